//! `sandbench gauntlet`: the safety matrix, as a regression check.

use super::gauntlet_render as render;
use crate::cli::{GauntletArgs, MatrixFormat};
use crate::config::Config;
use crate::gauntlet;
use crate::samples;
use crate::tier;

use super::usage;

pub async fn run(args: GauntletArgs, config: &Config) -> anyhow::Result<i32> {
    let names = match &args.tiers {
        Some(list) => tier::parse_list(list).map_err(usage)?,
        None => tier::KNOWN.iter().map(|s| s.to_string()).collect(),
    };
    let dir = args.samples.clone().unwrap_or_else(|| samples::default_dir(&config.host));
    let all = samples::load_dir(&dir).map_err(|e| usage(format!("{e:#}")))?;
    if all.is_empty() {
        return Err(usage(format!("no samples in {}", dir.display())));
    }
    // Tiers named in `SANDBENCH_REQUIRE_TIERS` must be available (CI sets it).
    let required = config.host.require_tiers.clone();
    let mut config = config.clone();
    config.process.allow_degraded |= args.allow_degraded;
    let config = &config;
    let (tiers, skipped) = tier::probe_selected(&names, config).await?;
    for (n, why) in &skipped {
        if required.contains(n) || args.tiers.is_some() && names.len() == 1 {
            anyhow::bail!("the {n} tier is not available: {why} (run `sandbench doctor`)");
        }
    }
    // Hostile cells run one after the other: pools fill meanwhile.
    for t in &tiers {
        let t = t.clone();
        tokio::spawn(async move { t.prewarm().await });
    }
    if tiers.is_empty() {
        anyhow::bail!("no selected tier is available here (run `sandbench doctor`)");
    }
    let limits = args.limits.apply(gauntlet::default_limits());
    let progress = args.format == MatrixFormat::Table;
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let printer = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            match (progress, ev) {
                (true, gauntlet::GauntletEvent::CellDone(c)) => {
                    eprintln!("  {:<18} {:<8} {}", c.sample, c.tier, c.verdict.short())
                }
                (true, gauntlet::GauntletEvent::Calibrating { tier }) => {
                    eprintln!("  {:<18} {tier:<8} measuring the load on it", "·")
                }
                _ => {}
            }
        }
    });
    let plan = gauntlet::Plan { scale: !args.limits_as_written, ..gauntlet::Plan::new(limits, args.repeat) };
    let matrix = gauntlet::run(tiers, skipped, all, plan, Some(tx)).await;
    let _ = printer.await;
    let secret = config.env.anthropic_api_key.clone();
    if let Err(e) = crate::state::save_gauntlet_in(&crate::config::state_dir(), &matrix, secret.as_deref()) {
        tracing::warn!("could not keep the gauntlet for `sandbench report --reuse`: {e:#}");
    }
    let out = match args.format {
        MatrixFormat::Table => render::table(&matrix),
        MatrixFormat::Markdown => render::markdown(&matrix),
        MatrixFormat::Json => render::json(&matrix),
    };
    super::emit(&format!("{out}\n"))?;
    Ok(if matrix.mismatches == 0 { 0 } else { 1 })
}
