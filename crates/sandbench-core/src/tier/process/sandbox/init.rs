//! init, pid 1 of the sandbox's pid namespace: builds the root, joins the
//! run's cgroup with the program's process, applies the run's limits, drops
//! its privileges, says "go", reaps, and reports the exit. Sessions reuse
//! its steps (`steps.rs`) for each call (`session.rs`).

use std::io::Read;
use std::os::fd::OwnedFd;

use nix::unistd::{fork, ForkResult};

use super::base::*;
use super::guard::*;
use super::limits::*;
use super::program::*;
use super::root::*;
use super::scratch::Scratch;
use super::session;
use super::steps::*;

pub(super) fn init_main(prep: &Prepare, owner: (u32, u32), procs: Vec<OwnedFd>, alive: OwnedFd) -> ! {
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
    if let Err(e) = super::super::netns::serve_port(prep.network_port) {
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
