//! The in-sandbox side of the process tier. `sandbench __sandbox` is exec'd
//! fresh (single-threaded, so fork is safe), reads its `SandboxConfig` on
//! stdin and builds the sandbox:
//!
//! ```text
//! helper (joins the run's cgroup, unshares namespaces)
//!   └─ init, pid 1 of a new pid namespace (mounts, pivot_root; reaps; reports)
//!        └─ program (Landlock, rlimits, unprivileged uid, seccomp, exec)
//! ```
//! When init exits the kernel kills every process left in the namespace, so
//! daemons cannot outlive the run; the helper and init die with their parent
//! (PR_SET_PDEATHSIG), so nothing survives sandbench being killed either.
//! Status goes to the host as JSON lines on fd 3.
#![allow(unsafe_code)] // fork, exec and raw descriptors between them: the sandbox helper is plumbing

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Gid, Uid};
use serde::{Deserialize, Serialize};

pub const STATUS_FD: i32 = 3;
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The helper's first line on stdin: enough to join the run's cgroup. The
/// join (a cgroup v1 migration waits for an RCU grace period, ~10 ms) can so
/// happen ahead of time in a spare helper that then waits for its program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepare {
    pub host_pid: i32,
    pub cgroup_procs: Vec<String>,
    /// Unprivileged: map our own uid into a new user namespace.
    pub user_ns: bool,
}

/// The rest of stdin: the program and how to run it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxConfig {
    pub code: String,
    pub file_name: String,
    pub interpreter: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Unprivileged: map our own uid into a new user namespace.
    pub user_ns: bool,
    /// Root: the uid/gid to drop to.
    pub run_uid: u32,
    pub run_gid: u32,
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
    /// Run even when Landlock or the seccomp filter cannot be enforced
    /// (the run is then marked degraded); otherwise such a run is refused.
    #[serde(default)]
    pub allow_degraded: bool,
    /// The egress port on the sandbox's loopback (`netns`), when the run's
    /// network is an allow list.
    #[serde(default)]
    pub network_port: Option<u16>,
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
    /// The program is about to exec.
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

fn send(status: &Status) {
    // fd 3 is the status pipe; write(2) of a small line is atomic.
    let mut line = serde_json::to_string(status).unwrap_or_default();
    line.push('\n');
    let _ = nix::unistd::write(unsafe { std::os::fd::BorrowedFd::borrow_raw(STATUS_FD) }, line.as_bytes());
}

fn fail(msg: String) -> ! {
    send(&Status::Error { msg });
    unsafe { libc::_exit(121) }
}

/// Entry point of `sandbench __sandbox`. Never returns.
pub fn helper_main() -> ! {
    let mut stdin = std::io::BufReader::new(std::io::stdin().take(MAX_CONFIG_BYTES));
    let mut line = String::new();
    if let Err(e) = std::io::BufRead::read_line(&mut stdin, &mut line) {
        fail(format!("sandbox helper: cannot read its first line: {e}"));
    }
    let prep: Prepare = match serde_json::from_str(&line) {
        Ok(c) => c,
        Err(e) => fail(format!("sandbox helper: bad first line: {e}")),
    };
    // PDEATHSIG was set before exec; if the host died in between, stop now.
    if nix::unistd::getppid().as_raw() != prep.host_pid {
        unsafe { libc::_exit(122) }
    }
    let me = std::process::id().to_string();
    for p in &prep.cgroup_procs {
        if let Err(e) = fs::write(p, &me) {
            fail(format!("cannot join cgroup {p}: {e}"));
        }
    }
    // Namespaces do not depend on the program: a spare makes them ahead too.
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
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
    // A spare helper waits here until a run hands it a program.
    let mut buf = Vec::new();
    if let Err(e) = stdin.read_to_end(&mut buf) {
        fail(format!("sandbox helper: cannot read its config: {e}"));
    }
    if buf.is_empty() {
        // The host let a spare go unused: leave quietly.
        unsafe { libc::_exit(0) }
    }
    let mut cfg: SandboxConfig = match serde_json::from_slice(&buf) {
        Ok(c) => c,
        Err(e) => fail(format!("sandbox helper: bad config: {e}")),
    };
    cfg.user_ns = prep.user_ns;
    drop(buf);
    // stdin becomes /dev/null: the program gets no input.
    match fs::File::open("/dev/null") {
        Ok(f) => {
            if let Err(e) = nix::unistd::dup2_stdin(&f) {
                fail(format!("cannot give the program an empty stdin: {e}"));
            }
        }
        Err(e) => fail(format!("cannot open /dev/null: {e}")),
    }
    match unsafe { fork() } {
        Ok(ForkResult::Child) => init_main(&cfg, uid.as_raw(), gid.as_raw()),
        Ok(ForkResult::Parent { child }) => {
            // init alone holds the egress channel.
            let _ = nix::unistd::close(super::netns::NET_FD);
            // Only the status pipe matters now; the program's output reaches
            // the host through its own copies of stdout and stderr, so the
            // host sees EOF when the program side is gone.
            release_output();
            let st = waitpid(child, None);
            if let Ok(WaitStatus::Signaled(_, sig, _)) = st {
                send(&Status::Warning { msg: format!("sandbox init killed by {sig}") });
            }
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

/// Build the sandbox's file system view under a fresh tmpfs root and pivot
/// into it: the interpreters' directories read-only, a generated `/etc`,
/// /work and /tmp private tmpfs, a minimal /dev, a /proc of the new pid
/// namespace. Nothing else of the host.
fn build_root(cfg: &SandboxConfig, owner: (u32, u32)) -> Result<(), String> {
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
    let inodes = 4096;
    tmpfs(&dev.join("shm"), &format!("size=8m,nr_inodes=64,mode=1777,uid={uid},gid={gid}"), MsFlags::MS_NOEXEC)?;
    let size = cfg.disk_bytes.max(4096);
    tmpfs(
        &root.join("work"),
        &format!("size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}"),
        MsFlags::empty(),
    )?;
    tmpfs(&root.join("tmp"), &format!("size={size},nr_inodes={inodes},mode=1777"), MsFlags::empty())?;
    let prog = root.join("work").join(&cfg.file_name);
    fs::write(&prog, &cfg.code).map_err(|e| format!("write the program: {e}"))?;
    let _ = std::os::unix::fs::chown(&prog, Some(uid), Some(gid));
    let _ = fs::set_permissions(&prog, fs::Permissions::from_mode(0o644));

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

/// The scratch mounts: the only places the program can write.
const SCRATCH: [&str; 3] = ["/work", "/tmp", "/dev/shm"];

/// The scratch mounts as the watch names them.
fn scratch_mounts() -> Vec<crate::highwater::Scratch> {
    SCRATCH.iter().map(|m| crate::highwater::Scratch::new(m, *m)).collect()
}

/// High-water marks of the scratch space, watched by init from before the
/// program starts (see [`crate::highwater`]): file events need
/// CAP_SYS_ADMIN (sandbench as root); the mount checks work without.
fn watch_scratch(cfg: &SandboxConfig) -> Option<crate::highwater::Watch> {
    match crate::highwater::Watch::new(&scratch_mounts(), cfg.file_size_bytes, crate::highwater::Mode::Pin) {
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

fn init_main(cfg: &SandboxConfig, outer_uid: u32, outer_gid: u32) -> ! {
    set_pdeathsig();
    let (run_uid, run_gid) = if cfg.user_ns { (outer_uid, outer_gid) } else { (cfg.run_uid, cfg.run_gid) };
    if let Err(e) = build_root(cfg, (run_uid, run_gid)) {
        fail(format!("sandbox file system: {e}"));
    }
    // Before anything else opens a descriptor: the channel is fd 4.
    if let Err(e) = super::netns::serve_port(cfg.network_port) {
        fail(format!("sandbox network: {e}"));
    }
    // Watching starts before the program exists: no write goes unseen.
    let mut watch = watch_scratch(cfg);
    let (guard_init, guard_prog) = match nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => fail(format!("init cannot make the guard's socket: {e}")),
    };
    let main_pid = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(guard_init);
            program_main(cfg, run_uid, run_gid, guard_prog)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => fail(format!("fork of the program failed: {e}")),
    };
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
        let mut status = 0;
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut ru) };
        if pid < 0 {
            if nix::errno::Errno::last() == nix::errno::Errno::EINTR {
                continue;
            }
            fail("init lost its program".into());
        }
        if pid == 0 {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let (idle, notified) = {
                let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
                let guarded = guard.as_ref().and_then(|g| g.fd()).is_some();
                if let Some(f) = guard.as_ref().and_then(|g| g.fd()) {
                    fds.push(PollFd::new(f, PollFlags::POLLIN));
                }
                if let Some(f) = watch.as_ref().and_then(|w| w.fd()) {
                    fds.push(PollFd::new(f, PollFlags::POLLIN));
                }
                // Idle now and then: a file filled through a mapping sends no event.
                let timeout = if watch.is_some() { PollTimeout::from(50u16) } else { PollTimeout::NONE };
                let n = match poll(&mut fds, timeout) {
                    Ok(n) => n,
                    Err(nix::errno::Errno::EINTR) => 1,
                    Err(e) => fail(format!("init poll: {e}")),
                };
                (n == 0, guarded.then(|| fds[1].revents().unwrap_or(PollFlags::empty())))
            };
            while let Ok(Some(_)) = sfd.read_signal() {}
            let call = match (notified, &mut guard) {
                (Some(rev), Some(g)) => g.ready(rev),
                _ => false,
            };
            if let Some(w) = &mut watch {
                if call {
                    if let Some(g) = &mut guard {
                        g.serve(w);
                    }
                } else if idle {
                    w.check_mounts();
                } else {
                    w.drain();
                }
            }
            continue;
        }
        if pid != main_pid.as_raw() {
            continue; // an orphan reparented to us
        }
        let (code, signal) = if libc::WIFSIGNALED(status) {
            (None, Some(libc::WTERMSIG(status)))
        } else {
            (Some(libc::WEXITSTATUS(status)), None)
        };
        let cpu_ms = (ru.ru_utime.tv_sec as u64 * 1000 + ru.ru_utime.tv_usec as u64 / 1000)
            + (ru.ru_stime.tv_sec as u64 * 1000 + ru.ru_stime.tv_usec as u64 / 1000);
        let guarded = guard.as_ref().map(|g| g.served());
        let files_watched = watch.as_ref().is_some_and(|w| w.sees_files());
        let mut found = watch.map(|w| w.finish()).unwrap_or_default();
        for gap in &found.gaps {
            send(&Status::Warning { msg: gap.clone() });
        }
        found.merge(scan_scratch(cfg));
        send(&Status::Exit {
            code,
            signal,
            cpu_ms,
            max_rss_kb: ru.ru_maxrss as u64,
            fsize_hit: found.capped.into_iter().next(),
            full_mounts: found.full,
            guarded,
            files_watched,
        });
        // pid 1 exiting makes the kernel kill everything else in the namespace.
        unsafe { libc::_exit(0) }
    }
}

/// After the program: did it hit the file-size limit or fill its scratch
/// space? Host-side evidence, not the program's word. Bounded, no symlinks.
fn scan_scratch(cfg: &SandboxConfig) -> crate::highwater::Found {
    let mut hit = None;
    let mut full = vec![];
    for dir in SCRATCH {
        if let Ok(s) = nix::sys::statvfs::statvfs(dir) {
            if s.blocks_available() == 0 || (s.files() > 0 && s.files_available() == 0) {
                full.push(dir.to_string());
            }
        }
        if hit.is_some() {
            continue;
        }
        let mut stack = vec![(Path::new(dir).to_path_buf(), 0)];
        let mut budget = 20_000;
        while let Some((d, depth)) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                budget -= 1;
                if budget == 0 {
                    break;
                }
                let Ok(m) = e.metadata() else { continue };
                if m.is_file() && m.len() >= cfg.file_size_bytes {
                    hit = Some(e.path().to_string_lossy().chars().take(200).collect());
                    break;
                }
                if m.is_dir() && depth < 16 {
                    stack.push((e.path(), depth + 1));
                }
            }
            if hit.is_some() || budget == 0 {
                break;
            }
        }
    }
    crate::highwater::Found { capped: hit.into_iter().collect(), full, gaps: vec![] }
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

fn program_main(cfg: &SandboxConfig, uid: u32, gid: u32, guard: std::os::fd::OwnedFd) -> ! {
    // A program that outlives init is killed with the namespace anyway; this
    // also covers the window before init's own wait loop starts.
    set_pdeathsig();
    if let Err(e) = nix::unistd::setsid() {
        fail(format!("setsid: {e}"));
    }
    if let Err(e) = nix::unistd::chdir("/work") {
        fail(format!("chdir /work: {e}"));
    }
    let landlock = landlock(cfg.network_port);
    let mut degraded = vec![];
    if landlock != "fully_enforced" {
        let what = format!("Landlock {}", landlock.replace('_', " "));
        if !cfg.allow_degraded {
            fail(format!(
                "{what} on this kernel (needs Landlock ABI 6, Linux 6.12+): refusing to run; pass --allow-degraded (or set [process] allow_degraded = true) to run marked degraded"
            ));
        }
        degraded.push(what);
    }
    let limits = || -> Result<(), String> {
        // A backstop one second past the limit: the host's cgroup counter
        // judges and kills first, so the hit is reported from a fact the
        // program cannot forge (a SIGXCPU death alone is not).
        rlimit(Resource::RLIMIT_CPU, cfg.cpu_secs + 1, cfg.cpu_secs + 2)?;
        if let Some(n) = cfg.data_limit {
            rlimit(Resource::RLIMIT_DATA, n, n)?;
        }
        rlimit(Resource::RLIMIT_FSIZE, cfg.file_size_bytes, cfg.file_size_bytes)?;
        rlimit(Resource::RLIMIT_NOFILE, cfg.open_files, cfg.open_files)?;
        rlimit(Resource::RLIMIT_CORE, 0, 0)?;
        rlimit(Resource::RLIMIT_MEMLOCK, 0, 0)?;
        if let Some(n) = cfg.nproc {
            rlimit(Resource::RLIMIT_NPROC, n, n)?;
        }
        Ok(())
    };
    if let Err(e) = limits() {
        fail(e);
    }
    if !cfg.user_ns {
        if uid == 0 || gid == 0 {
            fail("refusing to run the program as root: the run has no uid of its own".into());
        }
        let drop = || -> nix::Result<()> {
            nix::unistd::setgroups(&[])?;
            nix::unistd::setresgid(Gid::from_raw(gid), Gid::from_raw(gid), Gid::from_raw(gid))?;
            nix::unistd::setresuid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::from_raw(uid))
        };
        if let Err(e) = drop() {
            fail(format!("cannot drop to uid {uid}: {e}"));
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        fail(format!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error()));
    }
    let mut argv: Vec<CString> = vec![];
    let Some(exe) = cfg.interpreter.first().and_then(|c| find_in_path(c, &cfg.env)) else {
        fail(format!(
            "{} is not installed where the sandbox can see it (PATH /usr/local/bin:/usr/bin:/bin); install it, e.g. apt-get install python3",
            cfg.interpreter.first().map(String::as_str).unwrap_or("?")
        ));
    };
    for a in cfg.interpreter.iter().chain(std::iter::once(&cfg.file_name)) {
        argv.push(CString::new(a.as_str()).unwrap_or_default());
    }
    let envp: Vec<CString> = cfg.env.iter().filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok()).collect();
    // The guard first: its listener goes to init before the program's own
    // code can make a guarded call.
    send_guard(guard);
    let programs = match super::seccomp::programs() {
        Ok(p) => p,
        Err(e) => fail(e),
    };
    let mut seccomp = true;
    for p in &programs {
        if let Err(e) = seccompiler::apply_filter(p) {
            if !cfg.allow_degraded {
                fail(format!(
                    "seccomp filter not installed ({e}): refusing to run; pass --allow-degraded (or set [process] allow_degraded = true) to run marked degraded"
                ));
            }
            seccomp = false;
            degraded.push(format!("seccomp filter not installed ({e})"));
            break;
        }
    }
    send(&Status::Isolation { landlock, seccomp, uid: nix::unistd::getuid().as_raw(), user_ns: cfg.user_ns, degraded });
    send(&Status::Started);
    // Every inherited descriptor past stderr (the status pipe included)
    // closes at exec: the program never sees them.
    if let Err(e) = cloexec_all() {
        fail(e);
    }
    let err = nix::unistd::execve(&exe, &argv, &envp).unwrap_err();
    // Reopen-free error path: close_range only marked fd 3 CLOEXEC.
    fail(format!("cannot start {}: {err}", exe.to_string_lossy()));
}

/// Decode one status line; anything malformed is an error line, never a panic.
pub fn parse_status(line: &[u8]) -> Status {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| Status::Error { msg: format!("malformed status from the sandbox: {e}") })
}
