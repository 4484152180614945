//! `sandbench bench`'s engine: contenders (sandbench's tiers and the
//! baselines each is judged against), timed start→exit of `print(1)` in
//! interleaved rounds so that machine noise hits every contender alike, and
//! the ratios against the targets. Front ends render the report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::report::Outcome;
use crate::runner;
use crate::spec::{Language, RunSpec};
use crate::stats::percentile;
use crate::tier::{self, Tier};

pub const PRINT1: &str = "print(1)\n";

/// One thing to time.
pub enum Contender {
    /// A run through a sandbench tier (the full runner, as users get it).
    Tier { name: String, tier: Arc<dyn Tier> },
    /// A baseline command, spawned and waited for.
    Command { name: String, argv: Vec<String> },
    /// A tier run followed, untimed, by `settle` (e.g. a warm pool refilling),
    /// so that background work never overlaps another contender's measurement.
    Settled { name: String, tier: Arc<dyn Tier>, settle: Settle },
}

pub type Settle = Arc<dyn Fn() -> tier::BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

impl Contender {
    pub fn name(&self) -> &str {
        match self {
            Contender::Tier { name, .. } | Contender::Command { name, .. } | Contender::Settled { name, .. } => name,
        }
    }

    async fn once(&self) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        match self {
            Contender::Settled { tier, settle, .. } => {
                let mut spec = RunSpec::new(Language::Python, PRINT1);
                spec.label = "bench".into();
                let r = runner::run(tier.clone(), spec).await;
                let took = t0.elapsed();
                if r.outcome != Outcome::Ok || r.stdout.trim() != "1" {
                    anyhow::bail!("{} run failed: {}", tier.name(), r.summary_line());
                }
                settle().await?;
                return Ok(took);
            }
            Contender::Tier { tier, .. } => {
                let mut spec = RunSpec::new(Language::Python, PRINT1);
                spec.label = "bench".into();
                let r = runner::run(tier.clone(), spec).await;
                if r.outcome != Outcome::Ok || r.stdout.trim() != "1" {
                    anyhow::bail!("{} run failed: {}", tier.name(), r.summary_line());
                }
            }
            Contender::Command { argv, .. } => {
                let out = tokio::process::Command::new(&argv[0]).args(&argv[1..]).output().await?;
                if !out.status.success() || String::from_utf8_lossy(&out.stdout).trim() != "1" {
                    anyhow::bail!("{} failed: {}", argv[0], String::from_utf8_lossy(&out.stderr).trim());
                }
            }
        }
        Ok(t0.elapsed())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub name: String,
    pub runs: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    pub what: String,
    pub against: String,
    pub p50_ratio: f64,
    pub p95_ratio: f64,
    pub target: Option<String>,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub tier: String,
    pub program: String,
    pub contenders: Vec<Stats>,
    pub ratios: Vec<Ratio>,
    pub skipped: Vec<String>,
}

pub fn stats(name: &str, mut ms: Vec<f64>) -> Stats {
    ms.sort_by(f64::total_cmp);
    Stats {
        name: name.into(),
        runs: ms.len(),
        p50_ms: percentile(&ms, 0.5),
        p95_ms: percentile(&ms, 0.95),
        mean_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
    }
}

/// Contenders and targets for a tier: (contenders, [(what, against, target p50 ratio)], skipped).
pub type Plan = (Vec<Contender>, Vec<(String, String, Option<f64>)>, Vec<String>);

/// The contenders and targets for `tier_name` (a known tier name).
pub async fn plan(tier_name: &str, config: &Config) -> anyhow::Result<Plan> {
    let tier = tier::by_name(tier_name, config)?;
    let mut skipped = vec![];
    let mut c = vec![Contender::Tier { name: format!("sandbench {tier_name}"), tier }];
    let mut targets = vec![];
    match tier_name {
        "process" => {
            // Cold: every run builds its sandbox from nothing (no spare
            // helper). The first contender, with spares, is the warm path.
            let mut cold_cfg = config.clone();
            cold_cfg.process.spare = false;
            c[0] = Contender::Tier { name: "sandbench process (warm)".into(), tier: tier::by_name(tier_name, config)? };
            c.insert(
                0,
                Contender::Tier { name: "sandbench process (cold)".into(), tier: tier::by_name(tier_name, &cold_cfg)? },
            );
            let cold = "sandbench process (cold)".to_string();
            let warm = "sandbench process (warm)".to_string();
            // The same interpreter the sandbox uses, started the plain way.
            let py = ["/usr/local/bin/python3", "/usr/bin/python3"]
                .into_iter()
                .find(|p| std::path::Path::new(p).exists())
                .unwrap_or("python3")
                .to_string();
            c.push(Contender::Command {
                name: "bare python3".into(),
                argv: vec![py.clone(), "-c".into(), "print(1)".into()],
            });
            targets.push((cold.clone(), "bare python3".into(), Some(1.3)));
            targets.push((warm.clone(), "bare python3".into(), None));
            match crate::host::which("bwrap").map(|p| p.to_string_lossy().into_owned()) {
                Some(bwrap) => {
                    c.push(Contender::Command {
                        name: "bwrap --unshare-all".into(),
                        argv: [
                            bwrap.as_str(),
                            "--unshare-all",
                            "--die-with-parent",
                            "--ro-bind",
                            "/",
                            "/",
                            "--proc",
                            "/proc",
                            "--dev",
                            "/dev",
                            &py,
                            "-c",
                            "print(1)",
                        ]
                        .map(String::from)
                        .to_vec(),
                    });
                    targets.push((cold, "bwrap --unshare-all".into(), Some(1.0)));
                    targets.push((warm, "bwrap --unshare-all".into(), None));
                }
                None => skipped.push("bwrap is not installed (apt-get install bubblewrap)".into()),
            }
        }
        "docker" | "gvisor" => {
            c.clear();
            targets = crate::tier::docker::bench_plan(tier_name, config, &mut c, &mut skipped);
        }
        "e2b" => {
            // Network-bound: measured against the local process tier to show
            // what leaving the machine costs. No target ratio: it depends on
            // the distance to E2B's region more than on sandbench.
            let local = tier::by_name("process", config)?;
            c.push(Contender::Tier { name: "sandbench process".into(), tier: local });
            targets.push((format!("sandbench {tier_name}"), "sandbench process".into(), None));
        }
        "microvm" => microvm_plan(config, &mut c, &mut targets, &mut skipped).await?,
        peer if tier::peer::names().unwrap_or_default().contains(&peer) => {
            // Another tool's sandbox, against the same floor and sandbench's
            // own process tier, in one interleaved run. No target: it is
            // what the tool costs, not what sandbench promises.
            let me = format!("sandbench {peer}");
            c.push(Contender::Tier { name: "sandbench process".into(), tier: tier::by_name("process", config)? });
            let py = if std::path::Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
            c.push(Contender::Command {
                name: "bare python3".into(),
                argv: vec![py.into(), "-c".into(), "print(1)".into()],
            });
            targets.push((me.clone(), "bare python3".into(), None));
            targets.push((me, "sandbench process".into(), None));
        }
        other => anyhow::bail!("no benchmark is defined for the {other} tier yet"),
    }
    Ok((c, targets, skipped))
}

/// The microVM tier: cold boots against a plain QEMU boot of the same
/// kernel, initramfs and disk running print(1) (benches/microvm-plain-boot.sh),
/// snapshot restores, and warm (pooled) guests.
async fn microvm_plan(
    config: &Config,
    c: &mut Vec<Contender>,
    targets: &mut Vec<(String, String, Option<f64>)>,
    skipped: &mut Vec<String>,
) -> anyhow::Result<()> {
    use crate::tier::microvm::{self, MicrovmTier, Policy};
    const SCRIPT: &str = include_str!("../../../benches/microvm-plain-boot.sh");
    let p = microvm::artefacts::paths();
    let accel = microvm::accel::choose(&config.microvm, &p).await.accel;
    let cold = MicrovmTier::with_policy(config, Policy::Cold);
    let shape = cold.shape(&config.limits, accel);
    // The runner's contender is the Auto tier; make it the cold one by name.
    c.clear();
    c.push(Contender::Tier { name: "microvm cold".into(), tier: Arc::new(cold) });
    c.push(Contender::Command {
        name: "plain qemu boot".into(),
        argv: ["sh", "-c", SCRIPT, "microvm-plain-boot.sh"]
            .map(String::from)
            .into_iter()
            .chain([p.dir.to_string_lossy().into_owned(), accel.name().into(), shape.mem_mib.to_string()])
            .collect(),
    });
    targets.push(("microvm cold".into(), "plain qemu boot".into(), Some(1.1)));
    if microvm::snapshot::load(&config.microvm, &p, shape).is_some() {
        c.push(Contender::Tier {
            name: "microvm snapshot".into(),
            tier: Arc::new(MicrovmTier::with_policy(config, Policy::Snapshot)),
        });
        targets.push(("microvm snapshot".into(), "microvm cold".into(), None));
    } else {
        skipped.push("snapshot restore: no snapshot for the default limits (sandbench setup microvm saves one)".into());
    }
    let warm = MicrovmTier::with_policy(config, Policy::Auto);
    match warm.prewarm().await {
        Ok(_) => {
            c.push(Contender::Tier { name: "microvm warm".into(), tier: Arc::new(warm) });
            targets.push(("microvm warm".into(), "microvm cold".into(), Some(0.1)));
        }
        Err(e) => skipped.push(format!("warm pool: {e:#}")),
    }
    Ok(())
}

/// Time every contender of `plan`: one warm-up each (page cache, first
/// cgroup), then `runs` interleaved rounds. `round_done(n)` after each round.
pub async fn measure(
    tier: &str,
    plan: Plan,
    runs: usize,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    let (contenders, targets, skipped) = plan;
    let mut samples: Vec<Vec<f64>> = vec![vec![]; contenders.len()];
    for c in &contenders {
        c.once().await?;
    }
    for round in 0..runs {
        for (i, c) in contenders.iter().enumerate() {
            let d = c.once().await?;
            samples[i].push(d.as_secs_f64() * 1000.0);
        }
        round_done(round + 1);
    }
    let stats: Vec<Stats> = contenders.iter().zip(samples).map(|(c, s)| stats(c.name(), s)).collect();
    let find = |n: &str| stats.iter().find(|s| s.name == n);
    let ratios = targets
        .into_iter()
        .filter_map(|(what, against, target)| {
            let (a, b) = (find(&what)?, find(&against)?);
            let p50 = a.p50_ms / b.p50_ms;
            Some(Ratio {
                p50_ratio: p50,
                p95_ratio: a.p95_ms / b.p95_ms,
                target: target.map(|t| format!("p50 ≤ {t}×")),
                met: target.map(|t| p50 <= t),
                what,
                against,
            })
        })
        .collect();
    Ok(BenchReport { tier: tier.to_string(), program: "print(1)".into(), contenders: stats, ratios, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_samples() {
        let s = stats("x", vec![3.0, 1.0, 2.0]);
        assert_eq!(s.p50_ms, 2.0);
        assert_eq!(s.mean_ms, 2.0);
    }
}
