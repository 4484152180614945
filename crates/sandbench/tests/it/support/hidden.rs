//! Programs that hit a scratch-space limit and then hide it (issue 10, item
//! 8), shared by every tier's tests: each catches the error, removes the
//! evidence in its own way and exits 0. Run with [`ARGS`]: a 2 MiB file-size
//! limit and 8 MiB of scratch space per mount; CPU time enough for the
//! slowest tier (thousands of guarded calls under emulation), since these
//! programs are not about CPU.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use sandbench::event::ViolationKind;
use sandbench::report::{Outcome, RunReport};

use super::common::{bin, OuterNet};

/// The limits every program here assumes.
pub const ARGS: &[&str] =
    &["--file-size", "2M", "--disk", "8M", "--memory", "256M", "--timeout", "60s", "--cpu", "30s"];

/// One attack: the code, and the violation any tier with a high-water
/// watch must report.
pub struct Hidden {
    pub name: &'static str,
    pub code: &'static str,
    pub kind: ViolationKind,
    /// The program may end with an error of its own (a call the tier refuses).
    pub exit_may_fail: bool,
}

/// Eight 1.5 MiB files on an 8 MiB scratch filled through shared mappings by
/// a child (a page the mount has no room for kills it with SIGBUS): no
/// write(2), no file event. `fill()` runs it; `free()` is the space left.
macro_rules! map_fill {
    () => {
        r#"
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NAMES = [f"m{i}" for i in range(8)]
for n in NAMES:
    with open(n, "wb") as f:
        f.truncate(1536 << 10)

def free():
    st = os.statvfs(".")
    return st.f_bavail * st.f_frsize

def fill():
    pid = os.fork()
    if pid == 0:
        for n in NAMES:
            with open(n, "r+b") as f:
                m = mmap.mmap(f.fileno(), 0)
                for off in range(0, len(m), 4096):
                    m[off] = 1
        os._exit(0)
    print("filler:", os.waitpid(pid, 0)[1], "free", free())
"#
    };
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
        name: "scratch filled through memory mappings, pages punched with madvise(MADV_REMOVE)",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: concat!(
            map_fill!(),
            r#"
fill()
for n in NAMES:
    with open(n, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        try:
            m.madvise(mmap.MADV_REMOVE)
        except OSError as e:
            print("MADV_REMOVE:", e.strerror)
        m.close()
print("punched: free", free())
"#
        ),
    },
    Hidden {
        name: "scratch filled through memory mappings, pages punched with process_madvise",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: concat!(
            map_fill!(),
            r#"
class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

fill()
me = os.pidfd_open(os.getpid())
for n in NAMES:
    with open(n, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        first = (ctypes.c_char * 1).from_buffer(m)
        iov = Iov(ctypes.addressof(first), len(m))
        # process_madvise(pidfd, iov, 1, MADV_REMOVE, 0): since Linux 6.13
        # a process may give itself any advice this way.
        r = libc.syscall(440, me, ctypes.byref(iov), 1, 9, 0)
        if r < 0:
            print("process_madvise:", os.strerror(ctypes.get_errno()))
        del first
        m.close()
print("punched: free", free())
"#
        ),
    },
    Hidden {
        name: "scratch filled through memory mappings, files removed through io_uring",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: concat!(
            map_fill!(),
            r#"
import struct

def ring():
    """An io_uring of 8 entries, or why not."""
    params = (ctypes.c_char * 120)()
    fd = libc.syscall(425, 8, params)  # io_uring_setup
    if fd < 0:
        return None, os.strerror(ctypes.get_errno())
    raw = bytes(params)
    entries = struct.unpack_from("I", raw, 0)[0]
    sq = struct.unpack_from("7I", raw, 40)  # head tail mask entries flags dropped array
    cq = struct.unpack_from("6I", raw, 80)  # head tail mask entries overflow cqes
    sqr = mmap.mmap(fd, sq[6] + entries * 4, offset=0)
    cqr = mmap.mmap(fd, cq[5] + cq[3] * 16, offset=0x8000000)
    sqes = mmap.mmap(fd, entries * 64, offset=0x10000000)
    return (fd, sq, cq, sqr, cqr, sqes), None

def unlink(r, path):
    fd, sq, cq, sqr, cqr, sqes = r
    name = ctypes.create_string_buffer(path.encode())
    sqe = struct.pack("BBHiQQII", 36, 0, 0, -100, 0, ctypes.addressof(name), 0, 0).ljust(64, b"\0")
    tail = struct.unpack_from("I", sqr, sq[1])[0]
    slot = tail & struct.unpack_from("I", sqr, sq[2])[0]
    sqes[slot * 64:slot * 64 + 64] = sqe
    struct.pack_into("I", sqr, sq[6] + slot * 4, slot)
    struct.pack_into("I", sqr, sq[1], tail + 1)
    if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:  # io_uring_enter, GETEVENTS
        return os.strerror(ctypes.get_errno())
    head = struct.unpack_from("I", cqr, cq[0])[0]
    res = struct.unpack_from("i", cqr, cq[5] + (head & struct.unpack_from("I", cqr, cq[2])[0]) * 16 + 8)[0]
    struct.pack_into("I", cqr, cq[0], head + 1)
    return os.strerror(-res) if res < 0 else "removed"

r, why = ring()  # made before the fill: the removals follow it at once
fill()
for n in NAMES:
    print(n, unlink(r, n) if r else "no io_uring: " + why)
print("free", free())
"#
        ),
    },
    Hidden {
        name: "scratch filled through memory mappings, files removed through the i386 system call ABI",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: concat!(
            map_fill!(),
            r#"
# unlink(2) by `int 0x80` (the 32-bit ABI, number 10), its path below 4 GiB:
# push rbx; mov eax, 10; mov ebx, edi; int 0x80; pop rbx; ret
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)  # rwx, private anonymous, MAP_32BIT
code = bytes([0x53, 0xB8, 10, 0, 0, 0, 0x89, 0xFB, 0xCD, 0x80, 0x5B, 0xC3])
ctypes.memmove(page, code, len(code))
unlink32 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint)(page)
paths = []
for i, n in enumerate(NAMES):
    ctypes.memmove(page + 64 + 32 * i, n.encode() + b"\0", len(n) + 1)
    paths.append(page + 64 + 32 * i)
fill()
# In a child: a filter may kill the caller of a foreign ABI outright.
pid = os.fork()
if pid == 0:
    os._exit(0 if all(unlink32(p) == 0 for p in paths) else 3)
print("i386 unlinks:", os.waitpid(pid, 0)[1], "free", free())
"#
        ),
    },
    Hidden {
        name: "inode space filled with extended attributes, emptied",
        kind: ViolationKind::Disk,
        exit_may_fail: false,
        code: r#"
import os
# tmpfs (Linux 6.6+) charges user xattrs to the mount's inode space, and
# setting one sends no write event.
open("x", "wb").close()
n = 0
try:
    while True:
        os.setxattr("x", f"user.k{n}", b"v" * 4000)
        n += 1
except OSError as e:
    print("xattrs:", n, e.strerror)
names = []
if n == 0:
    # No xattrs here: fill the space the plain way instead.
    try:
        for i in range(64):
            names.append(f"fill-{i}")
            with open(names[-1], "wb") as f:
                f.write(b"x" * (1 << 20))
    except OSError as e:
        print("fill:", len(names), e.strerror)
for f in names:
    try:
        os.remove(f)
    except OSError:
        pass
for i in range(n):
    os.removexattr("x", f"user.k{i}")
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
        // gVisor frees a deleted file's space in the host tmpfs only when it
        // lets go of the file, which may be after the next write: then the
        // program itself met a full scratch, and the report saying so is
        // true, not a false alarm.
        let really_full = tier == "gvisor"
            && r.stderr.contains("No space left on device")
            && r.violations.iter().all(|v| v.kind == ViolationKind::Disk);
        if really_full {
            eprintln!(
                "{tier}: {name}: the program met a full scratch (gVisor freed deleted space late): reported as such"
            );
            continue;
        }
        if r.outcome != Outcome::Ok || !r.stdout.contains("done") {
            bad.push(format!("{name}: expected ok, got {} {:?} {}", r.summary_line(), r.violations, r.stderr));
        }
    }
    assert!(bad.is_empty(), "{tier}:\n{}", bad.join("\n"));
}
