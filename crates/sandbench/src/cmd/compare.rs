//! `sandbench compare`: one program on several tiers, side by side.

use futures_util::future::join_all;

use crate::cli::{CompareArgs, Format};
use crate::config::Config;
use crate::report::{Outcome, RunReport};
use crate::runner;
use crate::tier;

use super::{run::load_spec, usage};

pub async fn run(args: CompareArgs, config: &Config) -> anyhow::Result<i32> {
    let names = match &args.tiers {
        Some(list) => tier::parse_list(list).map_err(usage)?,
        None => tier::KNOWN.iter().map(|s| s.to_string()).collect(),
    };
    let mut spec = load_spec(&args.file, args.lang, config)?;
    spec.limits = args.limits.apply(spec.limits);
    spec.env.extend(args.env.iter().cloned());

    let (tiers, skipped) = tier::probe_selected(&names, config).await?;
    if tiers.is_empty() {
        anyhow::bail!("none of the selected tiers is available here (run `sandbench doctor`)");
    }
    let reports: Vec<RunReport> = if args.sequential {
        let mut v = vec![];
        for t in tiers {
            v.push(runner::run(t, spec.clone()).await);
        }
        v
    } else {
        join_all(tiers.into_iter().map(|t| runner::run(t, spec.clone()))).await
    };
    for r in &reports {
        crate::runlog::record(&spec, r, None);
    }
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "reports": reports, "skipped": skipped }))?
        ),
        Format::Text => print!("{}", table(&reports, &skipped)),
    }
    Ok(if reports.iter().any(|r| r.outcome == Outcome::Error) { 1 } else { 0 })
}

pub fn table(reports: &[RunReport], skipped: &[(String, String)]) -> String {
    let ms = |v: f64| format!("{v:.1}");
    let mut s = format!(
        "{:<9} {:<10} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}\n",
        "tier", "outcome", "violations", "setup", "1st out", "run", "teardown", "total", "cpu ms", "peak MiB"
    );
    for r in reports {
        let v: Vec<&str> = r.violations.iter().map(|v| v.kind.name()).collect();
        let t = &r.timings_ms;
        s.push_str(&format!(
            "{:<9} {:<10} {:<24} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}\n",
            r.tier,
            r.outcome.name(),
            if v.is_empty() { "—".to_string() } else { v.join(",") },
            ms(t.setup),
            t.first_output.map(ms).unwrap_or_else(|| "—".into()),
            ms(t.run),
            ms(t.teardown),
            ms(t.total),
            r.usage.cpu_ms.map(|c| c.to_string()).unwrap_or_else(|| "?".into()),
            r.usage.peak_memory_bytes.map(|b| format!("{:.1}", b as f64 / 1048576.0)).unwrap_or_else(|| "?".into()),
        ));
        if let Some(e) = &r.error {
            s.push_str(&format!("          error: {e}\n"));
        }
    }
    for (t, why) in skipped {
        s.push_str(&format!("{t:<9} unavailable: {why}\n"));
    }
    s
}
