//! The `microvm` tier: each program runs in its own QEMU `microvm` guest with
//! its own kernel — no kernel shared with the host. Inside, a resident agent
//! (`guest/agent.py`) runs the program as an unprivileged uid under a cgroup
//! v2 (memory, pids, cpu accounting) and rlimits, and streams output, usage
//! and the exit back over a virtio-serial port. The guest has no network
//! device, a read-only root disk and tmpfs scratch space.
//!
//! Starts: `warm` (a pre-booted guest from the pool), `snapshot` (restored
//! from a saved VM, when that beats a boot), `cold` (a fresh boot).
//!
//! Files: `artefacts` (setup and staleness), `vm` (QEMU process, command
//! line, reaping), `clock` (the guest's clock: the host's TSC rate), `proto` (frames; the guest is untrusted), `accel` (KVM
//! probe), `snapshot`, `pool`, `exec` (one program followed to its exit, for
//! a run and a session's call), `session`.

pub(crate) mod accel;
pub(crate) mod artefacts;
pub(crate) mod clock;
mod exec;
pub(crate) mod pool;
pub mod proto;
pub(crate) mod session;
pub(crate) mod snapshot;
pub(crate) mod vm;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, MicrovmConfig};
use crate::event::{EventKind, Phase, RunContext};
use crate::spec::{Limits, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, Check, SessionSpec, Tier, TierExit, TierSession};
use artefacts::Paths;
use session::MicrovmSession;
use vm::{Accel, Boot, Guest, Shape, WaitEnd};

/// How a tier instance starts guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Pool guest if one fits, else snapshot restore if faster than a boot,
    /// else a cold boot; the pool is refilled in the background.
    Auto,
    /// Always a cold boot (benchmarks).
    Cold,
    /// Always a snapshot restore when a snapshot exists (benchmarks).
    Snapshot,
}

pub struct MicrovmTier {
    cfg: MicrovmConfig,
    default_limits: Limits,
    policy: Policy,
    /// `[network]`: the egress proxy's resolver and upstream CAs.
    egress: crate::egress::Operator,
}

/// Remove what dead sandbench processes left: QEMU processes and run dirs.
pub fn reap_leftovers() {
    let n = vm::reap(&artefacts::paths());
    if n > 0 {
        tracing::info!("microvm: reaped {n} leftover(s)");
    }
}

/// `sandbench setup microvm`: the guest's kernel, root disk and agent
/// (`force` rebuilds them), the accelerator probed, and a snapshot saved for
/// the default limits when `[microvm] snapshot` is on. Idempotent.
pub(crate) async fn setup(config: &Config, force: bool, progress: &dyn crate::setup::Progress) -> anyhow::Result<()> {
    let cfg = &config.microvm;
    artefacts::setup(cfg, force, progress).await?;
    let p = artefacts::paths();
    if accel::cached(cfg, &p).is_none() {
        progress.line(&format!(
            "… accel      probing (a KVM guest must reach user space within {} s)",
            accel::KVM_PROBE_TIMEOUT.as_secs()
        ));
    }
    let choice = accel::choose(cfg, &p).await;
    progress.line(&format!("✓ accel      {}", choice.detail));
    progress.line(&match clock::describe(clock::host_tsc_khz()) {
        Ok(d) => format!("✓ clock      {d}"),
        Err(d) => format!("⚠ clock      {d}"),
    });
    let tier = MicrovmTier::new(config);
    if cfg.snapshot {
        let shape = tier.shape(&config.limits, choice.accel);
        match snapshot::load(cfg, &p, shape) {
            Some((_, m)) if !force => progress.line(&format!(
                "✓ snapshot   up to date ({} guest: restore {} vs boot {})",
                crate::units::size(shape.mem_mib << 20),
                crate::units::duration_ms(m.restore_ms),
                crate::units::duration_ms(m.boot_ms)
            )),
            _ => {
                progress.line(&format!(
                    "… snapshot   booting a {} MiB guest to save it (takes a boot or two)",
                    shape.mem_mib
                ));
                match tier.make_snapshot().await {
                    Ok(m) => progress.line(&format!(
                        "✓ snapshot   restore {} vs boot {} — {}",
                        crate::units::duration_ms(m.restore_ms),
                        crate::units::duration_ms(m.boot_ms),
                        if m.faster_than_boot() {
                            "restores will be used"
                        } else {
                            "boots are faster; snapshots stay unused"
                        }
                    )),
                    Err(e) => progress.line(&format!("! snapshot   not available ({e:#}); runs boot cold")),
                }
            }
        }
    }
    progress.line("microvm is ready: try `sandbench run --tier microvm hello.py`");
    Ok(())
}

impl MicrovmTier {
    pub fn new(config: &Config) -> Self {
        MicrovmTier {
            cfg: config.microvm.clone(),
            default_limits: config.limits.clone(),
            policy: Policy::Auto,
            egress: crate::egress::Operator::from_config(config),
        }
    }

    pub fn with_policy(config: &Config, policy: Policy) -> Self {
        MicrovmTier { policy, ..MicrovmTier::new(config) }
    }

    /// Guest shape for these limits: memory = limit + agent overhead, vCPUs
    /// = the CPU limit rounded up (at most the host's cores).
    pub fn shape(&self, limits: &Limits, accel: Accel) -> Shape {
        let bytes = limits.memory_bytes.saturating_add(self.cfg.overhead_bytes);
        let host = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u32;
        Shape {
            mem_mib: bytes.div_ceil(1 << 20).max(128),
            cpus: (limits.cpus.ceil().max(1.0) as u32).min(host.max(1)),
            accel,
        }
    }

    /// Start the warm pool (sized by `[microvm] pool_size`) for this process,
    /// fill it and wait for it; later runs take pooled guests and the pool
    /// refills in the background. Returns how many guests are ready.
    pub async fn prewarm(&self) -> anyhow::Result<usize> {
        let p = artefacts::paths();
        self.ready_check()?;
        let accel = accel::choose(&self.cfg, &p).await.accel;
        let shape = self.shape(&self.default_limits, accel);
        let pool = pool::Pool::activate(&self.cfg, &p, shape)
            .ok_or_else(|| anyhow!("the warm pool is off ([microvm] pool_size = 0)"))?;
        pool.fill().await
    }

    /// The QEMU processes of the guests the pool holds now, the dead ones
    /// dropped first (what `warm` counts; the chaos tests kill them).
    pub fn pool_pids() -> Vec<u32> {
        let Some(p) = pool::Pool::current() else { return vec![] };
        p.held();
        p.pids()
    }

    /// Kill every pooled guest (tests, shutdown).
    pub async fn drain_pool() {
        if let Some(p) = pool::Pool::current() {
            p.drain().await;
        }
    }

    /// Save a snapshot for the default shape (done by `setup`).
    pub async fn make_snapshot(&self) -> anyhow::Result<snapshot::SnapshotMeta> {
        let p = artefacts::paths();
        let accel = accel::choose(&self.cfg, &p).await.accel;
        snapshot::create(&self.cfg, &p, self.shape(&self.default_limits, accel)).await
    }

    fn ready_check(&self) -> anyhow::Result<()> {
        if vm::qemu_version(&self.cfg.qemu).is_none() {
            anyhow::bail!("{} is not installed: apt-get install qemu-system-x86", self.cfg.qemu);
        }
        let stale: Vec<String> = artefacts::status(&self.cfg)
            .into_iter()
            .filter(|a| !a.fresh)
            .map(|a| format!("{} {}", a.name, a.detail))
            .collect();
        if !stale.is_empty() {
            anyhow::bail!("the microVM is not set up ({}): run `sandbench setup microvm`", stale.join("; "));
        }
        Ok(())
    }
}

impl Tier for MicrovmTier {
    fn name(&self) -> &'static str {
        "microvm"
    }

    fn describe(&self) -> &'static str {
        "QEMU microVM: own guest kernel, no network device, read-only root, in-guest cgroup + rlimits"
    }

    /// Any allow list: the guest's relay carries the egress port over a
    /// serial port to the host proxy (the guest still has no network device).
    /// Node in the guest, and a guest that can start it within a run's
    /// limits: under TCG, V8 building its heap alone takes seconds of CPU.
    fn language_support(&self, lang: crate::spec::Language) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if lang != crate::spec::Language::Javascript {
                return Ok(());
            }
            let p = artefacts::paths();
            if !p.tree.join("usr/bin/node").is_file() {
                return Err("no node in the guest (sandbench setup microvm builds it with nodejs)".into());
            }
            if accel::choose(&self.cfg, &p).await.accel == Accel::Tcg {
                return Err("node under TCG (software emulation) needs seconds of CPU just to start, more than a run's CPU limit allows by default".into());
            }
            Ok(())
        })
    }

    fn check_network(&self, _: &crate::egress::Network) -> Result<(), String> {
        Ok(())
    }

    /// Secrets: the guest's relay leads to the proxy that substitutes them.
    fn check_secrets(&self, _: &crate::egress::secrets::Secrets) -> Result<(), String> {
        Ok(())
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }

    /// With the pooled guests' memory (their QEMU processes' PSS).
    fn warm(&self) -> Option<String> {
        if self.cfg.pool_size == 0 {
            return None;
        }
        // The guest pool is the process's (one per sandbench).
        let (ready, bytes) = pool::Pool::current().map_or((0, 0), |p| p.held());
        let mem = if bytes > 0 { format!(" · {} resident", crate::units::size(bytes)) } else { String::new() };
        Some(format!("{ready} of {} warm guest(s) ready{mem}", self.cfg.pool_size))
    }

    fn prewarm(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = MicrovmTier::prewarm(self).await {
                tracing::info!("microvm pool not filled: {e:#}");
            }
        })
    }

    /// The guest stays between calls (`session.rs`).
    fn sessions(&self) -> Result<(), String> {
        Ok(())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<std::sync::Arc<dyn crate::tier::contract::TierSession>>> {
        Box::pin(open_session(self, spec))
    }
}

/// A session's guest, taken the way a run takes one and kept (`session.rs`).
async fn open_session(tier: &MicrovmTier, spec: SessionSpec) -> anyhow::Result<Arc<dyn TierSession>> {
    tier.ready_check()?;
    let p = artefacts::paths();
    let choice = accel::choose(&tier.cfg, &p).await;
    let shape = tier.shape(&spec.limits, choice.accel);
    // Opening is not a run: its phase events go nowhere.
    let (tx, mut rx) = mpsc::channel(16);
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let ctx = RunContext { started: Instant::now(), tx, stop: CancellationToken::new() };
    let Some((guest, start, _)) = tier.acquire(&p, shape, spec.limits.disk_bytes, &ctx, &mut vec![]).await? else {
        anyhow::bail!("the session's guest did not start");
    };
    let details = json!({
        "accel": choice.accel.name(),
        "guest_memory_bytes": guest.shape.mem_mib << 20,
        "vcpus": guest.shape.cpus,
        "kernel": artefacts::Manifest::load(&p).kernel_version,
        "network": "none (no network device)",
        "root": "read-only ext4; /work and /tmp are tmpfs, kept for the session",
        "guest_start": start,
        "guest_warmed_up": guest.warmed_up,
        "qemu_pid": guest.pid(),
        "vm_name": guest.vm_name(),
    });
    Ok(Arc::new(MicrovmSession { guest: tokio::sync::Mutex::new(Some(guest)), details, alive: AtomicBool::new(true) }))
}

impl MicrovmTier {
    async fn probe_inner(&self) -> Availability {
        let p = artefacts::paths();
        let mut checks = vec![];
        let qemu = vm::qemu_version(&self.cfg.qemu);
        match &qemu {
            Some(v) => checks.push(Check::ok(
                "qemu",
                format!(
                    "{} — {v}",
                    artefacts::which(&self.cfg.qemu)
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| self.cfg.qemu.clone())
                ),
            )),
            None => checks.push(Check::fail(
                "qemu",
                format!("{} not found", self.cfg.qemu),
                "apt-get install qemu-system-x86",
            )),
        }
        let arts = artefacts::status(&self.cfg);
        for a in &arts {
            if a.fresh {
                checks.push(Check::ok(a.name, format!("{} — {}", a.path.display(), a.detail)));
            } else {
                checks.push(Check::fail(
                    a.name,
                    format!("{} — {}", a.path.display(), a.detail),
                    "sandbench setup microvm",
                ));
            }
        }
        let ready = qemu.is_some() && arts.iter().all(|a| a.fresh);
        let has_node = p.tree.join("usr/bin/node").is_file();
        let versions = artefacts::guest_versions(&p.tree);
        let version = |pkg: &str| versions.iter().find(|(p, _)| *p == pkg).and_then(|(_, v)| v.clone());
        if ready {
            checks.push(Check::ok(
                "python",
                format!(
                    "python3 {} in the guest's root disk",
                    version("python3").unwrap_or_else(|| "(version unknown)".into())
                ),
            ));
        }
        if ready {
            // Read from the guest's packages (doctor boots no guest for it).
            let pkgs: Vec<String> = crate::tier::libraries::LIBRARIES.iter().map(|l| format!("python3-{l}")).collect();
            let pkgs: Vec<&str> = pkgs.iter().map(String::as_str).collect();
            checks.push(crate::tier::libraries::check_packages(
                &artefacts::package_versions(&p.tree, &pkgs),
                "in the guest (read from its packages)",
                "not yet built into the guest: run such programs on the process, docker or gvisor tier",
            ));
        }
        let node = version("nodejs").map(|v| format!("node {v}")).unwrap_or_else(|| "node".into());
        let mut accel_name = "?";
        if ready {
            let c = accel::choose(&self.cfg, &p).await;
            accel_name = c.accel.name();
            // Node is a big program to start on an emulated CPU (V8 builds
            // its heap from a snapshot): seconds of the run's CPU time.
            checks.push(match (has_node, c.accel) {
                (false, _) => Check::warn(
                    "javascript",
                    "no node in the guest's root tree: JavaScript programs cannot run",
                    "sandbench setup microvm (the root tree is Debian + nodejs)",
                ),
                (true, Accel::Tcg) => Check::warn(
                    "javascript",
                    format!("{node} in the guest, but its start-up alone takes seconds of CPU under TCG"),
                    "give JavaScript runs a larger --cpu and --timeout, or the host working KVM",
                ),
                (true, _) => Check::ok("javascript", format!("{node} (Debian's nodejs) in the guest's root disk")),
            });
            // Software emulation because KVM did not work is a fallback that
            // works, many times slower: a warning with its reason. TCG asked
            // for in the config is a choice.
            if c.accel == Accel::Tcg && self.cfg.accel == crate::config::AccelSetting::Auto {
                checks.push(Check::warn(
                    "accel",
                    c.detail,
                    "runs work, seconds slower each: give the host working KVM (check /dev/kvm and nested \
virtualization), or set [microvm] accel = \"tcg\" to make emulation the configured choice",
                ));
            } else {
                checks.push(Check::ok("accel", c.detail));
            }
            checks.push(match clock::describe(clock::host_tsc_khz()) {
                Ok(d) => Check::ok("clock", d),
                Err(d) => Check::warn(
                    "clock",
                    d,
                    "timestamps, sleeps and CPU counts inside the guest come in 4 ms steps; a host whose CPU \
has constant_tsc and nonstop_tsc (/proc/cpuinfo) and whose kernel's clocksource is tsc gives nanoseconds",
                ),
            });
            let shape = self.shape(&self.default_limits, c.accel);
            match snapshot::load(&self.cfg, &p, shape) {
                Some((_, m)) => checks.push(Check::ok(
                    "snapshot",
                    format!(
                        "{} guest: restore {} vs boot {} — {} ({})",
                        crate::units::size(shape.mem_mib << 20),
                        crate::units::duration_ms(m.restore_ms),
                        crate::units::duration_ms(m.boot_ms),
                        if m.faster_than_boot() && self.cfg.snapshot {
                            "used for refills and pool misses"
                        } else {
                            "not used (a boot is faster)"
                        },
                        crate::units::size(m.size_bytes)
                    ),
                )),
                None => checks.push(Check::ok(
                    "snapshot",
                    "none for the default limits (sandbench setup microvm saves one); cold boots are used",
                )),
            }
            checks.push(Check::ok(
                "holds",
                "the guest agent is root of the guest's own kernel (the program runs as uid 65534); \
QEMU runs as sandbench's user on the host",
            ));
            checks.push(Check::ok(
                "pool",
                if self.cfg.pool_size == 0 {
                    "off ([microvm] pool_size = 0): every run boots".to_string()
                } else {
                    format!(
                        "{} warm guest(s) of {} MiB in long-lived sessions (TUI, gauntlet, bench)",
                        self.cfg.pool_size, shape.mem_mib
                    )
                },
            ));
        }
        let summary = if ready {
            format!(
                "ready (accel {accel_name}, {} MiB guests, pool {})",
                self.shape(&self.default_limits, Accel::Tcg).mem_mib,
                self.cfg.pool_size
            )
        } else if qemu.is_none() {
            "unavailable: QEMU is not installed (apt-get install qemu-system-x86)".into()
        } else {
            "unavailable: not set up (run `sandbench setup microvm`)".into()
        };
        Availability { tier: "microvm".into(), available: ready, summary, checks }
    }

    /// A guest ready for a program, and how it was started.
    async fn acquire(
        &self,
        p: &Paths,
        shape: Shape,
        disk: u64,
        ctx: &RunContext,
        timeline: &mut Vec<(&'static str, f64)>,
    ) -> anyhow::Result<Option<(Guest, &'static str, Option<&'static str>)>> {
        if self.policy == Policy::Auto {
            if let Some(pool) = pool::Pool::current() {
                if let Some((g, how)) = pool.take(shape) {
                    timeline.push(("guest_taken", ctx.ms()));
                    return Ok(Some((g, "warm", Some(how))));
                }
            }
        }
        ctx.emit(EventKind::Phase(Phase::Booting)).await;
        let snap = match self.policy {
            Policy::Auto if self.cfg.snapshot => {
                snapshot::load(&self.cfg, p, shape).filter(|(_, m)| m.faster_than_boot())
            }
            Policy::Snapshot => snapshot::load(&self.cfg, p, shape),
            _ => None,
        };
        let (mut g, how, want_pong) = match &snap {
            Some((state, _)) => {
                let mut g = Guest::spawn(&self.cfg.qemu, p, shape, Boot::Restore(state), false)?;
                timeline.push(("qemu_spawned", ctx.ms()));
                vm::ping(&mut g).await?;
                (g, "snapshot", true)
            }
            None => {
                let g = Guest::spawn(&self.cfg.qemu, p, shape, Boot::Cold(Some(disk)), false)?;
                timeline.push(("qemu_spawned", ctx.ms()));
                (g, "cold", false)
            }
        };
        let waited = g.wait_for(want_pong, snapshot::BOOT_TIMEOUT, &ctx.stop).await;
        // Restored guests answer the agent's ping; booted ones say READY.
        timeline.push((if want_pong { "restored_agent_answered" } else { "booted_agent_ready" }, ctx.ms()));
        match waited {
            Ok(WaitEnd::Ready) => Ok(Some((g, how, None))),
            Ok(WaitEnd::Stopped) => {
                g.kill().await;
                Ok(None)
            }
            Err(e) => {
                g.kill().await;
                Err(e)
            }
        }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        self.ready_check()?;
        let p = artefacts::paths();
        let choice = accel::choose(&self.cfg, &p).await;
        let limits = spec.limits.clone();
        let shape = self.shape(&limits, choice.accel);
        let mut details = json!({
            "accel": choice.accel.name(),
            "guest_memory_bytes": shape.mem_mib << 20,
            "vcpus": shape.cpus,
            "kernel": artefacts::Manifest::load(&p).kernel_version,
            "network": "none (no network device)",
            "root": "read-only ext4; /work and /tmp are tmpfs",
        });
        // Where the run's time goes (ms from its start), for the report.
        let mut timeline: Vec<(&'static str, f64)> = vec![];
        let acquired = self.acquire(&p, shape, limits.disk_bytes, &ctx, &mut timeline).await?;
        let Some((mut guest, start, pool_boot)) = acquired else {
            // Stopped (cancel / timeout) while booting: nothing ran.
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            details["start"] = json!("cold");
            return Ok(TierExit { usage: None, details });
        };
        details["start"] = json!(start);
        // A pooled guest may be bigger than this run needs; its cgroup holds
        // the program to the run's own memory limit.
        details["guest_memory_bytes"] = json!(guest.shape.mem_mib << 20);
        details["vcpus"] = json!(guest.shape.cpus);
        if let Some(b) = pool_boot {
            details["pool_boot"] = json!(b);
            // Whether it ran the pool's warm-up call (`pool.rs`): only a
            // pool that demand leaves full has time to warm its guests.
            details["pool_warmed_up"] = json!(guest.warmed_up);
        }
        if let Some(ms) = guest.boot_ms {
            details["guest_ready_ms"] = json!((ms * 10.0).round() / 10.0);
        }
        details["qemu_pid"] = json!(guest.pid());
        details["vm_name"] = json!(guest.vm_name());
        if let Some(r) = &guest.ready {
            details["guest"] = json!({"kernel": r.kernel, "python": r.python, "cgroup": r.cgroup,
                "uptime_agent_start_s": r.uptime_agent_start, "uptime_ready_s": r.uptime_ready});
        }
        ctx.note(match (start, guest.boot_ms) {
            ("warm", _) => format!(
                "microvm: warm guest from the pool{} (accel {})",
                if guest.warmed_up { ", warmed up" } else { "" },
                choice.accel.name()
            ),
            (how, Some(ms)) => {
                format!(
                    "microvm: {how} start, guest ready in {} (accel {})",
                    crate::units::duration_ms(ms),
                    choice.accel.name()
                )
            }
            (how, None) => format!("microvm: {how} start (accel {})", choice.accel.name()),
        })
        .await;
        for n in std::mem::take(&mut guest.notes) {
            ctx.note(format!("guest: {n}")).await;
        }
        let egress = crate::egress::Egress::start(&spec, &self.egress, &ctx)?;
        if let (Some(eg), Some(chan)) = (&egress, guest.net.take()) {
            let std_sock = std::os::unix::net::UnixStream::from(chan);
            std_sock.set_nonblocking(true)?;
            crate::egress::mux::carry_framed(eg.server(), tokio::net::UnixStream::from_std(std_sock)?);
        }
        let result = exec::execute(&spec, &ctx, &mut guest, egress.as_ref(), None, &mut timeline).await;
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        details["network"] = match egress {
            Some(eg) => {
                // The relay ends with the guest: kill it first.
                guest.kill().await;
                eg.finish().await
            }
            None => {
                // The program's exit and output are in: the guest is killed
                // (and its memory freed) in the background, awaited at
                // shutdown; a killed sandbench's QEMU dies with it
                // (PDEATHSIG) or is reaped at the next start.
                super::background::spawn(async move { guest.kill().await });
                json!("none (no network device)")
            }
        };
        let mut t = serde_json::Map::new();
        for (k, v) in &timeline {
            t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
        }
        details["timeline_ms"] = serde_json::Value::Object(t);
        let (usage, garbage, watch) = result?;
        if garbage > 0 {
            details["control_channel_garbage_bytes"] = json!(garbage);
        }
        if !watch.is_null() {
            details["scratch_watch"] = watch;
        }
        Ok(TierExit { usage, details })
    }
}
