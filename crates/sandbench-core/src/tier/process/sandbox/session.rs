//! A session's init: the sandbox (namespaces, root, scratch tmpfs, the run
//! cgroup, the session's uid) stays, and init runs one program per call.
//!
//! The helper's stdin is then a unix stream socket (the control channel)
//! instead of a pipe. Each call arrives on it as an 8-byte little-endian
//! length carrying, as `SCM_RIGHTS`, the write ends of the call's stdout and
//! stderr pipes, followed by that many bytes of [`SandboxConfig`] JSON. For
//! each call init does what it does for a one-shot run — forks a fresh
//! program process (Landlock, the session's uid, no_new_privs, seccomp, its
//! own session id), moves it into the run's cgroup, applies the call's
//! rlimits, says go — and when the program exits it kills every other
//! process of the namespace (`kill(-1)` from its pid 1), reaps them, judges
//! the scratch space for this call only, and reports the exit on the status
//! pipe. The host then sees EOF on the call's pipes. EOF on the control
//! channel ends the session: init exits and the kernel ends the namespace.
#![allow(unsafe_code)] // fork and raw descriptors of the sandbox init, as in the rest of sandbox.rs

use super::*;

use std::io::IoSliceMut;
use std::time::SystemTime;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

/// The control channel: fd 0 of the helper, inherited by init.
const CTL_FD: RawFd = 0;

/// Read one call; `None` once the host closed the channel (the session ends).
fn recv_call() -> Option<(SandboxConfig, OwnedFd, OwnedFd)> {
    let mut head = [0u8; 8];
    let mut got = 0;
    let mut fds: Vec<OwnedFd> = vec![];
    while got < head.len() {
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [IoSliceMut::new(&mut head[got..])];
        let msg = match recvmsg::<()>(CTL_FD, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => fail(format!("session init: the control channel failed: {e}")),
        };
        let n = msg.bytes;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // SAFETY: the kernel just installed these descriptors in
                    // this process for this message; nothing else owns them.
                    fds.extend(raw.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                }
            }
        }
        if n == 0 {
            return None;
        }
        got += n;
    }
    let len = u64::from_le_bytes(head);
    if len > MAX_CONFIG_BYTES {
        fail(format!("session init: a call of {len} bytes"));
    }
    let mut buf = vec![0u8; len as usize];
    // SAFETY: fd 0 stays open for init's life; ManuallyDrop keeps it so.
    let mut ctl = std::mem::ManuallyDrop::new(unsafe { fs::File::from_raw_fd(CTL_FD) });
    if let Err(e) = ctl.read_exact(&mut buf) {
        fail(format!("session init: cannot read a call: {e}"));
    }
    let cfg: SandboxConfig = match serde_json::from_slice(&buf) {
        Ok(c) => c,
        Err(e) => fail(format!("session init: bad call: {e}")),
    };
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(out), Some(err), None) => Some((cfg, out, err)),
        _ => fail("session init: a call came without exactly its two output pipes".into()),
    }
}

/// Scratch mounts out of space or inodes right now.
fn full_mounts() -> Vec<&'static str> {
    SCRATCH
        .iter()
        .copied()
        .filter(|m| {
            nix::sys::statvfs::statvfs(*m)
                .map(|s| s.blocks_available() == 0 || (s.files() > 0 && s.files_available() == 0))
                .unwrap_or(false)
        })
        .collect()
}

/// A file at the size limit changed during this call (its ctime, which no
/// program can set back, is not older than `since`). Bounded, no symlinks.
fn capped_since(file_size: u64, since: SystemTime) -> Option<String> {
    for dir in SCRATCH {
        let mut stack = vec![(Path::new(dir).to_path_buf(), 0)];
        let mut budget = 20_000;
        while let Some((d, depth)) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                budget -= 1;
                if budget == 0 {
                    return None;
                }
                let Ok(m) = e.metadata() else { continue };
                if m.is_file() && m.len() >= file_size {
                    use std::os::unix::fs::MetadataExt;
                    let ctime = SystemTime::UNIX_EPOCH
                        + std::time::Duration::new(
                            m.ctime().max(0) as u64,
                            m.ctime_nsec().clamp(0, 999_999_999) as u32,
                        );
                    if ctime >= since {
                        return Some(e.path().to_string_lossy().chars().take(200).collect());
                    }
                }
                if m.is_dir() && depth < 16 {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    None
}

pub(super) fn init_session(
    prep: &Prepare,
    owner: (u32, u32),
    procs: Vec<OwnedFd>,
    waiter: Option<(&Waiter, CString)>,
) -> ! {
    let mut watch = Watch::new();
    // The helper's output pipes are not any call's: each call brings its own.
    release_output();
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        fail(format!("init cannot block SIGCHLD: {e}"));
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(e) => fail(format!("init cannot watch its children: {e}")),
    };
    let ids = (!prep.user_ns).then_some(owner);
    send(&Status::Ready);
    loop {
        let Some((cfg, out, err)) = recv_call() else {
            // The session is closed: the kernel ends the namespace with us.
            // SAFETY: plain exit.
            unsafe { libc::_exit(0) }
        };
        // Writes of earlier calls (and their clean-up) are not this call's.
        watch.drain();
        watch.hit = None;
        watch.full = false;
        watch.overflow = false;
        watch.file_size = cfg.file_size_bytes;
        let prior = full_mounts();
        let since = SystemTime::now() - std::time::Duration::from_millis(20);
        // The pre-started interpreter, when the call is the kind it runs.
        let inline = waiter
            .as_ref()
            .is_some_and(|(w, _)| w.interpreter == cfg.interpreter && w.file_name == cfg.file_name && w.env == cfg.env);
        let call_waiter = if inline { waiter.as_ref().map(|(w, e)| (*w, e.clone())) } else { None };
        if let Some((w, _)) = &call_waiter {
            if let Err(e) = write_owned(&Path::new("/work").join(&w.file_name), WAITER_PY.as_bytes(), owner) {
                fail(format!("session init: {e}"));
            }
        }
        let (go_r, go_w) = pipe();
        let (ready_r, ready_w) = pipe();
        // The program starts with the default signal mask.
        if let Err(e) = mask.thread_unblock() {
            fail(format!("init cannot unblock SIGCHLD: {e}"));
        }
        // SAFETY: init is single-threaded.
        let main_pid = match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(go_w);
                drop(ready_r);
                for (fd, to) in [(&out, 1), (&err, 2)] {
                    // SAFETY: dup2 between descriptors this process owns.
                    if unsafe { libc::dup2(fd.as_raw_fd(), to) } < 0 {
                        fail(format!("dup2: {}", std::io::Error::last_os_error()));
                    }
                }
                drop(out);
                drop(err);
                program_main(prep, owner, call_waiter, go_r, ready_w)
            }
            Ok(ForkResult::Parent { child }) => child,
            Err(e) => fail(format!("fork of the program failed: {e}")),
        };
        if let Err(e) = mask.thread_block() {
            fail(format!("init cannot block SIGCHLD: {e}"));
        }
        // init keeps no copy of the call's pipes: EOF reaches the host once
        // the call's processes are gone.
        drop(out);
        drop(err);
        drop(go_r);
        drop(ready_w);
        let pid = main_pid.as_raw().to_string();
        for fd in &procs {
            if let Err(e) = write_all(fd, pid.as_bytes()) {
                fail(format!("cannot move the program's process into the run's cgroup: {e}"));
            }
        }
        let mut byte = [0u8; 1];
        let ready = matches!(nix::unistd::read(&ready_r, &mut byte), Ok(1));
        drop(ready_r);
        if !ready {
            send(&Status::Error {
                msg: "the sandbox's interpreter exited while starting (its error, if any, is on the call's stderr)"
                    .into(),
            });
        }
        let started =
            ready && start_call(prep, owner, &cfg, call_waiter.as_ref().map(|(w, _)| *w), main_pid, ids, go_w);
        // Follow the program to its exit (a program process that failed to
        // start has said why on the status pipe and exits 121).
        let (code, signal, cpu_ms, max_rss_kb) = wait_main(main_pid, &sfd, &mut watch);
        // Nothing the call started outlives it: pid 1's kill(-1) reaches every
        // other process of the namespace, and init reaps them all.
        // SAFETY: kill with integer arguments.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        // Until ECHILD: none left.
        while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(None::<Pid>, None) {}
        while let Ok(Some(_)) = sfd.read_signal() {}
        if !started {
            // Said on the status pipe already; the session goes on.
            send(&Status::Exit { code, signal, cpu_ms, max_rss_kb, fsize_hit: None, disk_full: false });
            continue;
        }
        watch.drain();
        if watch.overflow {
            send(&Status::Warning {
                msg: "too many file events to watch them all: a hidden limit hit may go unreported".into(),
            });
        }
        let now_full: Vec<&str> = full_mounts().into_iter().filter(|m| !prior.contains(m)).collect();
        let disk_full = if prior.is_empty() { watch.full || !now_full.is_empty() } else { !now_full.is_empty() };
        if !prior.is_empty() {
            send(&Status::Warning {
                msg: format!(
                    "scratch space already full when this call began (an earlier call filled it): {}; the other mounts are judged by their state at the end",
                    prior.join(", ")
                ),
            });
        }
        let fsize_hit = watch.hit.take().or_else(|| capped_since(cfg.file_size_bytes, since));
        send(&Status::Exit { code, signal, cpu_ms, max_rss_kb, fsize_hit, disk_full });
    }
}

/// Make the call's program file, apply its limits and say go; false (said on
/// the status pipe) when a step failed and the program must not run.
fn start_call(
    prep: &Prepare,
    owner: (u32, u32),
    cfg: &SandboxConfig,
    waiter: Option<&Waiter>,
    main_pid: Pid,
    ids: Option<(u32, u32)>,
    go_w: OwnedFd,
) -> bool {
    // The scratch space is the session's (its size fixed at the opening).
    let fixed = Prepare { disk_bytes: cfg.disk_bytes, ..prep.clone() };
    let steps = || -> Result<CString, String> {
        prepare_run(&fixed, owner, waiter, cfg)?;
        apply_rlimits_as(main_pid, cfg, ids)?;
        cfg.interpreter.first().and_then(|c| find_in_path(c, &cfg.env)).ok_or_else(|| {
            format!(
                "{} is not installed where the sandbox can see it (PATH /usr/local/bin:/usr/bin:/bin)",
                cfg.interpreter.first().map(String::as_str).unwrap_or("?")
            )
        })
    };
    match steps() {
        Ok(exe) => {
            send(&Status::Started);
            if let Err(e) = write_all(&go_w, &go_message(waiter.is_some(), &exe, cfg)) {
                send(&Status::Error {
                    msg: format!("the sandbox's interpreter exited before its program started: {e}"),
                });
                return false;
            }
            true
        }
        Err(e) => {
            send(&Status::Error { msg: e });
            false
        }
    }
}

/// Reap until the call's main process exits; watch the scratch space meanwhile.
fn wait_main(main_pid: Pid, sfd: &SignalFd, watch: &mut Watch) -> (Option<i32>, Option<i32>, u64, u64) {
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
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            if let Some(f) = &watch.fan {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => fail(format!("init poll: {e}")),
            }
            while let Ok(Some(_)) = sfd.read_signal() {}
            watch.drain();
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
        return (code, signal, cpu_ms, ru.ru_maxrss as u64);
    }
}
