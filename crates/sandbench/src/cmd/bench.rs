//! `sandbench bench`: the command line around the engine's benchmark
//! (`sandbench_core::bench`): arguments, progress, and the rendering.

use crate::cli::{BenchArgs, BenchPath, Format};
use crate::config::Config;
use sandbench_core::bench::{self, BenchReport};

use super::usage;

pub async fn run(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    let js = match args.language {
        None | Some(crate::spec::Language::Python) => false,
        Some(crate::spec::Language::Javascript) => true,
        Some(other) => return Err(usage(format!("bench times python or javascript programs, not {other}"))),
    };
    if js && (args.soak || args.duration.is_some() || args.concurrency.is_some()) {
        return Err(usage("--language javascript times single runs: leave out --soak, --duration and --concurrency"));
    }
    let session = args.path == BenchPath::Session;
    if session && (args.soak || args.duration.is_some() || args.concurrency.is_some()) {
        return Err(usage("--path session times single calls: leave out --soak, --duration and --concurrency"));
    }
    if args.tiers.is_some() && !args.soak && !args.all_tiers {
        return Err(usage("--tiers goes with --soak or --all-tiers (one tier: --tier NAME)"));
    }
    if args.soak {
        return soak(args, config).await;
    }
    if args.all_tiers {
        return all_tiers(args, config).await;
    }
    if args.duration.is_some() || args.concurrency.is_some() {
        return throughput(args, config).await;
    }
    if args.runs == 0 {
        return Err(usage("--runs must be at least 1"));
    }
    crate::tier::parse_list(&args.tier).map_err(usage)?;
    let language = if js { crate::spec::Language::Javascript } else { crate::spec::Language::Python };
    let plan = if session {
        bench::plan_session(&args.tier, config, language).await?
    } else if js {
        bench::plan_javascript(&args.tier, config).await?
    } else {
        bench::plan(&args.tier, config).await?
    };
    let text = args.format == Format::Text;
    let mut bar = super::progress::Progress::new(Some(args.runs as u64), text, std::time::Duration::from_secs(5));
    let mut progress = |round: usize| bar.set(round as u64, "bench: rounds");
    let report = if session {
        bench::measure_session(&args.tier, plan, args.runs, language, &mut progress).await?
    } else if js {
        bench::measure_javascript(&args.tier, plan, args.runs, &mut progress).await?
    } else {
        bench::measure(&args.tier, plan, args.runs, &mut progress).await?
    };
    bar.finish();
    // The saved figures are Python's one-shot runs (the frontier and the
    // workbench read them).
    if !js && !session {
        if let Err(e) = crate::state::save_bench_in(&crate::config::state_dir(), &report) {
            tracing::warn!("could not keep the benchmark: {e:#}");
        }
    }
    match args.format {
        Format::Json => super::emit_json(&report)?,
        Format::Text => super::emit(&render(&report))?,
    }
    Ok(0)
}

/// What `bench --all-tiers` prints as JSON.
#[derive(serde::Serialize)]
struct AllTiers {
    /// When it was measured (RFC 3339, UTC) and on what.
    measured_at: String,
    host: String,
    runs: usize,
    program: &'static str,
    rows: Vec<bench::AllRow>,
    /// Tiers not measured, and why.
    skipped: Vec<(String, String)>,
    reports: Vec<BenchReport>,
}

/// `bench --all-tiers`: every local tier available here, one table.
async fn all_tiers(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    if args.runs == 0 {
        return Err(usage("--runs must be at least 1"));
    }
    let names: Vec<String> = match &args.tiers {
        Some(list) => {
            let names = crate::tier::parse_list(list).map_err(usage)?;
            if let Some(n) = names.iter().find(|n| !bench::ALL_TIERS.contains(&n.as_str())) {
                return Err(usage(format!("--all-tiers covers {}, not {n}", bench::ALL_TIERS.join(", "))));
            }
            names
        }
        None => bench::ALL_TIERS.iter().map(|s| s.to_string()).collect(),
    };
    let (ready, mut skipped) = crate::tier::probe_selected(&names, config).await?;
    if ready.is_empty() {
        anyhow::bail!("no local tier is available here (run `sandbench doctor`)");
    }
    let text = args.format == Format::Text;
    let mut reports = vec![];
    for t in &ready {
        let name = t.name().to_string();
        let plan = match bench::plan_all(&name, config).await {
            Ok(p) => p,
            Err(e) => {
                skipped.push((name, format!("{e:#}")));
                continue;
            }
        };
        let mut bar = super::progress::Progress::new(Some(args.runs as u64), text, std::time::Duration::from_secs(5));
        let label = format!("bench: {name}");
        let mut progress = |round: usize| bar.set(round as u64, &label);
        match bench::measure_all(&name, plan, args.runs, &mut progress).await {
            Ok(r) => reports.push(r),
            Err(e) => skipped.push((name, format!("{e:#}"))),
        }
        bar.finish();
    }
    let rows: Vec<bench::AllRow> = reports.iter().filter_map(bench::AllRow::of).collect();
    let m = sandbench_core::share::Machine::here(&[]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let out = AllTiers {
        measured_at: sandbench_core::share::rfc3339(now),
        host: format!(
            "{} × {}, {}, Linux {}, cgroup {}, load {}",
            m.cpus,
            m.cpu_model.as_deref().unwrap_or("unknown CPU"),
            m.memory_bytes.map(crate::units::size).unwrap_or_else(|| "?".into()),
            m.kernel,
            m.cgroup,
            load(bench::load_average())
        ),
        runs: args.runs,
        program: "print(1)",
        rows,
        skipped,
        reports,
    };
    match args.format {
        Format::Json => super::emit_json(&out)?,
        Format::Text => super::emit(&render_all(&out))?,
    }
    Ok(0)
}

fn render_all(a: &AllTiers) -> String {
    let mut s = format!("print(1), p50 of {} interleaved rounds per tier · {} · {}\n\n", a.runs, a.measured_at, a.host);
    s.push_str("| tier | fresh warm run | session call | cold run | bare python3 |\n");
    s.push_str("|---|---|---|---|---|\n");
    let cell = |ms: f64, x: f64| format!("{} ({x:.2}×)", crate::units::duration_ms(ms));
    for r in &a.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.tier,
            cell(r.fresh_warm_ms, r.fresh_warm_x),
            cell(r.session_call_ms, r.session_call_x),
            cell(r.cold_ms, r.cold_x),
            crate::units::duration_ms(r.bare_python_ms)
        ));
    }
    for (t, why) in &a.skipped {
        s.push_str(&format!("\n{t}: not measured: {}", crate::sanitize::inert_line(why, 200)));
    }
    if !a.skipped.is_empty() {
        s.push('\n');
    }
    s.push_str(
        "\n× = over bare python3 -c in the same rounds (each tier's own). Command: sandbench bench --all-tiers\n",
    );
    s
}

fn load(l: Option<[f64; 3]>) -> String {
    l.map(|[a, b, c]| format!("{a:.2} {b:.2} {c:.2}")).unwrap_or_else(|| "unknown".into())
}

fn opt_ms(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

fn table(s: &mut String, contenders: &[bench::Stats]) {
    s.push_str(&format!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>12}\n",
        "contender (ms)", "exit p50", "exit p90", "exit p95", "mean", "1st byte p50"
    ));
    for c in contenders {
        s.push_str(&format!(
            "{:<34} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>12}\n",
            c.name,
            c.p50_ms,
            c.p90_ms,
            c.p95_ms,
            c.mean_ms,
            opt_ms(c.first_byte_p50_ms)
        ));
    }
}

fn ratio_lines(s: &mut String, ratios: &[bench::Ratio]) {
    for x in ratios {
        s.push_str(&format!(
            "{} / {}: exit p50 {:.2}× · p90 {:.2}× · p95 {:.2}×{}{}\n",
            x.what,
            x.against,
            x.p50_ratio,
            x.p90_ratio,
            x.p95_ratio,
            x.first_byte_p50_ratio.map(|f| format!(" · first byte p50 {f:.2}×")).unwrap_or_default(),
            match (&x.target, x.met) {
                (Some(t), Some(true)) => format!("  (target {t}: met)"),
                (Some(t), Some(false)) => format!("  (target {t}: NOT met)"),
                _ => String::new(),
            }
        ));
    }
}

pub fn render(r: &BenchReport) -> String {
    let mut s = format!(
        "bench {}{} · start→first byte and start→exit · {} runs each, interleaved · load {} → {}\n\n{}\n",
        r.tier,
        if r.path == "session" { " --path session" } else { "" },
        r.contenders.first().map(|c| c.runs).unwrap_or(0),
        load(r.load_before),
        load(r.load_after),
        r.program
    );
    table(&mut s, &r.contenders);
    ratio_lines(&mut s, &r.ratios);
    for c in &r.controls {
        s.push_str(&format!("\n{}\n", c.program));
        table(&mut s, &c.contenders);
        ratio_lines(&mut s, &c.ratios);
    }
    let with_phases: Vec<_> = r.contenders.iter().filter(|c| !c.phases.is_empty()).collect();
    if !with_phases.is_empty() {
        s.push_str("\nwhere the time goes (p50, ms from the run's start)\n");
        for c in with_phases {
            let p: Vec<String> = c.phases.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
            s.push_str(&format!("  {:<26} {}\n", c.name, p.join(" · ")));
        }
    }
    for k in &r.skipped {
        s.push_str(&format!("skipped: {k}\n"));
    }
    s
}

/// `bench --concurrency N --duration S`: throughput against the bare equivalent.
async fn throughput(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    let n = args.concurrency.unwrap_or(4);
    if n == 0 || n > 64 {
        return Err(usage("--concurrency must be between 1 and 64"));
    }
    let duration = args.duration.unwrap_or(std::time::Duration::from_secs(10));
    if duration.is_zero() {
        return Err(usage("--duration must be more than 0s"));
    }
    crate::tier::parse_list(&args.tier).map_err(usage)?;
    let t = crate::tier::by_name(&args.tier, config)?;
    let a = t.probe().await;
    if !a.available {
        anyhow::bail!("the {} tier is not available: {} (run `sandbench doctor`)", args.tier, a.summary);
    }
    drop(t);
    let plan = bench::throughput_plan(&args.tier, config)?;
    let text = args.format == Format::Text;
    let mut progress = move |what: &str| {
        if text {
            eprintln!("{what}");
        }
    };
    let r = bench::throughput(&args.tier, plan, n, duration, &mut progress).await;
    match args.format {
        Format::Json => super::emit_json(&r)?,
        Format::Text => super::emit(&render_throughput(&r))?,
    }
    Ok(if r.leftovers.total == 0 { 0 } else { 1 })
}

pub fn render_throughput(r: &bench::ThroughputReport) -> String {
    let mut s = format!(
        "throughput {} · {} in flight · {:.0} s per side (two halves each, alternating) · {} · load {} → {}\n",
        r.tier,
        r.concurrency,
        r.duration_s,
        r.program,
        load(r.load_before),
        load(r.load_after)
    );
    s.push_str(&format!(
        "{:<34} {:>6} {:>6} {:>8} {:>9} {:>9} {:>10} {:>15} {:>14}\n",
        "side", "runs", "errors", "runs/s", "p50 ms", "p99 ms", "CPU/run ms", "machine CPU/run", "true p99 ms"
    ));
    for side in std::iter::once(&r.sandbench).chain(r.bare.iter()) {
        s.push_str(&format!(
            "{:<34} {:>6} {:>6} {:>8.1} {:>9} {:>9} {:>10} {:>15} {:>14}\n",
            side.name,
            side.runs,
            side.errors,
            side.runs_per_s,
            opt_ms(side.p50_ms),
            opt_ms(side.p99_ms),
            side.cpu_ms_per_run.map(|c| format!("{c:.1}")).unwrap_or_else(|| "-".into()),
            side.machine_cpu_ms_per_run.map(|c| format!("{c:.1}")).unwrap_or_else(|| "-".into()),
            opt_ms(side.host_true.p99_ms),
        ));
    }
    if let Some(x) = r.ratio {
        s.push_str(&format!(
            "runs/s ratio {x:.2}×{}\n",
            match (r.target, r.met) {
                (Some(t), Some(true)) => format!("  (target ≥ {t}×: met)"),
                (Some(t), Some(false)) => format!("  (target ≥ {t}×: NOT met)"),
                _ => String::new(),
            }
        ));
    }
    for side in std::iter::once(&r.sandbench).chain(r.bare.iter()) {
        if let Some(e) = &side.first_error {
            s.push_str(&format!("{}: {} failed run(s), the first: {e}\n", side.name, side.errors));
        }
    }
    s.push_str(
        "CPU/run: what the meters hold (the side's cgroup, run cgroups, dockerd, containerd, containers)\n\
machine CPU/run: every CPU's busy time over the side's halves (also shims, runsc, kernel threads, other load)\n",
    );
    if let Some(h) = &r.helper {
        s.push_str(&format!("sandbox helper: {h}\n"));
    }
    s.push_str(&format!(
        "background teardown after the last report: {} in all\n",
        crate::units::duration_ms(r.teardown_after_ms)
    ));
    let l = &r.leftovers;
    s.push_str(&format!(
        "leftovers {} (cgroups {}, containers {}, qemu {}, run folders {})\n",
        l.total,
        l.cgroups,
        l.containers.map(|c| c.to_string()).unwrap_or_else(|| "not checked".into()),
        l.qemu,
        l.rundirs
    ));
    for k in &r.skipped {
        s.push_str(&format!("skipped: {k}\n"));
    }
    s
}

/// `bench --soak`: exit 1 when anything was left behind, output was lost, or
/// a verdict differs from what its sample declares.
async fn soak(args: BenchArgs, config: &Config) -> anyhow::Result<i32> {
    let concurrency = args.concurrency.unwrap_or(4);
    let duration = args.duration.unwrap_or(std::time::Duration::from_secs(60));
    if concurrency == 0 || concurrency > 64 {
        return Err(usage("--concurrency must be between 1 and 64"));
    }
    if duration.is_zero() {
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
        duration,
        concurrency,
        limits: crate::gauntlet::default_limits(),
        host: config.host.clone(),
        run_uids: (config.process.uid_base, config.process.uid_count),
        sessions: args.sessions,
    };
    let text = args.format == Format::Text;
    // One line every 10 s in a pipe: a soak runs for minutes.
    let mut bar = super::progress::Progress::new(None, text, std::time::Duration::from_secs(10));
    let mut progress =
        |runs: usize, mismatches: usize| bar.set(runs as u64, &format!("soak: {runs} runs, {mismatches} mismatch(es)"));
    let r = sandbench_core::soak::run(tiers, skipped, samples, cfg, &mut progress).await;
    bar.finish();
    match args.format {
        Format::Json => super::emit_json(&r)?,
        Format::Text => print!("{}", render_soak(&r)),
    }
    Ok(if r.passed() { 0 } else { 1 })
}

pub fn render_soak(r: &sandbench_core::soak::SoakReport) -> String {
    let ms = |v: Option<f64>| crate::units::or_dash(v, crate::units::duration_ms);
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
        for n in &t.not_applicable {
            s.push_str(&format!("  {:<10} n/a    {}\n", "", crate::sanitize::inert_line(n, 160)));
        }
    }
    for ss in &r.sessions {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        let worst =
            ss.p99_by_window.iter().map(|w| w.1).fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        s.push_str(&format!(
            "session {:<10} {} call(s), {} failure(s), reopened {} · p50 {} p99 {} · worst minute's p99 {}\n",
            ss.tier,
            ss.calls,
            ss.failures,
            ss.reopened,
            ms(ss.p50_ms),
            ms(ss.p99_ms),
            ms(worst)
        ));
        for f in &ss.failure_examples {
            s.push_str(&format!("  {}\n", crate::sanitize::inert_line(f, 200)));
        }
    }
    let u = &r.sandbench;
    let slope = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:+.1} {unit}/h"));
    s.push_str(&format!(
        "sandbench itself   at most {} descriptors ({}), {} resident ({}) over {} samples\n",
        u.fds_max,
        slope(u.fds_per_hour, "fds"),
        crate::units::size(u.rss_max_bytes),
        slope(u.rss_mib_per_hour, "MiB"),
        u.samples.len()
    ));
    s.push_str("limits             scaled by each tier's measured slowdown: the same Python work, tier CPU and running time vs host CPU\n");
    for t in &r.per_tier {
        let d = &t.slowdown;
        let range = |r: [u64; 2]| {
            if r[0] == r[1] {
                format!("{:.1} s", r[0] as f64 / 1000.0)
            } else {
                format!("{:.1}-{:.1} s", r[0] as f64 / 1000.0, r[1] as f64 / 1000.0)
            }
        };
        let measured = match &d.error {
            Some(e) => format!("not measured ({})", crate::sanitize::inert_line(e, 120)),
            None => format!(
                "cpu ×{:.2}, wall ×{:.2} ({:.0} ms CPU, {:.0} ms running vs {:.0} ms; {} round(s))",
                d.factor, d.wall_factor, d.tier_cpu_ms, d.tier_wall_ms, d.host_cpu_ms, d.rounds
            ),
        };
        s.push_str(&format!(
            "  {:<10} {measured}: cpu limit {}, wall limit {}\n",
            t.tier,
            range(t.cpu_time_ms),
            range(t.wall_time_ms)
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
    s.push_str(&format!(
        "processes left     {} zombie(s) under sandbench, {} process(es) of the run uids\n",
        r.processes.zombies, r.processes.run_uid_processes
    ));
    for (n, why) in &r.skipped_tiers {
        s.push_str(&format!("skipped: {n}: {}\n", crate::sanitize::inert_line(why, 200)));
    }
    s.push_str(if r.passed() { "result             pass\n" } else { "result             FAIL\n" });
    s
}
