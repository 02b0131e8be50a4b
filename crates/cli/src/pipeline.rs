//! `offrac pipeline`: named pipelines and cluster members in the cluster store (etcd).

use crate::CliError;
use offrac_cluster::{ClusterConfig, Store, DEFAULT_PREFIX};
use offrac_proto::chain_spec;

/// Where the cluster store is (shared with `offrac call --pipeline`).
#[derive(clap::Args, Clone)]
pub struct StoreArgs {
    /// etcd endpoints, comma-separated host:port.
    #[arg(
        long,
        env = "OFFRAC_ETCD",
        value_delimiter = ',',
        default_value = "127.0.0.1:2379"
    )]
    pub etcd: Vec<String>,
    /// Key prefix of the cluster.
    #[arg(long, env = "OFFRAC_ETCD_PREFIX", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
}

impl StoreArgs {
    pub fn connect(&self) -> Result<Store, CliError> {
        let mut cfg = ClusterConfig::new(self.etcd.clone());
        cfg.prefix = self.prefix.clone();
        Ok(Store::connect(cfg)?)
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: StoreArgs,
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Store a pipeline: a chain FUNCTION[:PARAM][@DEVICE],… (e.g. minmax@0,logit@1).
    Put { name: String, chain: String },
    /// Print a pipeline's chain.
    Get { name: String },
    /// Print every pipeline, one per line: NAME CHAIN.
    List,
    /// Remove a pipeline.
    Delete { name: String },
    /// Print the nodes registered in the cluster: DEVICE ADDRESS.
    Members,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let mut store = a.store.connect()?;
    match a.command {
        Sub::Put { name, chain } => {
            let hops = chain_spec::parse(&chain).map_err(|e| CliError::Usage(e.to_string()))?;
            store.put_pipeline(&name, &hops)?;
            println!("{name} {}", chain_spec::format(&hops));
        }
        Sub::Get { name } => match store.get_pipeline(&name)? {
            Some(hops) => println!("{}", chain_spec::format(&hops)),
            None => return Err(CliError::Usage(format!("no pipeline named {name:?}"))),
        },
        Sub::List => {
            for (name, hops) in store.list_pipelines()? {
                println!("{name} {}", chain_spec::format(&hops));
            }
        }
        Sub::Delete { name } => {
            if !store.delete_pipeline(&name)? {
                return Err(CliError::Usage(format!("no pipeline named {name:?}")));
            }
        }
        Sub::Members => {
            for m in store.members()? {
                println!("{} {}", m.device, m.addr);
            }
        }
    }
    Ok(())
}
