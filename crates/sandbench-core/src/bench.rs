//! `sandbench bench`'s engine: contenders (sandbench's tiers and the
//! baselines each is judged against), each timed from start to its first
//! output byte and to its exit, for `print(1)` and a stdlib-import control,
//! in interleaved rounds so that machine noise hits every contender alike;
//! the ratios against the targets; and the throughput run (N in flight for a
//! set time, against as many concurrent bare equivalents); and the agent's
//! hot path (`--path session`: a call in one kept session against the
//! tier's fresh warm run and the bare interpreter). Front ends render the
//! reports.

mod contender;
pub(crate) mod docker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::runner;
use crate::session::{Session, SessionSpec};
use crate::spec::{Language, RunSpec};
use crate::stats::percentile;
use crate::tier::kinds::{self, Bench, TierKind};
use crate::tier::{self, Tier};
use contender::{check, command_once, ms};
pub use contender::{settle_background, Contender, Sample, Settle, CODE};

pub const PRINT1: &str = "print(1)\n";
/// The control: a few stdlib imports before the print, where an interpreter
/// started ahead should win most.
pub const STDLIB: &str = "import json, re, collections, dataclasses\nprint(1)\n";
/// JavaScript's print(1), run with `bench --language javascript`.
pub const PRINT1_JS: &str = "console.log(1)\n";
/// JavaScript's control: a few built-in modules loaded before the print.
pub const STDLIB_JS: &str = "require('util'); require('crypto'); require('zlib'); require('url');\nconsole.log(1)\n";
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub name: String,
    pub runs: usize,
    /// Start to exit (the report, for a tier).
    pub p50_ms: f64,
    #[serde(default)]
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    /// Start to the first byte of output.
    #[serde(default)]
    pub first_byte_p50_ms: Option<f64>,
    #[serde(default)]
    pub first_byte_p95_ms: Option<f64>,
    /// Median of each phase the tier reported (`details.timeline_ms`: ms
    /// from the run's start), in the order they happen.
    #[serde(default)]
    pub phases: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    pub what: String,
    pub against: String,
    pub p50_ratio: f64,
    #[serde(default)]
    pub p90_ratio: f64,
    pub p95_ratio: f64,
    pub target: Option<String>,
    pub met: Option<bool>,
    /// The same ratio for the time to the first output byte.
    #[serde(default)]
    pub first_byte_p50_ratio: Option<f64>,
}

/// Every contender on one more program (the stdlib-import control).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Control {
    pub program: String,
    pub contenders: Vec<Stats>,
    pub ratios: Vec<Ratio>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchReport {
    pub tier: String,
    /// What was timed: `run` (one-shot runs, cold and warm, against the
    /// baselines) or `session` (a call in a kept session against a fresh
    /// warm run and the bare interpreter).
    #[serde(default = "run_path")]
    pub path: String,
    pub program: String,
    pub contenders: Vec<Stats>,
    pub ratios: Vec<Ratio>,
    pub skipped: Vec<String>,
    #[serde(default)]
    pub controls: Vec<Control>,
    /// The host's load average (1, 5, 15 min) when the bench started and ended.
    #[serde(default)]
    pub load_before: Option<[f64; 3]>,
    #[serde(default)]
    pub load_after: Option<[f64; 3]>,
}

fn run_path() -> String {
    "run".into()
}

/// `/proc/loadavg`'s three averages.
pub fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let v: Vec<f64> = s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

pub fn stats(name: &str, samples: &[Sample]) -> Stats {
    let mut ms: Vec<f64> = samples.iter().map(|s| s.exit_ms).collect();
    ms.sort_by(f64::total_cmp);
    let mut first: Vec<f64> = samples.iter().filter_map(|s| s.first_byte_ms).collect();
    first.sort_by(f64::total_cmp);
    // Phases in the order of their median.
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in samples {
        for (k, v) in &s.phases {
            by.entry(k).or_default().push(*v);
        }
    }
    let mut phases: Vec<(String, f64)> = by
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            (k.to_string(), percentile(&v, 0.5))
        })
        .collect();
    phases.sort_by(|a, b| a.1.total_cmp(&b.1));
    Stats {
        name: name.into(),
        runs: ms.len(),
        p50_ms: percentile(&ms, 0.5),
        p90_ms: percentile(&ms, 0.9),
        p95_ms: percentile(&ms, 0.95),
        mean_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        first_byte_p50_ms: (!first.is_empty()).then(|| percentile(&first, 0.5)),
        first_byte_p95_ms: (!first.is_empty()).then(|| percentile(&first, 0.95)),
        phases,
    }
}

/// Contenders and targets for a tier: (contenders, [(what, against, target p50 ratio)], skipped).
pub type Plan = (Vec<Contender>, Vec<(String, String, Option<f64>)>, Vec<String>);

// The host interpreter lives with the host facts (slowdown uses it too,
// and bench reaches soak: one place below both).
pub use crate::host::host_python;

/// `bwrap --unshare-all` around the host's python3, as people run it.
pub fn bwrap_argv(py: &str) -> Option<Vec<String>> {
    let bwrap = crate::host::which("bwrap")?.to_string_lossy().into_owned();
    Some(
        [
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
            py,
            "-c",
            CODE,
        ]
        .map(String::from)
        .to_vec(),
    )
}

/// How the named tier is benched, from its kinds row: (its name, the
/// shape). `None`: a peer, or no tier.
fn shape(tier_name: &str) -> Option<(&'static str, Bench)> {
    kinds::of(tier_name).map(|k| (k.name(), k.bench))
}

/// The local floor sandbench's remote tiers and the peers are held to.
const LOCAL: TierKind = TierKind::Process;

/// The process tier's spare-keeping tier, ready for a warm run after each.
fn process_warm(config: &Config) -> anyhow::Result<Contender> {
    let mut warm_cfg = config.clone();
    warm_cfg.process.spare = true;
    let warm = tier::by_name(TierKind::Process.name(), &warm_cfg)?;
    let w = warm.clone();
    let settle: Settle = Arc::new(move || {
        let w = w.clone();
        Box::pin(async move {
            tier::background::drain(Duration::from_secs(30)).await;
            w.prewarm().await;
            Ok(())
        })
    });
    Ok(Contender::Tier { name: "sandbench process (warm)".into(), tier: warm, settle: Some(settle) })
}

/// The contenders and targets for `tier_name` (a known tier name).
pub async fn plan(tier_name: &str, config: &Config) -> anyhow::Result<Plan> {
    let tier = tier::by_name(tier_name, config)?;
    let mut skipped = vec![];
    let mut c = vec![Contender::tier(format!("sandbench {tier_name}"), tier)];
    let mut targets = vec![];
    let py = host_python();
    match shape(tier_name) {
        Some((_, Bench::Spare)) => {
            // Cold: every run builds its sandbox from nothing (no spare).
            let mut cold_cfg = config.clone();
            cold_cfg.process.spare = false;
            c.clear();
            c.push(Contender::tier("sandbench process (cold)", tier::by_name(tier_name, &cold_cfg)?));
            c.push(process_warm(config)?);
            let cold = "sandbench process (cold)".to_string();
            let warm = "sandbench process (warm)".to_string();
            // The same interpreter the sandbox uses, started the plain way.
            c.push(Contender::Command {
                name: "bare python3".into(),
                argv: vec![py.clone(), "-c".into(), CODE.into()],
            });
            targets.push((cold.clone(), "bare python3".into(), Some(1.15)));
            targets.push((warm.clone(), "bare python3".into(), Some(0.3)));
            match bwrap_argv(&py) {
                Some(argv) => {
                    c.push(Contender::Command { name: "bwrap --unshare-all".into(), argv });
                    targets.push((cold, "bwrap --unshare-all".into(), Some(1.0)));
                    targets.push((warm, "bwrap --unshare-all".into(), None));
                }
                None => skipped.push("bwrap is not installed (apt-get install bubblewrap)".into()),
            }
        }
        Some((name, Bench::Container { runtime })) => {
            c.clear();
            targets = docker::bench_plan(name, runtime, config, &mut c, &mut skipped);
        }
        Some((_, Bench::Remote)) => {
            // Network-bound: measured against the local process tier to show
            // what leaving the machine costs. No target ratio: it depends on
            // the distance to the provider's region more than on sandbench.
            let local = format!("sandbench {}", LOCAL.name());
            c.push(Contender::tier(local.clone(), tier::by_name(LOCAL.name(), config)?));
            targets.push((format!("sandbench {tier_name}"), local, None));
        }
        Some((_, Bench::Guest)) => microvm_plan(config, &mut c, &mut targets, &mut skipped).await?,
        None if tier::peer::names().unwrap_or_default().contains(&tier_name) => {
            // Another tool's sandbox, against the same floor and sandbench's
            // own process tier, in one interleaved run. No target: it is
            // what the tool costs, not what sandbench promises.
            let me = format!("sandbench {tier_name}");
            let local = format!("sandbench {}", LOCAL.name());
            c.push(Contender::tier(local.clone(), tier::by_name(LOCAL.name(), config)?));
            c.push(Contender::Command { name: "bare python3".into(), argv: vec![py, "-c".into(), CODE.into()] });
            targets.push((me.clone(), "bare python3".into(), None));
            targets.push((me, local, None));
        }
        None => anyhow::bail!("no benchmark is defined for the {tier_name} tier yet"),
    }
    Ok((c, targets, skipped))
}

/// The host's node (the one the process tier and the peers run).
pub fn host_node() -> Option<String> {
    ["/usr/bin/node", "/usr/local/bin/node", "/usr/bin/nodejs"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(String::from)
}

/// `bench --language javascript`: the tier (cold and warm where it has
/// both) against bare `node -e 'console.log(1)'` (under `env -i`), the
/// floor of starting Node here. No target ratios yet: the figures are
/// what they are.
pub async fn plan_javascript(tier_name: &str, config: &Config) -> anyhow::Result<Plan> {
    let node = host_node()
        .ok_or_else(|| anyhow::anyhow!("no node on this host to measure against: apt-get install nodejs"))?;
    let tier = tier::by_name(tier_name, config)?;
    tier.language_support(Language::Javascript).await.map_err(|why| anyhow::anyhow!("{tier_name}: {why}"))?;
    let mut c = vec![];
    let mut targets = vec![];
    let bare = "bare node -e".to_string();
    if matches!(shape(tier_name), Some((_, Bench::Spare))) {
        let mut cold_cfg = config.clone();
        cold_cfg.process.spare = false;
        c.push(Contender::tier("sandbench process (cold)", tier::by_name(tier_name, &cold_cfg)?));
        c.push(process_warm(config)?);
        targets.push(("sandbench process (cold)".to_string(), bare.clone(), None));
        targets.push(("sandbench process (warm)".to_string(), bare.clone(), None));
    } else {
        // A long-lived tier object: its own warm path (a container pool,
        // a guest pool) as users of the workbench and MCP get it.
        let me = format!("sandbench {tier_name}");
        let t = tier.clone();
        let settle: Settle = Arc::new(move || {
            let t = t.clone();
            Box::pin(async move {
                tier::background::drain(Duration::from_secs(30)).await;
                t.prewarm().await;
                Ok(())
            })
        });
        c.push(Contender::Tier { name: me.clone(), tier, settle: Some(settle) });
        targets.push((me, bare.clone(), None));
    }
    // With an empty environment, as the sandboxes start it: a host variable
    // such as NODE_EXTRA_CA_CERTS (node then parses a CA bundle at start,
    // ~120 ms here) would make the floor slower than the sandboxes.
    let env =
        crate::host::which("env").map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|| "/usr/bin/env".into());
    c.push(Contender::Command { name: bare, argv: vec![env, "-i".into(), node, "-e".into(), CODE.into()] });
    Ok((c, targets, vec![]))
}

/// [`measure`] with JavaScript programs: `console.log(1)` and a control
/// that loads a few built-in modules.
pub async fn measure_javascript(
    tier: &str,
    plan: Plan,
    runs: usize,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    measure_in(tier, plan, runs, Language::Javascript, round_done).await
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
    c.push(Contender::tier("microvm cold", Arc::new(cold)));
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
        c.push(Contender::tier("microvm snapshot", Arc::new(MicrovmTier::with_policy(config, Policy::Snapshot))));
        targets.push(("microvm snapshot".into(), "microvm cold".into(), None));
    } else {
        skipped.push("snapshot restore: no snapshot for the default limits (sandbench setup microvm saves one)".into());
    }
    let warm = Arc::new(MicrovmTier::with_policy(config, Policy::Auto));
    match warm.prewarm().await {
        Ok(_) => {
            let w = warm.clone();
            let settle: Settle = Arc::new(move || {
                let w = w.clone();
                Box::pin(async move { w.prewarm().await.map(|_| ()) })
            });
            c.push(Contender::Tier { name: "microvm warm".into(), tier: warm, settle: Some(settle) });
            targets.push(("microvm warm".into(), "microvm cold".into(), Some(0.05)));
        }
        Err(e) => skipped.push(format!("warm pool: {e:#}")),
    }
    Ok(())
}

fn ratios(stats: &[Stats], targets: &[(String, String, Option<f64>)]) -> Vec<Ratio> {
    let find = |n: &str| stats.iter().find(|s| s.name == n);
    targets
        .iter()
        .filter_map(|(what, against, target)| {
            let (a, b) = (find(what)?, find(against)?);
            let p50 = a.p50_ms / b.p50_ms;
            let first = match (a.first_byte_p50_ms, b.first_byte_p50_ms) {
                (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                _ => None,
            };
            Some(Ratio {
                p50_ratio: p50,
                p90_ratio: a.p90_ms / b.p90_ms,
                p95_ratio: a.p95_ms / b.p95_ms,
                target: target.map(|t| format!("p50 ≤ {t}×")),
                met: target.map(|t| p50 <= t),
                first_byte_p50_ratio: first,
                what: what.clone(),
                against: against.clone(),
            })
        })
        .collect()
}

/// Time every contender of `plan`: one warm-up each (page cache, first
/// cgroup), then `runs` interleaved rounds of `print(1)` and, in the same
/// rounds, of the stdlib control. `round_done(n)` after each round.
pub async fn measure(
    tier: &str,
    plan: Plan,
    runs: usize,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    measure_in(tier, plan, runs, Language::Python, round_done).await
}

async fn measure_in(
    tier: &str,
    plan: Plan,
    runs: usize,
    language: Language,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    measure_path(tier, "run", plan, runs, language, round_done).await
}

/// Time the contenders of a plan; whatever they keep open (a session) is
/// closed before this returns, measured or failed.
async fn measure_path(
    tier: &str,
    path: &str,
    plan: Plan,
    runs: usize,
    language: Language,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    let (contenders, targets, skipped) = plan;
    let r = rounds(&contenders, runs, language, round_done).await;
    for c in &contenders {
        c.close().await;
    }
    let (all, shown, load_before) = r?;
    let r0 = ratios(&all[0], &targets);
    // The control has no targets of its own: the same pairs, for a look.
    let untargeted: Vec<_> = targets.iter().map(|(a, b, _)| (a.clone(), b.clone(), None)).collect();
    let controls =
        vec![Control { program: shown[1].into(), ratios: ratios(&all[1], &untargeted), contenders: all[1].clone() }];
    Ok(BenchReport {
        tier: tier.to_string(),
        path: path.to_string(),
        program: shown[0].into(),
        contenders: all[0].clone(),
        ratios: r0,
        skipped,
        controls,
        load_before,
        load_after: load_average(),
    })
}

type Rounds = (Vec<Vec<Stats>>, [&'static str; 2], Option<[f64; 3]>);

/// One warm-up each (page cache, first cgroup), then `runs` interleaved
/// rounds of `print(1)` and, in the same rounds, of the stdlib control:
/// each program's stats per contender, the programs as shown, the load
/// before.
async fn rounds(
    contenders: &[Contender],
    runs: usize,
    language: Language,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<Rounds> {
    let (programs, shown) = match language {
        Language::Javascript => {
            ([PRINT1_JS, STDLIB_JS], ["console.log(1)", "require('util'), 'crypto', 'zlib', 'url'; console.log(1)"])
        }
        _ => ([PRINT1, STDLIB], ["print(1)", "import json, re, collections, dataclasses; print(1)"]),
    };
    let load_before = load_average();
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![vec![]; contenders.len()]; programs.len()];
    for c in contenders {
        c.once_in(language, programs[0]).await?;
    }
    for round in 0..runs {
        for (p, code) in programs.iter().enumerate() {
            for (i, c) in contenders.iter().enumerate() {
                samples[p][i].push(c.once_in(language, code).await?);
            }
        }
        round_done(round + 1);
    }
    let all: Vec<Vec<Stats>> =
        samples.iter().map(|per| contenders.iter().zip(per).map(|(c, s)| stats(c.name(), s)).collect()).collect();
    Ok((all, shown, load_before))
}

/// The session's contender names for `tier_name`: (fresh warm, session call).
pub fn session_names(tier_name: &str) -> (String, String) {
    (format!("sandbench {tier_name} fresh warm"), format!("sandbench {tier_name} session call"))
}

/// The tier's normal warm path, for the session bench: what a one-shot run
/// gets from a long-lived sandbench (a spare, a pooled container or guest).
async fn fresh_warm(tier_name: &str, config: &Config, name: String) -> anyhow::Result<Contender> {
    Ok(match shape(tier_name) {
        Some((_, Bench::Spare)) => match process_warm(config)? {
            Contender::Tier { tier, settle, .. } => Contender::Tier { name, tier, settle },
            other => other,
        },
        Some((kind, Bench::Container { runtime })) => docker::warm_contender(kind, runtime, config, name),
        Some((_, Bench::Guest)) => {
            use crate::tier::microvm::{MicrovmTier, Policy};
            let warm = Arc::new(MicrovmTier::with_policy(config, Policy::Auto));
            warm.prewarm()
                .await
                .map_err(|e| anyhow::anyhow!("microvm: no warm guest for the fresh warm run: {e:#}"))?;
            let w = warm.clone();
            let settle: Settle = Arc::new(move || {
                let w = w.clone();
                Box::pin(async move { w.prewarm().await.map(|_| ()) })
            });
            Contender::Tier { name, tier: warm, settle: Some(settle) }
        }
        // No warm path of its own (a remote tier, a peer): a fresh run as it is.
        Some((_, Bench::Remote)) | None => Contender::tier(name, tier::by_name(tier_name, config)?),
    })
}

/// `bench --path session`: on `tier_name`, a fresh warm run of the
/// program, a call in one session kept open for the whole bench, and the
/// bare interpreter (`python3 -c`, or `node -e` under `env -i`), in
/// interleaved rounds. Targets: a docker or gVisor session call at most
/// half a fresh warm run (issue 24); elsewhere the ratios are shown.
pub async fn plan_session(tier_name: &str, config: &Config, language: Language) -> anyhow::Result<Plan> {
    let tier = tier::by_name(tier_name, config)?;
    tier.sessions().map_err(|why| anyhow::anyhow!("the {tier_name} tier cannot keep a session: {why}"))?;
    let bare = match language {
        Language::Python => {
            Contender::Command { name: "bare python3".into(), argv: vec![host_python(), "-c".into(), CODE.into()] }
        }
        Language::Javascript => {
            let node = host_node()
                .ok_or_else(|| anyhow::anyhow!("no node on this host to measure against: apt-get install nodejs"))?;
            tier.language_support(Language::Javascript).await.map_err(|why| anyhow::anyhow!("{tier_name}: {why}"))?;
            let env = crate::host::which("env")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/usr/bin/env".into());
            Contender::Command {
                name: "bare node -e".into(),
                argv: vec![env, "-i".into(), node, "-e".into(), CODE.into()],
            }
        }
        other => anyhow::bail!("bench times python or javascript programs, not {other}"),
    };
    let (warm_name, session_name) = session_names(tier_name);
    let warm = fresh_warm(tier_name, config, warm_name.clone()).await?;
    // The limits a fresh run of the bench has; a lifetime long enough for
    // any number of rounds (the bench closes it).
    let limits = RunSpec::new(language, PRINT1).limits;
    let spec = SessionSpec { max_life: Duration::from_secs(24 * 3600), ..SessionSpec::new(limits) };
    let session =
        Session::open(tier, spec).await.map_err(|e| anyhow::anyhow!("cannot open a {tier_name} session: {e:#}"))?;
    let bare_name = bare.name().to_string();
    let target = matches!(shape(tier_name), Some((_, Bench::Container { .. }))).then_some(0.5);
    let targets = vec![
        (session_name.clone(), warm_name.clone(), target),
        (session_name.clone(), bare_name.clone(), None),
        (warm_name, bare_name, None),
    ];
    let c = vec![warm, Contender::Session { name: session_name, session }, bare];
    Ok((c, targets, vec![]))
}

/// The tiers `bench --all-tiers` puts in its one table, in its order.
pub const ALL_TIERS: [&str; 4] = ["process", "docker", "gvisor", "microvm"];

/// `bench --all-tiers`, one tier's part: a cold run (no spare, pool or
/// warm guest: a sandbox built for the run), a fresh warm run (what a
/// long-lived sandbench serves a one-shot run from), a call in one kept
/// session, and bare `python3 -c`, measured in the same interleaved rounds.
pub async fn plan_all(tier_name: &str, config: &Config) -> anyhow::Result<Plan> {
    let (cold_name, warm_name, session_name, bare_name) = all_names(tier_name);
    let cold: Contender = match shape(tier_name) {
        Some((_, Bench::Spare)) => {
            let mut cold_cfg = config.clone();
            cold_cfg.process.spare = false;
            Contender::tier(cold_name.clone(), tier::by_name(tier_name, &cold_cfg)?)
        }
        Some((kind, Bench::Container { runtime })) => {
            let cold_cfg = Config {
                docker: crate::config::DockerConfig { pool_size: 0, ..config.docker.clone() },
                ..config.clone()
            };
            Contender::tier(
                cold_name.clone(),
                Arc::new(crate::tier::docker::DockerTier::on_runtime(kind, runtime, &cold_cfg)),
            )
        }
        Some((_, Bench::Guest)) => {
            use crate::tier::microvm::{MicrovmTier, Policy};
            Contender::tier(cold_name.clone(), Arc::new(MicrovmTier::with_policy(config, Policy::Cold)))
        }
        _ => anyhow::bail!("bench --all-tiers covers {}, not {tier_name}", ALL_TIERS.join(", ")),
    };
    let (session_plan, _, _) = plan_session(tier_name, config, Language::Python).await?;
    // plan_session's contenders: the fresh warm run, the session call, bare python3.
    let mut c = vec![cold];
    c.extend(session_plan);
    let targets = vec![
        (warm_name.clone(), bare_name.clone(), None),
        (session_name, bare_name.clone(), None),
        (cold_name, bare_name, None),
    ];
    Ok((c, targets, vec![]))
}

/// The contender names of [`plan_all`]: cold, fresh warm, session call, bare.
pub fn all_names(tier_name: &str) -> (String, String, String, String) {
    let (warm, session) = session_names(tier_name);
    (format!("sandbench {tier_name} cold"), warm, session, "bare python3".into())
}

/// One row of the `--all-tiers` table: p50s in ms and each over bare python3.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllRow {
    pub tier: String,
    pub fresh_warm_ms: f64,
    pub session_call_ms: f64,
    pub cold_ms: f64,
    pub bare_python_ms: f64,
    pub fresh_warm_x: f64,
    pub session_call_x: f64,
    pub cold_x: f64,
}

impl AllRow {
    /// From a tier's [`plan_all`] report (its `print(1)` contenders).
    pub fn of(r: &BenchReport) -> Option<AllRow> {
        let (cold, warm, session, bare) = all_names(&r.tier);
        let p50 = |n: &str| r.contenders.iter().find(|c| c.name == n).map(|c| c.p50_ms);
        let (cold, warm, session, bare) = (p50(&cold)?, p50(&warm)?, p50(&session)?, p50(&bare)?);
        let x = |v: f64| if bare > 0.0 { v / bare } else { f64::NAN };
        Some(AllRow {
            tier: r.tier.clone(),
            fresh_warm_ms: warm,
            session_call_ms: session,
            cold_ms: cold,
            bare_python_ms: bare,
            fresh_warm_x: x(warm),
            session_call_x: x(session),
            cold_x: x(cold),
        })
    }
}

/// [`measure`] for `--all-tiers` (a plan from [`plan_all`]).
pub async fn measure_all(
    tier: &str,
    plan: Plan,
    runs: usize,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    measure_path(tier, "all", plan, runs, Language::Python, round_done).await
}

/// [`measure`] for `--path session` (a plan from [`plan_session`]).
pub async fn measure_session(
    tier: &str,
    plan: Plan,
    runs: usize,
    language: Language,
    round_done: &mut (dyn FnMut(usize) + Send),
) -> anyhow::Result<BenchReport> {
    measure_path(tier, "session", plan, runs, language, round_done).await
}

/// One side of a throughput run: sandbench's tier, or the bare equivalent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ThroughputSide {
    pub name: String,
    pub runs: usize,
    pub errors: usize,
    /// Why the first failed run failed (one line, inert): a count alone
    /// would not say whether the side or the machine was at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Time with runs in flight (the last ones finished included).
    pub seconds: f64,
    pub runs_per_s: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// CPU per completed run: everything sandbench (or the bare command)
    /// started, measured by a cgroup around it, plus the run cgroups of the
    /// process tier, and for the engine tiers dockerd, containerd and the
    /// containers' cgroups; background teardown included.
    pub cpu_ms_per_run: Option<f64>,
    /// The whole machine's busy CPU over the side's halves per completed
    /// run (`/proc/stat`): what the CPU-per-run above cannot hold (the
    /// engine's shims and the `runsc` processes they start, kernel threads
    /// working for the runs), and whatever else ran meanwhile. With both
    /// sides alternated, the fair one to compare where CPUs are saturated.
    #[serde(default)]
    pub machine_cpu_ms_per_run: Option<f64>,
    /// The host's `/bin/true` spawned every 100 ms meanwhile.
    pub host_true: crate::soak::HostLatency,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ThroughputReport {
    pub tier: String,
    pub program: String,
    pub concurrency: usize,
    pub duration_s: f64,
    pub sandbench: ThroughputSide,
    pub bare: Option<ThroughputSide>,
    /// sandbench's runs/s over the bare equivalent's.
    pub ratio: Option<f64>,
    pub target: Option<f64>,
    pub met: Option<bool>,
    /// How long background teardown (cgroups, single-use containers) took to
    /// finish after sandbench's last report, summed over its phases.
    pub teardown_after_ms: f64,
    /// What carries this process's token after the pools were drained (must be 0).
    pub leftovers: crate::soak::Leftovers,
    pub skipped: Vec<String>,
    pub load_before: Option<[f64; 3]>,
    pub load_after: Option<[f64; 3]>,
    /// The process tier's sandbox helper (what each run exec's), when it is
    /// the tier measured.
    #[serde(default)]
    pub helper: Option<String>,
}

/// CPU time (ms) of the processes named in `daemons` (by their comm
/// prefix), summed: the Docker engine's share of a run.
fn daemons_cpu_ms(daemons: &[&str]) -> f64 {
    if daemons.is_empty() {
        return 0.0;
    }
    let mut total = 0.0;
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Some(st) = crate::host::ProcStat::of(pid) else { continue };
            if daemons.iter().any(|d| st.comm.starts_with(d)) {
                total += st.cpu_ms() as f64;
            }
        }
    }
    total
}

/// CPU (ms) of every container the local engine ran: its cgroup parent's
/// counter, which keeps what removed containers used (other users'
/// containers on the same engine count too).
fn containers_cpu_ms() -> f64 {
    let v1 = std::path::Path::new("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage");
    if let Some(ns) = std::fs::read_to_string(v1).ok().and_then(|s| s.trim().parse::<f64>().ok()) {
        return ns / 1e6;
    }
    std::fs::read_to_string("/sys/fs/cgroup/docker/cpu.stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<f64>().ok()))
        .map(|us| us / 1000.0)
        .unwrap_or(0.0)
}

/// This process's own CPU and its waited-for children's (ms): the fallback
/// where no CPU meter cgroup can be made.
fn rusage_ms() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1000.0 + t.tv_usec() as f64 / 1000.0;
    [UsageWho::RUSAGE_SELF, UsageWho::RUSAGE_CHILDREN]
        .into_iter()
        .filter_map(|w| getrusage(w).ok())
        .map(|u| tv(u.user_time()) + tv(u.system_time()))
        .sum()
}

/// Counts the CPU of one throughput phase: a meter cgroup around sandbench
/// (and so around every process it starts), plus the engine's daemons and
/// containers for the Docker tiers.
struct PhaseCpu {
    meter: Option<crate::tier::process::cgroup::CpuMeter>,
    start: f64,
    engine: bool,
    machine: Option<f64>,
}

impl PhaseCpu {
    fn begin(engine: bool, daemons: &[&str], env: &crate::config::HostEnv) -> PhaseCpu {
        let meter = crate::tier::process::cpu_meter("bench", env).ok();
        let mut p = PhaseCpu { meter, start: 0.0, engine, machine: None };
        p.start = p.now(daemons);
        p.machine = crate::host::machine_busy_ms();
        p
    }

    fn now(&self, daemons: &[&str]) -> f64 {
        let own = match &self.meter {
            Some(m) => m.cpu_ns().map(|n| n as f64 / 1e6).unwrap_or(0.0),
            None => rusage_ms(),
        };
        let engine = if self.engine { daemons_cpu_ms(daemons) + containers_cpu_ms() } else { 0.0 };
        own + engine
    }

    /// The phase's CPU, the whole machine's busy CPU meanwhile, and its
    /// meter: dropped (removed) once nothing of the phase runs inside (a
    /// spare sandbox made in it lives on).
    fn end(self, daemons: &[&str]) -> PhaseEnd {
        let machine = crate::host::machine_busy_ms();
        let d = self.now(daemons) - self.start;
        PhaseEnd {
            cpu: d.max(0.0),
            machine: self.machine.zip(machine).map(|(a, b)| (b - a).max(0.0)),
            meter: self.meter,
        }
    }
}

struct PhaseEnd {
    cpu: f64,
    machine: Option<f64>,
    meter: Option<crate::tier::process::cgroup::CpuMeter>,
}

/// What to throughput-test: sandbench's tier (with its pools) and the
/// concurrent bare equivalent, and the target ratio.
pub struct ThroughputPlan {
    pub tier: Arc<dyn Tier>,
    pub bare: Option<(String, Vec<String>)>,
    pub target: Option<f64>,
    pub daemons: Vec<&'static str>,
    pub skipped: Vec<String>,
    /// What the process tier and the leftover count take from the environment.
    pub host: crate::config::HostEnv,
}

pub fn throughput_plan(tier_name: &str, config: &Config) -> anyhow::Result<ThroughputPlan> {
    let py = host_python();
    let mut skipped = vec![];
    let tier = tier::by_name(tier_name, config)?;
    let (bare, target, daemons) = match shape(tier_name) {
        Some((_, Bench::Spare)) => {
            let b = bwrap_argv(&py).map(|a| ("bwrap --unshare-all python3 -c".to_string(), a));
            if b.is_none() {
                skipped.push("bwrap is not installed (apt-get install bubblewrap): no bare equivalent".into());
            }
            // Issue 24: as many runs per second as bwrap with 4 in flight.
            (b, Some(1.0), vec![])
        }
        Some((_, Bench::Container { runtime })) => {
            let b = docker::cli_argv(runtime, config);
            if b.is_none() {
                skipped.push("the docker CLI is not installed (apt-get install docker.io): no bare equivalent".into());
            }
            (b, Some(1.5), vec!["dockerd", "containerd"])
        }
        _ => {
            let b = Some(("bare python3 -c".to_string(), vec![py, "-c".into(), CODE.into()]));
            (b, None, vec![])
        }
    };
    Ok(ThroughputPlan { tier, bare, target, daemons, skipped, host: config.host.clone() })
}

/// Keep `n` runs of `one` in flight until `until`; (latencies ms, errors,
/// CPU the runs accounted outside this process's meter, ms).
async fn keep_in_flight<F, Fut>(n: usize, until: Instant, one: F) -> (Vec<f64>, Errors, f64)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<f64>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let (mut lat, mut errors, mut cpu) = (vec![], Errors::default(), 0.0);
    loop {
        while set.len() < n && Instant::now() < until {
            let f = one();
            set.spawn(async move {
                let t = Instant::now();
                (f.await, ms(t.elapsed()))
            });
        }
        match set.join_next().await {
            Some(Ok((Ok(c), d))) => {
                lat.push(d);
                cpu += c;
            }
            Some(Ok((Err(e), _))) => {
                tracing::info!("throughput run failed: {e:#}");
                errors.add(1, Some(format!("{e:#}")));
            }
            Some(Err(e)) => errors.add(1, Some(format!("the run's task ended: {e}"))),
            None => break,
        }
    }
    (lat, errors, cpu)
}

/// Failed runs of one side, and why the first one failed.
#[derive(Default)]
struct Errors {
    count: usize,
    first: Option<String>,
}

impl Errors {
    fn add(&mut self, count: usize, why: Option<String>) {
        self.count += count;
        if self.first.is_none() {
            self.first = why.map(|w| crate::sanitize::inert_line(&w, 300));
        }
    }
}

/// CPU of one side's halves: its own meter's, and the machine's (`None`
/// once any half could not read it).
#[derive(Clone, Copy)]
struct SideCpu {
    own: f64,
    machine: Option<f64>,
}

impl Default for SideCpu {
    fn default() -> Self {
        SideCpu { own: 0.0, machine: Some(0.0) }
    }
}

impl SideCpu {
    fn add(&mut self, own: f64, machine: Option<f64>) {
        self.own += own;
        self.machine = self.machine.zip(machine).map(|(a, b)| a + b);
    }
}

fn side(name: &str, lat: &mut [f64], errors: Errors, seconds: f64, cpu: SideCpu, host: Vec<f64>) -> ThroughputSide {
    lat.sort_by(f64::total_cmp);
    let mut host = host;
    host.sort_by(f64::total_cmp);
    let runs = lat.len();
    ThroughputSide {
        name: name.into(),
        runs,
        errors: errors.count,
        first_error: errors.first,
        seconds,
        runs_per_s: runs as f64 / seconds.max(1e-9),
        p50_ms: (runs > 0).then(|| percentile(lat, 0.5)),
        p99_ms: (runs > 0).then(|| percentile(lat, 0.99)),
        cpu_ms_per_run: (runs > 0).then(|| cpu.own / runs as f64),
        machine_cpu_ms_per_run: cpu.machine.filter(|_| runs > 0).map(|m| m / runs as f64),
        host_true: crate::soak::HostLatency {
            samples: host.len(),
            p50_ms: (!host.is_empty()).then(|| percentile(&host, 0.5)),
            p99_ms: (!host.is_empty()).then(|| percentile(&host, 0.99)),
            max_ms: host.last().copied(),
        },
    }
}

/// N runs in flight for `duration` on sandbench's tier and on the bare
/// equivalent, alternating in two halves each (sandbench, bare, sandbench,
/// bare) so that drift on a shared machine hits both; then the pools are
/// drained and what is left is counted.
pub async fn throughput(
    tier_name: &str,
    plan: ThroughputPlan,
    concurrency: usize,
    duration: Duration,
    progress: &mut (dyn FnMut(&str) + Send),
) -> ThroughputReport {
    let ThroughputPlan { tier, bare, target, daemons, skipped, host: host_env } = plan;
    let n = concurrency.max(1);
    let half = duration / 2;
    let load_before = load_average();
    let (mut s_lat, mut s_err, mut s_secs, mut s_cpu, mut s_host) =
        (vec![], Errors::default(), 0.0, SideCpu::default(), vec![]);
    let (mut b_lat, mut b_err, mut b_secs, mut b_cpu, mut b_host) =
        (vec![], Errors::default(), 0.0, SideCpu::default(), vec![]);
    let mut teardown_after_ms = 0.0;
    // Warm-up, untimed: pools filled, page cache hot.
    tier.prewarm().await;
    let mut warm = RunSpec::new(Language::Python, PRINT1);
    warm.label = "bench".into();
    let _ = runner::run(tier.clone(), warm).await;
    tier::background::drain(Duration::from_secs(60)).await;
    let engine = !daemons.is_empty();
    // A spare-kept sandbox runs its program in a cgroup of its own.
    let process = matches!(shape(tier_name), Some((_, Bench::Spare)));
    let mut meters = vec![];
    for round in 0..2 {
        progress(&format!("round {}/2: sandbench {tier_name}", round + 1));
        tier.prewarm().await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let host = Arc::new(std::sync::Mutex::new(vec![]));
        let prober = crate::soak::probe_host(stop.clone(), host.clone());
        let cpu = PhaseCpu::begin(engine, &daemons, &host_env);
        let t0 = Instant::now();
        let t = tier.clone();
        let (mut lat, err, in_runs) = keep_in_flight(n, t0 + half, move || {
            let t = t.clone();
            async move {
                let mut spec = RunSpec::new(Language::Python, PRINT1);
                spec.label = "bench".into();
                let r = runner::run(t.clone(), spec).await;
                check(t.name(), &r)?;
                // The process tier's program runs in its own cgroup, outside
                // the meter: its cgroup's CPU is in the report.
                Ok(if process { r.usage.cpu_ms.unwrap_or(0) as f64 } else { 0.0 })
            }
        })
        .await;
        let secs = t0.elapsed().as_secs_f64();
        // Teardown that the reports did not wait for is part of the cost.
        let d0 = Instant::now();
        tier::background::drain(Duration::from_secs(120)).await;
        teardown_after_ms += ms(d0.elapsed());
        let end = cpu.end(&daemons);
        s_cpu.add(end.cpu + in_runs, end.machine);
        meters.push(end.meter);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = tokio::task::spawn_blocking(move || prober.join()).await;
        s_host.extend(host.lock().map(|v| v.clone()).unwrap_or_default());
        s_lat.append(&mut lat);
        s_err.add(err.count, err.first);
        s_secs += secs;
        if let Some((name, argv)) = &bare {
            progress(&format!("round {}/2: {name}", round + 1));
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let host = Arc::new(std::sync::Mutex::new(vec![]));
            let prober = crate::soak::probe_host(stop.clone(), host.clone());
            let cpu = PhaseCpu::begin(engine, &daemons, &host_env);
            let t0 = Instant::now();
            let argv = Arc::new(argv.clone());
            let (mut lat, err, _) = keep_in_flight(n, t0 + half, move || {
                let argv = argv.clone();
                async move { command_once(&argv, PRINT1).await.map(|_| 0.0) }
            })
            .await;
            b_secs += t0.elapsed().as_secs_f64();
            let end = cpu.end(&daemons);
            b_cpu.add(end.cpu, end.machine);
            meters.push(end.meter);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = tokio::task::spawn_blocking(move || prober.join()).await;
            b_host.extend(host.lock().map(|v| v.clone()).unwrap_or_default());
            b_lat.append(&mut lat);
            b_err.add(err.count, err.first);
        }
    }
    let sandbench = side(&format!("sandbench {tier_name}"), &mut s_lat, s_err, s_secs, s_cpu, s_host);
    let bare = bare.map(|(name, _)| side(&name, &mut b_lat, b_err, b_secs, b_cpu, b_host));
    let ratio = bare.as_ref().filter(|b| b.runs_per_s > 0.0).map(|b| sandbench.runs_per_s / b.runs_per_s);
    // Pools and spares hold sandboxes by design: drain them, then nothing of ours may be left.
    progress("draining pools and counting leftovers");
    let _ = tier::shutdown().await;
    drop(tier);
    // The meters last: a spare made during a phase was born in its meter.
    tokio::task::spawn_blocking(move || drop(meters)).await.ok();
    let settle = Instant::now();
    let leftovers = loop {
        let l = crate::soak::leftovers(&host_env).await;
        if l.total == 0 || settle.elapsed() > Duration::from_secs(10) {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ThroughputReport {
        tier: tier_name.into(),
        program: "print(1)".into(),
        concurrency: n,
        duration_s: duration.as_secs_f64(),
        met: match (ratio, target) {
            (Some(r), Some(t)) => Some(r >= t),
            _ => None,
        },
        ratio,
        target,
        sandbench,
        bare,
        teardown_after_ms,
        leftovers,
        skipped,
        load_before,
        load_after: load_average(),
        helper: process.then(|| crate::tier::process::helper_exe::describe(&host_env)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(exit: f64, first: Option<f64>, phases: &[(&str, f64)]) -> Sample {
        Sample {
            exit_ms: exit,
            first_byte_ms: first,
            phases: phases.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[tokio::test]
    async fn failed_runs_are_counted_with_the_first_reason_made_inert() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = calls.clone();
        let until = Instant::now() + Duration::from_millis(200);
        let (lat, errors, cpu) = keep_in_flight(2, until, move || {
            let i = c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move {
                // The first call fails first: the second waits longer.
                tokio::time::sleep(Duration::from_millis(if i == 1 { 30 } else { 1 })).await;
                match i {
                    0 => anyhow::bail!("bwrap failed: \x1b[31mno space\nleft"),
                    1 => anyhow::bail!("a later reason"),
                    _ => Ok(1.5),
                }
            }
        })
        .await;
        assert_eq!(errors.count, 2);
        let first = errors.first.expect("the first reason is kept");
        assert!(first.starts_with("bwrap failed") && !first.contains('\x1b') && !first.contains('\n'), "{first}");
        assert_eq!(lat.len() + 2, calls.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(cpu, 1.5 * lat.len() as f64);
    }

    #[test]
    fn stats_of_samples() {
        let st = stats(
            "x",
            &[s(3.0, Some(2.0), &[("b", 2.0), ("a", 1.0)]), s(1.0, None, &[("a", 0.5)]), s(2.0, Some(1.0), &[])],
        );
        assert_eq!(st.p50_ms, 2.0);
        assert_eq!(st.mean_ms, 2.0);
        assert_eq!(st.first_byte_p50_ms, Some(2.0));
        assert_eq!(st.phases, vec![("a".to_string(), 1.0), ("b".to_string(), 2.0)], "ordered by when they happen");
        let none = stats("y", &[s(1.0, None, &[])]);
        assert_eq!(none.first_byte_p50_ms, None);
    }

    #[test]
    fn ratios_compare_named_contenders_and_say_whether_targets_are_met() {
        let a =
            Stats { name: "a".into(), p50_ms: 3.0, p95_ms: 6.0, first_byte_p50_ms: Some(1.0), ..Default::default() };
        let b =
            Stats { name: "b".into(), p50_ms: 10.0, p95_ms: 12.0, first_byte_p50_ms: Some(4.0), ..Default::default() };
        let r = ratios(&[a, b], &[("a".into(), "b".into(), Some(0.3)), ("a".into(), "zz".into(), None)]);
        assert_eq!(r.len(), 1, "a missing contender gives no ratio");
        assert!((r[0].p50_ratio - 0.3).abs() < 1e-9);
        assert_eq!(r[0].met, Some(true));
        assert_eq!(r[0].first_byte_p50_ratio, Some(0.25));
    }

    #[tokio::test]
    async fn a_command_contender_times_its_first_byte_and_exit() {
        let c = Contender::Command {
            name: "sh".into(),
            argv: vec!["/bin/sh".into(), "-c".into(), "echo 1; sleep 0.05".into(), CODE.into()],
        };
        let smp = c.once_in(Language::Python, PRINT1).await.unwrap();
        let first = smp.first_byte_ms.unwrap();
        assert!(first < smp.exit_ms, "{smp:?}");
        assert!(smp.exit_ms - first >= 40.0, "the exit comes after the sleep: {smp:?}");
        let bad = Contender::Command { name: "f".into(), argv: vec!["/bin/false".into()] };
        assert!(bad.once_in(Language::Python, PRINT1).await.is_err());
    }
}
