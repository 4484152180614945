//! The tier contract: what every isolation tier implements ([`Tier`], and
//! [`TierSession`] for one that keeps sessions) and what it answers with
//! ([`TierExit`], [`Availability`], [`LimitMaxima`]). It depends on the
//! plain types only (spec, event, report); the runner, the sessions and
//! the judge drive any `dyn Tier` through it, and the registry
//! ([`super::registry`]) is the one place that names the tiers themselves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::event::{RunContext, UsageSample};
use crate::spec::{Limits, RunSpec};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    pub fn check(&self, tier: &str, l: &Limits) -> Result<(), String> {
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
    fn check_limits(&self, limits: &Limits) -> Result<(), String> {
        self.max_limits().check(self.name(), limits)?;
        self.check_network(&limits.network)
    }
    /// Refuse a network limit the tier cannot enforce as given (never widen
    /// it). The default: no network at all, and no allow list.
    fn check_network(&self, network: &crate::egress::policy::Network) -> Result<(), String> {
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
pub fn refuse_allow_list(tier: &str, network: &crate::egress::policy::Network) -> Result<(), String> {
    if network.is_none() {
        return Ok(());
    }
    Err(format!(
        "the {tier} tier cannot enforce a network allow list (it runs with no network at all); use --network none, or a tier with egress: {}",
        super::kinds::with_proxy()
    ))
}

/// The refusal of a tier whose sandbox's traffic sandbench's egress proxy
/// does not carry: the value could only be handed to the program.
pub fn refuse_secrets(tier: &str, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    if secrets.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the {tier} tier cannot keep a secret out of its sandbox (sandbench's egress proxy does not carry its traffic); use a tier with egress: {}",
        super::kinds::with_proxy()
    ))
}

/// Default wall-clock cap of a session, from its opening.
pub const DEFAULT_MAX_LIFE: Duration = Duration::from_secs(30 * 60);
/// Default idle timeout: a session no call used for this long is closed.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(5 * 60);
/// What a session asks of its tier.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSpec {
    /// The sandbox's own limits (memory, disk, pids, file size, open files,
    /// cpus, network) and the most each call may have of the per-call ones
    /// (CPU time, wall time, output).
    pub limits: Limits,
    /// Wall-clock cap from the opening.
    pub max_life: Duration,
    /// Closed when no call ran for this long.
    pub idle_timeout: Duration,
}

impl SessionSpec {
    pub fn new(limits: Limits) -> SessionSpec {
        SessionSpec { limits, max_life: DEFAULT_MAX_LIFE, idle_timeout: DEFAULT_IDLE }
    }
}

/// A tier's side of a session: the kept sandbox.
pub trait TierSession: Send + Sync {
    /// Run one call: a fresh process as the session's uid under the call's
    /// limits (`spec.limits`, already merged by `call_limits`). Returns
    /// once that process and everything it started are gone; the sandbox and
    /// its files stay. Same event contract as [`Tier::run`].
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>>;
    /// Tear the sandbox down; returns once everything of it is gone.
    /// Called once, never while a call runs.
    fn close(&self) -> BoxFuture<'_, ()>;
    /// Whether the kept sandbox is still usable. A session whose sandbox died
    /// (its container or guest is gone) closes after the call that saw it.
    fn alive(&self) -> bool {
        true
    }
    /// Why the kept sandbox died, once it has, as the tier learnt it (its
    /// container removed, the guest killed, the engine gone): the session
    /// names it when it closes.
    fn ended_why(&self) -> Option<String> {
        None
    }
}
