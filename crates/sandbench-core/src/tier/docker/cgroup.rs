//! The container's cgroup, read from the host: usage for the report and the
//! kernel's counters (OOM kills, memory and pids limit hits) for the judge.
//! A remote engine's containers are sampled through its stats stream instead.

use std::path::{Path, PathBuf};
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
    V1 { cpu: PathBuf, memory: PathBuf, pids: PathBuf },
    V2(PathBuf),
}

impl Cgroup {
    pub(super) fn find(id: &str) -> Option<Cgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = |c: &str| root.join(c).join("docker").join(id);
        if v1("memory").join("memory.usage_in_bytes").exists() {
            let cpu =
                ["cpuacct", "cpu,cpuacct", "cpu"].iter().map(|c| v1(c)).find(|p| p.join("cpuacct.usage").exists())?;
            return Some(Cgroup::V1 { cpu, memory: v1("memory"), pids: v1("pids") });
        }
        [root.join("docker").join(id), root.join("system.slice").join(format!("docker-{id}.scope"))]
            .into_iter()
            .find(|p| p.join("cgroup.procs").exists())
            .map(Cgroup::V2)
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
            Cgroup::V1 { cpu, memory, pids } => {
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
                    oom_kills: Self::field(memory.join("memory.oom_control"), "oom_kill"),
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
