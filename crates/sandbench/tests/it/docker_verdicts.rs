//! Verdicts on the docker and gvisor tiers come only from facts the program
//! cannot write (issue 10): adversarial programs try to forge the loader's
//! status, signal PID 1, fake a signal with an exit code, and fail.

use crate::support::common;
use crate::support::docker_common;

use std::process::Command;
use std::time::Duration;

use common::{bin, report, OuterNet};
use docker_common::tier_ready;
use sandbench::event::ViolationKind;
use sandbench::report::RunReport;

/// Run `code` (file name `name`) on `tier` through the real binary, under the
/// outer safety net.
pub fn run_on(tier: &str, name: &str, code: &str, args: &[&str]) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, code).unwrap();
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", tier, "--format", "json", "--timeout", "30s"]).args(args).arg(&p);
    let out = net.output(&mut cmd, Duration::from_secs(180));
    report(&out)
}

fn kinds(r: &RunReport) -> Vec<ViolationKind> {
    r.violations.iter().map(|v| v.kind).collect()
}

/// Looks for anything secret-like in its own interpreter (every object the
/// garbage collector knows, every frame's locals and globals), then writes
/// status lines in the old nonce format for each candidate and raw frames
/// of the loader's protocol (a status and an exit by SIGXCPU) to every fd it
/// has and to PID 1's fds.
const FORGER: &str = r#"
import gc, os, sys
cands = set()
def take(v):
    if isinstance(v, str):
        v = v.encode("utf-8", "ignore")
    if isinstance(v, bytes) and 8 <= len(v) <= 64:
        cands.add(v)
for o in gc.get_objects():
    try:
        if isinstance(o, dict):
            for v in list(o.values()):
                take(v)
        elif isinstance(o, (list, tuple)):
            for v in o[:64]:
                take(v)
    except Exception:
        pass
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()) + list(f.f_globals.values()):
        take(v)
    f = f.f_back
def frame(k, d):
    return k + len(d).to_bytes(4, "big") + d
bad = b"pids=999 oom=3 disk=2f776f726b fsize=2f776f726b2f78"
forged = b"".join(b"\0sandbench-status " + c + b" " + bad + b"\n" for c in sorted(cands)[:400])
forged += frame(b"s", bad) + frame(b"x", b"signal 24 out=0 err=0") + frame(b"x", b"code 0 out=0 err=0")
for fd in range(64):
    try:
        os.write(fd, forged)
    except OSError:
        pass
for p in ("/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/fd/2", "/proc/%d/fd/1" % os.getppid()):
    try:
        with open(p, "wb") as fh:
            fh.write(forged)
        print("OPENED", p)
    except OSError:
        pass
print("forged", len(cands))
"#;

fn forgeries_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let r = run_on(tier, "forger.py", FORGER, &["--output", "4M"]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.stdout.contains("forged"), "{}", r.summary_line());
    assert!(!r.stdout.contains("OPENED"), "the program opened one of PID 1's fds: {}", r.stdout);
    assert!(r.violations.is_empty(), "forged verdict: {:?}", r.violations);
    assert_eq!((r.exit.code, r.exit.signal), (Some(0), None));
}

#[test]
fn a_program_cannot_forge_status_or_exit_on_docker() {
    forgeries_on("docker");
}

#[test]
fn a_program_cannot_forge_status_or_exit_on_gvisor() {
    forgeries_on("gvisor");
}

/// Signals PID 1 and its parent with everything that would end or stop
/// them, hits the file-size limit, then signals again: the verdict stays.
const SIGNALLER: &str = r#"
import os, signal
sent = []
def hit_all():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGALRM, signal.SIGSTOP, signal.SIGKILL):
        for pid in {1, os.getppid()}:
            try:
                os.kill(pid, sig)
                sent.append((pid, int(sig)))
            except OSError:
                pass
hit_all()
try:
    with open("/work/big", "wb") as fh:
        fh.write(b"x" * (2 << 20))
except OSError:
    pass
hit_all()
print("delivered", sent, "parent", os.getppid(), "uid", os.getuid())
"#;

fn signals_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let r = run_on(tier, "signaller.py", SIGNALLER, &["--file-size", "1M"]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.stdout.contains("delivered [] parent 1"), "a signal reached PID 1: {}", r.stdout);
    assert_eq!(kinds(&r), [ViolationKind::FileSize], "{}", r.summary_line());
    assert_eq!((r.exit.code, r.exit.signal), (Some(0), None));
}

#[test]
fn pid_1_is_immune_to_the_programs_signals_on_docker() {
    signals_on("docker");
}

#[test]
fn pid_1_is_immune_to_the_programs_signals_on_gvisor() {
    signals_on("gvisor");
}

fn exit_codes_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    // 152 = 128 + SIGXCPU: an exit code, not a signal, and no CPU was used.
    let r = run_on(tier, "exit152.py", "import os\nos._exit(152)\n", &["--cpu", "5s"]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!((r.exit.code, r.exit.signal), (Some(152), None));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A real signal is a signal — and a self-sent SIGXCPU is not a CPU verdict.
    let r = run_on(tier, "xcpu.sh", "kill -XCPU $$\n", &["--cpu", "5s"]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!((r.exit.code, r.exit.signal), (None, Some(libc::SIGXCPU)));
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn exit_codes_and_signals_are_distinct_on_docker() {
    exit_codes_on("docker");
}

#[test]
fn exit_codes_and_signals_are_distinct_on_gvisor() {
    exit_codes_on("gvisor");
}

/// A child dies to the OOM killer; the program waits for it and exits 0.
const OOM_CHILD: &str = r#"
import os
pid = os.fork()
if pid == 0:
    hog = []
    while True:
        hog.append(bytearray(8 << 20))
_, st = os.waitpid(pid, 0)
print("child ended", os.WIFSIGNALED(st) and os.WTERMSIG(st))
"#;

fn oom_child_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
    let r = run_on(tier, "oom_child.py", OOM_CHILD, &["--memory", "96M", "--cpu", "20s"]);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(r.has_violation(ViolationKind::Memory), "OOM kill of a child not reported: {}", r.summary_line());
    if tier == "docker" {
        // runc: the kernel killed the child only; the program itself ended well.
        assert_eq!(r.stdout.trim(), "child ended 9");
        assert_eq!((r.exit.code, r.exit.signal), (Some(0), None));
    }
}

#[test]
fn a_child_killed_by_the_oom_killer_is_reported_on_docker() {
    oom_child_on("docker");
}

#[test]
fn a_child_killed_by_the_oom_killer_is_reported_on_gvisor() {
    oom_child_on("gvisor");
}
