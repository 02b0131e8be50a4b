//! `offrac config`: print the embedded default configuration, or check a file.

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Print the embedded default configuration (every key, documented).
    Default,
    /// Check a configuration file: parse and validate it, print what it sets up.
    Check { file: String },
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Sub::Default => print!("{}", offrac_node::DEFAULT_CONFIG),
        Sub::Check { file } => {
            let cfg = crate::load_config(Some(&file))?;
            let slots: Vec<&str> = cfg.slots.iter().map(|s| s.function.name()).collect();
            println!(
                "{file}: ok — {} slot(s) ({}), {} buffer(s) of {} bytes ({}), max payload {} bytes",
                slots.len(),
                slots.join(", "),
                cfg.engine.buffers,
                cfg.engine.buffer_bytes,
                cfg.engine.buffer_policy,
                cfg.engine.max_payload
            );
        }
    }
    Ok(())
}
