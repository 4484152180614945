//! A sandbox leaves every host inode as it found it (issue 21, item 5).
//! Opening a gVisor session once made runsc's sandbox process (running as
//! nobody) the owner of the host's `/dev/null`: the engine had given the
//! session container the host's `/dev/null` as its stdin. Each tier here runs
//! a program that tries to chmod and chown the device nodes, `/tmp` and its
//! own standard streams, set their times (utimensat with `UTIME_NOW` needs
//! only write permission: issue 42, item 6), set extended attributes and
//! truncate them, by path and by descriptor, as a one-shot run and through a
//! session, between a snapshot of the host's device nodes and of every host
//! inode the tiers bind into a sandbox (owner, group, mode, device number,
//! inode, the contents of small files, and the times of the memory devices)
//! and another. Anything changed fails the test, and the test puts the owner
//! and mode back (never leaving its own damage).

use crate::support::common::{self, required};
use crate::support::docker_common::{block_on, tier_available};

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandbench::config::Config;
use sandbench::report::Outcome;
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

/// The host's device nodes and shared directories every sandbox could reach.
const HOST_NODES: &[&str] = &[
    "/dev",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/pts/ptmx",
    "/dev/console",
    "/dev/kvm",
    "/dev/net/tun",
    "/dev/fuse",
    "/dev/vhost-vsock",
    "/dev/shm",
    "/dev/mqueue",
    "/tmp",
    "/var/tmp",
    "/run",
];

/// The host's device nodes a sandbox can open for writing: using them
/// changes none of their times (the kernel stamps no read or write of a
/// memory device), so any change of a time is a program's utimensat.
const QUIET_NODES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// What is compared of one inode (times only of [`QUIET_NODES`]: other
/// inodes' change with plain use).
#[derive(Debug, Clone, PartialEq)]
struct Inode {
    uid: u32,
    gid: u32,
    mode: u32,
    rdev: u64,
    ino: u64,
    /// Regular files up to 1 MiB: their bytes.
    bytes: Option<Vec<u8>>,
    /// atime, mtime, ctime (ns) of a quiet node.
    times: Option<[(i64, i64); 3]>,
}

/// Every host inode a tier binds into a sandbox, or reads to build one.
fn watched() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = HOST_NODES.iter().map(PathBuf::from).collect();
    // The process tier's (and the path-binding peers') read-only binds and
    // the /etc files it copies.
    for d in sandbench::internals::process::HOST_BINDS {
        v.push(Path::new("/").join(d));
    }
    for f in sandbench::internals::process::ETC_COPIED {
        v.push(Path::new("/etc").join(f));
    }
    v.push("/etc/localtime".into());
    if let Ok(rd) = std::fs::read_dir("/etc") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("python3") {
                for f in sandbench::internals::process::PYTHON_ETC {
                    v.push(e.path().join(f));
                }
            }
        }
    }
    // The microVM's kernel, initramfs, root disk, agent and snapshots.
    let art = sandbench::internals::microvm::artefact_paths();
    for p in [&art.kernel, &art.initrd, &art.rootfs] {
        v.push(p.clone());
        if let Some(dir) = p.parent() {
            if let Ok(rd) = std::fs::read_dir(dir) {
                v.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

fn snapshot() -> BTreeMap<PathBuf, Inode> {
    let mut out = BTreeMap::new();
    for p in watched() {
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        let bytes = (m.is_file() && m.len() <= 1 << 20).then(|| std::fs::read(&p).ok()).flatten();
        let times = QUIET_NODES
            .iter()
            .any(|n| Path::new(n) == p.as_path())
            .then(|| [(m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()), (m.ctime(), m.ctime_nsec())]);
        out.insert(p, Inode { uid: m.uid(), gid: m.gid(), mode: m.mode(), rdev: m.rdev(), ino: m.ino(), bytes, times });
    }
    out
}

/// What changed between two snapshots; the owner and mode of what changed
/// are put back.
fn changed(before: &BTreeMap<PathBuf, Inode>, after: &BTreeMap<PathBuf, Inode>) -> Vec<String> {
    let mut out = vec![];
    for (p, b) in before {
        match after.get(p) {
            None => out.push(format!("{} is gone", p.display())),
            Some(a) if a != b => {
                let mut what = vec![];
                if (a.uid, a.gid) != (b.uid, b.gid) {
                    what.push(format!("owner {}:{} -> {}:{}", b.uid, b.gid, a.uid, a.gid));
                }
                if a.mode != b.mode {
                    what.push(format!("mode {:o} -> {:o}", b.mode, a.mode));
                }
                if (a.rdev, a.ino) != (b.rdev, b.ino) {
                    what.push("replaced (another inode)".into());
                }
                if a.bytes != b.bytes {
                    what.push("contents changed".into());
                }
                if a.times != b.times {
                    what.push(format!("times (atime, mtime, ctime) {:?} -> {:?}", b.times, a.times));
                }
                out.push(format!("{}: {}", p.display(), what.join(", ")));
                if a.ino == b.ino {
                    let _ = std::os::unix::fs::lchown(p, Some(b.uid), Some(b.gid));
                    if a.mode & 0o170000 != 0o120000 {
                        use std::os::unix::fs::PermissionsExt;
                        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(b.mode & 0o7777));
                    }
                }
            }
            Some(_) => {}
        }
    }
    for p in after.keys().filter(|p| !before.contains_key(*p)) {
        // New files in the artefacts folder are a rebuilt guest: not a sandbox's doing.
        if HOST_NODES.iter().any(|n| Path::new(n) == p.as_path()) {
            out.push(format!("{} appeared", p.display()));
        }
    }
    out
}

/// Tries to change the host's nodes from inside, one row per way a
/// program can change an inode it does not own (or owns); prints what
/// happened.
const TOUCHER: &str = r#"
import os
uid, gid = os.getuid(), os.getgid()
paths = ["/dev", "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx",
         "/dev/shm", "/tmp", "/proc/self/fd/0", "/proc/self/fd/1", "/proc/self/fd/2", "/usr", "/etc/ld.so.cache"]

def by_fd(p, f):
    fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
    try:
        f(fd)
    finally:
        os.close(fd)

ways = [
    ("chmod", lambda p: os.chmod(p, 0o777)),
    ("chown", lambda p: os.chown(p, uid, gid)),
    # UTIME_NOW needs only write permission; set times need ownership.
    ("utimensat now", lambda p: os.utime(p)),
    ("utimensat set", lambda p: os.utime(p, ns=(1, 1))),
    ("futimens now", lambda p: by_fd(p, os.utime)),
    ("fchmod", lambda p: by_fd(p, lambda fd: os.chmod(fd, 0o777))),
    ("setxattr user", lambda p: os.setxattr(p, "user.sandbench", b"x")),
    ("setxattr trusted", lambda p: os.setxattr(p, "trusted.sandbench", b"x")),
    # Device nodes only: no regular host file is ever put at risk by this test.
    ("truncate", lambda p: os.truncate(p, 0) if p.startswith("/dev/") else os.truncate("/", 0)),
    ("ftruncate", lambda p: by_fd(p, lambda fd: os.truncate(fd, 0)) if p.startswith("/dev/") else os.truncate("/", 0)),
]
for p in paths:
    for what, f in ways:
        try:
            f(p)
            print(what, p, "CHANGED")
        except OSError as e:
            print(what, p, e.strerror)
for p in ("/dev/null", "/dev/full"):
    try:
        with open(p, "w") as fh:
            fh.write("x")
    except OSError as e:
        print("write", p, e.strerror)
print("toucher done")
"#;

fn limits() -> Limits {
    Limits { memory_bytes: 128 << 20, wall_time: Duration::from_secs(60), ..Limits::default() }
}

fn tier(name: &str) -> Arc<dyn Tier> {
    // The process tier's helper is the sandbench binary, not this test binary.
    std::env::set_var("SANDBENCH_HELPER", common::bin());
    // No warm pool: a pool of this test's runtime would still be making
    // containers when the runtime ends (left to the next start's reaper).
    let mut config = Config::load().unwrap();
    config.docker.pool_size = 0;
    sandbench::tier::by_name(name, &config).unwrap()
}

/// The tests here snapshot the same host inodes: one at a time, so that a
/// change is put on the tier that made it.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whose times are compared: sandbench's own tiers (a peer's `--dev` binds
/// the host's nodes as they are, which is the peer's design, not ours).
#[derive(PartialEq)]
enum Times {
    Compared,
    NotCompared,
}

/// A one-shot run, and (where the tier keeps them) a session of two calls,
/// then closed; the host's inodes compared before and after.
fn leaves_host_inodes_alone(name: &str, sessions: bool, times: Times) {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let snap = || {
        let mut s = snapshot();
        if times == Times::NotCompared {
            s.values_mut().for_each(|i| i.times = None);
        }
        s
    };
    let before = snap();
    for p in ["/dev/null", "/dev/zero", "/dev/full"] {
        if before.get(Path::new(p)).is_some_and(|i| i.uid != 0) {
            eprintln!("note: {p} was not root's before the test (another run damaged it): {:?}", before[Path::new(p)]);
        }
    }
    let t = tier(name);
    block_on(async {
        let r = sandbench::runner::run(t.clone(), RunSpec::new(Language::Python, TOUCHER)).await;
        assert_eq!(r.outcome, Outcome::Ok, "{name}: {}\n{}", r.summary_line(), r.stderr);
        assert!(r.stdout.contains("toucher done"), "{name}: {}", r.stdout);
        if sessions {
            let s = Session::open(t.clone(), SessionSpec::new(limits())).await.unwrap();
            for _ in 0..2 {
                let r = s.run(RunSpec::new(Language::Python, TOUCHER)).await.unwrap();
                assert_eq!(r.outcome, Outcome::Ok, "{name} session: {}\n{}", r.summary_line(), r.stderr);
            }
            s.close().await;
        }
    });
    // Let a container's or guest's teardown finish.
    std::thread::sleep(Duration::from_secs(1));
    let diff = changed(&before, &snap());
    assert!(diff.is_empty(), "{name} changed host inodes:\n{}", diff.join("\n"));
}

fn ready(name: &str) -> bool {
    if let Err(why) = tier_available(name) {
        assert!(!required(name), "{name} is required: {why}");
        panic!("cannot run although its needs hold: {why}");
    }
    true
}

#[sandbench_testkit::test(needs = ["process"])]
fn process_runs_and_sessions_leave_host_inodes_as_found() {
    leaves_host_inodes_alone("process", true, Times::Compared);
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_runs_and_sessions_leave_host_inodes_as_found() {
    if ready("docker") {
        leaves_host_inodes_alone("docker", true, Times::Compared);
    }
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_runs_and_sessions_leave_host_inodes_as_found() {
    if ready("gvisor") {
        leaves_host_inodes_alone("gvisor", true, Times::Compared);
    }
}

/// The gVisor bench's baseline, `docker run --rm --runtime=runsc`, as
/// `sandbench bench` runs it (stdin from nowhere, output captured): run
/// without `-i`, runsc made the host's /dev/null nobody's.
#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_bench_baseline_leaves_host_inodes_as_found() {
    if !ready("gvisor") {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let config = Config::load().unwrap();
    let (_, argv) = sandbench::internals::docker::cli_argv(Some("runsc"), &config).expect("the docker CLI");
    let argv: Vec<String> =
        argv.into_iter().map(|a| if a == sandbench::bench::CODE { "print(1)".into() } else { a }).collect();
    let before = snapshot();
    let out =
        std::process::Command::new(&argv[0]).args(&argv[1..]).stdin(std::process::Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    let diff = changed(&before, &snapshot());
    assert!(diff.is_empty(), "the gVisor baseline changed host inodes:\n{}", diff.join("\n"));
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_runs_and_sessions_leave_host_inodes_as_found() {
    if ready("microvm") {
        leaves_host_inodes_alone("microvm", true, Times::Compared);
    }
}

/// Every installed peer (no sessions: peers have none).
#[sandbench_testkit::test(needs = ["root"])]
fn peer_runs_leave_host_inodes_as_found() {
    let mut ran = vec![];
    for peer in ["bwrap", "firejail", "nsjail", "srt", "codex"] {
        if tier_available(peer).is_err() {
            assert!(!required(peer), "{peer} is required but unavailable");
            continue;
        }
        leaves_host_inodes_alone(peer, false, Times::NotCompared);
        ran.push(peer);
    }
    if ran.is_empty() {
        panic!("cannot run although its needs hold: no peer is installed here (sandbench setup peers)");
    }
}
