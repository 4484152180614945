//! `sandbench bench`: the command line around the engine's benchmark
//! (`sandbench_core::bench`): arguments, progress, and the rendering.

use crate::cli::{BenchArgs, Format};
use crate::config::Config;
use sandbench_core::bench::{self, BenchReport};

use super::usage;

pub async fn run(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    if args.runs == 0 {
        return Err(usage("--runs must be at least 1"));
    }
    crate::tier::parse_list(&args.tier).map_err(usage)?;
    let plan = bench::plan(&args.tier, config).await?;
    let text = args.format == Format::Text;
    let runs = args.runs;
    let mut progress = move |round: usize| {
        if text {
            eprint!("\rround {round}/{runs}");
        }
    };
    let report = bench::measure(&args.tier, plan, args.runs, &mut progress).await?;
    if text {
        eprintln!();
    }
    if let Err(e) = crate::state::save_bench_in(&crate::config::state_dir(), &report) {
        tracing::warn!("could not keep the benchmark: {e:#}");
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => print!("{}", render(&report)),
    }
    Ok(0)
}

pub fn render(r: &BenchReport) -> String {
    let mut s = format!(
        "bench {} · start→exit of {} · {} runs each, interleaved\n",
        r.tier,
        r.program,
        r.contenders.first().map(|c| c.runs).unwrap_or(0)
    );
    s.push_str(&format!("{:<28} {:>9} {:>9} {:>9}\n", "contender", "p50 ms", "p95 ms", "mean ms"));
    for c in &r.contenders {
        s.push_str(&format!("{:<28} {:>9.2} {:>9.2} {:>9.2}\n", c.name, c.p50_ms, c.p95_ms, c.mean_ms));
    }
    for x in &r.ratios {
        s.push_str(&format!(
            "{} / {}: p50 {:.2}× · p95 {:.2}×{}\n",
            x.what,
            x.against,
            x.p50_ratio,
            x.p95_ratio,
            match (&x.target, x.met) {
                (Some(t), Some(true)) => format!("  (target {t}: met)"),
                (Some(t), Some(false)) => format!("  (target {t}: NOT met)"),
                _ => String::new(),
            }
        ));
    }
    for k in &r.skipped {
        s.push_str(&format!("skipped: {k}\n"));
    }
    s
}
