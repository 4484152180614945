//! The `process` tier: the program runs as a limited subprocess on the host
//! kernel, inside new pid/net/mount/ipc/uts (and, unprivileged, user)
//! namespaces, a per-run cgroup, Landlock, seccomp and rlimits, as an
//! unprivileged uid, with a scrubbed environment. See `sandbox.rs` for the
//! inside; the host side is here, by concern: `launch.rs` builds a sandbox,
//! `spare.rs` keeps one ahead, `run.rs` runs a program in one, `pump.rs`
//! follows the program to its exit (stream, sample, judge) for a run and a
//! session call alike, `session.rs` keeps a sandbox between calls,
//! `probe.rs` is `doctor`'s checks, `facts.rs` what this host offers (its
//! interpreters, the limits it can enforce), `contract.rs` the `Tier`
//! contract's answers. This file: the tier's own state. No file here
//! imports one that imports it back (`scripts/import-cycles.py`).

pub(crate) mod cgroup;
mod contract;
mod facts;
pub(crate) mod helper_exe;
mod launch;
pub(crate) mod netns;
mod probe;
mod pump;
mod run;
pub(crate) mod sandbox;
pub(crate) mod seccomp;
pub(crate) mod session;
mod spare;
pub(crate) mod uids;
pub(crate) mod zygote;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Config;
use crate::spec::{Language, Limits};
pub(crate) use facts::{host_maxima, version_word};
use launch::{layout, Host, Launched, Shape};

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The set-up steps the sandbox stamps (`Status::Mark`), kept in the
/// report's timeline; any other name is not trusted into it.
const MARKS: &[&str] = &[
    "helper_started",
    "namespaces_made",
    "root_built",
    "zygote_forked",
    "isolation_applied",
    "program_reaped",
    "watch_finished",
    "scratch_judged",
];

pub struct ProcessTier {
    host: Host,
    uid_base: u32,
    uid_count: u32,
    allow_degraded: bool,
    /// Keep one sandbox built ahead (its interpreter started, waiting).
    keep_spare: bool,
    /// The limits a spare is built with (the config's): a run with others
    /// has them applied before its program starts.
    spare_limits: Limits,
    /// The spare and the language its interpreter is (see [`spare_fits`]).
    spare: Arc<Mutex<Option<(Launched, Language)>>>,
    /// The language the next spare is made for: the last run's (agents and
    /// the workbench mostly run one language in a row).
    spare_language: Arc<Mutex<Language>>,
    filling: Arc<AtomicBool>,
    /// `[network]`: the egress proxy's resolver and upstream CAs.
    egress: crate::egress::Operator,
    /// The warm interpreter that forks Python programs' processes
    /// (`zygote.rs`); `None` when off or not possible here.
    zygote: Option<Arc<zygote::Zygote>>,
}

impl ProcessTier {
    pub fn new(config: &Config) -> Self {
        uids::prefetch();
        ProcessTier {
            host: Host::of(&config.host),
            uid_base: config.process.uid_base,
            uid_count: config.process.uid_count,
            keep_spare: config.process.spare,
            allow_degraded: config.process.allow_degraded,
            spare_limits: config.limits.clone(),
            spare: Arc::new(Mutex::new(None)),
            spare_language: Arc::new(Mutex::new(Language::Python)),
            filling: Arc::new(AtomicBool::new(false)),
            egress: crate::egress::Operator::from_config(config),
            zygote: (config.process.zygote && nix::unistd::geteuid().is_root()).then(|| {
                let spec = crate::spec::RunSpec::new(Language::Python, "");
                Arc::new(zygote::Zygote::new(spare::waiter_for(&spec)))
            }),
        }
    }

    /// What a spare holds, `own` bytes (PSS) of its processes: with the
    /// zygote's when its process is the zygote's fork (they share the
    /// interpreter's pages), and that share, if any.
    fn spare_memory(&self, own: u64, forked: bool) -> (u64, Option<u64>) {
        match self.zygote.as_ref().and_then(|z| z.memory()).filter(|_| forked) {
            Some(z) => (own + z, Some(z)),
            None => (own, None),
        }
    }

    fn shape(&self) -> Shape {
        Shape {
            host: self.host.clone(),
            uid_range: (self.uid_base, self.uid_count),
            allow_degraded: self.allow_degraded,
            zygote: self.zygote.clone(),
        }
    }
}

/// Remove cgroups left by sandbench processes that died.
pub(crate) fn reap_leftovers(env: &crate::config::HostEnv) {
    if let Ok(l) = layout(env.try_user_cgroup) {
        let n = cgroup::reap(l);
        if n > 0 {
            tracing::info!("reaped {n} leftover run cgroup(s)");
        }
    }
}

/// A CPU meter around this process (see [`cgroup::CpuMeter`]), where the
/// process tier's cgroups work.
pub(crate) fn cpu_meter(what: &str, env: &crate::config::HostEnv) -> Result<cgroup::CpuMeter, String> {
    let l = layout(env.try_user_cgroup).as_ref().map_err(|e| e.clone())?;
    cgroup::CpuMeter::enter(l, what).map_err(|e| format!("cannot make a CPU meter cgroup: {e}"))
}

/// Run cgroups that carry `token` (the soak's leftover count).
pub(crate) fn owned_cgroups(token: &str, env: &crate::config::HostEnv) -> Vec<std::path::PathBuf> {
    match layout(env.try_user_cgroup) {
        Ok(l) => cgroup::owned(l, token),
        Err(_) => vec![],
    }
}
