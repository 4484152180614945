//! The docker and gvisor tiers end to end: clear errors when the daemon or
//! the image is missing, the hardening as the program sees it, the secret
//! never inside, and no container left after timeouts, cancels, a killed
//! sandbench (reaped by the next start) and a drained warm pool; a finished
//! run's container ends by itself before it is removed.

use crate::support::docker_common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use docker_common::{block_on, containers_of, eventually, tier_ready};
use sandbench::config::Config;
use sandbench::internals::docker::DockerTier;
use sandbench::report::{Outcome, RunReport};
use sandbench::spec::{Language, Limits, RunSpec};

const SECRET: &str = "sk-ant-test-docker-lifecycle-42";

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sandbench"));
    c.env("ANTHROPIC_API_KEY", SECRET).stdin(Stdio::null());
    c
}

fn program(dir: &tempfile::TempDir, name: &str, code: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, code).unwrap();
    p.to_string_lossy().into_owned()
}

fn json_report(out: &std::process::Output) -> RunReport {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[sandbench_testkit::test]
fn a_dead_daemon_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let hello = program(&dir, "hello.py", "print(1)\n");
    // A socket file nobody listens on, and no socket at all.
    let sock = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    for host in [format!("unix://{}", sock.display()), "unix:///nonexistent/docker.sock".into()] {
        for tier in ["docker", "gvisor"] {
            let out = bin()
                .env("DOCKER_HOST", &host)
                .args(["run", "--tier", tier, "--format", "json", &hello])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{tier} {host}");
            let r = json_report(&out);
            assert_eq!(r.outcome, Outcome::Error);
            let e = r.error.unwrap();
            assert!(e.contains("cannot reach the Docker daemon at"), "{e}");
            assert!(e.contains("dockerd"), "says how to start it: {e}");
            assert!(!e.contains('\n'));
        }
        let out = bin().env("DOCKER_HOST", &host).args(["doctor"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("docker    ✗"), "{text}");
        assert!(text.contains("fix: start the daemon"), "{text}");
    }
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_missing_image_is_one_clear_line() {
    if !tier_ready("docker") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hello = program(&dir, "hello.py", "print(1)\n");
    let out = bin()
        .env("SANDBENCH_DOCKER_IMAGE", "sandbench/surely-missing:nope")
        .args(["run", "--tier", "docker", "--format", "json", &hello])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = json_report(&out).error.unwrap();
    assert!(e.contains("image sandbench/surely-missing:nope is not present"), "{e}");
    assert!(e.contains("sandbench setup docker"), "{e}");
    let out = bin().env("SANDBENCH_DOCKER_IMAGE", "sandbench/surely-missing:nope").args(["doctor"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fix: sandbench setup docker"), "{text}");
}

const PROBE: &str = r#"
import os, json
st = open("/proc/self/status").read()
def field(k):
    v = [l.split(":", 1)[1].strip() for l in st.splitlines() if l.startswith(k + ":")]
    return v[0] if v else None
try:
    open("/usr/sandbench-probe", "w")
    rootfs = "writable"
except OSError:
    rootfs = "read-only"
open("/work/ok", "w").write("x")
print(json.dumps({
    "uid": os.getuid(),
    "cap_eff": field("CapEff"),
    "no_new_privs": field("NoNewPrivs"),
    "rootfs": rootfs,
    "net": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else [],
    "secret": os.environ.get("ANTHROPIC_API_KEY"),
    "env": sorted(os.environ),
    "home": os.environ.get("HOME"),
}))
"#;

fn hardening_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "probe.py", PROBE);
    let out = bin().args(["run", "--tier", tier, "--format", "json", "--env", "MINE=1", &p]).output().unwrap();
    let r = json_report(&out);
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap_or_else(|_| panic!("{}", r.stderr));
    // A per-run uid from sandbench's dedicated range, as reported.
    let uid = v["uid"].as_u64().unwrap();
    assert!((0x7000_0000..0x7100_0000).contains(&uid), "uid {uid}");
    assert_eq!(r.details["program_uid"], uid);
    assert_eq!(v["cap_eff"], "0000000000000000");
    // gVisor's /proc does not show NoNewPrivs; the flag is still set on its
    // container (details.hardening).
    if tier == "docker" {
        assert_eq!(v["no_new_privs"], "1");
    }
    assert_eq!(v["rootfs"], "read-only");
    assert!(v["net"].as_array().unwrap().iter().all(|n| n == "lo"), "{}", v["net"]);
    assert!(v["secret"].is_null(), "the secret reached the sandbox");
    assert!(!r.stdout.contains(SECRET));
    assert_eq!(v["home"], "/work");
    let env: Vec<&str> = v["env"].as_array().unwrap().iter().filter_map(|e| e.as_str()).collect();
    for e in &env {
        assert!(["PATH", "LANG", "HOME", "TMPDIR", "HOSTNAME", "MINE"].contains(e), "unexpected variable {e}");
    }
    assert_eq!(r.details["runtime"], if tier == "gvisor" { "runsc" } else { "runc" });
    assert_eq!(r.details["start"], "cold");
    assert_eq!(r.details["hardening"]["network"], "none");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn the_container_is_hardened_on_docker() {
    hardening_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn the_container_is_hardened_on_gvisor() {
    hardening_on("gvisor");
}

fn timeout_and_cancel_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(1000)\n");
    // Wall timeout.
    let child = bin()
        .args(["run", "--tier", tier, "--format", "json", "--timeout", "1s", &p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let r = json_report(&out);
    assert_eq!(r.outcome, Outcome::Violation);
    assert!(r.has_violation(sandbench::event::ViolationKind::WallTimeout));
    assert_eq!(r.stdout.trim(), "up");
    assert!(containers_of(pid).is_empty(), "container left after a timeout");
    // Cancel (Ctrl-C) once the container exists.
    let child = bin()
        .args(["run", "--tier", tier, "--format", "json", "--timeout", "60s", &p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(eventually(30, || !containers_of(pid).is_empty()), "no container appeared");
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let r = json_report(&out);
    assert_eq!(r.outcome, Outcome::Cancelled, "{}", r.summary_line());
    assert!(r.timings_ms.total < 30_000.0);
    assert!(containers_of(pid).is_empty(), "container left after a cancel");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn timeouts_and_cancels_leave_no_container_on_docker() {
    timeout_and_cancel_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn timeouts_and_cancels_leave_no_container_on_gvisor() {
    timeout_and_cancel_on("gvisor");
}

fn killed_sandbench_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "sleep.py", "import time\ntime.sleep(1000)\n");
    let mut child = bin()
        .args(["run", "--tier", tier, "--timeout", "120s", &p])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(eventually(30, || !containers_of(pid).is_empty()), "no container appeared");
    let ids = containers_of(pid);
    child.kill().unwrap(); // SIGKILL: no cleanup code runs
    child.wait().unwrap();
    // Its container outlives it until some sandbench starts (other tests
    // start sandbench concurrently, so it may be gone already).
    // The next start reaps it (any command; doctor does not run a program of ours).
    let out = bin().args(["setup", tier]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // (Another test's sandbench may be removing it at the same moment.)
    assert!(eventually(10, || containers_of(pid).is_empty()), "the next start did not reap the dead owner's container");
    // gVisor: no sandbox or gofer process of that container either.
    assert!(
        eventually(10, || sandbench::internals::docker::runsc_processes().iter().all(|(_, id)| !ids.contains(id))),
        "runsc processes of the reaped container remain"
    );
}

/// `setup` through the engine's entry point: on a machine where the tier is
/// ready it says each step (the engine, the image, the runtime) and that it
/// is ready.
fn setup_again_on(tier: &str, runtime_line: Option<&str>) {
    if !tier_ready(tier) {
        return;
    }
    let out = bin().args(["setup", tier]).stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("setup: Docker engine "), "{err}");
    // Present here after the first setup; pulled, built or switched on a
    // machine whose image moved meanwhile.
    let image = ["is present", "setup: pulled ", "setup: built ", "now says [docker] image"];
    assert!(image.iter().any(|l| err.contains(l)), "{err}");
    if let Some(line) = runtime_line {
        assert!(err.contains(line), "{err}");
    }
    assert!(err.trim_end().ends_with("setup: ready (check with: sandbench doctor)"), "{err}");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn setup_docker_again_finds_the_image_present() {
    setup_again_on("docker", None);
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn setup_gvisor_again_finds_the_image_and_the_runtime() {
    setup_again_on("gvisor", Some("setup: runtime runsc is registered"));
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_killed_sandbench_is_reaped_at_the_next_start_on_docker() {
    killed_sandbench_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn a_killed_sandbench_is_reaped_at_the_next_start_on_gvisor() {
    killed_sandbench_on("gvisor");
}

fn warm_pool_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let _one = docker_common::WARM_POOLS.lock().unwrap_or_else(|e| e.into_inner());
    block_on(async {
        let mut config = Config::load().unwrap();
        config.docker.pool_size = 1;
        let t = Arc::new(if tier == "gvisor" { DockerTier::gvisor(&config) } else { DockerTier::docker(&config) });
        let limits = Limits::default();
        assert_eq!(t.prewarm_for(&limits).await.unwrap(), 1);
        let mut spec = RunSpec::new(Language::Python, "import sys\nprint(sys.argv[0], __name__)\n");
        spec.env.insert("W".into(), "1".into());
        let r = sandbench::runner::run(t.clone(), spec).await;
        assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
        assert_eq!(r.details["start"], "warm");
        assert_eq!(r.stdout.trim(), "/work/main.py __main__");
        // Single use: the next run gets another container.
        t.settle().await;
        let r2 = sandbench::runner::run(t.clone(), RunSpec::new(Language::Sh, "echo $W\n")).await;
        assert_eq!(r2.details["start"], "warm");
        assert_ne!(r2.details["container"], r.details["container"]);
        assert_eq!(r2.stdout.trim(), "", "env of one run must not leak into the next");
        // Other limits: cold, and the pool follows the new shape.
        let mut other = RunSpec::new(Language::Python, "print(2)\n");
        other.limits.memory_bytes = 200 << 20;
        let r3 = sandbench::runner::run(t.clone(), other).await;
        assert_eq!(r3.details["start"], "cold");
        assert_eq!(r3.stdout.trim(), "2");
        sandbench::tier::shutdown().await;
    });
    assert!(containers_of(std::process::id()).is_empty(), "the drained pool left containers");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn warm_pool_runs_are_warm_single_use_and_drained_on_docker() {
    warm_pool_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn warm_pool_runs_are_warm_single_use_and_drained_on_gvisor() {
    warm_pool_on("gvisor");
}

/// A finished run's container ends by itself (its loader kills what the
/// program left and exits once it has the acknowledgement) before it is
/// removed: the engine records a `die` and no `kill`. A removal that forces
/// a running container costs the runtime a kill (under gVisor one more
/// `runsc` process per run, which the engine's events do not show: there
/// the test checks the end and the removal only).
fn ends_by_itself_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Children left behind: the loader ends them, not the engine (with
    // many, a removal that does not wait for the loader finds the
    // container still running).
    let p = program(
        &dir,
        "left.py",
        "import subprocess\nfor _ in range(40):\n    subprocess.Popen(['sleep', '600'])\nprint('done')\n",
    );
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 1;
    let child = bin()
        .args(["run", "--tier", tier, "--format", "json", &p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let r = json_report(&child.wait_with_output().unwrap());
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert_eq!(r.stdout.trim(), "done");
    let short = r.details["container"].as_str().expect("the report names its container").to_string();
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 1;
    let ev = Command::new("docker")
        .args(["events", "--since", &since.to_string(), "--until", &until.to_string()])
        .args(["--filter", "type=container", "--format", "{{.Actor.ID}} {{.Action}}"])
        .output()
        .unwrap();
    assert!(ev.status.success(), "docker events: {}", String::from_utf8_lossy(&ev.stderr));
    let actions: Vec<String> = String::from_utf8_lossy(&ev.stdout)
        .lines()
        .filter(|l| l.starts_with(&short))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert!(actions.iter().any(|a| a == "die"), "no die event for {short}: {actions:?}");
    assert!(actions.iter().any(|a| a == "destroy"), "the container was not removed: {actions:?}");
    assert!(!actions.iter().any(|a| a == "kill"), "the finished run's container was killed: {actions:?}");
    assert!(containers_of(pid).is_empty(), "the run left its container");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_finished_runs_container_ends_by_itself_before_removal_on_docker() {
    ends_by_itself_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn a_finished_runs_container_ends_by_itself_before_removal_on_gvisor() {
    ends_by_itself_on("gvisor");
}
