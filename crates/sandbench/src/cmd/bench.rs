//! `sandbench bench`: the command line around the engine's benchmark
//! (`sandbench_core::bench`): arguments, progress, and the rendering.

use crate::cli::{BenchArgs, Format};
use crate::config::Config;
use sandbench_core::bench::{self, BenchReport};

use super::usage;

pub async fn run(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    if args.soak {
        return soak(args, config).await;
    }
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
        Format::Json => super::emit_json(&report)?,
        Format::Text => super::emit(&render(&report))?,
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

/// `bench --soak`: exit 1 when anything was left behind, output was lost, or
/// a verdict differs from what its sample declares.
async fn soak(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    if args.concurrency == 0 || args.concurrency > 64 {
        return Err(usage("--concurrency must be between 1 and 64"));
    }
    if args.duration.is_zero() {
        return Err(usage("--duration must be more than 0s"));
    }
    let names = match &args.tiers {
        Some(list) => crate::tier::parse_list(list).map_err(usage)?,
        None => crate::tier::KNOWN.iter().map(|s| s.to_string()).collect(),
    };
    let dir = args.samples.clone().unwrap_or_else(|| crate::samples::default_dir(&config.host));
    let samples = crate::samples::load_dir(&dir).map_err(|e| usage(format!("{e:#}")))?;
    if samples.is_empty() {
        return Err(usage(format!("no samples in {}", dir.display())));
    }
    let (tiers, skipped) = crate::tier::probe_selected(&names, config).await?;
    if args.tiers.is_some() {
        if let Some((n, why)) = skipped.first() {
            anyhow::bail!("the {n} tier is not available: {why} (run `sandbench doctor`)");
        }
    }
    if tiers.is_empty() {
        anyhow::bail!("no selected tier is available here (run `sandbench doctor`)");
    }
    for t in &tiers {
        let t = t.clone();
        tokio::spawn(async move { t.prewarm().await });
    }
    let cfg = sandbench_core::soak::SoakConfig {
        duration: args.duration,
        concurrency: args.concurrency,
        limits: crate::gauntlet::default_limits(),
        host: config.host.clone(),
    };
    let text = args.format == Format::Text;
    let mut progress = move |runs: usize, mismatches: usize| {
        if text {
            eprint!("\rsoak: {runs} runs, {mismatches} mismatch(es)");
        }
    };
    let r = sandbench_core::soak::run(tiers, skipped, samples, cfg, &mut progress).await;
    if text {
        eprintln!();
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
        Format::Text => print!("{}", render_soak(&r)),
    }
    Ok(if r.passed() { 0 } else { 1 })
}

pub fn render_soak(r: &sandbench_core::soak::SoakReport) -> String {
    let ms = |v: Option<f64>| v.map(|x| format!("{x:.1} ms")).unwrap_or_else(|| "-".into());
    let mut s = format!(
        "soak {:.0} s · {} in flight · tiers {}\n",
        r.duration_s,
        r.concurrency,
        if r.tiers.is_empty() { "-".into() } else { r.tiers.join(", ") }
    );
    s.push_str(&format!("runs completed     {}\n", r.runs));
    s.push_str(&format!(
        "verdicts           {} as declared, {} mismatch(es)\n",
        r.runs - r.mismatches.min(r.runs),
        r.mismatches
    ));
    for t in &r.per_tier {
        s.push_str(&format!(
            "  {:<10} {:>6} runs {:>4} mismatch(es) {:>4} error(s)\n",
            t.tier, t.runs, t.mismatches, t.errors
        ));
    }
    for m in &r.mismatch_examples {
        s.push_str(&format!("  ✗ {m}\n"));
    }
    let o = &r.output;
    s.push_str(&format!(
        "output             {} of {} bytes delivered over {} run(s); {} run(s) lost output\n",
        o.bytes_delivered, o.bytes_produced, o.runs, o.lost_runs
    ));
    let h = &r.host_true;
    s.push_str(&format!(
        "host /bin/true     p50 {} · p99 {} · max {} ({} samples)\n",
        ms(h.p50_ms),
        ms(h.p99_ms),
        ms(h.max_ms),
        h.samples
    ));
    let l = &r.leftovers;
    s.push_str(&format!(
        "leftovers          {} (cgroups {}, containers {}, qemu {}, run folders {})\n",
        l.total,
        l.cgroups,
        l.containers.map(|c| c.to_string()).unwrap_or_else(|| "not checked".into()),
        l.qemu,
        l.rundirs
    ));
    for (n, why) in &r.skipped_tiers {
        s.push_str(&format!("skipped: {n}: {}\n", crate::sanitize::inert_line(why, 200)));
    }
    s.push_str(if r.passed() { "result             pass\n" } else { "result             FAIL\n" });
    s
}
