//! `offrac sim-trace`: the Azure Functions 2021 trace, time-compressed, sent
//! open loop to the node's driver in the simulator, provisioned statically
//! (by seed 001's N formula on the trace's mean or peak rate, or given
//! counts) or by the autoscaler over spare slots; one JSON line per seed.

use crate::CliError;
use offrac_control::AutoscaleConfig;
use offrac_proto::FunctionId;
use offrac_sim::trace::{formula_slots, parse_azure, run_trace, Provisioning, TraceRun};

#[derive(clap::Args)]
pub struct Args {
    /// The processed trace (app,sleep_time,request_size,response_size).
    #[arg(long)]
    trace: String,
    /// Apps and the built-in each runs as, APP:FUNCTION,… (the trace's own mapping).
    #[arg(long, default_value = "1:topk,2:cnn,3:logit,5:minmax")]
    map: String,
    /// Execution time of each mapped function, µs, in --map's order.
    #[arg(long, default_value = "1000,1000,1000,1000")]
    exec_us: String,
    /// Sleep times are divided by this (time compression).
    #[arg(long, default_value_t = 1000.0)]
    speedup: f64,
    /// autoscale, mean, peak, or static:N,N,… (slots per function in --map's order).
    #[arg(long, default_value = "autoscale")]
    provision: String,
    /// autoscale: slots in all (one fixed per function, the rest spare).
    #[arg(long, default_value_t = 64)]
    slots: usize,
    /// Target utilisation ρ (the autoscaler's and the formula's).
    #[arg(long, default_value_t = 0.7)]
    rho: f64,
    /// Per-request overhead T_oh in the formula for static provisioning, µs.
    #[arg(long, default_value_t = 3.0)]
    t_oh_us: f64,
    /// peak: the window the peak rate is taken over, ms of virtual (compressed) time.
    #[arg(long, default_value_t = 10.0)]
    peak_window_ms: f64,
    /// autoscale: its period, ms of virtual time.
    #[arg(long, default_value_t = 10.0)]
    period_ms: f64,
    #[arg(long, default_value_t = 2)]
    grow_periods: u32,
    #[arg(long, default_value_t = 8)]
    shrink_periods: u32,
    #[arg(long, default_value_t = 2)]
    max_step: usize,
    /// Connections the arrivals are spread over.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Requests each slot's queue holds besides the running one.
    #[arg(long, default_value_t = 4)]
    queue_depth: usize,
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let usage = |m: String| CliError::Usage(m);
    let mut map = Vec::new();
    for item in a.map.split(',') {
        let (app, name) = item
            .split_once(':')
            .ok_or_else(|| usage(format!("--map item {item:?} is not APP:FUNCTION")))?;
        let app: u32 = app
            .trim()
            .parse()
            .map_err(|_| usage(format!("--map: bad app {app:?}")))?;
        let f = FunctionId::from_name(name.trim())
            .ok_or_else(|| usage(format!("--map: no built-in named {name:?}")))?;
        map.push((app, f.id()));
    }
    let exec: Vec<f64> =
        offrac_sim::parse_list(&a.exec_us, ',').map_err(|e| usage(e.to_string()))?;
    if exec.len() != map.len() || exec.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return Err(usage(format!(
            "--exec-us needs {} positive times, one per mapped app",
            map.len()
        )));
    }
    let functions: Vec<(u8, u64)> = map
        .iter()
        .zip(&exec)
        .map(|(&(_, f), &us)| (f, (us * 1000.0).round() as u64))
        .collect();
    let text = std::fs::read_to_string(&a.trace).map_err(|source| CliError::Read {
        path: a.trace.clone(),
        source,
    })?;
    let arrivals = parse_azure(&text, &map, a.speedup).map_err(|e| usage(e.to_string()))?;
    let t_oh = a.t_oh_us * 1000.0;
    let provisioning = match a.provision.as_str() {
        "autoscale" => {
            let spare = a
                .slots
                .checked_sub(functions.len())
                .filter(|s| *s > 0)
                .ok_or_else(|| {
                    usage(format!(
                        "--slots must exceed the {} functions",
                        functions.len()
                    ))
                })?;
            Provisioning::Autoscale {
                spare,
                policy: AutoscaleConfig {
                    target_utilisation: a.rho,
                    grow_periods: a.grow_periods,
                    shrink_periods: a.shrink_periods,
                    max_step: a.max_step,
                },
                period_ns: (a.period_ms * 1e6).round() as u64,
            }
        }
        "mean" => Provisioning::Static(formula_slots(&arrivals, &functions, t_oh, a.rho, None)),
        "peak" => Provisioning::Static(formula_slots(
            &arrivals,
            &functions,
            t_oh,
            a.rho,
            Some((a.peak_window_ms * 1e6).round() as u64),
        )),
        other => match other.strip_prefix("static:") {
            Some(list) => Provisioning::Static(
                offrac_sim::parse_list(list, ',').map_err(|e| usage(e.to_string()))?,
            ),
            None => {
                return Err(usage(format!(
                    "--provision is autoscale, mean, peak or static:N,…, not {other:?}"
                )))
            }
        },
    };
    let slots_per_function = match &provisioning {
        Provisioning::Static(n) => n.clone(),
        Provisioning::Autoscale { .. } => vec![1; functions.len()],
    };
    for seed in a.seed..a.seed + a.seeds {
        let run = TraceRun {
            functions: functions.clone(),
            provisioning: provisioning.clone(),
            connections: a.connections,
            queue_depth: a.queue_depth,
            seed,
            sample_ns: 100_000,
        };
        let report = run_trace(&run, &arrivals).map_err(|e| usage(e.to_string()))?;
        let line = serde_json::json!({
            "provision": a.provision,
            "seed": seed,
            "speedup": a.speedup,
            "slots_per_function": slots_per_function,
            "functions": functions.iter().map(|&(f, _)| FunctionId::from_id(f).map_or("?", |f| f.name())).collect::<Vec<_>>(),
            "report": report,
        });
        println!("{line}");
    }
    Ok(())
}
