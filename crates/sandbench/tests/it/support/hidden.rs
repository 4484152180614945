//! Programs that hit a scratch-space limit and then hide it (issue 10, item
//! 8), shared by every tier's tests: each catches the error, removes the
//! evidence in its own way and exits 0. Run with [`ARGS`]: a 2 MiB file-size
//! limit and 8 MiB of scratch space per mount.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use sandbench::event::ViolationKind;
use sandbench::report::{Outcome, RunReport};

use super::common::{bin, OuterNet};

/// The limits every program here assumes.
pub const ARGS: &[&str] = &["--file-size", "2M", "--disk", "8M", "--memory", "256M", "--timeout", "60s"];

/// One attack: the code, and the violation any tier with a high-water
/// watch must report.
pub struct Hidden {
    pub name: &'static str,
    pub code: &'static str,
    pub kind: ViolationKind,
    /// The program may end with an error of its own (a call the tier refuses).
    pub exit_may_fail: bool,
}

/// Every way of hiding a hit that the watches guarantee to see.
pub const GUARANTEED: &[Hidden] = &[
    Hidden {
        name: "capped file deleted",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
try:
    with open("big.bin", "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    print("stopped:", e.strerror)
os.remove("big.bin")
"#,
    },
    Hidden {
        name: "capped file linked, renamed, deleted",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
os.makedirs("a/b", exist_ok=True)
try:
    with open("a/one", "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    print("stopped:", e.strerror)
os.link("a/one", "a/b/two")
os.rename("a/b/two", "three")
os.remove("a/one")
os.remove("three")
"#,
    },
    Hidden {
        name: "capped file deleted before it was written",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
f = open("ghost", "wb")
os.remove("ghost")
try:
    while True:
        f.write(b"x" * 65536)
        f.flush()
except OSError as e:
    print("stopped:", e.strerror)
f.close()
"#,
    },
    Hidden {
        name: "capped file that never had a name",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
try:
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
except OSError as e:
    # Not every file system has O_TMPFILE (gVisor's host mounts): the
    # nearest thing is a file deleted before it is written.
    print("no O_TMPFILE:", e.strerror)
    fd = os.open("t", os.O_CREAT | os.O_WRONLY, 0o600)
    os.remove("t")
try:
    while True:
        os.write(fd, b"x" * 65536)
except OSError as e:
    print("stopped:", e.strerror)
os.close(fd)
"#,
    },
    Hidden {
        name: "capped file by fallocate, deleted",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
fd = os.open("alloc", os.O_CREAT | os.O_WRONLY, 0o600)
os.posix_fallocate(fd, 0, 2 << 20)
os.close(fd)
os.remove("alloc")
"#,
    },
    Hidden {
        name: "capped file 40 directories deep in /tmp, tree removed",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os, shutil
d = "/tmp/deep"
p = os.path.join(d, *[f"d{i}" for i in range(40)])
os.makedirs(p)
try:
    with open(os.path.join(p, "f"), "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    print("stopped:", e.strerror)
shutil.rmtree(d)
"#,
    },
    Hidden {
        name: "capped file 40 directories deep, kept, among many small files",
        kind: ViolationKind::FileSize,
        exit_may_fail: false,
        code: r#"
import os
for i in range(600):
    open(f"small-{i}", "wb").close()
p = os.path.join(*[f"d{i}" for i in range(40)])
os.makedirs(p)
try:
    with open(os.path.join(p, "f"), "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    print("stopped:", e.strerror)
"#,
    },
    Hidden {
        name: "scratch filled with files, emptied",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import os
names = []
try:
    for i in range(10000):
        names.append(f"fill-{i}")
        with open(names[-1], "wb") as f:
            f.write(b"x" * (1 << 20))
except OSError as e:
    print("full after", len(names), e.strerror)
for n in names:
    try:
        os.remove(n)
    except OSError:
        pass
"#,
    },
    Hidden {
        name: "scratch filled through deleted files, closed",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import os
fs = []
try:
    for i in range(64):
        f = open(f"u{i}", "wb")
        os.remove(f"u{i}")
        fs.append(f)
        f.write(b"x" * (1 << 20))
        f.flush()
except OSError as e:
    print("full after", len(fs), e.strerror)
for f in fs:
    try:
        f.close()
    except OSError:
        pass
"#,
    },
    Hidden {
        name: "scratch filled through memory mappings, emptied",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import mmap, os
names = [f"m{i}" for i in range(8)]
for n in names:
    with open(n, "wb") as f:
        f.truncate(1536 << 10)
pid = os.fork()
if pid == 0:
    # Touching a page the mount has no room for kills this child (SIGBUS).
    for n in names:
        with open(n, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            for off in range(0, len(m), 4096):
                m[off] = 1
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child:", status)
for n in names:
    os.remove(n)
"#,
    },
    Hidden {
        name: "/dev/shm (or /tmp) filled, emptied",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import os
# The microVM has no /dev/shm: its /tmp is the other scratch mount.
top = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
names = []
try:
    for i in range(10000):
        names.append(f"{top}/s{i}")
        with open(names[-1], "wb") as f:
            f.write(b"x" * (1 << 20))
except OSError as e:
    print("full after", len(names), e.strerror)
for n in names:
    try:
        os.remove(n)
    except OSError:
        pass
"#,
    },
    Hidden {
        name: "inodes used up by empty files, removed newest first",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import os
names = []
try:
    for i in range(1 << 20):
        n = f"e{i}"
        open(n, "wb").close()
        names.append(n)
except OSError as e:
    print("no inode after", len(names), e.strerror)
for n in reversed(names):
    os.remove(n)
"#,
    },
];

/// Programs that use much of their limits, one piece at a time, and never
/// hit one: the watches must not report anything for these.
pub const INNOCENT: &[(&str, &str)] = &[
    (
        "files written and deleted in turn, each nearly the disk",
        r#"
import os
for i in range(20):
    for j in range(3):
        with open(f"t{j}", "wb") as f:
            f.write(b"x" * ((2 << 20) - 4096))
    for j in range(3):
        os.remove(f"t{j}")
print("done")
"#,
    ),
    (
        "a file just under the size limit, truncated and rewritten",
        r#"
with open("f", "wb") as f:
    for i in range(20):
        f.seek(0)
        f.truncate()
        f.write(b"x" * ((2 << 20) - 1))
print("done")
"#,
    ),
];

/// Run `code` on `tier` with [`ARGS`]; the report.
pub fn run(net: &OuterNet, tier: &str, code: &str) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("prog.py");
    std::fs::write(&p, code).unwrap();
    let out = net.output(
        Command::new(bin()).args(["run", "--tier", tier, "--format", "json"]).args(ARGS).arg(&p),
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

/// Every attack is reported on `tier`, with the program's own exit 0,
/// except those in `racy` (what the tier does not guarantee: they run, and
/// what happened is printed), and no innocent program is. Failures are
/// collected, then shown together.
/// Races on every tier: the program frees the space with plain `close`s of
/// deleted files (no guarded call), and a full mount is seen only if the
/// watch reads the last write's event before the first close. Reproduced on
/// docker under load (2 of 3 runs with three CPU hogs on two cores).
pub const RACY_EVERYWHERE: &[&str] = &["scratch filled through deleted files, closed"];

pub fn check_tier(tier: &str, racy: &[&str]) {
    let net = OuterNet::new();
    let mut bad = vec![];
    for h in GUARANTEED {
        let r = run(&net, tier, h.code);
        let seen = r.outcome == Outcome::Violation && r.violations.iter().any(|v| v.kind == h.kind);
        if racy.contains(&h.name) || RACY_EVERYWHERE.contains(&h.name) {
            eprintln!(
                "{tier}: not guaranteed: {} — {}",
                h.name,
                if seen { "seen this time" } else { "missed this time" }
            );
            continue;
        }
        let ok = seen && (r.exit.code == Some(0) || h.exit_may_fail);
        if !ok {
            bad.push(format!(
                "{}: expected {:?}, got {} {:?} exit {:?} error {:?} warnings {}\n  stdout {:?} stderr {:?}",
                h.name,
                h.kind,
                r.summary_line(),
                r.violations.iter().map(|v| &v.detail).collect::<Vec<_>>(),
                r.exit,
                r.error,
                r.details["warnings"],
                r.stdout,
                r.stderr.chars().take(400).collect::<String>()
            ));
        }
    }
    for (name, code) in INNOCENT {
        let r = run(&net, tier, code);
        if r.outcome != Outcome::Ok || !r.stdout.contains("done") {
            bad.push(format!("{name}: expected ok, got {} {:?} {}", r.summary_line(), r.violations, r.stderr));
        }
    }
    assert!(bad.is_empty(), "{tier}:\n{}", bad.join("\n"));
}
