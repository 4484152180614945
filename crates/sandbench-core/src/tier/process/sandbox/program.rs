//! The program's process: Landlock, its own uid, no_new_privs, seccomp,
//! then it waits (as the pre-started interpreter, or before its exec) for
//! init's word.

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::resource::Resource;
use nix::unistd::{Gid, Uid};

use super::base::*;
use super::guard::*;
use super::limits::*;
use super::privs;

/// Decode an "exec" message (the inverse of [`go_message`]).
pub(super) fn parse_exec(m: &[u8]) -> Option<(CString, Vec<CString>, Vec<CString>)> {
    let rest = m.strip_prefix(b"exec\0")?;
    let fields: Vec<&[u8]> = rest.split(|b| *b == 0).collect();
    let end = fields.iter().skip(1).position(|f| f.is_empty())? + 1;
    let c = |f: &&[u8]| CString::new(*f).ok();
    let exe = c(fields.first()?)?;
    let argv = fields[1..end].iter().filter_map(c).collect();
    let env = fields[end + 1..].iter().filter(|f| !f.is_empty()).filter_map(c).collect();
    Some((exe, argv, env))
}

pub(super) fn landlock(egress_port: Option<u16>) -> String {
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

/// The program's process: every limit that does not depend on the run
/// (Landlock, its uid, no_new_privs, seccomp), then it waits — as the
/// pre-started interpreter, or before its exec — for init's word.
pub(super) fn program_main(
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
    // Every signal at its default and none blocked, as a program started
    // from a terminal has them: sandbench ignores SIGPIPE, and an exec keeps
    // an ignored signal ignored (a shell pipeline then sees EPIPE).
    if let Err(e) = default_signals() {
        fail(format!("cannot restore the default signal dispositions: {e}"));
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
    let programs = match super::super::seccomp::programs() {
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
            let argv: Vec<CString> =
                w.argv(prep.session).into_iter().map(|a| CString::new(a).unwrap_or_default()).collect();
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

/// Every catchable signal to `SIG_DFL`, and an empty signal mask. The raw
/// call: the C library refuses to touch the two signals it keeps for
/// itself (32 and 33), which sandbench's own parent may have left ignored.
pub(crate) fn default_signals() -> nix::Result<()> {
    use nix::sys::signal::{SigSet, SigmaskHow};
    // The kernel's struct sigaction (handler, flags, restorer, mask), all
    // zero: SIG_DFL, no flags, an empty mask.
    let dfl = [0u64; 4];
    for sig in (1..=64).filter(|s| ![libc::SIGKILL, libc::SIGSTOP].contains(s)) {
        // SAFETY: the kernel reads 32 bytes at `dfl` (the struct is smaller)
        // and writes nothing (no old action asked for); no handler code.
        let r =
            unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), std::ptr::null_mut::<u64>(), 8usize) };
        if r != 0 {
            return Err(nix::errno::Errno::last());
        }
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
}
