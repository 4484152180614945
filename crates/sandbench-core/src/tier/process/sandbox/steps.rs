//! init's steps that a one-shot run (`init.rs`) and a session's calls
//! (`session.rs`) both take: the word that starts the program, dropping
//! privileges, reaping, waiting, preparing a run's files. Their own file
//! because init hands a session to `session.rs`, which takes them too.

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::mount::{mount, MsFlags};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use super::base::*;
use super::privs;
use super::root::*;
use super::scratch::Scratch;

/// init's word to the program's process: run the program file in the
/// waiting interpreter, or exec `exe` with this argv and environment.
pub(super) fn go_message(inline: bool, exe: &CString, cfg: &SandboxConfig) -> Vec<u8> {
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

/// init, once the sandbox is built for what it will run: nothing it does
/// from here on needs a privilege (see `privs.rs`). It becomes the
/// sandbox's uid with no capability, and says so on the status pipe.
pub(super) fn drop_privileges(prep: &Prepare, owner: (u32, u32), alive: &OwnedFd) {
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
pub(super) fn end_the_rest() {
    loop {
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), nix::sys::signal::Signal::SIGKILL);
        match waitpid(None::<Pid>, None) {
            Err(nix::errno::Errno::ECHILD) => return,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => fail(format!("init cannot reap the run's processes: {e}")),
        }
    }
}

/// How long init waits, once it has reaped its own children, for the rest
/// of its namespace to be reaped by their parents outside it.
const ALONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Once [`end_the_rest`] is done: how many processes of the namespace other
/// than init are left, zombies included — 0 confirms that every process of
/// the run ended and was reaped. A process whose parent is outside the
/// namespace (the zygote's fork, and anything a program parented on the
/// zygote) is not init's to reap: its parent does, so init looks at its own
/// `/proc` (which lists every process of this pid namespace, a zombie until
/// it is reaped) until only pid 1 is there, killing again each round what
/// is, for at most [`ALONE_WITHIN`]. None: `/proc` could not be read.
pub(super) fn wait_alone() -> Option<u32> {
    let deadline = std::time::Instant::now() + ALONE_WITHIN;
    let mut pause = std::time::Duration::from_micros(200);
    loop {
        let others = fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n != "1" && n.bytes().all(|b| b.is_ascii_digit())))
            .count() as u32;
        if others == 0 || std::time::Instant::now() >= deadline {
            return Some(others);
        }
        let _ = nix::sys::signal::kill(Pid::from_raw(-1), nix::sys::signal::Signal::SIGKILL);
        while reap_orphan().is_some() {}
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(20));
    }
}

/// A child of init that has exited, with the kernel's count of its resources.
pub(super) struct Reaped {
    pub(super) pid: i32,
    pub(super) code: Option<i32>,
    pub(super) signal: Option<i32>,
    pub(super) cpu_ms: u64,
    pub(super) max_rss_kb: u64,
}

/// Reap one exited child without waiting, if any (none at all is no error:
/// a zygote's process is not init's child).
pub(super) fn reap_orphan() -> Option<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only into `status`.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid < 0 && nix::errno::Errno::last() == nix::errno::Errno::EINTR {
            continue;
        }
        return (pid > 0).then_some(pid);
    }
}

/// Reap one exited child without waiting; None when none has exited.
pub(super) fn reap_any() -> Option<Reaped> {
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
pub(super) fn wait_and_serve(
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
pub(super) fn wait_ready(
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
pub(super) fn prepare_run(
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

pub(crate) fn find_in_path(cmd: &str, env: &[(String, String)]) -> Option<CString> {
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
