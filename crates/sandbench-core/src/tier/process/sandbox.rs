//! The in-sandbox side of the process tier. `sandbench __sandbox` is exec'd
//! fresh (single-threaded, so fork is safe) and builds the sandbox:
//!
//! ```text
//! helper (unshares namespaces; stays outside the run's cgroup)
//!   └─ init, pid 1 of a new pid namespace (mounts, pivot_root, joins the run's
//!      cgroup with the program; applies the run's limits; reaps; reports)
//!        └─ program (Landlock, rlimits, its own uid, seccomp, then exec of
//!           the waiting interpreter: it starts while init joins the cgroup)
//! ```
//! The helper's stdin carries a [`Prepare`] (length-prefixed) and then, once a
//! run takes the sandbox, its [`SandboxConfig`] (read by init). A sandbox made
//! ahead (a spare) is the same thing with the second part not sent yet: warm
//! and cold runs get the same isolation by the same code.
//!
//! The order is what makes a cold start cheap: on cgroup v1 moving a process
//! into a cgroup waits for an RCU grace period (~10 ms), so init moves itself
//! and the program's process only after the program's process has exec'd its
//! interpreter (trusted code, not the program yet), and the interpreter starts
//! up meanwhile. The program's first byte runs only after init has seen every
//! step succeed (cgroup joined, the run's rlimits and scratch size applied)
//! and says "go".
//!
//! When init exits the kernel kills every process left in the namespace, so
//! daemons cannot outlive the run; the helper and init die with their parent
//! (PR_SET_PDEATHSIG), so nothing survives sandbench being killed either.
//! Status goes to the host as JSON lines on fd 3.
#![allow(unsafe_code)] // fork, exec and raw descriptors between them: the sandbox helper is plumbing

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Gid, Pid, Uid};
use serde::{Deserialize, Serialize};

mod privs;
mod scratch;
mod session;
use scratch::{Scratch, SCRATCH};
pub use session::{frame_call, KILL_FRAME};

pub const STATUS_FD: i32 = 3;
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;
const MAX_PREPARE_BYTES: usize = 1 << 20;

/// In the program's process, between its set-up and the program: init's word
/// ("run" or "exec ...") arrives on this descriptor...
const GO_FD: RawFd = 3;
/// ...after the waiting interpreter said it is ready on this one.
const READY_FD: RawFd = 4;

/// The pre-started interpreter (see `waiter.py`): sandbench's code, run as
/// `<interpreter> <file_name>` from /work, replaced by the program's file.
pub const WAITER_PY: &str = include_str!("waiter.py");
/// Node's waiter (see `waiter.js`): it can only run its program inline.
pub const WAITER_JS: &str = include_str!("waiter.js");

/// What the helper needs before any run: the sandbox's shape. Everything in
/// it is the same for every run of a tier (a spare is made from it alone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepare {
    pub host_pid: i32,
    /// The run cgroup's `cgroup.procs` files (opened by the helper before it
    /// unshares; init writes itself and the program's process into them).
    pub cgroup_procs: Vec<String>,
    /// Unprivileged: map our own uid into a new user namespace.
    pub user_ns: bool,
    /// Root: the uid/gid the program drops to (unused in a user namespace).
    pub run_uid: u32,
    pub run_gid: u32,
    /// Run even when Landlock or the seccomp filter cannot be enforced
    /// (the run is then marked degraded); otherwise such a run is refused.
    pub allow_degraded: bool,
    /// Size of /work and /tmp as first mounted (a run with another size
    /// remounts them before its program starts).
    pub disk_bytes: u64,
    /// Start this interpreter ahead and let it run the program itself when
    /// the run asks for exactly it; `None`: the program's process waits
    /// before its exec instead.
    pub waiter: Option<Waiter>,
    /// The egress port on the sandbox's loopback (`netns`), when the run's
    /// network is an allow list (its Landlock rules allow connecting to it).
    #[serde(default)]
    pub network_port: Option<u16>,
    /// The run CA's certificate (PEM) when a secret of the run goes over
    /// TLS: added to the sandbox's copy of the system bundle.
    #[serde(default)]
    pub run_ca: Option<String>,
    /// A session's sandbox (`sandbox/session.rs`): init runs one program per
    /// call framed on stdin, until stdin closes.
    #[serde(default)]
    pub session: bool,
}

/// An interpreter started before its program, and what it can run inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    pub interpreter: Vec<String>,
    pub file_name: String,
    pub env: Vec<(String, String)>,
}

impl Waiter {
    /// The waiter's own source, in its interpreter's language.
    pub fn source(&self) -> &'static str {
        match self.interpreter.first().map(|c| c.rsplit('/').next().unwrap_or(c)) {
            Some("node" | "nodejs") => WAITER_JS,
            _ => WAITER_PY,
        }
    }
}

/// What a run brings: the program and the limits init applies before it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxConfig {
    pub code: String,
    pub file_name: String,
    pub interpreter: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cpu_secs: u64,
    /// RLIMIT_DATA, only when no cgroup contains the run: a cgroup limits
    /// resident memory, which is what the memory limit means; a virtual-size
    /// limit would refuse thread stacks and mappings long before that.
    pub data_limit: Option<u64>,
    pub file_size_bytes: u64,
    pub disk_bytes: u64,
    pub open_files: u64,
    /// RLIMIT_NPROC, only when no cgroup contains the run.
    pub nproc: Option<u64>,
}

/// Status lines from the sandbox to the host.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Status {
    /// What was actually applied.
    Isolation {
        landlock: String,
        seccomp: bool,
        uid: u32,
        user_ns: bool,
        /// Protections that could not be enforced (only with allow_degraded).
        #[serde(default)]
        degraded: Vec<String>,
    },
    /// The program's process is in the run's cgroup.
    Joined,
    /// A step of the sandbox's set-up done, at this CLOCK_MONOTONIC time
    /// (shared by every pid namespace): where a cold start's time goes.
    Mark {
        what: String,
        mono_ns: u64,
    },
    /// The sandbox is built, in its cgroup, and its interpreter is waiting.
    Ready,
    /// What a process of the sandbox holds once it is built (`who`: init
    /// or helper), read back from the kernel after dropping the rest.
    Privileges {
        who: String,
        held: String,
    },
    /// The program is about to start.
    Started,
    Warning {
        msg: String,
    },
    Error {
        msg: String,
    },
    Exit {
        code: Option<i32>,
        signal: Option<i32>,
        cpu_ms: u64,
        max_rss_kb: u64,
        /// A file at the file-size limit, if one was found.
        fsize_hit: Option<String>,
        /// Scratch mounts that were full at some moment.
        full_mounts: Vec<String>,
        /// Calls that waited for the scratch watch (None: no guard).
        guarded: Option<u64>,
        /// Did the watch see file events (or only mount states)?
        files_watched: bool,
    },
}

/// Where [`send`] writes: fd 3, or (in the program's process, once fd 3 is
/// the waiter's) a close-on-exec copy above it.
static STATUS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(STATUS_FD);

fn send(status: &Status) {
    // fd 3 is the status pipe; write(2) of a small line is atomic.
    let mut line = serde_json::to_string(status).unwrap_or_default();
    line.push('\n');
    let fd = STATUS.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the status descriptor stays open in the helper and init for
    // their whole life, and in the program's process until its exec.
    let _ = nix::unistd::write(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }, line.as_bytes());
}

/// CLOCK_MONOTONIC in ns (the clock the host's `Instant` reads).
pub fn mono_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `t`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn mark(what: &str) {
    send(&Status::Mark { what: what.into(), mono_ns: mono_ns() });
}

fn fail(msg: String) -> ! {
    send(&Status::Error { msg });
    // SAFETY: ends the process at once; nothing to unwind in a forked child.
    unsafe { libc::_exit(121) }
}

/// The helper's stdin starts with an 8-byte little-endian length and that
/// many bytes of JSON; read exactly that (init reads the rest).
fn read_prepare() -> Result<Prepare, String> {
    // SAFETY: fd 0 is the host's pipe; ManuallyDrop keeps it open for init.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { fs::File::from_raw_fd(0) });
    let mut len = [0u8; 8];
    stdin.read_exact(&mut len).map_err(|e| format!("cannot read its first message: {e}"))?;
    let n = u64::from_le_bytes(len) as usize;
    if n > MAX_PREPARE_BYTES {
        return Err(format!("first message too long ({n} bytes)"));
    }
    let mut buf = vec![0u8; n];
    stdin.read_exact(&mut buf).map_err(|e| format!("cannot read its first message: {e}"))?;
    serde_json::from_slice(&buf).map_err(|e| format!("bad first message: {e}"))
}

/// Frame a [`Prepare`] as the helper reads it.
pub fn frame_prepare(p: &Prepare) -> Vec<u8> {
    let json = serde_json::to_vec(p).unwrap_or_default();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// Entry point of `sandbench __sandbox`. Never returns.
pub fn helper_main() -> ! {
    mark("helper_started");
    let prep = match read_prepare() {
        Ok(p) => p,
        Err(e) => fail(format!("sandbox helper: {e}")),
    };
    // PDEATHSIG was set before exec; if the host died in between, stop now.
    if nix::unistd::getppid().as_raw() != prep.host_pid {
        // SAFETY: plain exit of a process nobody waits for any more.
        unsafe { libc::_exit(122) }
    }
    // Opened here, written by init after pivot_root (when /sys is gone from
    // its view): descriptors survive both.
    let mut procs = vec![];
    for p in &prep.cgroup_procs {
        match fs::OpenOptions::new().write(true).open(p) {
            Ok(f) => procs.push(OwnedFd::from(f)),
            Err(e) => fail(format!("cannot open cgroup {p}: {e}")),
        }
    }
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    // The cgroup namespace is rooted where the helper was born (sandbench's
    // own cgroup): the program sees its run cgroup as
    // /sandbench/<opaque name>, nothing of the host's tree above.
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if prep.user_ns {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    if let Err(e) = unshare(flags) {
        let hint = if prep.user_ns {
            " (unprivileged user namespaces may be disabled: sysctl -w kernel.unprivileged_userns_clone=1)"
        } else {
            ""
        };
        fail(format!("cannot create namespaces: {e}{hint}"));
    }
    if prep.user_ns {
        // Identity map: our uid keeps its number; capabilities inside the
        // namespace are gone at exec because the uid is not 0.
        let maps = [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ];
        for (f, v) in maps {
            if let Err(e) = fs::write(f, v) {
                fail(format!("cannot write {f}: {e}"));
            }
        }
    }
    mark("namespaces_made");
    // Held open by the helper for its whole life: init, which loses its
    // parent-death signal when it changes uid, learns from its EOF whether
    // the helper died before the signal was set again.
    let (alive_r, alive_w) = pipe();
    // SAFETY: single-threaded (exec'd fresh), so fork is safe.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(alive_w);
            let owner = if prep.user_ns { (uid.as_raw(), gid.as_raw()) } else { (prep.run_uid, prep.run_gid) };
            init_main(&prep, owner, procs, alive_r)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(procs);
            drop(alive_r);
            // init alone holds the egress channel.
            let _ = nix::unistd::close(super::netns::NET_FD);
            // Only the status pipe matters now; the program's output reaches
            // the host through its own copies of stdout and stderr, so the
            // host sees EOF when the program side is gone.
            release_output();
            // From here the helper only waits for init: it needs nothing.
            match privs::drop_helper() {
                Ok(held) => send(&Status::Privileges { who: "helper".into(), held }),
                Err(e) => fail(format!("the sandbox helper cannot drop its privileges: {e}")),
            }
            let st = waitpid(child, None);
            drop(alive_w);
            if let Ok(WaitStatus::Signaled(_, sig, _)) = st {
                send(&Status::Warning { msg: format!("sandbox init killed by {sig}") });
            }
            // SAFETY: plain exit; nothing to flush.
            unsafe { libc::_exit(0) }
        }
        Err(e) => fail(format!("fork of the sandbox init failed: {e}")),
    }
}

/// Die with the parent. Unchecked, a sandbox could outlive a killed sandbench.
fn set_pdeathsig() {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        fail(format!("PR_SET_PDEATHSIG: {}", std::io::Error::last_os_error()));
    }
}

/// Point stdout and stderr at /dev/null: the host sees EOF on the program's
/// output as soon as the program side is gone, not when the supervisors are.
fn release_output() {
    let r = fs::OpenOptions::new().write(true).open("/dev/null").map_err(|e| e.to_string()).and_then(|null| {
        nix::unistd::dup2_stdout(&null).and_then(|_| nix::unistd::dup2_stderr(&null)).map_err(|e| e.to_string())
    });
    if let Err(e) = r {
        fail(format!("cannot release the program's output pipes: {e}"));
    }
}

/// Mark every descriptor past stderr close-on-exec (the status pipe above
/// all): the program must start with 0, 1 and 2 only.
fn cloexec_all() -> Result<(), String> {
    // SAFETY: close_range with integer arguments only; it changes flags, not
    // ownership, of descriptors.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) } == 0 {
        return Ok(());
    }
    let why = std::io::Error::last_os_error();
    // Kernels before 5.11 lack CLOSE_RANGE_CLOEXEC: mark each open one.
    let fds: Vec<i32> = fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("close_range: {why}; /proc/self/fd: {e}"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on a descriptor number; a stale number (the
        // directory's own, closed by now) fails with EBADF, which is fine.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0
            && nix::errno::Errno::last() != nix::errno::Errno::EBADF
        {
            return Err(format!("close_range: {why}; FD_CLOEXEC on {fd}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn bind_ro(src: &Path, dst: &Path) -> Result<(), String> {
    mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
        .map_err(|e| format!("bind {}: {e}", src.display()))?;
    // A remount must keep the flags the host mount had (nosuid, nodev, ...):
    // the kernel refuses to clear them inside a user namespace.
    let keep = nix::sys::statvfs::statvfs(dst)
        .map(|s| {
            use nix::sys::statvfs::FsFlags;
            let f = s.flags();
            let mut m = MsFlags::empty();
            for (a, b) in [
                (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
                (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
                (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
                (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
                (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
                (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
            ] {
                if f.contains(a) {
                    m |= b;
                }
            }
            m
        })
        .unwrap_or(MsFlags::empty());
    mount(
        None::<&str>,
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | keep,
        None::<&str>,
    )
    .map_err(|e| format!("remount {} read-only: {e}", dst.display()))
}

fn tmpfs(dst: &Path, opts: &str, extra: MsFlags) -> Result<(), String> {
    mount(Some("tmpfs"), dst, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra, Some(opts))
        .map_err(|e| format!("mount tmpfs on {}: {e}", dst.display()))
}

/// Host directories bound read-only, whole, into the sandbox: the
/// interpreters and their libraries. Nothing else of the host is bound; a
/// host unix socket planted in one of them is still unreachable because the
/// seccomp filter refuses `socket(AF_UNIX)` (Landlock cannot yet confine
/// pathname sockets).
pub const HOST_BINDS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Files copied (not bound) from the host's `/etc` into the sandbox's own:
/// the loader's cache, certificates and OpenSSL's config. The interpreters'
/// config files are [`PYTHON_ETC`]; passwd, group and nsswitch.conf are
/// generated. Nothing else of the host's `/etc` exists in the sandbox.
pub const ETC_COPIED: &[&str] = &["ld.so.cache", "ssl/certs/ca-certificates.crt", "ssl/openssl.cnf"];

/// Python's own config under `/etc/python3*/` (Debian ships them there).
pub const PYTHON_ETC: &[&str] = &["debian_config", "sitecustomize.py"];

/// Largest host file copied into the sandbox's `/etc`.
const MAX_ETC_FILE: u64 = 4 << 20;

fn copy_host_file(src: &Path, dst: &Path) -> Result<(), String> {
    let Ok(meta) = fs::metadata(src) else { return Ok(()) }; // absent on this host: nothing to copy
    if !meta.is_file() || meta.len() > MAX_ETC_FILE {
        return Ok(());
    }
    if let Some(dir) = dst.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    fs::copy(src, dst).map_err(|e| format!("copy {}: {e}", src.display()))?;
    fs::set_permissions(dst, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod {}: {e}", dst.display()))
}

/// The sandbox's `/etc`, built fresh: generated account files holding only
/// the sandbox's users, and the few host files the interpreters read.
fn build_etc(etc: &Path, owner: (u32, u32)) -> Result<(), String> {
    fs::create_dir(etc).map_err(|e| format!("mkdir /etc: {e}"))?;
    let (uid, gid) = owner;
    let mut passwd = String::from("root:x:0:0:root:/root:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\n");
    if uid != 0 {
        passwd.push_str(&format!("sandbox:x:{uid}:{gid}:sandbench sandbox:/work:/usr/sbin/nologin\n"));
    }
    if gid != 0 {
        group.push_str(&format!("sandbox:x:{gid}:\n"));
    }
    let generated = [
        ("passwd", passwd),
        ("group", group),
        ("nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n".to_string()),
    ];
    for (name, text) in generated {
        fs::write(etc.join(name), text).map_err(|e| format!("write /etc/{name}: {e}"))?;
    }
    let host = Path::new("/etc");
    for f in ETC_COPIED {
        copy_host_file(&host.join(f), &etc.join(f))?;
    }
    if let Ok(rd) = fs::read_dir(host) {
        for e in rd.flatten() {
            let name = e.file_name();
            let n = name.to_string_lossy();
            if n == "python3" || (n.starts_with("python3.") && n[8..].bytes().all(|b| b.is_ascii_digit())) {
                for f in PYTHON_ETC {
                    copy_host_file(&e.path().join(f), &etc.join(&*n).join(f))?;
                }
            }
        }
    }
    // localtime: the host's zone, by link into /usr (visible) or by copy.
    match fs::read_link(host.join("localtime")) {
        Ok(t) if t.starts_with("/usr/share/zoneinfo") => {
            std::os::unix::fs::symlink(&t, etc.join("localtime")).map_err(|e| format!("symlink /etc/localtime: {e}"))?
        }
        _ => copy_host_file(&host.join("localtime"), &etc.join("localtime"))?,
    }
    Ok(())
}

/// The system bundle as the sandbox sees it (its own copy, in its `/etc`).
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Add the run's CA (a run with a secret over TLS) to the sandbox's copy of
/// the system bundle: clients that read the system store trust it, and the
/// trust variables point at the same file. The host's bundle is untouched
/// (this is the copy in the sandbox's fresh `/etc`, still ours alone: no
/// program exists yet).
fn trust_run_ca(etc: &Path, pem: &str) -> Result<(), String> {
    let bundle = etc.join(SYSTEM_BUNDLE.trim_start_matches("/etc/"));
    if let Some(dir) = bundle.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&bundle)
        .map_err(|e| format!("open the sandbox's CA bundle: {e}"))?;
    std::io::Write::write_all(&mut f, format!("\n# sandbench: this run's CA (secrets)\n{pem}").as_bytes())
        .map_err(|e| format!("write the sandbox's CA bundle: {e}"))?;
    fs::set_permissions(&bundle, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod the CA bundle: {e}"))
}

/// Build the sandbox's file system view under a fresh tmpfs root and pivot
/// into it: the interpreters' directories read-only, a generated `/etc`,
/// /work and /tmp private tmpfs, a minimal /dev, a /proc of the new pid
/// namespace. Nothing else of the host.
fn build_root(disk_bytes: u64, owner: (u32, u32), run_ca: Option<&str>) -> Result<(), String> {
    let r = |e: nix::Error, what: &str| format!("{what}: {e}");
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| r(e, "make mounts private"))?;
    let root = Path::new("/tmp");
    tmpfs(root, "size=4m,nr_inodes=512,mode=0755", MsFlags::empty())?;
    for d in HOST_BINDS {
        let src = Path::new("/").join(d);
        let dst = root.join(d);
        let Ok(meta) = fs::symlink_metadata(&src) else { continue };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&src).map_err(|e| format!("readlink {}: {e}", src.display()))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| format!("symlink {d}: {e}"))?;
        } else if meta.is_dir() {
            fs::create_dir(&dst).map_err(|e| format!("mkdir {d}: {e}"))?;
            bind_ro(&src, &dst)?;
        }
    }
    build_etc(&root.join("etc"), owner)?;
    if let Some(pem) = run_ca {
        trust_run_ca(&root.join("etc"), pem)?;
    }
    for d in ["proc", "dev", "work", "tmp"] {
        fs::create_dir(root.join(d)).map_err(|e| format!("mkdir {d}: {e}"))?;
    }
    mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| r(e, "mount /proc"))?;
    let dev = root.join("dev");
    tmpfs(&dev, "size=64k,nr_inodes=64,mode=0755", MsFlags::MS_NOEXEC)?;
    for n in ["null", "zero", "full", "random", "urandom"] {
        let dst = dev.join(n);
        fs::File::create(&dst).map_err(|e| format!("create /dev/{n}: {e}"))?;
        mount(Some(&Path::new("/dev").join(n)), &dst, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(|e| r(e, &format!("bind /dev/{n}")))?;
    }
    for (l, t) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(t, dev.join(l)).map_err(|e| format!("symlink /dev/{l}: {e}"))?;
    }
    fs::create_dir(dev.join("shm")).map_err(|e| format!("mkdir /dev/shm: {e}"))?;
    let (uid, gid) = owner;
    tmpfs(&dev.join("shm"), &format!("size=8m,nr_inodes=64,mode=1777,uid={uid},gid={gid}"), MsFlags::MS_NOEXEC)?;
    tmpfs(&root.join("work"), &scratch_opts("work", disk_bytes, owner), MsFlags::empty())?;
    tmpfs(&root.join("tmp"), &scratch_opts("tmp", disk_bytes, owner), MsFlags::empty())?;

    nix::unistd::chdir(root).map_err(|e| r(e, "chdir new root"))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| r(e, "pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| r(e, "detach the old root"))?;
    nix::unistd::chdir("/").map_err(|e| r(e, "chdir /"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| r(e, "make the root read-only"))?;
    nix::unistd::sethostname("sandbench").map_err(|e| r(e, "sethostname"))?;
    Ok(())
}

/// Mount options of a scratch space (`work` or `tmp`) of `size` bytes.
fn scratch_opts(which: &str, size: u64, (uid, gid): (u32, u32)) -> String {
    let size = size.max(4096);
    match which {
        "work" => format!("size={size},nr_inodes=4096,mode=0700,uid={uid},gid={gid}"),
        _ => format!("size={size},nr_inodes=4096,mode=1777"),
    }
}

/// The scratch mounts as the watch names them.
fn scratch_mounts() -> Vec<crate::highwater::Scratch> {
    SCRATCH.iter().map(|m| crate::highwater::Scratch::new(m, *m)).collect()
}

/// High-water marks of the scratch space, watched by init from before the
/// program starts (see [`crate::highwater`]): file events need
/// CAP_SYS_ADMIN (sandbench as root); the mount checks work without.
fn watch_scratch() -> Option<crate::highwater::Watch> {
    match crate::highwater::Watch::new(&scratch_mounts(), u64::MAX, crate::highwater::Mode::Pin) {
        Ok(w) => Some(w),
        // init made these mounts a moment ago: not opening them is a broken sandbox.
        Err(e) => fail(format!("cannot watch the scratch space: {e}")),
    }
}

/// The program's side of the guard (see [`crate::highwater::install_guard`]):
/// install the filter and hand its listener to init over `sock`. A guard
/// that cannot be installed is reported, not fatal: the watch then races
/// space freed by the program.
fn send_guard(sock: std::os::fd::OwnedFd) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    match crate::highwater::install_guard() {
        Ok(listener) => {
            let fds = [listener.as_raw_fd()];
            let iov = [std::io::IoSlice::new(b"g")];
            if let Err(e) =
                sendmsg::<()>(sock.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
            {
                // Without a supervisor every guarded call would wait forever.
                fail(format!("cannot hand the scratch guard to init: {e}"));
            }
        }
        Err(e) => send(&Status::Warning {
            msg: format!("{e}: space the program frees is not checked first, so a full scratch emptied at once may go unreported"),
        }),
    }
}

/// The socket the program's process hands its guard listener over.
fn guard_socket() -> (OwnedFd, OwnedFd) {
    match nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => fail(format!("init cannot make the guard's socket: {e}")),
    }
}

/// Init's side: the listener, or None when the program sent none.
fn receive_guard(sock: &std::os::fd::OwnedFd) -> Option<crate::highwater::Guard> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::FromRawFd;
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.ok()?,
        }
    };
    let fd = msg.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
        _ => None,
    })?;
    // SAFETY: SCM_RIGHTS just installed this descriptor in our table.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    match crate::highwater::Guard::new(fd) {
        Ok(g) => Some(g),
        Err(e) => fail(format!("scratch guard: {e}")),
    }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => fail(format!("pipe: {e}")),
    }
}

/// Write a whole buffer to a raw descriptor (pipes and cgroup files).
fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> nix::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn prlimit(pid: Pid, res: Resource, soft: u64, hard: u64) -> Result<(), String> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: prlimit reads `lim` and writes nothing (null old limit).
    if unsafe { libc::prlimit(pid.as_raw(), res as _, &lim, std::ptr::null_mut()) } != 0 {
        return Err(format!("prlimit {res:?}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The run's rlimits on the program's process, before its program starts.
/// prlimit(2) on another process needs CAP_SYS_RESOURCE or the same real
/// ids; a root sandbench may lack the capability (containers drop it), so
/// init takes the program's uid and gid as its *real* ids for the call
/// (its effective ids, and so its privileges, stay) and then restores them.
/// The program's process runs only sandbench's waiting code meanwhile.
fn apply_rlimits_as(pid: Pid, cfg: &SandboxConfig, ids: Option<(u32, u32)>) -> Result<(), String> {
    let Some((uid, gid)) = ids else { return apply_rlimits(pid, cfg) };
    let keep = Uid::from_raw(u32::MAX);
    let keep_g = Gid::from_raw(u32::MAX);
    let (ruid, rgid) = (nix::unistd::getuid(), nix::unistd::getgid());
    nix::unistd::setresgid(Gid::from_raw(gid), keep_g, keep_g).map_err(|e| format!("setresgid for prlimit: {e}"))?;
    nix::unistd::setresuid(Uid::from_raw(uid), keep, keep).map_err(|e| format!("setresuid for prlimit: {e}"))?;
    let r = apply_rlimits(pid, cfg);
    nix::unistd::setresuid(ruid, keep, keep).map_err(|e| format!("setresuid back: {e}"))?;
    nix::unistd::setresgid(rgid, keep_g, keep_g).map_err(|e| format!("setresgid back: {e}"))?;
    r
}

fn apply_rlimits(pid: Pid, cfg: &SandboxConfig) -> Result<(), String> {
    // A backstop one second past the limit: the host's cgroup counter judges
    // and kills first, so the hit is reported from a fact the program cannot
    // forge (a SIGXCPU death alone is not).
    prlimit(pid, Resource::RLIMIT_CPU, cfg.cpu_secs + 1, cfg.cpu_secs + 2)?;
    if let Some(n) = cfg.data_limit {
        prlimit(pid, Resource::RLIMIT_DATA, n, n)?;
    }
    prlimit(pid, Resource::RLIMIT_FSIZE, cfg.file_size_bytes, cfg.file_size_bytes)?;
    prlimit(pid, Resource::RLIMIT_NOFILE, cfg.open_files, cfg.open_files)?;
    if let Some(n) = cfg.nproc {
        prlimit(pid, Resource::RLIMIT_NPROC, n, n)?;
    }
    Ok(())
}

/// init's word to the program's process: run the program file in the
/// waiting interpreter, or exec `exe` with this argv and environment.
fn go_message(inline: bool, exe: &CString, cfg: &SandboxConfig) -> Vec<u8> {
    if inline {
        return b"run".to_vec();
    }
    let mut m = b"exec\0".to_vec();
    m.extend_from_slice(exe.as_bytes());
    m.push(0);
    for a in cfg.interpreter.iter().chain(std::iter::once(&cfg.file_name)) {
        m.extend(a.bytes().filter(|b| *b != 0));
        m.push(0);
    }
    m.push(0);
    for (k, v) in &cfg.env {
        if !k.contains('\0') && !v.contains('\0') && !k.contains('=') {
            m.extend_from_slice(format!("{k}={v}").as_bytes());
            m.push(0);
        }
    }
    m
}

/// Decode an "exec" message (the inverse of [`go_message`]).
fn parse_exec(m: &[u8]) -> Option<(CString, Vec<CString>, Vec<CString>)> {
    let rest = m.strip_prefix(b"exec\0")?;
    let fields: Vec<&[u8]> = rest.split(|b| *b == 0).collect();
    let end = fields.iter().skip(1).position(|f| f.is_empty())? + 1;
    let c = |f: &&[u8]| CString::new(*f).ok();
    let exe = c(fields.first()?)?;
    let argv = fields[1..end].iter().filter_map(c).collect();
    let env = fields[end + 1..].iter().filter(|f| !f.is_empty()).filter_map(c).collect();
    Some((exe, argv, env))
}

/// init, once the sandbox is built for what it will run: nothing it does
/// from here on needs a privilege (see `privs.rs`). It becomes the
/// sandbox's uid with no capability, and says so on the status pipe.
fn drop_privileges(prep: &Prepare, owner: (u32, u32), alive: &OwnedFd) {
    let ids = (!prep.user_ns).then_some(owner);
    match privs::drop_init(ids) {
        Ok(held) => send(&Status::Privileges { who: "init".into(), held }),
        Err(e) => fail(format!("sandbox init cannot drop its privileges: {e}")),
    }
    // A new uid clears the parent-death signal: set it again, then make
    // sure the helper did not die in between (its pipe's EOF).
    set_pdeathsig();
    let mut fds = [nix::poll::PollFd::new(alive.as_fd(), nix::poll::PollFlags::POLLIN)];
    let gone = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO)
        .map(|n| n > 0 && fds[0].revents().is_some_and(|r| !r.is_empty()))
        .unwrap_or(true);
    if gone {
        // SAFETY: plain exit; the kernel ends the namespace with us.
        unsafe { libc::_exit(122) }
    }
}

/// Kill every other process of the namespace and reap them all (until
/// ECHILD: none is left, whatever it forked meanwhile — each round's kill
/// reaches what the last one missed). Only then may a verdict be final.
fn end_the_rest() {
    loop {
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), nix::sys::signal::Signal::SIGKILL);
        match waitpid(None::<Pid>, None) {
            Err(nix::errno::Errno::ECHILD) => return,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => fail(format!("init cannot reap the run's processes: {e}")),
        }
    }
}

fn init_main(prep: &Prepare, owner: (u32, u32), procs: Vec<OwnedFd>, alive: OwnedFd) -> ! {
    set_pdeathsig();
    // The waiter only where its interpreter exists (/usr is the host's, bound
    // as is: the host's view answers for the sandbox's).
    let waiter = prep.waiter.as_ref().and_then(|w| {
        let exe = find_in_path(w.interpreter.first()?, &w.env)?;
        Some((w, exe))
    });
    if let Err(e) = build_root(prep.disk_bytes, owner, prep.run_ca.as_deref()) {
        fail(format!("sandbox file system: {e}"));
    }
    // Before anything else opens a descriptor: the channel is fd 4.
    if let Err(e) = super::netns::serve_port(prep.network_port) {
        fail(format!("sandbox network: {e}"));
    }
    let scratch = match Scratch::open() {
        Ok(s) => s,
        Err(e) => fail(format!("sandbox file system: {e}")),
    };
    if let Some((w, _)) = &waiter {
        if let Err(e) = scratch.write_work(&w.file_name, w.source().as_bytes(), owner) {
            fail(format!("sandbox file system: {e}"));
        }
    }
    mark("root_built");
    if prep.session {
        session::init_session(prep, owner, procs, waiter, scratch, alive)
    }
    // Watching starts before the program's process exists: no write goes
    // unseen. Its file-size limit is the run's, set when the run arrives.
    let mut watch = watch_scratch();
    let (guard_init, guard_prog) = guard_socket();
    let (go_r, go_w) = pipe();
    let (ready_r, ready_w) = pipe();
    // SAFETY: init is single-threaded.
    let main_pid = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(go_w);
            drop(ready_r);
            drop(guard_init);
            program_main(prep, owner, waiter.clone(), go_r, ready_w, guard_prog)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => fail(format!("fork of the program failed: {e}")),
    };
    drop(go_r);
    drop(ready_w);
    drop(guard_prog);
    // Before anything else: until init serves the guard, the program's
    // guarded calls wait. EOF (no guard) when the program could not install
    // one or did not get that far.
    let mut guard = receive_guard(&guard_init);
    drop(guard_init);
    // init keeps no copy of the program's output pipes.
    release_output();
    // SIGCHLD through a descriptor, so init waits for children and file
    // events at once. Blocked only now: the program keeps its default mask.
    let mut mask = nix::sys::signal::SigSet::empty();
    mask.add(nix::sys::signal::Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        fail(format!("init cannot block SIGCHLD: {e}"));
    }
    // The program's process joins the run's cgroup while its interpreter
    // starts (on cgroup v1 the first move waits for an RCU grace period).
    // init itself stays outside: the cgroup holds the program's processes
    // only, and everything they fork from now on.
    let pid = main_pid.as_raw().to_string();
    for fd in &procs {
        if let Err(e) = write_all(fd, pid.as_bytes()) {
            fail(format!("cannot move the program's process into the run's cgroup: {e}"));
        }
    }
    drop(procs);
    send(&Status::Joined);
    // Ready: the interpreter has read its own file (so the program's may
    // replace it) and waits; or the program's process waits before its exec.
    // A guarded call meanwhile (sandbench's own code: none is expected) is
    // served, never left waiting.
    if !wait_ready(&ready_r, &mut guard, &mut watch) {
        fail("the sandbox's interpreter exited while starting (its error, if any, is on the run's stderr)".into());
    }
    drop(ready_r);
    send(&Status::Ready);
    // A spare waits here until a run hands it a program (its process blocks
    // in a read meanwhile: no guarded call can come).
    let mut buf = Vec::new();
    if let Err(e) = std::io::stdin().take(MAX_CONFIG_BYTES).read_to_end(&mut buf) {
        fail(format!("sandbox init: cannot read its config: {e}"));
    }
    if buf.is_empty() {
        // The host let a spare go unused: leave quietly.
        // SAFETY: plain exit; the kernel ends the namespace with us.
        unsafe { libc::_exit(0) }
    }
    let cfg: SandboxConfig = match serde_json::from_slice(&buf) {
        Ok(c) => c,
        Err(e) => fail(format!("sandbox init: bad config: {e}")),
    };
    drop(buf);
    if let Err(e) = prepare_run(prep, owner, waiter.as_ref().map(|(w, _)| *w), &cfg, &scratch) {
        fail(e);
    }
    let ids = (!prep.user_ns).then_some(owner);
    if let Err(e) = apply_rlimits_as(main_pid, &cfg, ids) {
        fail(e);
    }
    let inline = waiter
        .as_ref()
        .is_some_and(|(w, _)| w.interpreter == cfg.interpreter && w.file_name == cfg.file_name && w.env == cfg.env);
    let exe = match (inline, &waiter) {
        (true, Some((_, exe))) => exe.clone(),
        _ => match cfg.interpreter.first().and_then(|c| find_in_path(c, &cfg.env)) {
            Some(e) => e,
            None => fail(format!(
                "{} is not installed where the sandbox can see it (PATH /usr/local/bin:/usr/bin:/bin); install it, e.g. apt-get install python3",
                cfg.interpreter.first().map(String::as_str).unwrap_or("?")
            )),
        },
    };
    if let Some(w) = &mut watch {
        w.set_file_size(cfg.file_size_bytes);
    }
    // The sandbox is built for this run; nothing below needs a privilege.
    drop_privileges(prep, owner, &alive);
    send(&Status::Started);
    if let Err(e) = write_all(&go_w, &go_message(inline, &exe, &cfg)) {
        fail(format!("the sandbox's interpreter exited before its program started: {e}"));
    }
    drop(go_w);
    let sfd = match nix::sys::signalfd::SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_NONBLOCK | nix::sys::signalfd::SfdFlags::SFD_CLOEXEC,
    ) {
        Ok(s) => s,
        Err(e) => fail(format!("init cannot watch its children: {e}")),
    };
    loop {
        // Reap first: a child that exited before SIGCHLD was blocked sent a
        // signal nobody received.
        let Some(reaped) = reap_any() else {
            wait_and_serve(&sfd, &mut guard, &mut watch, None);
            continue;
        };
        if reaped.pid != main_pid.as_raw() {
            continue; // an orphan reparented to us
        }
        // Nothing of the run outlives the verdict: whatever the program left
        // (a daemon in a session of its own) goes, and is reaped, first.
        end_the_rest();
        mark("program_reaped");
        let Reaped { code, signal, cpu_ms, max_rss_kb, .. } = reaped;
        let guarded = guard.as_ref().map(|g| g.served());
        let files_watched = watch.as_ref().is_some_and(|w| w.sees_files());
        // The fanotify group stays open until init exits: closing it waits for
        // an SRCU grace period, which the verdict need not wait for.
        let (mut found, _pin) = watch.map(|w| w.finish_keeping()).unwrap_or_default();
        mark("watch_finished");
        for gap in &found.gaps {
            send(&Status::Warning { msg: gap.clone() });
        }
        found.merge(scratch.judge(cfg.file_size_bytes));
        mark("scratch_judged");
        send(&Status::Exit {
            code,
            signal,
            cpu_ms,
            max_rss_kb,
            fsize_hit: found.capped.into_iter().next(),
            full_mounts: found.full,
            guarded,
            files_watched,
        });
        // SAFETY: plain exit.
        unsafe { libc::_exit(0) }
    }
}

/// A child of init that has exited, with the kernel's count of its resources.
struct Reaped {
    pid: i32,
    code: Option<i32>,
    signal: Option<i32>,
    cpu_ms: u64,
    max_rss_kb: u64,
}

/// Reap one exited child without waiting; None when none has exited.
fn reap_any() -> Option<Reaped> {
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data that wait4 fills in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes only into `status` and `ru`.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut ru) };
        if pid < 0 {
            if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                continue;
            }
            fail("init lost its program".into());
        }
        if pid == 0 {
            return None;
        }
        let (code, signal) = if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            (Some(libc::WEXITSTATUS(status)), None)
        };
        let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
        let cpu_ms = ms(ru.ru_utime) + ms(ru.ru_stime);
        return Some(Reaped { pid, code, signal, cpu_ms, max_rss_kb: ru.ru_maxrss as u64 });
    }
}

/// One wait of init for its children: until a signal (SIGCHLD), a guarded
/// call (served), file events (drained), `host` readable, or the idle
/// tick (a file filled through a mapping sends no event: the mounts are
/// checked then). True when `host` is readable.
fn wait_and_serve(
    sfd: &nix::sys::signalfd::SignalFd,
    guard: &mut Option<crate::highwater::Guard>,
    watch: &mut Option<crate::highwater::Watch>,
    host: Option<std::os::fd::BorrowedFd<'_>>,
) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let (idle, host_says, notified) = {
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        let host_at = host.map(|h| {
            fds.push(PollFd::new(h, PollFlags::POLLIN));
            fds.len() - 1
        });
        let guard_at = guard.as_ref().and_then(|g| g.fd()).map(|f| {
            fds.push(PollFd::new(f, PollFlags::POLLIN));
            fds.len() - 1
        });
        if let Some(f) = watch.as_ref().and_then(|w| w.fd()) {
            fds.push(PollFd::new(f, PollFlags::POLLIN));
        }
        let timeout = if watch.is_some() { PollTimeout::from(50u16) } else { PollTimeout::NONE };
        let n = match poll(&mut fds, timeout) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 1,
            Err(e) => fail(format!("init poll: {e}")),
        };
        let rev = |i: Option<usize>| i.and_then(|i| fds[i].revents()).unwrap_or(PollFlags::empty());
        (n == 0, !rev(host_at).is_empty(), guard_at.map(|i| rev(Some(i))))
    };
    while let Ok(Some(_)) = sfd.read_signal() {}
    let call = match (notified, guard.as_mut()) {
        (Some(rev), Some(g)) => g.ready(rev),
        _ => false,
    };
    if let Some(w) = watch.as_mut() {
        if call {
            if let Some(g) = guard.as_mut() {
                g.serve(w);
            }
        } else if idle {
            w.check_mounts();
        } else {
            w.drain();
        }
    }
    host_says
}

/// Wait for the program's process to say it is ready, serving its guard
/// (and draining the watch) meanwhile. False at EOF: it died while starting.
fn wait_ready(
    ready: &OwnedFd,
    guard: &mut Option<crate::highwater::Guard>,
    watch: &mut Option<crate::highwater::Watch>,
) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let (readable, call) = {
            let mut fds = vec![PollFd::new(ready.as_fd(), PollFlags::POLLIN)];
            if let Some(f) = guard.as_ref().and_then(|g| g.fd()) {
                fds.push(PollFd::new(f, PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => fail(format!("init poll: {e}")),
            }
            let r = fds[0].revents().unwrap_or(PollFlags::empty());
            let g = fds.get(1).and_then(|f| f.revents()).unwrap_or(PollFlags::empty());
            (!r.is_empty(), g)
        };
        if let (Some(g), Some(w)) = (guard.as_mut(), watch.as_mut()) {
            if g.ready(call) {
                g.serve(w);
            }
        }
        if readable {
            let mut byte = [0u8; 1];
            match nix::unistd::read(ready, &mut byte) {
                Ok(1) => return true,
                Err(nix::errno::Errno::EINTR) => continue,
                _ => return false,
            }
        }
    }
}

/// Make the scratch space the run's: its size, its program file in /work,
/// and no waiter file left that the run does not use. Through `scratch`'s
/// descriptors only: in a session the program had these names before.
fn prepare_run(
    prep: &Prepare,
    owner: (u32, u32),
    waiter: Option<&Waiter>,
    cfg: &SandboxConfig,
    scratch: &Scratch,
) -> Result<(), String> {
    if cfg.disk_bytes != prep.disk_bytes {
        for which in ["work", "tmp"] {
            let dst = Path::new("/").join(which);
            mount(
                None::<&str>,
                &dst,
                Some("tmpfs"),
                MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(scratch_opts(which, cfg.disk_bytes, owner).as_str()),
            )
            .map_err(|e| format!("resize /{which} to the run's disk limit: {e}"))?;
        }
    }
    if let Some(w) = waiter.filter(|w| w.file_name != cfg.file_name) {
        scratch.remove_work(&w.file_name).map_err(|e| format!("remove the unused waiter: {e}"))?;
    }
    // A new file (not the waiter's, rewritten): the interpreter read its own
    // file by inode, and the program must not see a mix of both.
    let tmp = format!(".{}.sandbench", cfg.file_name);
    let why = |e: String| {
        if scratch.full_mounts().contains(&"/work") {
            // The program file lives in /work: no code can run (and free
            // the space) until there is room for it.
            format!(
                "cannot write the program: /work is full (an earlier call of this session filled it): {e}; \
close the session and open a new one"
            )
        } else {
            format!("write the program: {e}")
        }
    };
    scratch.write_work(&tmp, cfg.code.as_bytes(), owner).map_err(why)?;
    scratch.rename_work(&tmp, &cfg.file_name).map_err(why)
}

fn landlock(egress_port: Option<u16>) -> String {
    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope, ABI,
    };
    let abi = ABI::V6;
    let result = (|| -> Result<RulesetStatus, landlock::RulesetError> {
        let status = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))?
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?
            .scope(Scope::AbstractUnixSocket | Scope::Signal)?
            .create()?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
            .add_rules(path_beneath_rules(["/work", "/tmp", "/dev/shm"], AccessFs::from_all(abi)))?
            .add_rules(path_beneath_rules(["/dev/null", "/dev/zero", "/dev/full"], AccessFs::from_all(abi)))?
            // TCP connect to the egress listener's port only (nothing else
            // listens in the namespace either); no bind at all.
            .add_rules(egress_port.map(|p| Ok::<_, landlock::RulesetError>(NetPort::new(p, AccessNet::ConnectTcp))))?
            .restrict_self()?;
        Ok(status.ruleset)
    })();
    match result {
        Ok(RulesetStatus::FullyEnforced) => "fully_enforced".into(),
        Ok(RulesetStatus::PartiallyEnforced) => "partially_enforced".into(),
        Ok(RulesetStatus::NotEnforced) => "not_enforced".into(),
        Err(e) => format!("error: {e}"),
    }
}

fn rlimit(res: Resource, v: u64, hard: u64) -> Result<(), String> {
    setrlimit(res, v, hard).map_err(|e| format!("setrlimit {res:?}: {e}"))
}

fn find_in_path(cmd: &str, env: &[(String, String)]) -> Option<CString> {
    if cmd.contains('/') {
        return CString::new(cmd).ok();
    }
    let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("/usr/bin:/bin");
    for dir in path.split(':').filter(|d| d.starts_with('/')) {
        let p = Path::new(dir).join(cmd);
        if let Ok(m) = fs::metadata(&p) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return CString::new(p.as_os_str().as_encoded_bytes()).ok();
            }
        }
    }
    None
}

/// The program's process: every limit that does not depend on the run
/// (Landlock, its uid, no_new_privs, seccomp), then it waits — as the
/// pre-started interpreter, or before its exec — for init's word.
fn program_main(
    prep: &Prepare,
    (uid, gid): (u32, u32),
    waiter: Option<(&Waiter, CString)>,
    go: OwnedFd,
    ready: OwnedFd,
    guard: OwnedFd,
) -> ! {
    // A program that outlives init is killed with the namespace anyway; this
    // also covers the window before init's own wait loop starts.
    set_pdeathsig();
    if let Err(e) = nix::unistd::setsid() {
        fail(format!("setsid: {e}"));
    }
    if let Err(e) = nix::unistd::chdir("/work") {
        fail(format!("chdir /work: {e}"));
    }
    // stdin is /dev/null: the program gets no input (fd 0 was the host's pipe).
    match fs::File::open("/dev/null") {
        Ok(f) => {
            if let Err(e) = nix::unistd::dup2_stdin(&f) {
                fail(format!("cannot give the program an empty stdin: {e}"));
            }
        }
        Err(e) => fail(format!("cannot open /dev/null: {e}")),
    }
    // sandbench ignores SIGPIPE; an exec keeps an ignored signal ignored, and
    // a shell pipeline expects the default.
    // SAFETY: restoring a default disposition installs no handler code.
    if let Err(e) =
        unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) }
    {
        fail(format!("cannot restore SIGPIPE: {e}"));
    }
    let landlock = landlock(prep.network_port);
    let mut degraded = vec![];
    if landlock != "fully_enforced" {
        let what = format!("Landlock {}", landlock.replace('_', " "));
        if !prep.allow_degraded {
            fail(format!(
                "{what} on this kernel (needs Landlock ABI 6, Linux 6.12+): refusing to run; pass --allow-degraded (or set [process] allow_degraded = true) to run marked degraded"
            ));
        }
        degraded.push(what);
    }
    // The run's own limits (CPU, file size, descriptors, ...) follow from
    // init before the program starts; these hold for every run.
    let fixed = || -> Result<(), String> {
        rlimit(Resource::RLIMIT_CORE, 0, 0)?;
        rlimit(Resource::RLIMIT_MEMLOCK, 0, 0)
    };
    if let Err(e) = fixed() {
        fail(e);
    }
    // Forked from an init that already dropped everything (a session's
    // calls): nothing is left to drop, and no privilege to drop it with.
    let nothing = privs::holds_nothing();
    let dropped = nothing
        && {
            let (r, e, s) = (nix::unistd::getresuid(), nix::unistd::getresgid(), nix::unistd::getgroups());
            matches!((r, e, s), (Ok(u), Ok(g), Ok(groups)) if [u.real, u.effective, u.saved].iter().all(|x| x.as_raw() == uid)
            && [g.real, g.effective, g.saved].iter().all(|x| x.as_raw() == gid) && groups.is_empty())
        };
    if !prep.user_ns && !dropped {
        if uid == 0 || gid == 0 {
            fail("refusing to run the program as root: the run has no uid of its own".into());
        }
        let drop = || -> Result<(), String> {
            nix::unistd::setgroups(&[]).map_err(|e| e.to_string())?;
            // Nothing the program could regain later, even through an exec.
            privs::drop_bounding()?;
            nix::unistd::setresgid(Gid::from_raw(gid), Gid::from_raw(gid), Gid::from_raw(gid))
                .map_err(|e| e.to_string())?;
            nix::unistd::setresuid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::from_raw(uid))
                .map_err(|e| e.to_string())?;
            privs::clear_caps()
        };
        if let Err(e) = drop() {
            fail(format!("cannot drop to uid {uid}: {e}"));
        }
    } else if prep.user_ns && !nothing {
        // The user namespace's capabilities go at exec (the uid is not 0);
        // its bounding set goes now.
        if let Err(e) = privs::drop_bounding() {
            fail(format!("cannot drop the bounding set: {e}"));
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        fail(format!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error()));
    }
    // The guard first: its listener goes to init before the program's own
    // code (or the waiting interpreter's) can make a guarded call.
    send_guard(guard);
    let programs = match super::seccomp::programs() {
        Ok(p) => p,
        Err(e) => fail(e),
    };
    let mut seccomp = true;
    for p in &programs {
        if let Err(e) = seccompiler::apply_filter(p) {
            if !prep.allow_degraded {
                fail(format!(
                    "seccomp filter not installed ({e}): refusing to run; pass --allow-degraded (or set [process] allow_degraded = true) to run marked degraded"
                ));
            }
            seccomp = false;
            degraded.push(format!("seccomp filter not installed ({e})"));
            break;
        }
    }
    send(&Status::Isolation {
        landlock,
        seccomp,
        uid: nix::unistd::getuid().as_raw(),
        user_ns: prep.user_ns,
        degraded,
    });
    mark("isolation_applied");
    // Every inherited descriptor past stderr closes at exec: the program never
    // sees them. The status pipe moves above the waiter's two (still
    // close-on-exec) so that this process can report a failure until then.
    if let Err(e) = cloexec_all() {
        fail(e);
    }
    // Copies above the low numbers first, so that no dup2 below lands on a
    // descriptor still needed.
    let high = |fd: RawFd| -> OwnedFd {
        // SAFETY: F_DUPFD_CLOEXEC on an open descriptor; the new one is ours.
        let n = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
        if n < 0 {
            fail(format!("dup: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `n` was just opened by fcntl and nothing else owns it.
        unsafe { OwnedFd::from_raw_fd(n) }
    };
    let status = high(STATUS_FD);
    STATUS.store(status.as_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    std::mem::forget(status); // in use until exec, which closes it
    let (go_hi, ready_hi) = (high(go.as_raw_fd()), high(ready.as_raw_fd()));
    drop(go);
    drop(ready);
    // dup2 clears close-on-exec on the copies: only these two reach the
    // waiting interpreter, and it closes both before the program's code.
    for (fd, to) in [(&go_hi, GO_FD), (&ready_hi, READY_FD)] {
        // SAFETY: dup2 between descriptors this process owns.
        if unsafe { libc::dup2(fd.as_raw_fd(), to) } < 0 {
            fail(format!("dup2: {}", std::io::Error::last_os_error()));
        }
    }
    drop(go_hi);
    drop(ready_hi);
    match waiter {
        Some((w, exe)) => {
            let argv: Vec<CString> = w
                .interpreter
                .iter()
                .chain(std::iter::once(&w.file_name))
                .map(|a| CString::new(a.as_str()).unwrap_or_default())
                .collect();
            let envp: Vec<CString> = w.env.iter().filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok()).collect();
            let err = nix::unistd::execve(&exe, &argv, &envp).unwrap_err();
            fail(format!("cannot start {}: {err}", exe.to_string_lossy()));
        }
        None => {
            // SAFETY: GO_FD and READY_FD were just made by dup2 and are ours.
            let (go, ready) = unsafe { (OwnedFd::from_raw_fd(GO_FD), OwnedFd::from_raw_fd(READY_FD)) };
            if let Err(e) = write_all(&ready, b"r") {
                fail(format!("cannot tell init the sandbox is ready: {e}"));
            }
            drop(ready);
            let mut msg = vec![];
            if let Err(e) = fs::File::from(go).take(MAX_CONFIG_BYTES).read_to_end(&mut msg) {
                fail(format!("cannot read init's word: {e}"));
            }
            let Some((exe, argv, envp)) = parse_exec(&msg) else {
                // init went away (the spare was dropped) or said nothing usable.
                // SAFETY: plain exit, nothing of the program ran.
                unsafe { libc::_exit(121) }
            };
            let err = nix::unistd::execve(&exe, &argv, &envp).unwrap_err();
            fail(format!("cannot start {}: {err}", exe.to_string_lossy()));
        }
    }
}

/// Decode one status line; anything malformed is an error line, never a panic.
pub fn parse_status(line: &[u8]) -> Status {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| Status::Error { msg: format!("malformed status from the sandbox: {e}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(interp: &[&str], file: &str, env: &[(&str, &str)]) -> SandboxConfig {
        SandboxConfig {
            code: "x".into(),
            file_name: file.into(),
            interpreter: interp.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cpu_secs: 1,
            data_limit: None,
            file_size_bytes: 1,
            disk_bytes: 1,
            open_files: 1,
            nproc: None,
        }
    }

    #[test]
    fn exec_messages_round_trip_and_drop_what_cannot_be_passed() {
        let c = cfg(&["/bin/sh"], "main.sh", &[("PATH", "/bin"), ("A", "b=c"), ("BAD", "x\0y"), ("K=V", "z")]);
        let exe = CString::new("/bin/sh").unwrap();
        let m = go_message(false, &exe, &c);
        let (e, argv, env) = parse_exec(&m).unwrap();
        assert_eq!(e, exe);
        assert_eq!(argv, vec![CString::new("/bin/sh").unwrap(), CString::new("main.sh").unwrap()]);
        assert_eq!(env, vec![CString::new("PATH=/bin").unwrap(), CString::new("A=b=c").unwrap()]);
        assert_eq!(go_message(true, &exe, &c), b"run");
        assert!(parse_exec(b"run").is_none());
        assert!(parse_exec(b"exec\0").is_none());
        assert!(parse_exec(b"").is_none());
    }

    #[test]
    fn prepare_is_framed_by_its_length() {
        let p = Prepare {
            host_pid: 7,
            cgroup_procs: vec!["/x/cgroup.procs".into()],
            user_ns: false,
            run_uid: 2,
            run_gid: 2,
            allow_degraded: false,
            disk_bytes: 4096,
            waiter: None,
            network_port: None,
            run_ca: None,
            session: false,
        };
        let f = frame_prepare(&p);
        let n = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
        assert_eq!(n, f.len() - 8);
        let back: Prepare = serde_json::from_slice(&f[8..]).unwrap();
        assert_eq!(back.cgroup_procs, p.cgroup_procs);
    }
}
