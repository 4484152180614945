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
    if let Some((w, _)) = waiter.as_ref().filter(|_| !prep.zygote) {
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
    let (main_pid, exit_r) = if prep.zygote {
        let (exit_r, exit_w) = pipe();
        let pid = from_zygote([go_r, ready_w, guard_prog, exit_w], &ready_r);
        mark("zygote_forked");
        (pid, Some(exit_r))
    } else {
        // SAFETY: init is single-threaded.
        let pid = match unsafe { fork() } {
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
        (pid, None)
    };
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
    if prep.zygote {
        // What the zygote's process holds, read back from the kernel: not
        // its word for it.
        if let Err(e) = zygote_process_holds(main_pid, owner) {
            fail(format!("the zygote's process for this sandbox is not as it must be: {e}"));
        }
    }
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
    // A zygote's process that ended while it waited (the zygote died, and
    // took it along) leaves its exit pipe readable: say so, not what the
    // next step would fail with.
    if let Some(x) = &exit_r {
        let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(x), nix::poll::PollFlags::POLLIN)];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0) {
            fail("the program's process ended before its program started (its zygote died); the next run starts a new one".into());
        }
    }
    let ids = (!prep.user_ns).then_some(owner);
    if let Err(e) = apply_rlimits_as(main_pid, &cfg, ids) {
        fail(e);
    }
    let inline = waiter.as_ref().is_some_and(|(w, _)| w.runs_inline(&cfg));
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
        let reaped = match &exit_r {
            // The zygote's process is the zygote's child: its exit comes
            // from there (the kernel's wait status, as the zygote reaped
            // it); what it left is reparented to init and reaped here.
            Some(x) => {
                while reap_orphan().is_some() {}
                if !wait_and_serve(&sfd, &mut guard, &mut watch, Some(std::os::fd::AsFd::as_fd(x))) {
                    continue;
                }
                read_exit(x, main_pid)
            }
            None => {
                // Reap first: a child that exited before SIGCHLD was blocked
                // sent a signal nobody received.
                let Some(reaped) = reap_any() else {
                    wait_and_serve(&sfd, &mut guard, &mut watch, None);
                    continue;
                };
                reaped
            }
        };
        if reaped.pid != main_pid.as_raw() {
            continue; // an orphan reparented to us
        }
        // Nothing of the run outlives the verdict: whatever the program left
        // (a daemon in a session of its own) goes, and is reaped, first.
        end_the_rest();
        // ...and whatever was not init's own to reap (parented outside the
        // namespace) is gone too, or the exit says it is not confirmed.
        let left = wait_alone();
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
            left,
            bounds: found.bounds,
        });
        // SAFETY: plain exit.
        unsafe { libc::_exit(0) }
    }
}

/// Ask the zygote for the program's process (`zygote.rs`): init's pidfd and
/// the process's descriptors (go, ready, guard, then the status pipe and
/// the run's output) go over init's connection, which closes. The process
/// says its pid (in this namespace) first on the ready pipe.
fn from_zygote(fds: [OwnedFd; 4], ready: &OwnedFd) -> nix::unistd::Pid {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: ZYG_FD was placed by take_channels and only init holds it now.
    let conn = unsafe { OwnedFd::from_raw_fd(ZYG_FD) };
    // SAFETY: pidfd_open with integers; a new descriptor (or -1) comes back.
    let me = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if me < 0 {
        fail(format!("pidfd_open: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the descriptor pidfd_open just returned; nothing else owns it.
    let me = unsafe { OwnedFd::from_raw_fd(me as i32) };
    let [go, ready_w, guard, exit] = fds.each_ref().map(|f| f.as_raw_fd());
    let raw = [me.as_raw_fd(), go, ready_w, guard, STATUS_FD, 1, 2, exit];
    let iov = [std::io::IoSlice::new(b"z")];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&raw)];
    if let Err(e) =
        nix::sys::socket::sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
    {
        fail(format!("the sandbox's zygote is gone ({e}); the next run starts it again"));
    }
    drop((conn, me, fds));
    let Some(line) = read_line(ready, 16) else {
        fail("the zygote did not start the program's process (its error, if any, is above)".into());
    };
    match std::str::from_utf8(&line).ok().and_then(|l| l.strip_prefix('p')).and_then(|n| n.parse::<i32>().ok()) {
        Some(n) if n > 1 => nix::unistd::Pid::from_raw(n),
        _ => fail("the zygote's process gave no pid".into()),
    }
}

/// The zygote's process, once it said it is ready: its uid and gid are the
/// run's (all four of each), no capability in any set, no_new_privs, in
/// seccomp filter mode with the guard and the three filters, and its parent
/// outside this namespace (the zygote, which reaps it and tells init).
fn zygote_process_holds(pid: nix::unistd::Pid, (uid, gid): (u32, u32)) -> Result<(), String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("its status: {e}"))?;
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(str::trim)).unwrap_or("")
    };
    let all = |v: &str, want: u32| {
        let ids: Vec<&str> = v.split_whitespace().collect();
        ids.len() == 4 && ids.iter().all(|i| *i == want.to_string())
    };
    let want = [
        ("Uid", all(field("Uid"), uid)),
        ("Gid", all(field("Gid"), gid)),
        ("Groups", field("Groups").is_empty()),
        ("CapInh", field("CapInh").trim_start_matches('0').is_empty()),
        ("CapPrm", field("CapPrm").trim_start_matches('0').is_empty()),
        ("CapEff", field("CapEff").trim_start_matches('0').is_empty()),
        ("CapBnd", field("CapBnd").trim_start_matches('0').is_empty()),
        ("CapAmb", field("CapAmb").trim_start_matches('0').is_empty()),
        ("NoNewPrivs", field("NoNewPrivs") == "1"),
        ("Seccomp", field("Seccomp") == "2"),
        ("Seccomp_filters", field("Seccomp_filters") == "4"),
        // Its parent is the zygote, outside this namespace.
        ("PPid", field("PPid") == "0"),
    ];
    match want.iter().find(|(_, ok)| !ok) {
        Some((name, _)) => Err(format!("{name}: {}", field(name))),
        None => Ok(()),
    }
}

/// The zygote's word on its process's exit: `x <code> <signal> <cpu_ms>
/// <max_rss_kb>` (-1 for none), from the wait status and rusage the kernel
/// gave it. EOF or anything else: the zygote is gone, and so is the run.
fn read_exit(x: &OwnedFd, pid: nix::unistd::Pid) -> Reaped {
    let Some(line) = read_line(x, 96) else {
        fail("the sandbox's zygote ended before the program's process did".into());
    };
    let text = String::from_utf8_lossy(&line);
    let n: Vec<i64> = text.strip_prefix("x ").unwrap_or("").split(' ').filter_map(|f| f.parse().ok()).collect();
    let [code, signal, cpu_ms, max_rss_kb] = n[..] else {
        fail("the sandbox's zygote sent a malformed exit".into());
    };
    let some = |v: i64| (v >= 0).then_some(v as i32);
    Reaped {
        pid: pid.as_raw(),
        code: some(code),
        signal: some(signal),
        cpu_ms: cpu_ms.max(0) as u64,
        max_rss_kb: max_rss_kb.max(0) as u64,
    }
}

/// One line from a pipe, a byte at a time (nothing after it is consumed), of
/// at most `max` bytes; None at EOF, on an error or when it is longer.
fn read_line(fd: &OwnedFd, max: usize) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        let mut b = [0u8; 1];
        match nix::unistd::read(fd, &mut b) {
            Ok(1) if b[0] == b'\n' => return Some(line),
            Ok(1) if line.len() < max => line.push(b[0]),
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return None,
        }
    }
}
