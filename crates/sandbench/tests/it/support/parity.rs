//! Checks every local tier must pass alike, each called from its tier's own
//! test module (so that a tier that cannot run here shows as ignored there):
//! the socket families a program may open (issue 21, item 4), what the
//! memory limit means (item 8) and the calls every tier refuses (issue 42,
//! item 8).
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use sandbench::report::{Outcome, RunReport};

use super::common::{bin, samples_dir, OuterNet};

/// Run the program at `path` on `tier` with `args`; the report.
pub fn run_file(net: &OuterNet, tier: &str, path: &std::path::Path, args: &[&str]) -> RunReport {
    let out = net.output(
        Command::new(bin()).args(["run", "--tier", tier, "--format", "json"]).args(args).arg(path),
        Duration::from_secs(300),
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{tier}: no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Run `code` on `tier` with `args`; the report.
pub fn run_code(net: &OuterNet, tier: &str, code: &str, args: &[&str]) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("prog.py");
    std::fs::write(&p, code).unwrap();
    run_file(net, tier, &p, args)
}

/// The gauntlet's socket-families sample opens no socket of a family the
/// tier does not need (vsock, packet, netlink other than route, ...), and
/// still opens the ones it does (inet, inet6, a unix socketpair).
pub fn socket_families(tier: &str) {
    let net = OuterNet::new();
    let r = run_file(&net, tier, &samples_dir().join("hostile/socket_families.py"), &[]);
    assert_eq!(r.outcome, Outcome::Ok, "{tier}: {} {:?}\n{}", r.summary_line(), r.violations, r.stderr);
    let opened: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("OPENED")).collect();
    assert!(opened.is_empty(), "{tier}: families it does not need opened: {opened:?}");
    for need in ["allowed: inet\n", "allowed: inet6\n", "allowed: socketpair unix\n"] {
        assert!(r.stdout.contains(need), "{tier}: {need:?} missing (the sample did not run through?):\n{}", r.stdout);
    }
}

/// The gauntlet's refused-calls sample on `tier`: every row of the one
/// table (`tier/process/seccomp.rs`: `DENIED`, `CLONE_FLAGS`), clone3 and an
/// x32 call is tried and refused with EPERM or ENOSYS; none reached the
/// kernel (a call the kernel answered otherwise is printed ALLOWED). A row
/// the sample does not try fails this too: adding a row to the table means
/// trying it here. The program's bounding and ambient sets are empty and
/// `no_new_privs` is set, on every tier.
pub fn refused_calls(tier: &str) {
    use sandbench::internals::process::{CLONE_FLAGS, DENIED};
    let net = OuterNet::new();
    let r = run_file(&net, tier, &samples_dir().join("hostile/refused_calls.py"), &[]);
    assert_eq!(r.outcome, Outcome::Ok, "{tier}: {} {:?}\n{}\n{}", r.summary_line(), r.violations, r.stdout, r.stderr);
    let allowed: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("ALLOWED")).collect();
    assert!(allowed.is_empty(), "{tier}: calls every tier must refuse reached the kernel: {allowed:#?}");
    let mut rows: Vec<String> = DENIED.iter().map(|(n, _)| n.to_string()).collect();
    rows.extend(CLONE_FLAGS.iter().map(|(n, _)| format!("clone({n})")));
    rows.push("clone3".into());
    if cfg!(target_arch = "x86_64") {
        rows.push("x32 unshare".into());
    }
    let refused =
        |row: &String| ["EPERM", "ENOSYS"].iter().any(|e| r.stdout.lines().any(|l| l == format!("refused {row}: {e}")));
    let missing: Vec<&String> = rows.iter().filter(|row| !refused(row)).collect();
    assert!(missing.is_empty(), "{tier}: not tried, or not refused: {missing:?}\n{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.ends_with("done\n"), "{tier}: the sample did not run through:\n{}", r.stdout);
    // And nothing an exec could grant, as the process tier's program (which
    // keeps the caller's sets when it runs unprivileged, with no uid to drop).
    if tier != "process" || super::common::is_root() {
        let want = "holds: bounding=0000000000000000 ambient=0000000000000000 no_new_privs=1\n";
        assert!(r.stdout.contains(want), "{tier}: {want:?} missing:\n{}", r.stdout);
    }
}

/// What the memory limit means (issue 21, item 8): resident memory. 64
/// threads of a small program reserve far more address space (their
/// stacks) than 256M while using a few MiB: `ok`, all 64 started, nothing
/// refused. A 300M resident allocation under 256M is a memory violation.
/// `first` sees the threads' report before it is judged (a tier whose
/// limit cannot be resident memory here says so there).
pub fn memory_is_resident(tier: &str, first: impl Fn(&RunReport)) {
    let net = OuterNet::new();
    let code = r#"
import threading
ev = threading.Event()
ts = []
try:
    for _ in range(64):
        t = threading.Thread(target=ev.wait)
        t.start()
        ts.append(t)
except RuntimeError as e:
    print("refused after", len(ts), "threads:", e)
print("started", len(ts))
ev.set()
for t in ts:
    t.join()
"#;
    let r = run_code(&net, tier, code, &["--memory", "256M", "--pids", "128", "--timeout", "60s", "--cpu", "30s"]);
    first(&r);
    assert_eq!(r.outcome, Outcome::Ok, "{tier}: {} {:?}\n{}\n{}", r.summary_line(), r.violations, r.stdout, r.stderr);
    assert!(r.stdout.contains("started 64"), "{tier}: {}", r.stdout);
    let code = "b = bytearray(300 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('alive')\n";
    let r = run_code(&net, tier, code, &["--memory", "256M", "--timeout", "60s", "--cpu", "30s"]);
    assert_eq!(r.outcome, Outcome::Violation, "{tier}: {}\n{}", r.summary_line(), r.stderr);
    assert!(
        r.violations.iter().any(|v| v.kind == sandbench::event::ViolationKind::Memory),
        "{tier}: {:?}",
        r.violations
    );
}
