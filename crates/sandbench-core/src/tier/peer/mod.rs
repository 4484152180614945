//! Peer tiers: the sandboxes people already use (bubblewrap, firejail,
//! nsjail, Anthropic's `srt`, the Codex CLI's sandbox, or a user's own
//! wrapper) run through the same runner, events and report as sandbench's
//! tiers. A peer is a TOML profile (`profile.rs`) that says how to wrap the
//! program in the tool's command line. Around every run sandbench keeps its
//! own outer net, which the program cannot write to:
//!
//! - the wrapper starts inside a cgroup sandbench owns (memory and pids set to
//!   the run's limits plus the tool's own overhead): a bomb that gets past the
//!   peer is still stopped there, and listed in `details.escapes`;
//! - the scratch folder is a tmpfs of the run's disk size (as root);
//! - the wrapper runs unprivileged, the way these tools are meant to be used:
//!   as root, each run gets a uid of its own from the process tier's private
//!   range (`process::uids`), so concurrent runs never share files or
//!   per-uid quotas, and its folders are reachable by that uid alone
//!   (`rundir`); with sandbench's scrubbed environment plus what the
//!   launcher holds (`RunSpec::launcher_env`);
//! - wall time and output are enforced by the runner, as for every tier.
//!
//! Verdicts come from the cgroup's counters, the scratch mount's free space
//! and the signals sandbench sent; never from printed text.

pub(crate) mod identity;
pub(crate) mod profile;
pub(crate) mod rundir;
mod started;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use serde_json::json;
use tokio::process::Command;

use crate::config::Config;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, UsageSample};
use crate::judge::{Counters, ExitFacts, Judge};
use crate::spec::{format_size, Language, Limits, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, Check, Tier, TierExit};
use crate::tier::process::cgroup::{self, Layout, RunCgroup};
use crate::tier::process::uids;
use identity::{run_as, run_as_policy, RunAs};
use profile::{Context, Profile};
use rundir::RunDir;

const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long processes may take to leave on their own once the wrapper exited.
const DRAIN_GRACE: Duration = Duration::from_millis(300);
/// Extra processes the outer net allows past the peer's own pids limit, so
/// that only a limit the peer did not hold fires it.
const PIDS_SLACK: u64 = 2;
/// Tries of a wrapper that exits before it started the program (srt's
/// proxy bridge, for one, fails now and then on a loaded machine).
const START_TRIES: u32 = 5;

/// The tool exited before the program started (no start marker).
#[derive(Debug)]
struct NotStarted(String);

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotStarted {}

/// A profile and the file it came from, for the life of the process.
pub(crate) struct Entry {
    pub profile: Profile,
    pub source: String,
}

fn registry() -> &'static Result<Vec<Entry>, String> {
    static R: OnceLock<Result<Vec<Entry>, String>> = OnceLock::new();
    R.get_or_init(|| {
        let dir = user_dir();
        profile::load_all(dir.as_deref())
            .map(|v| v.into_iter().map(|(profile, source)| Entry { profile, source }).collect())
    })
}

/// `<config dir>/peers`: beside config.toml (`SANDBENCH_CONFIG` moves both).
pub(crate) fn user_dir() -> Option<PathBuf> {
    Config::path().and_then(|p| p.parent().map(|d| d.join("peers")))
}

/// Every peer's name, or the first profile error.
pub fn names() -> Result<Vec<&'static str>, String> {
    match registry() {
        Ok(v) => Ok(v.iter().map(|e| e.profile.name.as_str()).collect()),
        Err(e) => Err(e.clone()),
    }
}

/// Every peer with its profile (for doctor and setup).
pub(crate) fn entries() -> Result<&'static [Entry], String> {
    registry().as_ref().map(|v| v.as_slice()).map_err(Clone::clone)
}

/// `sandbench setup peers`: install every peer's tool (apt, pip, npm: the
/// profile's `install` line); installed tools are left alone. No account is
/// made: as root, each peer run gets a uid of its own from the process
/// tier's range. `Err` names the tools still missing.
pub(crate) async fn setup(progress: &dyn crate::setup::Progress) -> anyhow::Result<()> {
    let entries = entries().map_err(|e| anyhow!(e))?;
    let root = nix::unistd::geteuid().is_root();
    let mut apt_updated = false;
    let mut failed = vec![];
    for e in entries {
        let p = &e.profile;
        if missing(p).is_empty() {
            progress.line(&format!("✓ {:<9} installed ({})", p.name, tool_version(p).await));
            continue;
        }
        if !root {
            progress.line(&format!("✗ {:<9} not installed; as root run: {}", p.name, p.install));
            failed.push(p.name.clone());
            continue;
        }
        if p.install.contains("apt-get") && !apt_updated {
            apt_updated = true;
            let _ = Command::new("apt-get").args(["update", "-qq"]).status().await;
        }
        progress.line(&format!("… {:<9} installing: {}", p.name, p.install));
        let st = Command::new("sh")
            .arg("-c")
            .arg(&p.install)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .status()
            .await;
        let still = missing(p);
        match (st, still.is_empty()) {
            (Ok(s), true) if s.success() => {
                progress.line(&format!("✓ {:<9} installed ({})", p.name, tool_version(p).await))
            }
            (st, _) => {
                let why = match st {
                    Ok(s) if !s.success() => format!("the install command exited with {s}"),
                    Err(e) => format!("cannot run sh: {e}"),
                    _ => format!("still missing: {}", still.join(", ")),
                };
                progress.line(&format!("✗ {:<9} {why}", p.name));
                failed.push(p.name.clone());
            }
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("not installed: {} (see above; `sandbench doctor` shows each peer)", failed.join(", "));
    }
    progress.line(&format!(
        "peers are ready: try `sandbench gauntlet --tiers process,{}`",
        entries.iter().map(|e| e.profile.name.as_str()).collect::<Vec<_>>().join(",")
    ));
    Ok(())
}

/// The named peer, if there is one.
pub(crate) fn by_name(name: &str, config: &Config) -> Result<Option<Arc<dyn Tier>>, String> {
    let all = registry().as_ref().map_err(Clone::clone)?;
    Ok(all.iter().find(|e| e.profile.name == name).map(|e| Arc::new(PeerTier::new(e, config)) as Arc<dyn Tier>))
}

/// The cgroup layout of the outer cgroups, detected once.
fn outer_layout(try_user_cgroup: bool) -> &'static Result<Layout, String> {
    static L: OnceLock<Result<Layout, String>> = OnceLock::new();
    L.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() && !try_user_cgroup {
            return Err("sandbench is not root: it cannot create the outer cgroup a peer runs in".into());
        }
        cgroup::detect()
    })
}

use crate::host::which;

/// The tool and the binaries it needs that are not on PATH.
pub(crate) fn missing(p: &Profile) -> Vec<String> {
    std::iter::once(&p.tool).chain(&p.needs).filter(|t| which(t).is_none()).cloned().collect()
}

pub(crate) struct PeerTier {
    profile: &'static Profile,
    source: &'static str,
    version: OnceLock<String>,
    try_user_cgroup: bool,
    /// The process tier's uid range, which peer runs lease from too.
    uid_range: (u32, u32),
    /// Where run folders go (`rundir::base`).
    runs: PathBuf,
}

impl PeerTier {
    fn new(e: &'static Entry, config: &Config) -> PeerTier {
        PeerTier {
            profile: &e.profile,
            source: &e.source,
            version: OnceLock::new(),
            try_user_cgroup: config.host.try_user_cgroup,
            uid_range: (config.process.uid_base, config.process.uid_count),
            runs: rundir::base(&config.host),
        }
    }

    pub(crate) fn tool_path(&self) -> Option<PathBuf> {
        which(&self.profile.tool)
    }

    /// The tool's version line (cached), or why it could not be read.
    pub(crate) async fn version(&self) -> String {
        if let Some(v) = self.version.get() {
            return v.clone();
        }
        let v = tool_version(self.profile).await;
        let _ = self.version.set(v.clone());
        v
    }
}

/// Run the profile's version command and keep its first line with a digit,
/// made inert (printable ASCII, 80 characters).
pub(crate) async fn tool_version(p: &Profile) -> String {
    let Some(tool) = which(&p.tool) else { return "not installed".into() };
    let mut cx = Context::example();
    cx.tool = tool.display().to_string();
    let argv: Result<Vec<String>, String> = p.version.iter().map(|a| cx.expand(a, &[])).collect();
    let Ok(argv) = argv else { return "unknown".into() };
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .kill_on_drop(true)
            .output(),
    )
    .await;
    let Ok(Ok(out)) = out else { return "unknown (the version command failed)".into() };
    let text = [out.stdout, out.stderr].concat();
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| l.chars().any(|c| c.is_ascii_digit()))
        .map(|l| l.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(80).collect::<String>())
        .map(|l| l.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The interpreter on the host (peers see the host's /usr).
fn interpreter(lang: Language) -> Option<Vec<String>> {
    host_argv(lang.interpreter().iter().map(|s| s.to_string()).collect())
}

/// `argv` with its command found on the host's PATH.
fn host_argv(mut argv: Vec<String>) -> Option<Vec<String>> {
    if !argv[0].starts_with('/') {
        argv[0] = ["/usr/bin", "/bin", "/usr/local/bin"]
            .iter()
            .map(|d| format!("{d}/{}", argv[0]))
            .find(|p| Path::new(p).exists())?;
    }
    Some(argv)
}

impl Tier for PeerTier {
    fn name(&self) -> &'static str {
        &self.profile.name
    }

    /// Peers run the host's interpreters. A profile whose memory limit is
    /// RLIMIT_AS (a virtual-size limit) cannot start Node at all: V8
    /// reserves far more address space than any memory limit, so such a
    /// cell would only measure that, not the sandbox.
    fn language_support(&self, lang: Language) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            interpreter(lang).ok_or_else(|| format!("no {} on this host", lang.interpreter()[0]))?;
            let virtual_size =
                self.profile.limits.memory.iter().flatten().any(|a| a.contains("rlimit_as") || a.contains("rlimit-as"));
            if lang == Language::Javascript && virtual_size {
                return Err(format!(
                    "{}'s memory limit is RLIMIT_AS (virtual size), which stops V8 from reserving its heap",
                    self.profile.name
                ));
            }
            Ok(())
        })
    }

    fn describe(&self) -> &'static str {
        &self.profile.describe
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }
}

impl PeerTier {
    async fn probe_inner(&self) -> Availability {
        let p = self.profile;
        let mut checks = vec![];
        let tool = self.tool_path();
        match &tool {
            Some(t) => checks.push(Check::ok(&p.tool, format!("{} ({})", self.version().await, t.display()))),
            None => checks.push(Check::fail(&p.tool, "not installed", p.install.clone())),
        }
        for n in &p.needs {
            match which(n) {
                Some(path) => checks.push(Check::ok(n, path.display().to_string())),
                None => checks.push(Check::fail(n, "not installed (the tool needs it)", p.install.clone())),
            }
        }
        match uids::check_range(self.uid_range.0, self.uid_range.1) {
            Ok(()) => checks.push(Check::ok("user", run_as_policy(self.uid_range))),
            Err(e) => checks.push(Check::fail("user", e, "fix [process] uid_base / uid_count in the config")),
        }
        match outer_layout(self.try_user_cgroup) {
            Ok(l) => checks.push(Check::ok(
                "outer net",
                format!("cgroup {} around every run", if l.version() == cgroup::Version::V1 { "v1" } else { "v2" }),
            )),
            Err(e) => checks.push(Check::fail("outer net", e.clone(), "run sandbench as root")),
        }
        let (yes, no) = p.enforced();
        checks.push(Check::ok(
            "limits",
            format!(
                "enforced by {}: {}; not enforced: {}",
                p.name,
                if yes.is_empty() { "none".into() } else { yes.join(", ") },
                if no.is_empty() { "none".into() } else { no.join(", ") }
            ),
        ));
        let ready = checks.iter().all(|c| c.ok);
        let mut summary = String::new();
        if ready {
            // The honest test: a trivial program through the real wrapper.
            let mut spec = RunSpec::new(Language::Sh, "echo peer-probe-ok\n");
            spec.label = "doctor probe".into();
            let me = PeerTier {
                profile: self.profile,
                source: self.source,
                version: OnceLock::new(),
                try_user_cgroup: self.try_user_cgroup,
                uid_range: self.uid_range,
                runs: self.runs.clone(),
            };
            let r = crate::runner::run(Arc::new(me), spec).await;
            if r.outcome == crate::report::Outcome::Ok && r.exit.code == Some(0) && r.stdout.contains("peer-probe-ok") {
                checks.push(Check::ok(
                    "sandbox",
                    format!("a trivial program ran ({})", crate::units::duration_ms(r.timings_ms.total)),
                ));
                summary = format!("ready ({})", self.version().await);
            } else {
                let why = r.error.clone().unwrap_or_else(|| {
                    let err: String = r.stderr.lines().next().unwrap_or("").chars().take(160).collect();
                    format!("{} {}", r.summary_line(), crate::sanitize::visible_controls(err.as_bytes()))
                });
                checks.push(Check::fail(
                    "sandbox",
                    format!("a trivial program failed: {why}"),
                    format!("check the profile {} and the tool's own diagnostics", self.source),
                ));
            }
        }
        let available = checks.iter().all(|c| c.ok);
        if !available {
            summary = match &tool {
                None => format!("not installed: {}", p.install),
                Some(_) => {
                    let first = checks.iter().find(|c| !c.ok).map(|c| c.detail.clone()).unwrap_or_default();
                    format!("unavailable: {first}")
                }
            };
        }
        Availability { tier: p.name.clone(), available, summary, checks }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let p = self.profile;
        let limits = spec.limits.clone();
        let tool = self.tool_path().ok_or_else(|| anyhow!("{} is not installed: {}", p.tool, p.install))?;
        let (who, lease) = run_as(self.uid_range).map_err(|e| anyhow!(e))?;
        let layout = outer_layout(self.try_user_cgroup)
            .as_ref()
            .map_err(|e| anyhow!("no outer cgroup for the {} peer ({e}); peers run only inside one", p.name))?;
        let interp = host_argv(spec.interpreter())
            .ok_or_else(|| anyhow!("{} is not installed on the host", spec.interpreter()[0]))?;
        let version = self.version().await;
        let sh =
            interpreter(Language::Sh).ok_or_else(|| anyhow!("no /bin/sh on the host to start the program with"))?;
        let (launcher, marker) = started::launcher(&sh[0]).context("cannot make the start marker")?;

        let dir = RunDir::create(&self.runs, &p.name, &spec, &who, lease, limits.disk_bytes)
            .context("cannot prepare the run's folders")?;
        let cx = Context {
            tool: tool.display().to_string(),
            run: dir.root.clone(),
            program_dir: dir.program_dir.clone(),
            scratch: dir.scratch.clone(),
            home: dir.home.clone(),
            inside_program_dir: p.inside.program_dir.clone().unwrap_or_else(|| dir.program_dir.display().to_string()),
            inside_scratch: p.inside.scratch.clone().unwrap_or_else(|| dir.scratch.display().to_string()),
            program_file: spec.language.program_file(&spec.code).into(),
            launcher,
            interpreter: interp,
            uid: who.uid,
            gid: who.gid,
            limits: limits.clone(),
        };
        for (name, template) in &p.files {
            let text = cx.expand(template, &[]).map_err(|e| anyhow!("profile {}: files.{name}: {e}", self.source))?;
            dir.write_file(name, &text)?;
        }
        let program_env = spec.sandbox_env(&cx.inside_scratch, &cx.inside_scratch);
        let argv = profile::build_argv(p, &cx, &program_env).map_err(|e| anyhow!("profile {}: {e}", self.source))?;
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("HOME".into(), cx.home.display().to_string()),
        ];
        let mut set = |k: &str, v: String| {
            env.retain(|(ek, _)| ek != k);
            env.push((k.to_string(), v));
        };
        if p.env_flag.is_none() {
            for (k, v) in &program_env {
                set(k, v.clone());
            }
        }
        for (k, v) in &p.tool_env {
            set(k, cx.expand(v, &[]).map_err(|e| anyhow!("profile {}: tool_env.{k}: {e}", self.source))?);
        }
        for (k, v) in &spec.launcher_env {
            set(k, v.clone());
        }
        let cwd = match &p.cwd {
            Some(c) => PathBuf::from(cx.expand(c, &[]).map_err(|e| anyhow!("profile {}: cwd: {e}", self.source))?),
            None => dir.scratch.clone(),
        };

        // The outer net: the run's memory and pids plus the tool's own, no
        // CPU cap (a limit the peer does not enforce stays unenforced).
        let net_limits = Limits {
            memory_bytes: limits.memory_bytes.saturating_add(p.overhead.memory_mib << 20),
            cpus: 1024.0,
            ..limits.clone()
        };
        let mut tries = 0;
        let (result, stats) = loop {
            tries += 1;
            let mut cg = RunCgroup::create_with(layout, &net_limits, p.overhead.pids + PIDS_SLACK)
                .context("cannot create the outer cgroup")?;
            let result = self.execute(&ctx, &limits, &argv, &env, &cwd, &who, &cg, &dir, &marker).await;
            let stats = cg.stats();
            cg.kill_all();
            let cg = tokio::task::spawn_blocking(move || {
                cg.remove();
            });
            let _ = cg.await;
            match result {
                Err(e)
                    if tries < START_TRIES && e.downcast_ref::<NotStarted>().is_some() && !ctx.stop.is_cancelled() =>
                {
                    ctx.note(format!("{e}; trying again ({}/{START_TRIES})", tries + 1)).await;
                    tokio::time::sleep(Duration::from_millis(250 << tries.min(4))).await;
                }
                r => break (r, stats),
            }
        };
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        tokio::task::spawn_blocking(move || drop(dir)).await.ok();
        let mut out = result?;
        out.usage = Some(UsageSample {
            cpu_ms: stats.cpu_ns.map(|n| n / 1_000_000),
            memory_bytes: stats.memory_peak,
            pids: stats.pids_peak,
        });
        let (yes, no) = p.enforced();
        let mut by_peer = serde_json::Map::new();
        for (k, flags) in p.limits.all() {
            if let Some(f) = flags {
                let shown: Vec<String> = f.iter().map(|a| cx.expand(a, &[]).unwrap_or_default()).collect();
                by_peer.insert(
                    k.into(),
                    json!(if shown.is_empty() { "by its fixed flags".into() } else { shown.join(" ") }),
                );
            }
        }
        let d = out.details.as_object_mut().ok_or_else(|| anyhow!("details"))?;
        d.insert("peer".into(), json!(p.name));
        d.insert("profile".into(), json!(self.source));
        d.insert("tool".into(), json!(tool.display().to_string()));
        d.insert("version".into(), json!(version));
        d.insert("argv".into(), json!(argv));
        d.insert("run_as".into(), json!({ "user": who.user, "uid": who.uid, "gid": who.gid }));
        d.insert(
            "limits".into(),
            json!({
                "enforced_by_peer": by_peer,
                "enforced_by_sandbench": ["wall_time", "output_bytes"],
                "not_enforced": no,
                "peer_enforces": yes,
                "outer_net": {
                    "memory_bytes": net_limits.memory_bytes,
                    "pids": limits.pids + PIDS_SLACK,
                    "scratch_tmpfs_bytes": dir_disk(&who, limits.disk_bytes),
                },
            }),
        );
        d.insert("cgroup".into(), json!(layout.version()));
        d.insert("start".into(), json!("cold"));
        // Tries the tool needed to start the program (1: at once).
        d.insert("tool_tries".into(), json!(tries));
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        ctx: &RunContext,
        limits: &Limits,
        argv: &[String],
        env: &[(String, String)],
        cwd: &Path,
        who: &RunAs,
        cg: &RunCgroup,
        dir: &RunDir,
        marker: &str,
    ) -> anyhow::Result<TierExit> {
        let p = self.profile;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        rundir::enter_outer_net(&mut cmd, cg.procs_files(), who.switch.then_some((who.uid, who.gid)), dir.etc_files())?;
        let mut child = cmd.spawn().with_context(|| format!("cannot start {}", argv[0]))?;
        ctx.emit(EventKind::Phase(Phase::Running)).await;
        ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
        let (started_tx, started_rx) = tokio::sync::watch::channel(false);
        let out_task =
            tokio::spawn(started::pump_stdout(child.stdout.take(), marker.to_string(), ctx.clone(), started_tx));
        let mut err_task = tokio::spawn(started::pump_stderr(child.stderr.take(), ctx.clone(), started_rx.clone()));

        let mut ticker = tokio::time::interval(SAMPLE_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut seen = Seen { file_limit: limits.file_size_bytes, ..Default::default() };
        let mut judge = Judge::new(limits);
        let mut killed = false;
        let status = loop {
            tokio::select! {
                st = child.wait() => break st,
                _ = ctx.stop.cancelled(), if !killed => {
                    killed = true;
                    let _ = child.start_kill();
                    cg.kill_all();
                }
                _ = ticker.tick() => {
                    let s = cg.stats();
                    seen.note(dir);
                    ctx.usage(UsageSample { cpu_ms: s.cpu_ns.map(|n| n / 1_000_000), memory_bytes: s.memory, pids: s.pids }).await;
                    // Memory and pids as they happen; CPU at the end: sandbench
                    // does not kill a peer for CPU (a limit the peer does not
                    // enforce stays unenforced; the wall time ends it).
                    judge.sample(ctx, &Counters { cpu_ms: None, ..s.counters() }).await;
                }
            }
        };
        // The wrapper is gone: whatever is still in the cgroup outlived the
        // peer's own containment. Give it a moment to leave by itself.
        let mut escapes = vec![];
        let deadline = tokio::time::Instant::now() + DRAIN_GRACE;
        let mut left = cg.members();
        while !left.is_empty() && !killed && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = cg.members();
        }
        if !left.is_empty() && !killed {
            escapes.push(format!(
                "{} process(es) outlived {} (it had exited); sandbench's outer cgroup killed them",
                left.len(),
                p.name
            ));
        }
        cg.kill_all();
        // Output pipes close once the last holder is dead.
        let _ = tokio::time::timeout(Duration::from_secs(5), out_task).await;
        let held = match tokio::time::timeout(Duration::from_secs(5), &mut err_task).await {
            Ok(Ok(h)) => h,
            _ => {
                err_task.abort();
                vec![]
            }
        };
        let s = cg.stats();
        seen.note(dir);

        let status = status.context("lost the wrapper process")?;
        let exit = {
            use std::os::unix::process::ExitStatusExt;
            ExitStatus { code: status.code(), signal: status.signal() }
        };
        if !killed && !*started_rx.borrow() {
            // The tool exited before it started the program: not a verdict.
            let said = String::from_utf8_lossy(&held);
            // The tool's own failure line if it wrote one, else its first.
            let line = said
                .lines()
                .map(str::trim)
                .find(|l| p.failure_prefixes.iter().any(|pre| l.starts_with(pre.as_str())))
                .or_else(|| said.lines().map(str::trim).find(|l| !l.is_empty()))
                .unwrap_or("nothing on stderr");
            let line: String = line.chars().take(200).collect();
            return Err(anyhow::Error::new(NotStarted(format!(
                "{} exited ({}) before it started the program: {}",
                p.name,
                exit.describe(),
                crate::sanitize::visible_controls(line.as_bytes())
            ))));
        }
        // Once the program has started, stderr is the program's too: a line
        // that looks like the tool's failure may be the program's forgery
        // (the js-forged-verdict sample made codex's run an "error"), so
        // failure lines are read only before the start (above).
        // What got past the peer, in the outer net's own counters.
        if s.oom_kills > 0 || s.memory_max_events > 0 {
            escapes.push(format!(
                "memory got past {}: it reached sandbench's outer cgroup limit ({} = the run's {} + {} MiB for the tool){}",
                p.name,
                format_size(limits.memory_bytes + (p.overhead.memory_mib << 20)),
                format_size(limits.memory_bytes),
                p.overhead.memory_mib,
                if s.oom_kills > 0 { format!(", which OOM-killed {} process(es)", s.oom_kills) } else { String::new() }
            ));
        }
        if s.pids_max_events > 0 {
            escapes.push(format!(
                "processes got past {}: sandbench's outer cgroup refused {} fork(s) at {} + {}",
                p.name, s.pids_max_events, limits.pids, PIDS_SLACK
            ));
        }
        let facts = ExitFacts {
            // The wrapper's status: a tool reports its program's death its own way.
            status: exit,
            counters: s.counters(),
            rlimit_signals_trusted: false,
            capped_files: seen.capped.iter().cloned().collect(),
            full_mounts: if seen.scratch_full {
                vec![format!("the scratch folder ({})", dir.scratch.display())]
            } else {
                vec![]
            },
            bounds: seen.bounds.clone(),
        };
        judge.exit(ctx, &facts).await;
        ctx.emit(EventKind::Exit(if killed { ExitStatus { code: None, signal: Some(libc::SIGKILL) } } else { exit }))
            .await;
        Ok(TierExit { usage: None, details: json!({ "escapes": escapes, "wrapper_exit": exit.describe() }) })
    }
}

fn dir_disk(who: &RunAs, disk: u64) -> Option<u64> {
    who.switch.then_some(disk)
}

/// High-water marks read from the host side of the scratch folder.
#[derive(Default)]
struct Seen {
    file_limit: u64,
    /// A file (relative path) that reached the file-size limit.
    capped: Option<String>,
    scratch_full: bool,
    /// Bounds the last scan hit (the last one looks at the end state).
    bounds: Vec<crate::judge::BoundHit>,
}

impl Seen {
    fn note(&mut self, dir: &RunDir) {
        let (capped, full, bounds) = dir.scan(self.file_limit);
        if self.capped.is_none() {
            self.capped = capped;
        }
        self.scratch_full |= full;
        self.bounds = bounds;
    }
}

/// Remove run folders of sandbench processes that are gone (their lock is free).
pub(crate) fn reap_leftovers(env: &crate::config::HostEnv) {
    let n = rundir::reap(&rundir::base(env));
    if n > 0 {
        tracing::info!("reaped {n} leftover peer run folder(s)");
    }
}
