//! Isolation tiers. A tier knows how to probe whether it can run here, and how
//! to run one program and stream `RunEvent`s; it knows nothing of front ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::event::{EventKind, RunEvent, UsageSample, Violation, ViolationKind};
use crate::session::{SessionSpec, TierSession};
use crate::spec::RunSpec;

pub mod background;
pub mod docker;
pub mod e2b;
pub mod microvm;
pub mod peer;
pub mod process;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// sandbench's own tiers, in order of isolation strength. Peers (other
/// tools' sandboxes, `peer::names()`) are tiers too, named by their profiles.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    serde::Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum TierKind {
    Process,
    Docker,
    Gvisor,
    Microvm,
    E2b,
}

impl TierKind {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// The names of sandbench's own tiers, in order of isolation strength.
pub const KNOWN: &[&str] = <TierKind as strum::VariantNames>::VARIANTS;

/// Longest violation detail or note (characters).
pub const MAX_DETAIL: usize = 400;

/// What a run needs from the runner: a clock, a place to send events and a
/// token that says "stop now" (cancel, wall timeout, output limit).
#[derive(Clone)]
pub struct RunContext {
    pub started: Instant,
    pub tx: mpsc::Sender<RunEvent>,
    pub stop: CancellationToken,
}

impl RunContext {
    pub fn ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    pub async fn emit(&self, kind: EventKind) {
        // The runner outlives every tier future; a send error means it was
        // torn down, and the tier's own cleanup still runs.
        let _ = self.tx.send(RunEvent { at_ms: self.ms(), kind }).await;
    }

    /// Report a violation. The detail may quote what the program chose (a
    /// file name): it is made inert here, once, for every front end.
    pub async fn violation(&self, kind: ViolationKind, detail: impl Into<String>) {
        let detail = crate::sanitize::inert_line(&detail.into(), MAX_DETAIL);
        let v = Violation { kind, at_ms: self.ms(), detail };
        self.emit(EventKind::Violation(v)).await;
    }

    /// A status line for the run's notes, made inert like a violation's detail.
    pub async fn note(&self, text: impl Into<String>) {
        self.emit(EventKind::Note(crate::sanitize::inert_line(&text.into(), MAX_DETAIL))).await;
    }

    pub async fn usage(&self, u: UsageSample) {
        self.emit(EventKind::Usage(u)).await;
    }
}

/// What a tier returns when the program is gone and everything is cleaned up.
#[derive(Debug, Default)]
pub struct TierExit {
    /// Final totals, when better than the last sample (e.g. cgroup CPU at exit).
    pub usage: Option<UsageSample>,
    /// Tier-specific facts for the report's `details`.
    pub details: serde_json::Value,
}

/// How a check went: fine, works but weaker or slower than it should
/// (a fallback, said with its reason), or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckLevel {
    Ok,
    Warn,
    Fail,
}

/// One fact `doctor` reports about a tier.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    /// It works (a warning works too).
    pub ok: bool,
    pub level: CheckLevel,
    pub detail: String,
    /// The command or step that fixes it, when not ok (or better, when a warning).
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &str, detail: impl Into<String>) -> Check {
        Check { name: name.into(), ok: true, level: CheckLevel::Ok, detail: detail.into(), fix: None }
    }
    /// It works, but not as it should here: a much slower or weaker fallback.
    pub fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name: name.into(), ok: true, level: CheckLevel::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }
    pub fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name: name.into(), ok: false, level: CheckLevel::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }

    /// ✓, ⚠ or ✗.
    pub fn glyph(&self) -> &'static str {
        match self.level {
            CheckLevel::Ok => "✓",
            CheckLevel::Warn => "⚠",
            CheckLevel::Fail => "✗",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Availability {
    pub tier: String,
    pub available: bool,
    /// One line: "ready (cgroup v1, landlock ABI 7)" or why not.
    pub summary: String,
    pub checks: Vec<Check>,
}

/// The largest limits a tier can enforce on this host. `None`: the tier has
/// no maximum of its own for that limit. Front ends (the CLI's flags, the
/// workbench's limits form) and the runner all refuse through
/// [`Tier::check_limits`], so a run never starts with a limit that cannot bite.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitMaxima {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub disk_bytes: Option<u64>,
    pub open_files: Option<u64>,
    pub cpus: Option<f64>,
}

impl LimitMaxima {
    /// One line naming the first limit above its maximum, and the maximum.
    pub fn check(&self, tier: &str, l: &crate::spec::Limits) -> Result<(), String> {
        use crate::spec::format_size;
        let above = |what: &str, v: String, max: String| {
            Err(format!("{what} {v} is more than the {tier} tier can enforce here (at most {max})"))
        };
        if let Some(m) = self.memory_bytes.filter(|m| l.memory_bytes > *m) {
            return above("memory", format_size(l.memory_bytes), format_size(m));
        }
        if let Some(m) = self.pids.filter(|m| l.pids > *m) {
            return above("pids", l.pids.to_string(), m.to_string());
        }
        if let Some(m) = self.disk_bytes.filter(|m| l.disk_bytes > *m) {
            return above("disk", format_size(l.disk_bytes), format_size(m));
        }
        if let Some(m) = self.open_files.filter(|m| l.open_files > *m) {
            return above("open files", l.open_files.to_string(), m.to_string());
        }
        if let Some(m) = self.cpus.filter(|m| l.cpus > *m) {
            return above("cpus", l.cpus.to_string(), m.to_string());
        }
        Ok(())
    }
}

pub trait Tier: Send + Sync {
    fn name(&self) -> &'static str;
    /// One line for listings.
    fn describe(&self) -> &'static str;
    fn probe(&self) -> BoxFuture<'_, Availability>;
    /// The largest limits this tier can enforce here (default: no maxima).
    fn max_limits(&self) -> LimitMaxima {
        LimitMaxima::default()
    }
    /// Refuse limits the tier cannot enforce, before any sandbox work: one
    /// line that names the maximum.
    fn check_limits(&self, limits: &crate::spec::Limits) -> Result<(), String> {
        self.max_limits().check(self.name(), limits)?;
        self.check_network(&limits.network)
    }
    /// Refuse a network limit the tier cannot enforce as given (never widen
    /// it). The default: no network at all, and no allow list.
    fn check_network(&self, network: &crate::egress::Network) -> Result<(), String> {
        refuse_allow_list(self.name(), network)
    }
    /// Refuse secrets (`spec.secrets`) the tier cannot keep out of the
    /// sandbox. The default: no egress proxy of sandbench's, so no secrets.
    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
        refuse_secrets(self.name(), secrets)
    }
    /// Whether this tier can start programs of `lang` here: `Err` says why
    /// not (the gauntlet shows such a cell as not available, never as a
    /// pass). The default: the tier's run reports a missing interpreter.
    fn language_support(&self, _lang: crate::spec::Language) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// Run one program. Must return only once every process, container, VM
    /// and temp file of the run is gone, also when `ctx.stop` fires.
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>>;
    /// Get later runs a warm start (fill a pool), for long-lived front ends
    /// (workbench, gauntlet). The default has nothing to warm.
    fn prewarm(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// What this instance holds warm right now (a spare sandbox, a pool's
    /// containers or guests), in a few words, for the workbench's tier pane;
    /// `None` for a tier that keeps nothing warm.
    fn warm(&self) -> Option<String> {
        None
    }
    /// Whether this tier can keep one sandbox alive between calls (a
    /// session, `crate::session`), or one line saying why not.
    fn sessions(&self) -> Result<(), String> {
        Err(format!("the {} tier cannot keep a session: every run gets a fresh sandbox", self.name()))
    }
    /// Build the sandbox a session keeps, with the session's limits. Called
    /// through `Session::open` only, after `sessions()` said yes.
    fn open_session(&self, spec: SessionSpec) -> BoxFuture<'_, anyhow::Result<Arc<dyn TierSession>>> {
        let _ = spec;
        let why = self.sessions().err().unwrap_or_else(|| format!("the {} tier has no sessions", self.name()));
        Box::pin(async move { Err(anyhow::anyhow!(why)) })
    }
}

/// The refusal of a tier without an egress path.
pub fn refuse_allow_list(tier: &str, network: &crate::egress::Network) -> Result<(), String> {
    if network.is_none() {
        return Ok(());
    }
    Err(format!(
        "the {tier} tier cannot enforce a network allow list (it runs with no network at all); use --network none, or a tier with egress: process, docker, gvisor, microvm"
    ))
}

/// The refusal of a tier whose sandbox's traffic sandbench's egress proxy
/// does not carry: the value could only be handed to the program.
pub fn refuse_secrets(tier: &str, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    if secrets.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the {tier} tier cannot keep a secret out of its sandbox (sandbench's egress proxy does not carry its traffic); use a tier with egress: process, docker, gvisor, microvm"
    ))
}

/// Whether the named tier can take secrets, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_secrets(name: &str, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    match name {
        "process" | "docker" | "gvisor" | "microvm" => Ok(()),
        "e2b" => e2b::refuse_secrets(secrets),
        other => refuse_secrets(other, secrets),
    }
}

/// Build the named tier.
pub fn by_name(name: &str, config: &Config) -> anyhow::Result<Arc<dyn Tier>> {
    match name.parse::<TierKind>() {
        Ok(TierKind::Process) => Ok(Arc::new(process::ProcessTier::new(config))),
        Ok(TierKind::Docker) => Ok(Arc::new(docker::DockerTier::docker(config))),
        Ok(TierKind::Gvisor) => Ok(Arc::new(docker::DockerTier::gvisor(config))),
        Ok(TierKind::E2b) => Ok(Arc::new(e2b::E2bTier::new(config))),
        Ok(TierKind::Microvm) => Ok(Arc::new(microvm::MicrovmTier::new(config))),
        Err(_) => match peer::by_name(name, config).map_err(|e| anyhow::anyhow!(e))? {
            Some(t) => Ok(t),
            None => anyhow::bail!("unknown tier '{name}' (known: {})", known_names().join(", ")),
        },
    }
}

/// The maxima of the named tier, without building it (the workbench's limits
/// form checks against the tier the next run goes to).
pub fn max_limits(name: &str) -> LimitMaxima {
    match name {
        "process" => process::host_maxima(),
        _ => LimitMaxima::default(),
    }
}

/// Whether the named tier can enforce `network`, without building it (the
/// workbench's limits form; the runner asks the tier itself).
pub fn check_network(name: &str, network: &crate::egress::Network) -> Result<(), String> {
    match name {
        "process" | "docker" | "gvisor" | "microvm" => Ok(()),
        "e2b" => e2b::check_allow_list(network),
        other => refuse_allow_list(other, network),
    }
}

/// sandbench's tiers, then the peers (when their profiles load).
pub fn known_names() -> Vec<String> {
    KNOWN.iter().map(|s| s.to_string()).chain(peer::names().unwrap_or_default().into_iter().map(String::from)).collect()
}

/// Parse a comma-separated tier list, refusing unknown names.
pub fn parse_list(s: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if !KNOWN.contains(&t) && !peer::names()?.contains(&t) {
            return Err(format!("unknown tier '{t}' (known: {})", known_names().join(", ")));
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    if out.is_empty() {
        return Err(format!("no tier given (known: {})", known_names().join(", ")));
    }
    Ok(out)
}

/// Probe the named tiers: the available ones, and (name, why) for the rest.
pub async fn probe_selected(
    names: &[String],
    config: &Config,
) -> anyhow::Result<(Vec<Arc<dyn Tier>>, Vec<(String, String)>)> {
    let mut ready = vec![];
    let mut skipped = vec![];
    for n in names {
        let t = by_name(n, config)?;
        let a = t.probe().await;
        if a.available {
            ready.push(t);
        } else {
            skipped.push((n.clone(), a.summary));
        }
    }
    Ok((ready, skipped))
}

/// Reap what earlier, dead sandbench processes left behind, for every tier.
pub async fn reap_leftovers(config: &Config) {
    process::reap_leftovers(&config.host);
    docker::reap_leftovers(&config.host).await;
    microvm::reap_leftovers();
    peer::reap_leftovers(&config.host);
}

/// Reap leftovers of the named tiers only. A one-shot command pays for its
/// own tier's check, not for asking a Docker engine it will not use (~30 ms
/// of `sandbench run --tier process`); other tiers' leftovers go at their
/// next use or the next command that uses every tier (workbench, doctor).
pub async fn reap_leftovers_of(names: &[String], config: &Config) {
    let has = |n: &str| names.iter().any(|t| t == n);
    if has("process") {
        process::reap_leftovers(&config.host);
    }
    if has("docker") || has("gvisor") {
        docker::reap_leftovers(&config.host).await;
    }
    if has("microvm") {
        microvm::reap_leftovers();
    }
    if names.iter().any(|n| !KNOWN.contains(&n.as_str())) {
        peer::reap_leftovers(&config.host);
    }
}

/// Clean up what this process still holds, before it exits (remote
/// sandboxes cost money and outlive us otherwise; warm containers too).
/// Front ends call it on every exit path (signals included: they own them)
/// and show the returned warnings.
pub async fn shutdown() -> Vec<String> {
    // Sessions first: their sandboxes are torn down by their tiers' own
    // close (an e2b session's sandbox is also in e2b's live list).
    crate::session::close_all("sandbench is exiting").await;
    let mut warnings = e2b::kill_live().await;
    docker::shutdown().await;
    microvm::MicrovmTier::drain_pool().await;
    let left = background::drain(std::time::Duration::from_secs(30)).await;
    if left > 0 {
        warnings.push(format!(
            "{left} sandbox teardown(s) still running at exit: the next sandbench start reaps what they leave"
        ));
    }
    warnings
}
