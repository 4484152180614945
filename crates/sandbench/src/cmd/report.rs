//! `sandbench report`: runs (or, with `--reuse`, takes from the state dir)
//! the gauntlet and the latency benchmark, and writes the engine's report
//! (`sandbench_core::share`) as one HTML page, its JSON record or the
//! frontier's SVG. Progress goes to standard error.

use std::path::PathBuf;

use sandbench_core::share::{self, Section};

use crate::cli::{ReportArgs, ReportFormat};
use crate::config::Config;
use crate::{gauntlet, samples, state, tier};

use super::usage;

pub async fn run(args: ReportArgs, config: &Config) -> anyhow::Result<i32> {
    let names = match &args.tiers {
        Some(list) => tier::parse_list(list).map_err(usage)?,
        None => tier::KNOWN.iter().map(|s| s.to_string()).collect(),
    };
    let mut config = config.clone();
    config.process.allow_degraded |= args.allow_degraded;
    let config = &config;
    let dir = crate::config::state_dir();

    // Probe every tier asked for: the ready ones run, and every one's facts
    // (engine versions, accelerator, why not) go into the report.
    let mut ready = vec![];
    let mut skipped = vec![];
    let mut facts = vec![];
    for n in &names {
        let t = tier::by_name(n, config)?;
        let a = t.probe().await;
        facts.push(share::TierFacts::of(&a));
        if a.available {
            ready.push(t);
        } else {
            skipped.push((n.clone(), a.summary.clone()));
        }
    }
    let machine = share::Machine::here(&facts);
    let wanted = |t: &String| names.contains(t);

    let saved_gauntlet = if args.reuse { reusable(state::load_gauntlet_in(&dir), "gauntlet") } else { None };
    let saved_latency = if args.reuse { reusable(state::load_latency_in(&dir), "latency benchmark") } else { None };
    if (saved_gauntlet.is_none() || saved_latency.is_none()) && ready.is_empty() {
        anyhow::bail!("none of the selected tiers is available here (run `sandbench doctor`)");
    }
    if saved_gauntlet.is_none() || saved_latency.is_none() {
        for t in &ready {
            let t = t.clone();
            tokio::spawn(async move { t.prewarm().await });
        }
    }

    let gauntlet = match saved_gauntlet {
        Some(s) => {
            eprintln!("report: reusing the gauntlet of {}", share::rfc3339(s.saved_at));
            let mut m = s.data;
            // Only the tiers asked for.
            m.tiers.retain(&wanted);
            m.cells.retain(|c| wanted(&c.tier));
            m.mismatches = m.cells.iter().filter(|c| !c.as_expected).count();
            Section {
                measured_at: share::rfc3339(s.saved_at),
                sandbench_version: s.sandbench_version,
                reused: true,
                data: m,
            }
        }
        None => {
            let sdir = args.samples.clone().unwrap_or_else(|| samples::default_dir(&config.host));
            let all = samples::load_dir(&sdir).map_err(|e| usage(format!("{e:#}")))?;
            if all.is_empty() {
                return Err(usage(format!("no samples in {}", sdir.display())));
            }
            let cells = all.len() * ready.len();
            eprintln!(
                "report: the gauntlet, {cells} cells ({} samples × {} tiers), one at a time…",
                all.len(),
                ready.len()
            );
            let (tx, mut rx) = tokio::sync::mpsc::channel(64);
            let printer = tokio::spawn(async move {
                let mut n = 0;
                while let Some(ev) = rx.recv().await {
                    if let gauntlet::GauntletEvent::CellDone(c) = ev {
                        n += 1;
                        eprintln!("  {n:>3}/{cells} {:<20} {:<8} {}", c.sample, c.tier, c.verdict.short());
                    }
                }
            });
            let m = gauntlet::run(
                ready.clone(),
                skipped.clone(),
                all,
                gauntlet::Plan::new(gauntlet::default_limits(), 3),
                Some(tx),
            )
            .await;
            let _ = printer.await;
            // The report shows what was kept: outputs cut, the host's secret redacted.
            let secret = config.env.anthropic_api_key.clone();
            state::save_gauntlet_in(&dir, &m, secret.as_deref())?;
            let s = state::load_gauntlet_in(&dir)?
                .ok_or_else(|| anyhow::anyhow!("the gauntlet just saved in {} is gone", dir.display()))?;
            Section {
                measured_at: share::rfc3339(s.saved_at),
                sandbench_version: s.sandbench_version,
                reused: false,
                data: s.data,
            }
        }
    };

    let latency = match saved_latency {
        Some(s) => {
            eprintln!("report: reusing the latency benchmark of {}", share::rfc3339(s.saved_at));
            let mut l = s.data;
            l.summary.tiers.retain(|t| wanted(&t.tier));
            Section {
                measured_at: share::rfc3339(s.saved_at),
                sandbench_version: s.sandbench_version,
                reused: true,
                data: l,
            }
        }
        None => {
            let total = ready.len() * args.repeat as usize;
            eprintln!("report: latency, print(1) × {} rounds on {} tiers…", args.repeat, ready.len());
            let mut bar = super::progress::Progress::new(Some(total as u64), true, std::time::Duration::from_secs(5));
            let mut n = 0;
            let mut progress = |r: &crate::report::RunReport| {
                n += 1;
                bar.set(n as u64, &format!("  latency: {}", r.tier));
            };
            let l = share::measure_latency(
                &ready,
                skipped.clone(),
                args.repeat as usize,
                config.limits.clone(),
                &mut progress,
            )
            .await;
            bar.finish();
            state::save_latency_in(&dir, &l)?;
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            Section {
                measured_at: share::rfc3339(now),
                sandbench_version: env!("CARGO_PKG_VERSION").into(),
                reused: false,
                data: l,
            }
        }
    };

    let report = share::build(&names, facts, machine, Some(gauntlet), Some(latency));
    let (text, ext) = match args.format {
        ReportFormat::Html => (share::html(&report), "html"),
        ReportFormat::Json => (share::json(&report) + "\n", "json"),
        ReportFormat::Svg => (sandbench_core::frontier::svg(&report.frontier.points), "svg"),
    };
    let out = args.out.unwrap_or_else(|| PathBuf::from(format!("sandbench-report.{ext}")));
    if out.as_os_str() == "-" {
        super::emit(&text)?;
    } else {
        std::fs::write(&out, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
        let shown = std::path::absolute(&out).unwrap_or(out);
        eprintln!("report: wrote {}", shown.display());
    }
    Ok(0)
}

/// A kept result, or `None` (and why, on stderr) when there is none or it
/// cannot be read: it is then measured again.
fn reusable<T>(r: anyhow::Result<Option<state::Saved<T>>>, what: &str) -> Option<state::Saved<T>> {
    match r {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            eprintln!("report: no {what} kept yet: running it");
            None
        }
        Err(e) => {
            eprintln!("report: {e:#}: running the {what} again");
            None
        }
    }
}
