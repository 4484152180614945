//! The `process` tier: the program runs as a limited subprocess on the host
//! kernel, inside new pid/net/mount/ipc/uts (and, unprivileged, user)
//! namespaces, a per-run cgroup, Landlock, seccomp and rlimits, as an
//! unprivileged uid, with a scrubbed environment. See `sandbox.rs` for the
//! inside; this file is the host side: spawn (and keep a spare), hand the
//! program over, conclude, clean up. `pump.rs` follows the program to its
//! exit (stream, sample, judge) for a run and a session call alike;
//! `session.rs` keeps a sandbox between calls.
#![allow(unsafe_code)] // pre_exec hooks of the helper (async-signal-safe calls only)

pub mod cgroup;
pub mod netns;
mod pump;
pub mod sandbox;
pub mod seccomp;
pub mod session;
pub mod uids;

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, Context};
use nix::fcntl::OFlag;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::config::Config;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::spec::{Language, Limits, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, Check, LimitMaxima, Tier, TierExit};
use cgroup::{Layout, RunCgroup};
use pump::{Pump, Scope};
use sandbox::{SandboxConfig, Status};

const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The set-up steps the sandbox stamps (`Status::Mark`), kept in the
/// report's timeline; any other name is not trusted into it.
const MARKS: &[&str] = &[
    "helper_started",
    "namespaces_made",
    "root_built",
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
}

/// What the tier takes from sandbench's environment (`config::HostEnv`).
#[derive(Debug, Clone)]
struct Host {
    /// The binary started as the sandbox helper.
    exe: std::path::PathBuf,
    try_user_cgroup: bool,
}

impl Host {
    fn of(env: &crate::config::HostEnv) -> Host {
        Host {
            exe: env.helper.clone().unwrap_or_else(|| std::path::PathBuf::from("/proc/self/exe")),
            try_user_cgroup: env.try_user_cgroup,
        }
    }
}

/// How every sandbox of a tier instance is made (the same for cold and spares).
#[derive(Debug, Clone)]
struct Shape {
    host: Host,
    uid_range: (u32, u32),
    allow_degraded: bool,
}

/// A sandbox helper started with its [`sandbox::Prepare`]: namespaces,
/// root, the program's process set up and waiting, in its fresh cgroup.
/// Single use. Dropping it kills the helper (and with it the sandbox) and
/// removes the cgroup; the uid lease goes last, once nothing runs as it.
struct Launched {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    status: Option<BufReader<tokio::net::unix::pipe::Receiver>>,
    /// Status lines read before the run (while waiting for `Ready`).
    early: Vec<Status>,
    ready: bool,
    cg: Option<RunCgroup>,
    /// The run's own uid (as root); `None` in a user namespace, where the
    /// program keeps the invoking user's uid.
    uid: Option<uids::UidLease>,
    warnings: Vec<String>,
    /// Marks of the run's own time taken before `execute` (ms from its start).
    timeline: Vec<(&'static str, f64)>,
    /// The cgroup's counters at the program's exit.
    final_stats: Option<cgroup::Stats>,
    /// The host end of the channel init hands the egress listener over
    /// (see `netns`); every helper gets one, a run without network drops it.
    net: Option<OwnedFd>,
    /// What the sandbox's helper and init hold once it is built, as they
    /// read it back from the kernel (`Status::Privileges`).
    privileges: serde_json::Map<String, serde_json::Value>,
}

impl Launched {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Read status lines until the sandbox says it is ready.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let status = self.status.as_mut().ok_or_else(|| anyhow!("helper has no status pipe"))?;
        let mut line = Vec::new();
        while !self.ready {
            let n = read_line_bounded(status, &mut line).await.context("sandbox status")?;
            if n == 0 {
                anyhow::bail!("the sandbox ended while it was being built (see the log)");
            }
            match sandbox::parse_status(&line) {
                Status::Ready => self.ready = true,
                Status::Mark { .. } => {}
                Status::Privileges { who, held } => {
                    self.privileges.insert(who, json!(held));
                }
                Status::Error { msg } => anyhow::bail!("{msg}"),
                s => self.early.push(s),
            }
        }
        Ok(())
    }

    /// Processes of the sandbox (helper, init, the waiting interpreter) and
    /// their resident memory (PSS).
    fn memory(&self) -> u64 {
        self.child.id().map(|p| crate::host::pss_bytes(&crate::host::process_tree(p as i32))).unwrap_or(0)
    }

    /// Finish off what is left of a sandbox whose program is done: the helper
    /// (it exits right after init), the cgroup, then the uid.
    async fn teardown(mut self) {
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        if let Some(mut c) = self.cg.take() {
            tokio::task::spawn_blocking(move || c.remove()).await.ok();
        }
        drop(self.uid.take());
    }
}

/// The cgroup layout, detected once (the first caller's environment decides).
fn layout(try_user_cgroup: bool) -> &'static Result<Layout, String> {
    static L: OnceLock<Result<Layout, String>> = OnceLock::new();
    L.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() && !try_user_cgroup {
            // v1 hierarchies are root's; on v2 an unprivileged user can only
            // use a delegated subtree, which detect() tries.
            return cgroup::detect().map_err(|e| format!("{e} (run as root, or use a systemd-delegated cgroup v2)"));
        }
        cgroup::detect()
    })
}

/// Remove cgroups left by sandbench processes that died.
pub fn reap_leftovers(env: &crate::config::HostEnv) {
    if let Ok(l) = layout(env.try_user_cgroup) {
        let n = cgroup::reap(l);
        if n > 0 {
            tracing::info!("reaped {n} leftover run cgroup(s)");
        }
    }
}

/// A CPU meter around this process (see [`cgroup::CpuMeter`]), where the
/// process tier's cgroups work.
pub fn cpu_meter(what: &str, env: &crate::config::HostEnv) -> Result<cgroup::CpuMeter, String> {
    let l = layout(env.try_user_cgroup).as_ref().map_err(|e| e.clone())?;
    cgroup::CpuMeter::enter(l, what).map_err(|e| format!("cannot make a CPU meter cgroup: {e}"))
}

/// Run cgroups that carry `token` (the soak's leftover count).
pub fn owned_cgroups(token: &str, env: &crate::config::HostEnv) -> Vec<std::path::PathBuf> {
    match layout(env.try_user_cgroup) {
        Ok(l) => cgroup::owned(l, token),
        Err(_) => vec![],
    }
}

/// The interpreter a run starts ahead of its program (Python's in spares and
/// sessions, which can exec another interpreter; the run's own when cold).
fn waiter_for(spec: &RunSpec) -> sandbox::Waiter {
    waiter_with(spec, spec.sandbox_env("/work", "/tmp"))
}

/// The same with the run's whole environment (its egress variables too), so
/// that the interpreter started ahead can run the program itself.
fn waiter_with(spec: &RunSpec, env: Vec<(String, String)>) -> sandbox::Waiter {
    sandbox::Waiter {
        interpreter: spec.language.interpreter().iter().map(|s| s.to_string()).collect(),
        file_name: spec.language.program_file(&spec.code).into(),
        env,
    }
}

/// Node started ahead of a JavaScript run (`waiter.js`), in a run built for
/// itself or in a spare. A CommonJS program only: an ES module (`main.mjs`)
/// is loaded by a different loader, so its process waits before its exec
/// instead.
fn node_waiter(spec: &RunSpec, env: Vec<(String, String)>) -> Option<sandbox::Waiter> {
    node_inline(spec).then(|| waiter_with(spec, env))
}

fn node_inline(spec: &RunSpec) -> bool {
    spec.language.program_file(&spec.code) == spec.language.file_name()
}

/// Whether a spare whose interpreter is `spare` can run `spec`. Python's
/// waiter runs Python inline and execs any other interpreter; Node's can
/// only run inline (it cannot exec another interpreter over itself): a
/// CommonJS program in exactly the environment the spare's Node was started
/// with. A Python, sh or ES module run, or one with variables of its own,
/// meeting a Node spare is built cold.
fn spare_fits(spare: Language, spec: &RunSpec) -> bool {
    match spare {
        Language::Python => true,
        Language::Javascript => {
            spec.language == Language::Javascript
                && node_inline(spec)
                && waiter_for(spec).env == waiter_for(&RunSpec::new(Language::Javascript, "")).env
        }
        Language::Sh => false,
    }
}

/// The language a spare is made in after a run of `spec`: Node after a
/// CommonJS JavaScript run, else Python (which serves every language).
fn spare_language_after(spec: &RunSpec) -> Language {
    if spec.language == Language::Javascript && node_inline(spec) {
        Language::Javascript
    } else {
        Language::Python
    }
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
        }
    }

    fn shape(&self) -> Shape {
        Shape {
            host: self.host.clone(),
            uid_range: (self.uid_base, self.uid_count),
            allow_degraded: self.allow_degraded,
        }
    }

    /// Start a helper and hand it the sandbox's shape. The run's uid (a
    /// /proc scan) and cgroup are made while the helper binary execs.
    /// `session`: a session's sandbox, which runs one program per call
    /// (`session.rs`); otherwise one program, then it ends.
    async fn launch(
        limits: &Limits,
        waiter: Option<sandbox::Waiter>,
        network_port: Option<u16>,
        run_ca: Option<String>,
        session: bool,
        shape: &Shape,
        t0: std::time::Instant,
    ) -> anyhow::Result<Launched> {
        let (uid_range, allow_degraded) = (shape.uid_range, shape.allow_degraded);
        let try_user_cgroup = shape.host.try_user_cgroup;
        let at = |what: &'static str| (what, t0.elapsed().as_secs_f64() * 1000.0);
        let mut timeline = vec![];
        let root = nix::unistd::geteuid().is_root();
        let exe = &shape.host.exe;
        let (status_r, status_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("cannot create the status pipe")?;
        let wfd = status_w.as_raw_fd();
        let (net_host, net_helper) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .context("cannot create the egress channel")?;
        let nfd = net_helper.as_raw_fd();
        let mut cmd = Command::new(exe);
        cmd.arg("__sandbox")
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Out of the way first: the status pipe may be about to land on its number.
                let net = libc::fcntl(nfd, libc::F_DUPFD_CLOEXEC, 10);
                if net < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if wfd == sandbox::STATUS_FD {
                    if libc::fcntl(wfd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(wfd, sandbox::STATUS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::dup2(net, netns::NET_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("cannot start the sandbox helper {}", exe.display()))?;
        timeline.push(at("helper_spawned"));
        drop(status_w);
        drop(net_helper);
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("helper has no stdin"))?;
        let lim = limits.clone();
        let (uid, cg, warnings) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let mut warnings = vec![];
            let uid = if root {
                Some(
                    uids::lease(uid_range.0, uid_range.1)
                        .map_err(|e| anyhow!("cannot get the run a uid of its own: {e}"))?,
                )
            } else {
                None
            };
            let cg = match layout(try_user_cgroup) {
                // Cgroups work here: a run without its own is not the sandbox
                // sandbench promised, so it does not happen.
                Ok(l) => Some(RunCgroup::create(l, &lim).context("cannot create the run's cgroup")?),
                Err(e) => {
                    warnings.push(format!(
                        "no cgroup ({e}): fork and memory bombs are contained only by rlimits and the pid namespace"
                    ));
                    None
                }
            };
            Ok((uid, cg, warnings))
        })
        .await
        .context("sandbox preparation")??;
        timeline.push(at("uid_and_cgroup"));
        let prep = sandbox::Prepare {
            host_pid: std::process::id() as i32,
            cgroup_procs: cg
                .as_ref()
                .map(|c| c.procs_files().iter().map(|p| p.to_string_lossy().into_owned()).collect())
                .unwrap_or_default(),
            user_ns: !root,
            run_uid: uid.as_ref().map_or(0, |l| l.uid),
            run_gid: uid.as_ref().map_or(0, |l| l.uid),
            allow_degraded,
            disk_bytes: limits.disk_bytes,
            waiter,
            network_port,
            run_ca,
            session,
        };
        stdin.write_all(&sandbox::frame_prepare(&prep)).await.context("cannot talk to the sandbox helper")?;
        let status_rx = tokio::net::unix::pipe::Receiver::from_owned_fd(status_r).context("status pipe")?;
        Ok(Launched {
            child,
            stdin: Some(stdin),
            status: Some(BufReader::new(status_rx)),
            early: vec![],
            ready: false,
            cg,
            uid,
            warnings,
            timeline,
            final_stats: None,
            net: Some(net_host),
            privileges: Default::default(),
        })
    }

    /// A spare for the next run, made in the background (one at a time).
    fn refill(&self) {
        self.refill_after(Duration::ZERO)
    }

    /// The same, starting `after` from now: right after a run, so that the
    /// new helper's fork (which stalls every thread of this process while
    /// it copies the page tables) never delays the run's own report.
    fn refill_after(&self, after: Duration) {
        if !self.keep_spare || self.spare.lock().map(|s| s.is_some()).unwrap_or(true) {
            return;
        }
        if self.filling.swap(true, Ordering::SeqCst) {
            return;
        }
        let slot = self.spare.clone();
        let filling = self.filling.clone();
        let limits = self.spare_limits.clone();
        let shape = self.shape();
        let language = self.spare_language.lock().map(|l| *l).unwrap_or(Language::Python);
        tokio::spawn(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let mut spec = RunSpec::new(language, "");
            spec.limits = limits.clone();
            let made = async {
                let t0 = std::time::Instant::now();
                // Spares have no network: a run with an allow list is built for itself.
                let mut l = Self::launch(&limits, Some(waiter_for(&spec)), None, None, false, &shape, t0).await?;
                l.wait_ready().await?;
                anyhow::Ok(l)
            };
            match made.await {
                Ok(l) => {
                    if let Ok(mut s) = slot.lock() {
                        if s.is_none() {
                            *s = Some((l, language));
                        }
                    }
                }
                Err(e) => tracing::info!("no spare process sandbox: {e:#}"),
            }
            filling.store(false, Ordering::SeqCst);
        });
    }

    /// The cgroup directories of the spare waiting now, if any: what a
    /// caller checks is gone once this tier is (other tiers of the same
    /// process share its cgroups' name prefix).
    pub fn spare_cgroups(&self) -> Vec<std::path::PathBuf> {
        let Ok(s) = self.spare.lock() else { return vec![] };
        s.as_ref().and_then(|(l, _)| l.cg.as_ref()).map(|c| c.dirs()).unwrap_or_default()
    }

    /// The spare, if it can run `spec`; the next one is made for `spec`'s
    /// language. A spare that cannot run it is torn down in the background
    /// (off this run's path), so the refill after this run makes one that can.
    fn take_spare(&self, spec: &RunSpec) -> Option<Launched> {
        let next = spare_language_after(spec);
        if let Ok(mut l) = self.spare_language.lock() {
            *l = next;
        }
        let mut slot = self.spare.lock().ok()?;
        let (mut l, language) = slot.take()?;
        let usable = l.ready && l.alive();
        if usable && spare_fits(language, spec) {
            return Some(l);
        }
        if usable && language == next {
            // Still the right one for the run after this (a JavaScript run
            // with variables of its own meeting a Node spare): it stays.
            *slot = Some((l, language));
            return None;
        }
        drop(slot);
        // An idle spare's helper waits for a program that never comes.
        let _ = l.child.start_kill();
        super::background::spawn(l.teardown());
        None
    }

    /// Wait until a spare is ready (or making one failed), at most 30 s.
    async fn spare_ready(&self) {
        if !self.keep_spare {
            return;
        }
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if self.spare.lock().map(|s| s.is_some()).unwrap_or(true) {
                return;
            }
            self.refill();
            tokio::time::sleep(Duration::from_millis(2)).await;
            if !self.filling.load(Ordering::SeqCst) && self.spare.lock().map(|s| s.is_none()).unwrap_or(true) {
                // The fill just failed (logged); the next run goes cold.
                return;
            }
        }
    }

    /// What a spare costs while it waits, measured on one built now.
    async fn warm_check(&self) -> String {
        if !self.keep_spare {
            return "no spare ([process] spare = false): every run starts cold".into();
        }
        let mut spec = RunSpec::new(Language::Python, "");
        spec.limits = self.spare_limits.clone();
        let shape = self.shape();
        let built = async {
            let t0 = std::time::Instant::now();
            let mut l =
                Self::launch(&self.spare_limits, Some(waiter_for(&spec)), None, None, false, &shape, t0).await?;
            l.wait_ready().await?;
            anyhow::Ok((l.memory(), t0.elapsed()))
        };
        match built.await {
            Ok((bytes, took)) => format!(
                "long-lived front ends keep 1 spare sandbox ready, its interpreter started: {} resident (PSS), built in {}; [process] spare = false turns it off",
                crate::units::size(bytes),
                crate::units::duration_ms(took.as_secs_f64() * 1000.0)
            ),
            Err(e) => format!("a spare could not be built ({e:#}): runs start cold"),
        }
    }
}

/// What this host lets the process tier enforce: no more processes than the
/// kernel's pid space (less sandbench's own in the run cgroup), no more
/// memory or tmpfs scratch space than the host has, no more descriptors than
/// `fs.nr_open`, no more CPU bandwidth than the CPUs it may use.
pub fn host_maxima() -> LimitMaxima {
    static M: OnceLock<LimitMaxima> = OnceLock::new();
    *M.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok());
        // PID_MAX_LIMIT: pid_max can never exceed it.
        let pid_max = read("/proc/sys/kernel/pid_max").unwrap_or(4 << 20).min(4 << 20);
        let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| (kb >> 10) << 20)
        });
        LimitMaxima {
            memory_bytes: mem,
            pids: Some(pid_max.saturating_sub(cgroup::SUPERVISORS)),
            disk_bytes: mem,
            open_files: read("/proc/sys/fs/nr_open"),
            cpus: std::thread::available_parallelism().ok().map(|n| n.get() as f64),
        }
    })
}

impl Tier for ProcessTier {
    fn name(&self) -> &'static str {
        "process"
    }

    /// The spare and what it holds (its processes' PSS).
    fn warm(&self) -> Option<String> {
        if !self.keep_spare {
            return None;
        }
        let mem = self.spare.lock().ok().and_then(|mut s| {
            let (l, language) = s.as_mut().filter(|(l, _)| l.ready)?;
            let language = *language;
            l.alive().then(|| (l.memory(), language))
        });
        Some(match mem {
            Some((b, language)) => {
                format!("1 spare sandbox ready · {} started · {} resident", language.name(), crate::units::size(b))
            }
            None => "no spare sandbox ready (one is made after a run)".into(),
        })
    }

    fn max_limits(&self) -> LimitMaxima {
        host_maxima()
    }

    /// Any allow list: the egress listener in the empty namespace is the way out.
    /// The sandbox sees the host's /usr: the host's interpreter is the one.
    fn language_support(&self, lang: Language) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            interpreter_on_host(lang).map(|_| ()).ok_or_else(|| {
                format!("no {} on this host (apt-get install {})", lang.interpreter()[0], lang.debian_package())
            })
        })
    }

    fn check_network(&self, _: &crate::egress::Network) -> Result<(), String> {
        Ok(())
    }

    /// Secrets: the proxy the namespace's only socket leads to substitutes them.
    fn check_secrets(&self, _: &crate::egress::secrets::Secrets) -> Result<(), String> {
        Ok(())
    }

    fn describe(&self) -> &'static str {
        "limited subprocess: namespaces, cgroup, Landlock, seccomp, rlimits"
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }

    /// A spare sandbox, built and waiting (when `[process] spare` is on).
    fn prewarm(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.spare_ready())
    }

    /// The sandbox stays between calls (`session.rs`, `sandbox/session.rs`).
    fn sessions(&self) -> Result<(), String> {
        Ok(())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<Arc<dyn crate::tier::contract::TierSession>>> {
        Box::pin(session::open(self, spec))
    }
}

fn interpreter_on_host(lang: Language) -> Option<String> {
    let cmd = lang.interpreter()[0];
    if cmd.starts_with('/') {
        return std::path::Path::new(cmd).exists().then(|| cmd.to_string());
    }
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| format!("{d}/{cmd}"))
        .find(|p| std::path::Path::new(p).exists())
}

/// What doctor shows for an interpreter found on the host: Node's version
/// too (`node --version`, bounded), since Debian's and NodeSource's differ.
fn node_detail(lang: Language, path: String) -> String {
    if lang != Language::Javascript {
        return path;
    }
    let out = std::process::Command::new(&path).arg("--version").stdin(std::process::Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => {
            let v: String =
                String::from_utf8_lossy(&o.stdout).trim().chars().filter(char::is_ascii_graphic).take(40).collect();
            format!("{path} {v}")
        }
        _ => path,
    }
}

impl ProcessTier {
    async fn probe_inner(&self) -> Availability {
        let mut checks = vec![];
        match layout(self.host.try_user_cgroup) {
            Ok(l) => checks.push(Check::ok(
                "cgroup",
                format!("{} — memory and pids limits, CPU accounting", match l.version() {
                    cgroup::Version::V1 => "v1",
                    cgroup::Version::V2 => "v2",
                }),
            )),
            // The sandbox still works (the probe below says whether): a
            // weaker fallback, so a warning.
            Err(e) => checks.push(Check::warn(
                "cgroup",
                format!("unavailable: {e}; fork and memory bombs are contained only by rlimits and the pid namespace"),
                "run sandbench as root, or on cgroup v2 from a delegated cgroup (systemd-run --user --scope -p Delegate=yes sandbench ...)",
            )),
        }
        for lang in Language::ALL {
            let missing = format!("{} not found in /usr/local/bin:/usr/bin:/bin", lang.interpreter()[0]);
            let fix = format!("apt-get install {}", lang.debian_package());
            match interpreter_on_host(lang) {
                Some(p) => checks.push(Check::ok(lang.name(), node_detail(lang, p))),
                // Python and sh are the tier's own (spares, probes); without
                // Node only JavaScript programs fail.
                None if lang == Language::Javascript => {
                    checks.push(Check::warn(lang.name(), format!("{missing}: JavaScript programs cannot run"), fix))
                }
                None => checks.push(Check::fail(lang.name(), missing, fix)),
            }
        }
        // The honest test: build a real sandbox and run a trivial program.
        let mut spec = RunSpec::new(Language::Sh, "exit 0\n");
        spec.limits.wall_time = Duration::from_secs(10);
        spec.label = "doctor probe".into();
        let probe = ProcessTier {
            host: self.host.clone(),
            egress: Default::default(),
            uid_base: self.uid_base,
            uid_count: self.uid_count,
            allow_degraded: self.allow_degraded,
            keep_spare: false,
            spare_limits: self.spare_limits.clone(),
            spare: Default::default(),
            spare_language: Arc::new(Mutex::new(Language::Python)),
            filling: Default::default(),
        };
        let report = crate::runner::run(Arc::new(probe), spec).await;
        let sandbox_ok = report.outcome == crate::report::Outcome::Ok && report.exit.code == Some(0);
        if sandbox_ok {
            let d = &report.details;
            checks.push(Check::ok(
                "namespaces",
                format!(
                    "pid, net, mount, ipc, uts, cgroup{}",
                    if d["user_ns"].as_bool() == Some(true) { ", user" } else { "" }
                ),
            ));
            let ll = d["landlock"].as_str().unwrap_or("unknown").to_string();
            if ll == "fully_enforced" || ll == "partially_enforced" {
                checks.push(Check::ok("landlock", ll));
            } else {
                checks.push(Check::fail(
                    "landlock",
                    ll,
                    "boot with lsm=landlock,... (CONFIG_SECURITY_LANDLOCK); the mount namespace still applies",
                ));
            }
            checks.push(Check::ok(
                "seccomp",
                format!(
                    "{} syscalls denied, namespace clones refused, socket families other than {} refused",
                    seccomp::DENIED.len(),
                    seccomp::FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            ));
            checks.push(Check::ok("uid", uid_policy(self.uid_base, self.uid_count, &d["uid"])));
            checks.push(holds_check(&d["privileges"]));
            checks.push(Check::ok("warm", self.warm_check().await));
        } else {
            let why = report.error.clone().unwrap_or_else(|| report.summary_line());
            checks.push(Check::fail(
                "sandbox",
                format!("a trivial program failed: {why}"),
                "check that user namespaces are allowed (sysctl kernel.unprivileged_userns_clone=1) and see the log",
            ));
        }
        let available = sandbox_ok;
        let summary = if available {
            let cg = match layout(self.host.try_user_cgroup) {
                Ok(l) => format!("cgroup {:?}", l.version()).to_lowercase(),
                Err(_) => "no cgroup: weaker containment".into(),
            };
            format!("ready ({cg}, landlock {}, seccomp)", report.details["landlock"].as_str().unwrap_or("?"))
        } else {
            "unavailable: the sandbox could not start a trivial program".into()
        };
        Availability { tier: "process".into(), available, summary, checks }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let limits = spec.limits.clone();
        let mut warnings: Vec<String> = vec![];
        // A run with an allow list gets the egress listener's port in its
        // Landlock rules, which are applied before any program arrives: such
        // a run is built for itself (spares have no network).
        let egress = crate::egress::Egress::start(&spec, &self.egress, &ctx)?;
        let port = egress.as_ref().map(|_| crate::egress::SANDBOX_PORT);
        let mut env = spec.sandbox_env("/work", "/tmp");
        if let Some(eg) = &egress {
            env.extend(eg.sandbox_env(&spec.env, sandbox::SYSTEM_BUNDLE));
        }
        let run_ca = egress.as_ref().and_then(|e| e.ca_pem());
        let spare = if port.is_none() { self.take_spare(&spec) } else { None };
        let (mut launched, start) = match spare {
            Some(mut l) => {
                if let Some(c) = &l.cg {
                    c.set_limits(&limits).context("cannot set the run's cgroup limits")?;
                }
                l.timeline = vec![("sandbox_taken", ctx.ms())];
                (l, "warm")
            }
            None => {
                // Built for this run: its interpreter (Python) starts ahead of
                // the program as in a spare, while init joins the cgroup.
                let waiter = match spec.language {
                    Language::Python => Some(waiter_with(&spec, env.clone())),
                    Language::Javascript => node_waiter(&spec, env.clone()),
                    Language::Sh => None,
                };
                let mut l = Self::launch(&limits, waiter, port, run_ca, false, &self.shape(), ctx.started).await?;
                l.timeline.push(("helper_prepared", ctx.ms()));
                (l, "cold")
            }
        };
        warnings.extend(launched.warnings.iter().cloned());
        for w in &warnings {
            ctx.note(format!("warning: {w}")).await;
        }
        let nproc = if launched.cg.is_some() {
            None
        } else {
            // RLIMIT_NPROC counts every process of the real uid, so leave room
            // for the ones the user already has.
            Some(count_user_processes(nix::unistd::getuid().as_raw()) + limits.pids)
        };
        if let (Some(eg), Some(chan)) = (&egress, launched.net.take()) {
            let server = eg.server();
            eg.server().track(async move {
                if let Some(l) = netns::receive_listener(chan).await {
                    server.serve_listener(l);
                }
            });
        }
        launched.net = None;
        let config = SandboxConfig {
            code: spec.code.clone(),
            file_name: spec.language.program_file(&spec.code).into(),
            interpreter: spec.language.interpreter().iter().map(|s| s.to_string()).collect(),
            env,
            cpu_secs: limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64,
            data_limit: launched.cg.is_none().then_some(limits.memory_bytes),
            file_size_bytes: limits.file_size_bytes,
            disk_bytes: limits.disk_bytes,
            open_files: limits.open_files,
            nproc,
        };
        let result = self.execute(&spec, &ctx, config, &mut launched).await;
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        // Read once at the program's exit (in execute), not again here.
        let final_stats = launched.final_stats.take();
        // The program is gone and its output drained: the report need not wait
        // for the helper's exit and the cgroup's removal (awaited at shutdown;
        // a killed sandbench leaves them to the next start's reaper).
        super::background::spawn(launched.teardown());
        self.refill_after(Duration::from_millis(20));
        let network = match egress {
            Some(eg) => eg.finish().await,
            None => json!("none: an empty network namespace (no device but a loopback that is down)"),
        };
        let mut out = result?;
        out.details["network"] = network;
        // Which accounting the peak memory figure is (the README names it).
        out.details["memory_accounting"] = json!(if final_stats.is_some() {
            "cgroup peak"
        } else {
            "max RSS of the program's largest process (no cgroup)"
        });
        if let Some(s) = final_stats {
            // A run stopped from outside (output limit, timeout, cancel) has
            // no exit report, but the cgroup still counted what it used: that,
            // not the last sample (often the zeros of the first tick).
            let u = out.usage.get_or_insert_with(Default::default);
            {
                u.cpu_ms = s.cpu_ns.map(|n| n / 1_000_000).or(u.cpu_ms);
                u.pids = s.pids_peak.or(u.pids);
                // Peak memory is the sandbox's own accounting: the cgroup's
                // high-water mark, the figure its limit is enforced against.
                // Not the program's max RSS, which counts shared pages the
                // cgroup charged to whoever touched them first and so read
                // 24M under a 16M limit that held. Without a peak file (v2
                // before 5.19) the samples of the same counter stand.
                u.memory_bytes = s.memory_peak;
            }
        }
        if let Some(obj) = out.details.as_object_mut() {
            let used = obj.get("uid").cloned().unwrap_or(serde_json::Value::Null);
            obj.insert("uid_policy".into(), json!(uid_policy(self.uid_base, self.uid_count, &used)));
            obj.insert("warnings".into(), json!(warnings));
            obj.insert("start".into(), json!(start));
        }
        Ok(out)
    }

    /// Hand the sandbox the program and follow it to its exit.
    async fn execute(
        &self,
        spec: &RunSpec,
        ctx: &RunContext,
        config: SandboxConfig,
        launched: &mut Launched,
    ) -> anyhow::Result<TierExit> {
        let limits = &spec.limits;
        let mut stdin = launched.stdin.take().ok_or_else(|| anyhow!("helper has no stdin"))?;
        let payload = serde_json::to_vec(&config)?;
        // Dropped after the write: init reads the config up to EOF.
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
        let mut side = RunSide {
            out: tokio::spawn(read_output(launched.child.stdout.take(), Stream::Stdout, ctx.clone())),
            err: tokio::spawn(read_output(launched.child.stderr.take(), Stream::Stderr, ctx.clone())),
            out_done: false,
            err_done: false,
        };
        let start_by = tokio::time::Instant::now() + limits.wall_time;
        let mut pump = Pump::new(ctx, limits, Scope::Run { start_by });
        // Done once the program has exited and both its output pipes are
        // drained (EOF: every process holding them is gone), or the sandbox
        // is gone without saying so.
        pump.drive(launched, &mut side).await?;
        drop(launched.status.take());
        pump.timeline.push(("output_drained", ctx.ms()));
        let cg = launched.cg.as_ref();
        // A verdict is final only once no process of the run can exist: init
        // reaps every one before it reports the exit; a run stopped from here
        // (its helper killed, the namespace going down) is confirmed empty.
        if let Some(c) = cg.filter(|c| !c.members().is_empty()) {
            c.kill_all();
            if !c.members().is_empty() {
                ctx.note("processes of the run were still being torn down when it was judged").await;
            }
        }
        let _ = writer.await;
        let stats = cg.map(|c| c.stats());
        launched.final_stats = stats;
        let final_counters = pump.final_sample(stats).await;
        // Only sandbench's own code writes the status pipe (the program never
        // holds it): an error there means the sandbox was not built as
        // promised, whatever exit status followed (a failed setup step exits
        // 121 from the program's process).
        if let Some(msg) = pump.error.take() {
            return Err(anyhow!("{msg}"));
        }
        let Some(e) = pump.exited() else {
            if pump.killed || ctx.stop.is_cancelled() {
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                let mut details = isolation_details(std::mem::take(&mut pump.isolation), cg, &pump.timeline);
                details["privileges"] = json!(launched.privileges);
                return Ok(TierExit { usage: None, details });
            }
            return Err(anyhow!("the sandbox ended without reporting the program's exit (see the log)"));
        };
        let (cpu_ms, rss, status) = (e.cpu_ms, e.max_rss_kb * 1024, e.status);
        let (details, _) = pump.conclude(e, status, final_counters, cg, launched, true).await;
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: Some(cpu_ms), memory_bytes: Some(rss), pids: None }), details })
    }
}

/// A one-shot run's side of the pump: the program's pipes are its own, read
/// to EOF by two tasks; a stop kills the helper and the run's cgroup.
struct RunSide {
    out: tokio::task::JoinHandle<()>,
    err: tokio::task::JoinHandle<()>,
    out_done: bool,
    err_done: bool,
}

impl pump::Side for RunSide {
    async fn output_ready(&mut self) -> Stream {
        tokio::select! {
            _ = &mut self.out, if !self.out_done => { self.out_done = true; Stream::Stdout }
            _ = &mut self.err, if !self.err_done => { self.err_done = true; Stream::Stderr }
            else => std::future::pending().await,
        }
    }

    async fn take(&mut self, _: Stream, _: &RunContext) {}

    fn drained(&self) -> bool {
        self.out_done && self.err_done
    }

    async fn kill(&mut self, child: &mut tokio::process::Child, cg: Option<&RunCgroup>) {
        let _ = child.start_kill();
        if let Some(c) = cg {
            c.kill_all();
        }
    }
}

/// Which uid programs run as, in words, for `doctor` and the report.
/// What the sandbox's init (and its helper outside) held while the probe's
/// program ran, as each read it back from the kernel: a warning when that
/// was not reported (sandbench cannot say).
fn holds_check(privileges: &serde_json::Value) -> Check {
    let said = |who: &str| privileges.get(who).and_then(|v| v.as_str()).map(|h| format!("{who}: {h}"));
    match (said("init"), said("helper")) {
        (Some(i), h) => Check::ok("holds", [Some(i), h].into_iter().flatten().collect::<Vec<_>>().join("; ")),
        _ => Check::warn(
            "holds",
            "the sandbox's init did not say what it holds",
            "see the log (sandbench.log): the privilege drop may have failed",
        ),
    }
}

fn uid_policy(base: u32, count: u32, used: &serde_json::Value) -> String {
    if nix::unistd::geteuid().is_root() {
        format!(
            "each run gets its own uid from {base}..{} (no host process has it; this run: {used})",
            u64::from(base) + u64::from(count) - 1
        )
    } else {
        format!("the invoking user's uid {used}, inside a user namespace (per-uid quotas are shared with that user)")
    }
}

fn isolation_details(
    mut iso: serde_json::Value,
    cg: Option<&RunCgroup>,
    timeline: &[(&'static str, f64)],
) -> serde_json::Value {
    let mut t = serde_json::Map::new();
    for (k, v) in timeline {
        t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
    }
    iso["timeline_ms"] = serde_json::Value::Object(t);
    iso["cgroup"] = match cg {
        Some(c) => json!(c.version()),
        None => serde_json::Value::Null,
    };
    iso["namespaces"] = json!(["pid", "net", "mount", "ipc", "uts", "cgroup"]);
    if iso["user_ns"].as_bool() == Some(true) {
        if let Some(a) = iso["namespaces"].as_array_mut() {
            a.push(json!("user"));
        }
    }
    iso["start"] = json!("cold");
    iso
}

/// Read one line of at most 64 KiB; longer lines are cut (the rest is read as
/// further lines and fails to parse, which is reported, not trusted).
async fn read_line_bounded<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    line.clear();
    let n = (&mut *r).take(64 * 1024).read_until(b'\n', line).await?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(n)
}

/// Read one of the program's pipes to EOF as output events.
async fn read_output<R: AsyncRead + Unpin>(src: Option<R>, stream: Stream, ctx: RunContext) {
    let Some(mut src) = src else { return };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                ctx.emit(EventKind::Output(stream, buf[..n].to_vec())).await;
            }
        }
    }
}

fn count_user_processes(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
                .filter(|e| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
                .count() as u64
        })
        .unwrap_or(0)
}

/// Usage without a cgroup: walk /proc for the helper's descendants.
fn proc_tree_sample(root: i32) -> UsageSample {
    use nix::unistd::{sysconf, SysconfVar};
    let tick = sysconf(SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100).max(1) as u64;
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(4096).max(1) as u64;
    let mut procs: Vec<(i32, i32, u64, u64)> = vec![];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            // The command name may contain spaces and parentheses: parse after the last ')'.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { continue };
            let f: Vec<&str> = rest.split(' ').collect();
            if f.len() < 22 {
                continue;
            }
            let ppid = f[1].parse().unwrap_or(0);
            let cpu = f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
            let rss = f[21].parse::<u64>().unwrap_or(0);
            procs.push((pid, ppid, cpu, rss));
        }
    }
    let mut set = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for p in &procs {
            if !set.contains(&p.0) && set.contains(&p.1) {
                set.push(p.0);
                grew = true;
            }
        }
    }
    let ours: Vec<_> = procs.iter().filter(|p| set.contains(&p.0) && p.0 != root).collect();
    UsageSample {
        cpu_ms: Some(ours.iter().map(|p| p.2).sum::<u64>() * 1000 / tick),
        memory_bytes: Some(ours.iter().map(|p| p.3).sum::<u64>() * page),
        pids: Some(ours.len() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_lines() {
        let data = vec![b'x'; 100_000];
        let mut r = BufReader::new(&data[..]);
        let mut line = vec![];
        let n = read_line_bounded(&mut r, &mut line).await.unwrap();
        assert_eq!(n, 64 * 1024);
        assert!(matches!(sandbox::parse_status(&line), Status::Error { .. }));
    }
}
