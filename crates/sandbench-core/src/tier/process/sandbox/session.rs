//! A session's init: the sandbox (namespaces, root, scratch tmpfs, the run
//! cgroup, the session's uid) stays, and init runs one program per call.
//!
//! The helper's stdin carries, after the [`Prepare`], one frame per call:
//! an 8-byte little-endian length and that many bytes of [`SandboxConfig`]
//! JSON; EOF ends the session (init exits and the kernel ends the namespace).
//! A frame of length 0 during a call is the host's kill (cancel, CPU limit):
//! init ends the call's processes itself, so that nothing but the call's
//! die (a kill from outside could race the next call's process).
//! For each call init does what it does for a one-shot run — a fresh program
//! process (Landlock, the session's uid, no_new_privs, seccomp, its own
//! session id) in the run's cgroup, the call's rlimits, then go — and when
//! the program exits it kills every other process of the namespace
//! (`kill(-1)` from its pid 1), reaps them all, judges the scratch space for
//! this call only and reports the exit on the status pipe. Only then does
//! the host take the call's output as complete: every process that could
//! write to the session's stdout and stderr pipes is gone by then.
//!
//! The next call's program process is made shortly after a call ends, once
//! the host's answer to it has gone out (and the first one at the opening),
//! as a spare is for one-shot runs: its interpreter starts and it joins the
//! cgroup while nothing waits for it.
//!
//! Everything privileged happens before the first call's process exists:
//! the scratch watch's fanotify group is made once (and reused by every
//! call), then init drops to the session's uid with no capability (see
//! `privs.rs`). Between calls it writes the next files in `/work` — a tree
//! the previous calls' programs owned — through the scratch mounts'
//! descriptors only (`scratch.rs`), as that uid.
#![allow(unsafe_code)] // fork and raw descriptors of the sandbox init, as in the rest of sandbox.rs

use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use nix::unistd::{fork, ForkResult, Pid};

use super::base::*;
use super::guard::*;
use super::limits::*;
use super::program::*;
use super::scratch::Scratch;
use super::steps::*;

use std::time::SystemTime;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// The next frame's length; `None` at EOF.
fn read_head() -> Option<u64> {
    // SAFETY: fd 0 is the host's pipe; ManuallyDrop keeps it open.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { fs::File::from_raw_fd(0) });
    let mut head = [0u8; 8];
    match stdin.read_exact(&mut head) {
        Ok(()) => Some(u64::from_le_bytes(head)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
        Err(e) => fail(format!("session init: cannot read a call: {e}")),
    }
}

/// Read one call's frame from stdin; `None` once the host closed it. A
/// kill that came after its call had ended anyway is skipped.
fn recv_call() -> Option<SandboxConfig> {
    // SAFETY: fd 0 is the host's pipe; ManuallyDrop keeps it open.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { fs::File::from_raw_fd(0) });
    let len = loop {
        match read_head()? {
            0 => continue,
            n => break n,
        }
    };
    if len > MAX_CONFIG_BYTES {
        fail(format!("session init: a call of {len} bytes"));
    }
    let mut buf = vec![0u8; len as usize];
    if let Err(e) = stdin.read_exact(&mut buf) {
        fail(format!("session init: cannot read a call: {e}"));
    }
    match serde_json::from_slice(&buf) {
        Ok(c) => Some(c),
        Err(e) => fail(format!("session init: bad call: {e}")),
    }
}

/// Frame a call as [`recv_call`] reads it.
/// The host's kill of the running call.
pub(crate) const KILL_FRAME: [u8; 8] = [0; 8];

pub(crate) fn frame_call(cfg: &SandboxConfig) -> Vec<u8> {
    let json = serde_json::to_vec(cfg).unwrap_or_default();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// A program process made ahead: in the run's cgroup, its interpreter
/// waiting for init's word (or, without one, waiting before its exec).
struct Next {
    pid: Pid,
    go: OwnedFd,
    /// False when it died while starting (said on the status pipe).
    ready: bool,
    /// Started as the waiting interpreter (not waiting before its exec).
    waiting: bool,
    /// The process's scratch guard (None: it installed none).
    guard: Option<crate::highwater::Guard>,
}

struct Init<'a> {
    prep: &'a Prepare,
    owner: (u32, u32),
    procs: Vec<OwnedFd>,
    waiter: Option<(&'a Waiter, CString)>,
    mask: SigSet,
    scratch: Scratch,
}

impl Init<'_> {
    /// Fork the next call's program process and move it into the cgroup.
    fn prestart(&self, watch: &mut Option<crate::highwater::Watch>) -> Next {
        // The previous call's program had this name: whatever it left there
        // is replaced, never written through. Should even that fail, the
        // process waits before its exec instead of in the interpreter.
        let waiter = self.waiter.as_ref().filter(|(w, _)| {
            match self.scratch.write_work(&w.file_name, w.source().as_bytes(), self.owner) {
                Ok(()) => true,
                Err(e) => {
                    send(&Status::Warning { msg: format!("the next call starts without a waiting interpreter: {e}") });
                    false
                }
            }
        });
        let (guard_init, guard_prog) = guard_socket();
        let (go_r, go_w) = pipe();
        let (ready_r, ready_w) = pipe();
        // The program starts with the default signal mask.
        if let Err(e) = self.mask.thread_unblock() {
            fail(format!("init cannot unblock SIGCHLD: {e}"));
        }
        // SAFETY: init is single-threaded.
        let pid = match unsafe { fork() } {
            Ok(ForkResult::Child) => {
                drop(go_w);
                drop(ready_r);
                drop(guard_init);
                let waiter = waiter.map(|(w, e)| (*w, e.clone()));
                program_main(self.prep, self.owner, waiter, go_r, ready_w, guard_prog)
            }
            Ok(ForkResult::Parent { child }) => child,
            Err(e) => fail(format!("fork of the program failed: {e}")),
        };
        if let Err(e) = self.mask.thread_block() {
            fail(format!("init cannot block SIGCHLD: {e}"));
        }
        drop(go_r);
        drop(ready_w);
        drop(guard_prog);
        let mut guard = receive_guard(&guard_init);
        drop(guard_init);
        let text = pid.as_raw().to_string();
        for fd in &self.procs {
            if let Err(e) = write_all(fd, text.as_bytes()) {
                fail(format!("cannot move the program's process into the run's cgroup: {e}"));
            }
        }
        let ready = wait_ready(&ready_r, &mut guard, watch);
        Next { pid, go: go_w, ready, waiting: waiter.is_some(), guard }
    }

    /// The call's program file, limits and word; false (said on the status
    /// pipe) when a step failed and the program must not run.
    fn start_call(&self, cfg: &SandboxConfig, next: &Next) -> bool {
        if !next.ready {
            send(&Status::Error {
                msg: "the sandbox's interpreter exited while starting (its error, if any, is on the call's stderr)"
                    .into(),
            });
            return false;
        }
        let waiter = self.waiter.as_ref().filter(|_| next.waiting);
        let inline = waiter
            .is_some_and(|(w, _)| w.interpreter == cfg.interpreter && w.file_name == cfg.file_name && w.env == cfg.env);
        // The waiter's file stays only when it is about to become the program.
        let waiter = waiter.map(|(w, _)| *w);
        // The scratch space is the session's: its size fixed at the opening.
        let fixed = Prepare { disk_bytes: cfg.disk_bytes, ..self.prep.clone() };
        let steps = || -> Result<CString, String> {
            prepare_run(&fixed, self.owner, waiter, cfg, &self.scratch)?;
            // init is the process's uid by now: no privilege needed.
            apply_rlimits(next.pid, cfg)?;
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
                // Without a waiter the process waits before its exec, so
                // every word is an exec; with one, "run" or "exec".
                let word = go_message(inline, &exe, cfg);
                if let Err(e) = write_all(&next.go, &word) {
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
}

pub(super) fn init_session(
    prep: &Prepare,
    owner: (u32, u32),
    procs: Vec<OwnedFd>,
    waiter: Option<(&Waiter, CString)>,
    scratch: Scratch,
    alive: OwnedFd,
) -> ! {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    if let Err(e) = mask.thread_block() {
        fail(format!("init cannot block SIGCHLD: {e}"));
    }
    let sfd = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(e) => fail(format!("init cannot watch its children: {e}")),
    };
    let init = Init { prep, owner, procs, waiter, mask, scratch };
    // One watch for the whole session, made while init may (fanotify needs
    // CAP_SYS_ADMIN); each call takes what it found.
    let mut watch = watch_scratch();
    drop_privileges(prep, owner, &alive);
    // init keeps the session's stdout and stderr for its program processes
    // (it writes nothing to them itself).
    let mut next = Some(init.prestart(&mut watch));
    send(&Status::Ready);
    loop {
        let Some(cfg) = recv_call() else {
            // The session is closed: the kernel ends the namespace with us.
            // SAFETY: plain exit.
            unsafe { libc::_exit(0) }
        };
        // Mounts full already were filled (and reported) by earlier calls.
        let prior = init.scratch.full_mounts();
        let since = SystemTime::now() - std::time::Duration::from_millis(20);
        let n = next.take().unwrap_or_else(|| init.prestart(&mut watch));
        if let Some(w) = &mut watch {
            // What the watch saw between calls (the prestarted interpreter)
            // is not this call's.
            let _ = w.take();
            w.set_file_size(cfg.file_size_bytes);
        }
        let started = init.start_call(&cfg, &n);
        let Next { pid: main_pid, go, mut guard, .. } = n;
        drop(go);
        // Follow the program to its exit (a program process that failed to
        // start has said why on the status pipe and exits 121).
        let (code, signal, cpu_ms, max_rss_kb) = wait_main(main_pid, &sfd, &mut watch, &mut guard);
        // Nothing the call started outlives it: pid 1's kill(-1) reaches
        // every other process of the namespace, and init reaps them all.
        end_the_rest();
        let left = wait_alone();
        while let Ok(Some(_)) = sfd.read_signal() {}
        let guarded = guard.as_ref().map(|g| g.served());
        drop(guard);
        if !started {
            let exit = Status::Exit {
                code,
                signal,
                cpu_ms,
                max_rss_kb,
                fsize_hit: None,
                full_mounts: vec![],
                guarded,
                files_watched: false,
                left,
                bounds: vec![],
            };
            send(&exit);
            next = prestart_after_reply(&init, &mut watch);
            continue;
        }
        let files_watched = watch.as_ref().is_some_and(|w| w.sees_files());
        let found = watch.as_mut().map(|w| w.take()).unwrap_or_default();
        for gap in &found.gaps {
            send(&Status::Warning { msg: gap.clone() });
        }
        let mut full: Vec<String> = found.full.into_iter().filter(|m| !prior.contains(&m.as_str())).collect();
        for m in init.scratch.full_mounts() {
            if !prior.contains(&m) && !full.iter().any(|f| f == m) {
                full.push(m.to_string());
            }
        }
        if !prior.is_empty() {
            send(&Status::Warning {
                msg: format!(
                    "scratch space already full when this call began (an earlier call filled it): {}; the other mounts are judged as usual",
                    prior.join(", ")
                ),
            });
        }
        // The watch saw this call's writes; a file capped by an earlier
        // call and untouched since is not this call's.
        let mut bounds = found.bounds;
        let fsize_hit = match found.capped.into_iter().next() {
            Some(f) => Some(f),
            None => {
                let (hit, b) = init.scratch.capped(cfg.file_size_bytes, Some(since));
                bounds.extend(b);
                hit
            }
        };
        send(&Status::Exit {
            code,
            signal,
            cpu_ms,
            max_rss_kb,
            fsize_hit,
            full_mounts: full,
            guarded,
            files_watched,
            left,
            bounds,
        });
        next = prestart_after_reply(&init, &mut watch);
    }
}

/// How long init lets the host's reply to a call go out before it makes
/// the next call's process. Made at once, the interpreter's start shared
/// the 2 CPUs with the host answering the call (an MCP session call's own
/// overhead was 0.73–0.78 ms p50 against 0.58–0.60 with the start deferred,
/// `benches/mcp-roundtrip.py`, side by side). A call that comes sooner has
/// its process made when it arrives, so waiting costs a call at most this.
const PRESTART_AFTER_MS: i32 = 5;

/// The next call's process, made while nobody waits for it: after
/// [`PRESTART_AFTER_MS`], or never here if the host writes first (a call,
/// a stale kill or EOF; the loop reads it, and a call then gets its process
/// made on the spot).
fn prestart_after_reply(init: &Init, watch: &mut Option<crate::highwater::Watch>) -> Option<Next> {
    let mut fds = [libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 }];
    // SAFETY: one valid pollfd for fd 0, which stays open for init's life.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 1, PRESTART_AFTER_MS) };
    (r <= 0).then(|| init.prestart(watch))
}

/// Reap until the call's main process exits; serve its guard, watch the
/// scratch space and the host's kill meanwhile.
fn wait_main(
    main_pid: Pid,
    sfd: &SignalFd,
    watch: &mut Option<crate::highwater::Watch>,
    guard: &mut Option<crate::highwater::Guard>,
) -> (Option<i32>, Option<i32>, u64, u64) {
    let mut host_open = true;
    loop {
        let Some(r) = reap_any() else {
            // SAFETY: fd 0 stays open for init's life.
            let stdin = unsafe { std::os::fd::BorrowedFd::borrow_raw(0) };
            if wait_and_serve(sfd, guard, watch, host_open.then_some(stdin)) {
                // A kill (or EOF: the session is closing): every process but
                // init goes, the program's main among them, and is reaped above.
                match read_head() {
                    Some(0) | None => {}
                    Some(_) => fail("session init: a call arrived while another ran".into()),
                }
                host_open = false;
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGKILL);
            }
            continue;
        };
        if r.pid == main_pid.as_raw() {
            return (r.code, r.signal, r.cpu_ms, r.max_rss_kb);
        }
        // else an orphan reparented to us
    }
}
