//! `sandbench compare`: one program on several tiers, side by side, through
//! the engine's compare (`sandbench_core::compare`): one tier at a time by
//! default, `--repeat` rounds interleaved, a summary of distributions.

use sandbench_core::compare::{self, Mode};

use crate::cli::{CompareArgs, TableFormat};
use crate::config::Config;
use crate::report::Outcome;
use crate::tier;

use super::{run::load_spec, usage};

pub async fn run(args: CompareArgs, config: &Config) -> anyhow::Result<i32> {
    // The workbench's F6 rule: every available tier, sandbench's own and
    // the installed peers (the tier list `doctor` shows).
    let names = match &args.tiers {
        Some(list) => tier::parse_list(list).map_err(usage)?,
        None => tier::known_names(),
    };
    let mut spec = load_spec(&args.file, args.lang, config)?;
    spec.limits = args.limits.apply(spec.limits);
    spec.env.extend(args.env.iter().cloned());

    let (tiers, skipped) = tier::probe_selected(&names, config).await?;
    if tiers.is_empty() {
        anyhow::bail!("none of the selected tiers is available here (run `sandbench doctor`)");
    }
    // The same warm starts as the benchmark: spares and pools ready before
    // the first run (each report says cold, warm or snapshot).
    futures_util::future::join_all(tiers.iter().map(|t| t.prewarm())).await;
    let mode = if args.concurrent { Mode::Concurrent } else { Mode::Sequential };
    let repeat = args.repeat as usize;
    let total = repeat * tiers.len();
    let show = args.format == TableFormat::Text && total > 1;
    let mut bar = super::progress::Progress::new(Some(total as u64), show, std::time::Duration::ZERO);
    let mut n = 0;
    let mut progress = |r: &crate::report::RunReport| {
        n += 1;
        // Logged as it ends, with its own time (not the compare's end).
        crate::runlog::record(&spec, r, None);
        let what = format!("{}: {} · {}", r.tier, r.outcome.name(), crate::units::duration_ms(compare::exit_ms(r)));
        bar.set(n as u64, &what);
    };
    let reports = compare::run(&tiers, &spec, repeat, mode, &mut progress).await;
    bar.finish();
    let order: Vec<String> = tiers.iter().map(|t| t.name().to_string()).collect();
    let summary = compare::summarize(&order, &reports, mode, repeat, &spec.label, skipped.clone());
    if let Err(e) = crate::state::save_compare_in(&crate::config::state_dir(), &summary) {
        tracing::warn!("could not keep the compare: {e:#}");
    }
    match args.format {
        TableFormat::Json => super::emit_json(&serde_json::json!({
            "schema_version": crate::report::SCHEMA_VERSION,
            "summary": summary,
            "reports": reports,
            "skipped": skipped,
        }))?,
        TableFormat::Text => super::emit(&compare::text(&summary))?,
        TableFormat::Markdown => super::emit(&compare::markdown(&summary))?,
        TableFormat::Csv => super::emit(&compare::csv(&summary))?,
    }
    Ok(if reports.iter().any(|r| r.outcome == Outcome::Error) { 1 } else { 0 })
}
