//! What a bench times: a contender (a sandbench tier, a baseline command
//! or a kept session) and one measured run of it. Its own file because the
//! benches of one tier (`docker.rs`) build contenders for the engine in
//! `bench.rs`, which calls them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::report::{Outcome, RunReport};
use crate::runner;
use crate::session::Session;
use crate::spec::{Language, RunSpec};
use crate::tier::{self, Tier};

/// In a command's argv, replaced by the program's code.
pub const CODE: &str = "{code}";

/// What a contender does between two measured runs, untimed (e.g. a warm
/// pool refilling, background teardown finishing), so that its background
/// work never overlaps another contender's measurement.
pub type Settle = Arc<dyn Fn() -> tier::BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

/// One thing to time.
pub enum Contender {
    /// A run through a sandbench tier (the full runner, as users get it).
    Tier { name: String, tier: Arc<dyn Tier>, settle: Option<Settle> },
    /// A baseline command, spawned and waited for; `{code}` in its argv is
    /// the program.
    Command { name: String, argv: Vec<String> },
    /// A call in one session kept open for the whole bench (the agent's hot
    /// path): every measured run is the next call in the same sandbox.
    Session { name: String, session: Session },
}

/// One measured run.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub exit_ms: f64,
    pub first_byte_ms: Option<f64>,
    /// The tier's own account of where the time went (`details.timeline_ms`).
    pub phases: Vec<(String, f64)>,
}

/// Drain background teardowns (a run's report comes before its sandbox is
/// gone) before the next contender's measurement.
pub fn settle_background() -> Settle {
    Arc::new(|| {
        Box::pin(async {
            tier::background::drain(Duration::from_secs(30)).await;
            Ok(())
        })
    })
}

impl Contender {
    pub fn name(&self) -> &str {
        match self {
            Contender::Tier { name, .. } | Contender::Command { name, .. } | Contender::Session { name, .. } => name,
        }
    }

    /// Close what the contender keeps open (a session's sandbox); returns
    /// once it is gone.
    pub async fn close(&self) {
        if let Contender::Session { session, .. } = self {
            session.close().await;
        }
    }

    /// A tier contender whose background teardown is drained between runs.
    pub fn tier(name: impl Into<String>, tier: Arc<dyn Tier>) -> Contender {
        Contender::Tier { name: name.into(), tier, settle: Some(settle_background()) }
    }

    pub(super) async fn once_in(&self, language: Language, code: &str) -> anyhow::Result<Sample> {
        match self {
            Contender::Tier { tier, settle, .. } => {
                let mut spec = RunSpec::new(language, code);
                spec.label = "bench".into();
                let t0 = Instant::now();
                let r = runner::run(tier.clone(), spec).await;
                let exit_ms = ms(t0.elapsed());
                check(tier.name(), &r)?;
                if let Some(s) = settle {
                    s().await?;
                }
                Ok(Sample { exit_ms, first_byte_ms: r.timings_ms.first_output, phases: phases(&r) })
            }
            Contender::Command { argv, .. } => {
                let (exit, first) = command_once(argv, code).await?;
                Ok(Sample { exit_ms: ms(exit), first_byte_ms: first.map(ms), phases: vec![] })
            }
            Contender::Session { session, .. } => {
                let mut spec = RunSpec::new(language, code);
                spec.label = "bench".into();
                let t0 = Instant::now();
                let r = session.run(spec).await.map_err(|e| anyhow::anyhow!("{} session call: {e}", session.tier()))?;
                let exit_ms = ms(t0.elapsed());
                check(session.tier(), &r)?;
                // What the session does between calls (the next call's
                // process or loader made ahead) is off the call's path, as
                // for an agent that thinks between calls; the reports of a
                // session's calls have no background teardown.
                tier::background::drain(Duration::from_secs(30)).await;
                Ok(Sample { exit_ms, first_byte_ms: r.timings_ms.first_output, phases: phases(&r) })
            }
        }
    }
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(super) fn check(tier: &str, r: &RunReport) -> anyhow::Result<()> {
    if r.outcome != Outcome::Ok || r.stdout.trim() != "1" {
        anyhow::bail!("{tier} run failed: {}", r.summary_line());
    }
    Ok(())
}

fn phases(r: &RunReport) -> Vec<(String, f64)> {
    r.details
        .get("timeline_ms")
        .and_then(|t| t.as_object())
        .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
        .unwrap_or_default()
}

/// Spawn `argv` (with `{code}` replaced), note when its first stdout byte
/// arrives, wait for its exit. Returns (exit, first byte).
pub(super) async fn command_once(argv: &[String], code: &str) -> anyhow::Result<(Duration, Option<Duration>)> {
    let args: Vec<String> = argv.iter().map(|a| if a == CODE { code.to_string() } else { a.clone() }).collect();
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new(&args[0])
        .args(&args[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", args[0]))?;
    let mut out = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut err = child.stderr.take().ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let read_out = async {
        let mut buf = vec![];
        let mut first = None;
        let mut chunk = [0u8; 4096];
        loop {
            match out.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    first.get_or_insert_with(|| t0.elapsed());
                    buf.extend_from_slice(&chunk[..n]);
                }
            }
        }
        (buf, first)
    };
    let read_err = async {
        let mut e = vec![];
        let _ = err.read_to_end(&mut e).await;
        e
    };
    let ((stdout, first), stderr) = tokio::join!(read_out, read_err);
    let status = child.wait().await?;
    let exit = t0.elapsed();
    if !status.success() || String::from_utf8_lossy(&stdout).trim() != "1" {
        anyhow::bail!("{} failed: {}", args[0], crate::sanitize::inert_line(&String::from_utf8_lossy(&stderr), 300));
    }
    Ok((exit, first))
}
