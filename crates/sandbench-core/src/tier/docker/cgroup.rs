//! The container's cgroup, read from the host: usage for the report and the
//! kernel's counters (OOM kills, memory and pids limit hits) for the judge.
//! A remote engine's containers are sampled through its stats stream instead.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::StatsOptions;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::event::UsageSample;
use crate::judge;

const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// What the sampler learned; judged by the pump.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sample {
    pub(super) usage: UsageSample,
    /// The cgroup's own high-water mark of charged memory (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`): the run's peak memory,
    /// which catches what happened between two samples.
    pub(super) peak: Option<u64>,
    /// Kernel counters of the container's cgroup (local engines only).
    pub(super) counters: judge::Counters,
}

/// Where the container's cgroup lives on this machine (local engines with
/// the cgroupfs or systemd driver, v1 or v2).
#[derive(Debug, Clone)]
pub(super) enum Cgroup {
    V1 { cpu: PathBuf, memory: PathBuf, pids: PathBuf, oom: Option<Arc<OomWatch>> },
    V2(PathBuf),
}

impl Cgroup {
    pub(super) fn find(id: &str) -> Option<Cgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = |c: &str| root.join(c).join("docker").join(id);
        if v1("memory").join("memory.usage_in_bytes").exists() {
            let cpu =
                ["cpuacct", "cpu,cpuacct", "cpu"].iter().map(|c| v1(c)).find(|p| p.join("cpuacct.usage").exists())?;
            return Some(Cgroup::V1 { cpu, memory: v1("memory"), pids: v1("pids"), oom: None });
        }
        [root.join("docker").join(id), root.join("system.slice").join(format!("docker-{id}.scope"))]
            .into_iter()
            .find(|p| p.join("cgroup.procs").exists())
            .map(Cgroup::V2)
    }

    /// The same cgroup with the kernel's OOM notice held (v1; see
    /// [`OomWatch`]), for a container whose program has not started yet.
    /// Without it (v2, no right to register) the counters alone are read.
    pub(super) fn watching_oom(self) -> Cgroup {
        match self {
            Cgroup::V1 { cpu, memory, pids, oom: None } => {
                let oom = match OomWatch::register(&memory) {
                    Ok(w) => Some(Arc::new(w)),
                    Err(e) => {
                        tracing::debug!("cannot hold the memory cgroup's OOM notice: {e}");
                        None
                    }
                };
                Cgroup::V1 { cpu, memory, pids, oom }
            }
            other => other,
        }
    }

    /// The kernel's OOM notice, when it is held.
    pub(super) fn oom_watch(&self) -> Option<&OomWatch> {
        match self {
            Cgroup::V1 { oom, .. } => oom.as_deref(),
            Cgroup::V2(_) => None,
        }
    }

    fn read(p: PathBuf) -> Option<String> {
        std::fs::read_to_string(p).ok()
    }

    fn num(p: PathBuf) -> Option<u64> {
        Self::read(p)?.trim().parse().ok()
    }

    fn field(p: PathBuf, key: &str) -> Option<u64> {
        Self::read(p)?.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Usage and the kernel's counters of the container's cgroup.
    pub(super) fn sample(&self, count_pids: bool) -> Sample {
        match self {
            // Memory as the kernel charges it (what the limit is enforced
            // against), the same figure the process tier shows.
            Cgroup::V1 { cpu, memory, pids, oom } => {
                let mem = Self::num(memory.join("memory.usage_in_bytes"));
                let peak = Self::num(memory.join("memory.max_usage_in_bytes"));
                let cpu_ms = Self::num(cpu.join("cpuacct.usage")).map(|ns| ns / 1_000_000);
                let usage = UsageSample {
                    cpu_ms,
                    memory_bytes: mem,
                    pids: if count_pids { Self::num(pids.join("pids.current")) } else { None },
                };
                let counters = judge::Counters {
                    cpu_ms,
                    // `None` orders below any count: the larger known figure.
                    oom_kills: Self::field(memory.join("memory.oom_control"), "oom_kill")
                        .max(oom.as_ref().map(|w| w.seen())),
                    memory_limit_hits: Self::num(memory.join("memory.failcnt")),
                    pids_refused: if count_pids { Self::field(pids.join("pids.events"), "max") } else { None },
                };
                Sample { usage, peak, counters }
            }
            Cgroup::V2(dir) => {
                let mem = Self::num(dir.join("memory.current"));
                let peak = Self::num(dir.join("memory.peak"));
                let cpu_ms = Self::field(dir.join("cpu.stat"), "usage_usec").map(|us| us / 1000);
                let usage = UsageSample {
                    cpu_ms,
                    memory_bytes: mem,
                    pids: if count_pids { Self::num(dir.join("pids.current")) } else { None },
                };
                let counters = judge::Counters {
                    cpu_ms,
                    oom_kills: Self::field(dir.join("memory.events"), "oom_kill"),
                    memory_limit_hits: Self::field(dir.join("memory.events"), "max"),
                    pids_refused: if count_pids { Self::field(dir.join("pids.events"), "max") } else { None },
                };
                Sample { usage, peak, counters }
            }
        }
    }
}

/// The kernel's notice of every OOM in a v1 memory cgroup, held by eventfds
/// registered before the program starts. The counter files are read by path
/// and vanish with the cgroup; when the OOM killer ends the whole container
/// (gVisor's sandbox is one host process that holds all the guest's memory)
/// the cgroup can be gone before a sample saw its counters, and a limit that
/// bit would read as a broken sandbox. The eventfds outlive the cgroup.
///
/// The kernel also signals an OOM eventfd once when the cgroup is removed,
/// so a second eventfd, on a usage threshold no cgroup can reach, is
/// signalled only then: with it a removal is told from an OOM.
#[derive(Debug)]
pub(super) struct OomWatch {
    /// One count per OOM, one more when the cgroup goes.
    oom: nix::sys::eventfd::EventFd,
    /// One count, when the cgroup goes.
    gone: nix::sys::eventfd::EventFd,
    /// The cgroup's `memory.oom_control`: while it exists, the cgroup has
    /// not been removed (its removal notices come after the rmdir).
    control: PathBuf,
    /// OOMs counted while the cgroup still existed, and counts read after
    /// it was gone (one of which, in time, is the removal's).
    counts: Mutex<(u64, u64)>,
}

impl OomWatch {
    fn register(memory: &Path) -> std::io::Result<OomWatch> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let flags = EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK;
        let oom = EventFd::from_flags(flags)?;
        let gone = EventFd::from_flags(flags)?;
        // Root-owned cgroupfs files of sandbench's own container, which
        // neither the program nor another user can write or replace.
        let open = |name: &str, write: bool| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(memory.join(name))
        };
        let control = open("memory.oom_control", false)?;
        let usage = open("memory.usage_in_bytes", false)?;
        let mut events = open("cgroup.event_control", true)?;
        events.write_all(format!("{} {}", oom.as_raw_fd(), control.as_raw_fd()).as_bytes())?;
        // "-1": the largest charge a counter can hold, never crossed.
        events.write_all(format!("{} {} -1", gone.as_raw_fd(), usage.as_raw_fd()).as_bytes())?;
        Ok(OomWatch { oom, gone, control: memory.join("memory.oom_control"), counts: Mutex::new((0, 0)) })
    }

    fn take(fd: &nix::sys::eventfd::EventFd) -> u64 {
        // Non-blocking: nothing signalled since the last read is EAGAIN.
        fd.read().unwrap_or(0)
    }

    /// OOMs known for certain so far (read while the cgroup existed).
    pub(super) fn seen(&self) -> u64 {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = Self::take(&self.oom);
        if self.control.exists() {
            c.0 += n;
        } else {
            c.1 += n;
        }
        c.0
    }

    /// Every OOM of the cgroup's life, once the program is gone: when the
    /// cgroup was removed, waits (up to a second) for the kernel's removal
    /// notices and does not count the removal's own. If the removal's
    /// notice never came, one count is still taken for it: an OOM is only
    /// claimed on the kernel's word.
    pub(super) async fn settled(&self) -> u64 {
        let sure = self.seen();
        if self.control.exists() {
            return sure;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        while Self::take(&self.gone) == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The two notices are separate work items of the kernel's: give
        // the OOM eventfd's a moment after the threshold's.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.1 += Self::take(&self.oom);
        c.0 + c.1.saturating_sub(1)
    }
}

/// Sample the container: its cgroup files when the engine is local (cheap
/// and immediate), else the engine's stats stream (one sample a second).
/// `guest_pids` is false on gVisor, where the host only sees the sandbox's
/// own threads, not the program's processes.
pub(super) async fn sample_loop(
    docker: Docker,
    id: String,
    cgroup: Option<Cgroup>,
    guest_pids: bool,
    tx: mpsc::Sender<Sample>,
) {
    {
        if let Some(cg) = cgroup {
            let mut ticker = tokio::time::interval(SAMPLE_EVERY);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if tx.send(cg.sample(guest_pids)).await.is_err() {
                    return;
                }
            }
        }
    }
    let mut stream = docker.stats(&id, Some(StatsOptions { stream: true, one_shot: false }));
    while let Some(Ok(s)) = stream.next().await {
        // The cgroup's charge as the engine reports it (its high-water mark
        // only on cgroup v1 engines).
        let mem = s.memory_stats.as_ref().and_then(|m| m.usage);
        let peak = s.memory_stats.as_ref().and_then(|m| m.max_usage);
        let cpu_ms = s
            .cpu_stats
            .as_ref()
            .and_then(|c| c.cpu_usage.as_ref())
            .and_then(|u| u.total_usage)
            .map(|ns| ns / 1_000_000);
        let pids = if guest_pids { s.pids_stats.as_ref().and_then(|p| p.current) } else { None };
        // A remote engine's stats carry no refusal or OOM counters.
        let counters = judge::Counters { cpu_ms, ..Default::default() };
        let sample = Sample { usage: UsageSample { cpu_ms, memory_bytes: mem, pids }, peak, counters };
        if tx.send(sample).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A memory cgroup of this test's own (v1), removed when dropped.
    struct TestCgroup(PathBuf);

    impl TestCgroup {
        /// None (skipped, said on stderr) without root or a v1 memory
        /// hierarchy, unless CI's `SANDBENCH_REQUIRE_TIERS` names docker,
        /// whose OOM verdicts need it: then the test fails.
        fn new(tag: &str, limit: u64) -> Option<TestCgroup> {
            let root = Path::new("/sys/fs/cgroup/memory");
            if !root.join("cgroup.event_control").exists() || !nix::unistd::geteuid().is_root() {
                let required = std::env::var("SANDBENCH_REQUIRE_TIERS")
                    .is_ok_and(|v| v.split(',').any(|t| t.trim() == "docker"))
                    && Path::new("/sys/fs/cgroup/memory").exists();
                assert!(!required, "SANDBENCH_REQUIRE_TIERS names docker but the v1 memory cgroup cannot be watched");
                eprintln!("skipped: needs root and a cgroup v1 memory hierarchy");
                return None;
            }
            let dir = root.join(format!("sandbench-oomwatch-{tag}-{}", std::process::id()));
            std::fs::create_dir(&dir).ok()?;
            let cg = TestCgroup(dir);
            std::fs::write(cg.0.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
            Some(cg)
        }

        /// A process that fills memory in one go, inside the cgroup (the
        /// cgroup is the safety net: it is the one it can fill).
        fn fill(&self, mib: u32) -> std::process::ExitStatus {
            let procs = self.0.join("cgroup.procs");
            let mut child = Command::new("sh")
                .arg("-c")
                .arg(format!("echo $$ > {} && exec python3 -c 'b = b\"x\" * ({mib} << 20)'", procs.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("sh");
            let t = std::time::Instant::now();
            loop {
                if let Some(s) = child.try_wait().expect("wait") {
                    return s;
                }
                if t.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    panic!("the filler did not end in 30 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    impl Drop for TestCgroup {
        fn drop(&mut self) {
            for _ in 0..100 {
                if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime")
    }

    #[test]
    fn an_oom_is_seen_after_the_cgroup_is_gone() {
        let Some(cg) = TestCgroup::new("oom", 32 << 20) else { return };
        let watch = OomWatch::register(&cg.0).expect("register");
        let status = cg.fill(256);
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL), "{status:?}");
        // The cgroup goes before anything read its counters, as a gVisor
        // container's does when the OOM killer ends its sandbox.
        drop(cg);
        assert!(rt().block_on(watch.settled()) >= 1);
    }

    #[test]
    fn a_cgroup_removed_without_an_oom_counts_none() {
        let Some(cg) = TestCgroup::new("calm", 64 << 20) else { return };
        let watch = OomWatch::register(&cg.0).expect("register");
        assert!(cg.fill(1).success());
        assert_eq!(watch.seen(), 0);
        drop(cg);
        // The removal's own notice is not an OOM.
        assert_eq!(rt().block_on(watch.settled()), 0);
    }

    #[test]
    fn an_oom_read_while_the_cgroup_exists_is_certain() {
        let Some(cg) = TestCgroup::new("live", 32 << 20) else { return };
        let watch = OomWatch::register(&cg.0).expect("register");
        assert!(!cg.fill(256).success());
        assert!(watch.seen() >= 1);
        let sure = watch.seen();
        drop(cg);
        assert_eq!(rt().block_on(watch.settled()), sure);
    }
}
