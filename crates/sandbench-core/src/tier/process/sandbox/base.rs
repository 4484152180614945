//! What every part of the sandbox helper shares: the protocol with the host
//! (what it is sent, [`Status`] lines on fd 3), the status channel's
//! `send`/`mark`/`fail`, and the descriptors' plumbing (pipes, close-on-exec,
//! parent-death signal). The bottom of the helper's files: it uses none of them.

use std::fs;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

pub(crate) const STATUS_FD: i32 = 3;
pub(super) const MAX_CONFIG_BYTES: u64 = 64 << 20;
pub(super) const MAX_PREPARE_BYTES: usize = 1 << 20;

/// In the program's process, between its set-up and the program: init's word
/// ("run" or "exec ...") arrives on this descriptor...
pub(super) const GO_FD: RawFd = 3;
/// ...after the waiting interpreter said it is ready on this one.
pub(super) const READY_FD: RawFd = 4;

/// The helper's (then init's) connection to the zygote, when it has one.
pub(super) const ZYG_FD: RawFd = 5;

/// The pre-started interpreter (see `waiter.py`): sandbench's code, run as
/// `<interpreter> <file_name>` from /work, replaced by the program's file.
pub(super) const WAITER_PY: &str = include_str!("../waiter.py");
/// Node's waiter (see `waiter.js`): it can only run its program inline.
pub(super) const WAITER_JS: &str = include_str!("../waiter.js");

/// What the helper needs before any run: the sandbox's shape. Everything in
/// it is the same for every run of a tier (a spare is made from it alone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Prepare {
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
    /// The host's build token (`helper_exe::BUILD`): a helper of another
    /// build refuses to build the sandbox.
    #[serde(default)]
    pub build: String,
    /// The program's process comes from the zygote (`zygote.rs`) over the
    /// connection on [`ZYG_FD`], not from a fork of init.
    #[serde(default)]
    pub zygote: bool,
}

/// An interpreter started before its program, and what it can run inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiter {
    pub interpreter: Vec<String>,
    pub file_name: String,
    pub env: Vec<(String, String)>,
}

impl Waiter {
    /// Whether this waiter runs `cfg`'s program itself (the same interpreter,
    /// file name and environment), rather than exec'ing another interpreter.
    pub(crate) fn runs_inline(&self, cfg: &SandboxConfig) -> bool {
        self.interpreter == cfg.interpreter && self.file_name == cfg.file_name && self.env == cfg.env
    }

    fn is_node(&self) -> bool {
        matches!(self.interpreter.first().map(|c| c.rsplit('/').next().unwrap_or(c)), Some("node" | "nodejs"))
    }

    /// The waiter's own source, in its interpreter's language.
    pub(crate) fn source(&self) -> &'static str {
        if self.is_node() {
            WAITER_JS
        } else {
            WAITER_PY
        }
    }

    /// The command line the waiter starts with: its run's, and in a
    /// session Python's `-s` besides. There it starts between calls, next
    /// to files the earlier calls left: the user site's `.pth` files and
    /// `usercustomize` (`HOME` is /work) would run there, outside any call.
    /// `waiter.py` adds the user site as start-up would have, once its call
    /// has come. Elsewhere it starts before any program file exists, and
    /// as the run's own command line.
    pub(crate) fn argv(&self, session: bool) -> Vec<String> {
        let mut argv = self.interpreter.clone();
        if session && !self.is_node() && !argv.is_empty() {
            argv.insert(1, "-s".into());
        }
        argv.push(self.file_name.clone());
        argv
    }
}

/// What a run brings: the program and the limits init applies before it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SandboxConfig {
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
pub(crate) enum Status {
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
        /// Processes of the sandbox's pid namespace other than init left
        /// once it had killed and reaped them all (`steps::wait_alone`): 0
        /// confirms the run ended whole; None, not confirmed.
        #[serde(default)]
        left: Option<u32>,
        /// Bounds the watch and the exit scan hit (the run is then
        /// `incomplete` unless a violation is found).
        #[serde(default)]
        bounds: Vec<crate::judge::BoundHit>,
    },
}

/// Where [`send`] writes: fd 3, or (in the program's process, once fd 3 is
/// the waiter's) a close-on-exec copy above it.
pub(super) static STATUS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(STATUS_FD);

pub(super) fn send(status: &Status) {
    // fd 3 is the status pipe; write(2) of a small line is atomic.
    let mut line = serde_json::to_string(status).unwrap_or_default();
    line.push('\n');
    let fd = STATUS.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the status descriptor stays open in the helper and init for
    // their whole life, and in the program's process until its exec.
    let _ = nix::unistd::write(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }, line.as_bytes());
}

/// CLOCK_MONOTONIC in ns (the clock the host's `Instant` reads).
pub(crate) fn mono_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only into `t`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

pub(super) fn mark(what: &str) {
    send(&Status::Mark { what: what.into(), mono_ns: mono_ns() });
}

pub(super) fn fail(msg: String) -> ! {
    send(&Status::Error { msg });
    // SAFETY: ends the process at once; nothing to unwind in a forked child.
    unsafe { libc::_exit(121) }
}

/// The helper's stdin starts with an 8-byte little-endian length and that
/// many bytes of JSON; read exactly that (init reads the rest).
pub(super) fn read_prepare() -> Result<Prepare, String> {
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
pub(crate) fn frame_prepare(p: &Prepare) -> Vec<u8> {
    let json = serde_json::to_vec(p).unwrap_or_default();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// One message from the unix socket `sock` with at most `N` descriptors
/// (blocking, retried on EINTR): the bytes read, the descriptors (owned,
/// close-on-exec), and whether the kernel cut the control data.
pub(super) fn recv_fds<const N: usize>(sock: RawFd) -> nix::Result<(usize, Vec<OwnedFd>, bool)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; N]);
    let msg = loop {
        match recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r?,
        }
    };
    let mut fds = vec![];
    for c in msg.cmsgs().into_iter().flatten() {
        if let ControlMessageOwned::ScmRights(got) = c {
            // SAFETY: SCM_RIGHTS just installed these descriptors in our table.
            fds.extend(got.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
        }
    }
    Ok((msg.bytes, fds, msg.flags.contains(MsgFlags::MSG_CTRUNC)))
}

/// The host hands the helper its two channels (the status pipe's write end,
/// then the egress socket) as the first message on stdin, a socket: it starts
/// the helper with a spawn (no code of its own between fork and exec, so no
/// copy of its address space), which cannot put descriptors at fixed numbers.
/// They go to [`STATUS_FD`] and `NET_FD` here, and a third, the connection
/// to the zygote, to [`ZYG_FD`]. A helper whose stdin is not a socket
/// (started by hand, or by a test) keeps fds 3 and 4 as inherited. Returns
/// how many came (0: not a socket).
pub(super) fn take_channels() -> usize {
    let die = |why: String| -> ! {
        // No status channel yet: stderr is the host's pipe.
        eprintln!("sandbox helper: {why}");
        // SAFETY: ends the process at once, before any step of the sandbox.
        unsafe { libc::_exit(121) }
    };
    let (fds, cut) = match recv_fds::<4>(0) {
        Err(nix::errno::Errno::ENOTSOCK) => return 0,
        Err(e) => die(format!("cannot receive its channels: {e}")),
        Ok((_, fds, cut)) => (fds, cut),
    };
    // The third, when there is one: its connection to the zygote.
    if !(2..=3).contains(&fds.len()) || cut {
        die(format!("expected its 2 or 3 channels on stdin, got {}", fds.len()));
    }
    // Above the targets first, so placing one cannot close the other.
    let high: Vec<OwnedFd> = fds
        .iter()
        .map(|f| match nix::fcntl::fcntl(f, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10)) {
            // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor we own.
            Ok(n) => unsafe { OwnedFd::from_raw_fd(n) },
            Err(e) => die(format!("cannot move its channels: {e}")),
        })
        .collect();
    drop(fds);
    for (fd, to) in high.iter().zip([STATUS_FD, super::super::netns::NET_FD, ZYG_FD]) {
        // dup2 leaves the copy open across exec, as inheriting it did.
        // SAFETY: dup2 between descriptor numbers, no memory involved.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(fd), to) } < 0 {
            die(format!("cannot place its channel on fd {to}: {}", std::io::Error::last_os_error()));
        }
    }
    high.len()
}

/// Die with the parent. Unchecked, a sandbox could outlive a killed sandbench.
pub(super) fn set_pdeathsig() {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        fail(format!("PR_SET_PDEATHSIG: {}", std::io::Error::last_os_error()));
    }
}

/// Point stdout and stderr at /dev/null: the host sees EOF on the program's
/// output as soon as the program side is gone, not when the supervisors are.
pub(super) fn release_output() {
    let r = fs::OpenOptions::new().write(true).open("/dev/null").map_err(|e| e.to_string()).and_then(|null| {
        nix::unistd::dup2_stdout(&null).and_then(|_| nix::unistd::dup2_stderr(&null)).map_err(|e| e.to_string())
    });
    if let Err(e) = r {
        fail(format!("cannot release the program's output pipes: {e}"));
    }
}

/// Mark every descriptor past stderr close-on-exec (the status pipe above
/// all): the program must start with 0, 1 and 2 only.
pub(super) fn cloexec_all() -> Result<(), String> {
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

pub(super) fn pipe() -> (OwnedFd, OwnedFd) {
    match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => fail(format!("pipe: {e}")),
    }
}

/// Write a whole buffer to a raw descriptor (pipes and cgroup files).
pub(super) fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> nix::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Decode one status line; anything malformed is an error line, never a panic.
pub(crate) fn parse_status(line: &[u8]) -> Status {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| Status::Error { msg: format!("malformed status from the sandbox: {e}") })
}
