//! Chaos: warm state that something outside sandbench takes away — a pool's
//! containers removed or killed (as `docker rm -f`, a prune or an OOM do),
//! the process tier's zygote and its spare's sandbox killed, a microVM
//! pool's QEMU killed. For each: the state shown is true within a second, no
//! run reports a false `ok` or hangs, the next run succeeds (and says why it
//! started cold), and nothing is left behind. Every test touches only what
//! its own tier made.

use crate::support::{common, docker_common};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::query_parameters::{KillContainerOptions, ListContainersOptions, RemoveContainerOptions};
use docker_common::{block_on, tier_ready};
use sandbench::config::Config;
use sandbench::internals::docker::{DockerTier, Endpoint, Engine};
use sandbench::internals::process::ProcessTier;
use sandbench::report::{Outcome, RunReport};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

async fn engine() -> Engine {
    Engine::connect(&Endpoint::of(&sandbench::config::HostEnv::from_process())).await.expect("docker answers")
}

/// Every container (any state) whose id starts with one of `ids` (full ids
/// or the 12-character ones a report names).
async fn still_there(engine: &Engine, ids: &[String]) -> Vec<String> {
    let filters = HashMap::from([("label".to_string(), vec![format!("sandbench.pid={}", std::process::id())])]);
    let list = engine
        .docker
        .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
        .await
        .expect("list containers");
    list.into_iter().filter_map(|c| c.id).filter(|id| ids.iter().any(|mine| id.starts_with(mine.as_str()))).collect()
}

async fn until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

fn ok(r: &RunReport, want: &str) {
    assert_eq!(r.outcome, Outcome::Ok, "{}\n{}\n{}", r.summary_line(), r.stderr, r.details);
    assert_eq!(r.stdout.trim(), want, "{}", r.summary_line());
}

/// The pool's containers go from outside, one way per round (removed; killed
/// and left stopped): the pool drops them within a second (its event watch),
/// the tier pane's count says so, and the runs right after are served —
/// warm from the refill or cold with the reason — never failed.
fn pool_members_taken_away_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let _one = docker_common::WARM_POOLS.lock().unwrap_or_else(|e| e.into_inner());
    block_on(async {
        let mut config = Config::load().unwrap();
        config.docker.pool_size = 2;
        let t = Arc::new(if tier == "gvisor" { DockerTier::gvisor(&config) } else { DockerTier::docker(&config) });
        let engine = engine().await;
        let mut touched: Vec<String> = vec![];
        for how in ["removed", "killed"] {
            assert_eq!(t.prewarm_for(&Limits::default()).await.unwrap(), 2);
            let members = t.pool_ids();
            assert_eq!(members.len(), 2, "{how}");
            touched.extend(members.iter().cloned());
            for id in &members {
                let r = match how {
                    "removed" => engine
                        .docker
                        .remove_container(id, Some(RemoveContainerOptions { force: true, ..Default::default() }))
                        .await
                        .map(|_| ()),
                    _ => engine
                        .docker
                        .kill_container(id, Some(KillContainerOptions { signal: "SIGKILL".into() }))
                        .await
                        .map(|_| ()),
                };
                r.unwrap_or_else(|e| panic!("{how} {id}: {e}"));
            }
            // True within a second: none of them is still counted.
            let gone = until(1, || t.pool_ids().iter().all(|id| !members.contains(id))).await;
            assert!(gone, "{how}: the pool still holds {:?} of {members:?}", t.pool_ids());
            let shown = Tier::warm(&*t).unwrap_or_default();
            assert!(!members.iter().any(|m| shown.contains(&m[..12])), "{shown}");
            // Served at once, however the refill stands.
            for n in 0..2 {
                let r = sandbench::runner::run(t.clone(), RunSpec::new(Language::Python, format!("print({n})"))).await;
                ok(&r, &n.to_string());
                touched.push(r.details["container"].as_str().unwrap_or_default().to_string());
                if r.details["start"] == "cold" {
                    if let Some(why) = r.details["start_note"].as_str() {
                        assert!(why.starts_with("pool member gone: "), "{why}");
                        assert!(r.summary_line().contains(why), "{}", r.summary_line());
                    }
                }
            }
            t.settle().await;
        }
        // A member killed in the window between the event and the take (the
        // watch cannot have seen it yet): the run's own check catches it.
        assert_eq!(t.prewarm_for(&Limits::default()).await.unwrap(), 2);
        let members = t.pool_ids();
        touched.extend(members.iter().cloned());
        for id in &members {
            let _ = engine.docker.kill_container(id, Some(KillContainerOptions { signal: "SIGKILL".into() })).await;
        }
        let r = sandbench::runner::run(t.clone(), RunSpec::new(Language::Python, "print('after')")).await;
        ok(&r, "after");
        touched.push(r.details["container"].as_str().unwrap_or_default().to_string());
        sandbench::tier::shutdown().await;
        sandbench::internals::drain(Duration::from_secs(20)).await;
        touched.retain(|s| !s.is_empty());
        let left = still_there(&engine, &touched).await;
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

#[sandbench_testkit::test(needs = ["docker"])]
fn pool_containers_removed_or_killed_outside_are_dropped_and_runs_still_served_on_docker() {
    pool_members_taken_away_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn pool_containers_removed_or_killed_outside_are_dropped_and_runs_still_served_on_gvisor() {
    pool_members_taken_away_on("gvisor");
}

/// A process's start time (field 22 of its stat): with the pid, who it is.
fn started(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(") ")?.1.split(' ').nth(19)?.parse().ok()
}

/// Whether a process seen before is still running (not a zombie).
fn running(pid: i32, at: Option<u64>) -> bool {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    present(pid, at) && s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

/// Whether a process seen before, zombie or not, is still in the process
/// table (a pid reused since is someone else).
fn present(pid: i32, at: Option<u64>) -> bool {
    at.is_some() && started(pid) == at
}

/// The processes in a cgroup directory and its children.
fn procs_in(dirs: &[std::path::PathBuf]) -> Vec<i32> {
    let mut out = vec![];
    for d in dirs {
        for e in walkdir(d) {
            if let Ok(s) = std::fs::read_to_string(e.join("cgroup.procs")) {
                out.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
    }
    out
}

fn walkdir(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![d.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walkdir(&e.path()));
            }
        }
    }
    out
}

/// The process tier's warm state killed from outside: its zygote (the warm
/// interpreter every sandbox's program is forked from) and then every
/// process of its waiting spare sandbox (init first). The runs after each
/// are served and right, a new zygote is started, the killed spare is never
/// handed out, and the dead spare's cgroup goes.
#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn a_killed_zygote_or_spare_is_replaced_and_runs_still_served_on_process() {
    if !common::is_root() {
        return; // the zygote serves root's sandboxes only
    }
    let process = Arc::new(ProcessTier::new(&common::config()));
    let tier: Arc<dyn Tier> = process.clone();
    let a = tier.probe().await;
    assert!(a.available, "process tier unavailable: {}", a.summary);
    let run = |code: &'static str| {
        let t = tier.clone();
        async move { sandbench::runner::run(t, RunSpec::new(Language::Python, code)).await }
    };
    ok(&run("print(1)").await, "1");
    let spare_up = |p: &ProcessTier| !p.spare_cgroups().is_empty();
    assert!(until(10, || spare_up(&process)).await, "no spare after a run");
    // 1. The zygote.
    let zygote = process.zygote_pid().expect("a zygote runs after a run") as i32;
    let zygote_at = started(zygote);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygote), nix::sys::signal::Signal::SIGKILL).unwrap();
    // Once the kernel says it has ended (a zombie): a kill still in flight
    // is a window no check can close, and a run it hits fails (never `ok`).
    assert!(until(5, || !running(zygote, zygote_at)).await, "the zygote did not die");
    for _ in 0..3 {
        ok(&run("import os; print(os.getuid() > 0)").await, "True");
    }
    let again = process.zygote_pid().expect("a zygote runs again") as i32;
    assert_ne!(again, zygote, "the dead zygote is still the one held");
    assert!(!present(zygote, zygote_at), "the killed zygote was not reaped");
    // 2. The spare's sandbox, init and all.
    assert!(until(10, || spare_up(&process)).await, "no spare after the runs");
    let dirs = process.spare_cgroups();
    let procs: Vec<(i32, Option<u64>)> = procs_in(&dirs).into_iter().map(|p| (p, started(p))).collect();
    assert!(!procs.is_empty(), "the spare's cgroup holds no process: {dirs:?}");
    for (p, _) in &procs {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL);
    }
    assert!(until(5, || procs.iter().all(|(p, at)| !running(*p, *at))).await, "the spare did not die");
    let r = run("print('after the spare')").await;
    ok(&r, "after the spare");
    assert_eq!(r.details["start"], "cold", "the killed spare was handed out");
    let why = r.details["start_note"].as_str().unwrap_or_default();
    assert!(why.starts_with("spare gone: "), "{}", r.details);
    assert!(r.summary_line().contains(why), "{}", r.summary_line());
    // The dead spare's cgroup is gone (its processes reaped), once the tier
    // has had its teardown.
    let gone = until(10, || dirs.iter().all(|d| !d.exists())).await;
    assert!(gone, "the killed spare's cgroup is left: {dirs:?}");
    // Every process of it reaped (no zombie kept), at the latest when the
    // tier is gone.
    drop(tier);
    drop(process);
    sandbench::internals::drain(Duration::from_secs(20)).await;
    let reaped = until(10, || procs.iter().all(|(p, at)| !present(*p, *at))).await;
    let left: Vec<_> = procs.iter().filter(|(p, at)| present(*p, *at)).collect();
    assert!(reaped, "processes of the killed spare are still in the process table: {left:?}");
}

/// A session's container removed from outside while the session is idle:
/// the session closes within a few seconds with the reason, and a call
/// after says it (never `ok`, never a hang); nothing of it is left.
fn session_container_removed_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    block_on(async {
        let config = Config::load().unwrap();
        let t: Arc<dyn Tier> =
            Arc::new(if tier == "gvisor" { DockerTier::gvisor(&config) } else { DockerTier::docker(&config) });
        let limits = Limits { memory_bytes: 256 << 20, ..Default::default() };
        let s = sandbench::session::Session::open(t, sandbench::session::SessionSpec::new(limits)).await.unwrap();
        let first = s.run(RunSpec::new(Language::Python, "print('first')")).await.unwrap();
        ok(&first, "first");
        let short = first.details["container"].as_str().unwrap().to_string();
        let engine = engine().await;
        engine
            .docker
            .remove_container(&short, Some(RemoveContainerOptions { force: true, ..Default::default() }))
            .await
            .unwrap();
        let closed = until(5, || s.is_closed()).await;
        let why = s.info().closed.unwrap_or_default();
        assert!(closed, "the session is still open after its container was removed");
        assert!(why.contains("removed outside sandbench"), "{why}");
        let after = s.run(RunSpec::new(Language::Python, "print('after')")).await;
        let e = after.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("removed outside sandbench"), "{e}");
        assert!(still_there(&engine, &[short]).await.is_empty());
    });
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_sessions_container_removed_outside_closes_it_with_the_reason_on_docker() {
    session_container_removed_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn a_sessions_container_removed_outside_closes_it_with_the_reason_on_gvisor() {
    session_container_removed_on("gvisor");
}

/// Unmounts (lazily) the test's own small tmpfs, also when the test fails.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// A tmpfs of `bytes` at `at` (the test's own directory), as root.
    fn mount(at: &std::path::Path, bytes: u64) -> SmallDisk {
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={bytes},mode=0700").as_str()),
        )
        .expect("mount the test's tmpfs");
        SmallDisk(at.to_path_buf())
    }

    /// Fill it with one file until the disk says no more.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let p = self.0.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![b'x'; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.write_all(b"x");
        p
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The disk that holds the run log full: the run is still delivered whole
/// (a log that cannot be written never fails a run), the log keeps whole
/// entries only (no half line from a write the disk cut short), and once
/// there is room again the next run is logged.
#[sandbench_testkit::test(needs = ["process"])]
fn a_full_disk_under_the_run_log_loses_no_run_and_leaves_no_half_entry() {
    if !common::is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk_at = dir.path().join("disk");
    std::fs::create_dir(&disk_at).unwrap();
    let disk = SmallDisk::mount(&disk_at, 256 << 10);
    let state = disk_at.join("state");
    let prog = dir.path().join("p.py");
    // A big entry: its output is what the log keeps of it (bounded), more
    // than the room a nearly full disk has left.
    std::fs::write(&prog, "print('x' * 60000)\nprint('done')\n").unwrap();
    let run = || {
        let net = common::OuterNet::new();
        let mut cmd = std::process::Command::new(common::bin());
        cmd.args(["run", "--tier", "process", "--format", "json", prog.to_str().unwrap()])
            .env("SANDBENCH_STATE_DIR", &state)
            .env("SANDBENCH_HELPER", common::helper_bin());
        net.output(&mut cmd, Duration::from_secs(60))
    };
    let first = run();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let log = state.join("runs.jsonl");
    let whole = |at: &std::path::Path| {
        let text = std::fs::read_to_string(at).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "a half entry is left: …{:?}",
            &text[text.len().saturating_sub(80)..]
        );
        let entries: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).expect("a whole entry")).collect();
        entries.len()
    };
    assert_eq!(whole(&log), 1);
    let filler = disk.fill();
    let full = run();
    assert!(full.status.success(), "a full run log failed the run: {}", String::from_utf8_lossy(&full.stderr));
    let r = common::report(&full);
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert!(r.stdout.ends_with("done\n"), "the run's output was cut");
    assert_eq!(whole(&log), 1, "the log took a run the disk had no room for");
    std::fs::remove_file(filler).unwrap();
    let again = run();
    assert!(again.status.success());
    assert_eq!(whole(&log), 2, "with room again, the next run is logged");
}
