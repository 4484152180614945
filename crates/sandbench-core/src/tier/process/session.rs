//! Process-tier sessions, the host side. The sandbox of a session is the one
//! a run gets (same helper, namespaces, root, scratch tmpfs, run cgroup,
//! Landlock, seccomp, a uid of its own leased for the session's life), kept:
//! the helper's stdin is a unix socket instead of a pipe, and each call goes
//! down it with the write ends of that call's own stdout and stderr pipes
//! (see `sandbox/session.rs` for the inside). A call is judged on the cgroup
//! counters it added, on files changed during it and on scratch mounts that
//! filled during it; a cancel or a CPU kill ends the cgroup's processes —
//! the call's program and what it started, never init — and the session
//! goes on. Closing the socket ends init, and with it the namespace.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use nix::fcntl::OFlag;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use serde_json::json;

use super::sandbox::{self, SandboxConfig, Status};
use super::{count_user_processes, isolation_details, pump, python_waiter, read_line_bounded, uid_policy};
use super::{Launched, ProcessTier, SAMPLE_EVERY};
use crate::event::{EventKind, ExitStatus, Phase, Stream, UsageSample};
use crate::judge::{self, ExitFacts, Judge};
use crate::session::{counters_since, SessionSpec, TierSession};
use crate::spec::{Language, RunSpec};
use crate::tier::{BoxFuture, RunContext, TierExit};

pub(crate) struct ProcessSession {
    kept: tokio::sync::Mutex<Option<Kept>>,
    alive: AtomicBool,
    uid_range: (u32, u32),
}

struct Kept {
    sandbox: Launched,
    /// The host's end of the control socket.
    ctl: UnixStream,
}

pub(crate) async fn open(tier: &ProcessTier, spec: SessionSpec) -> anyhow::Result<Arc<dyn TierSession>> {
    let (host, inside) = UnixStream::pair().context("cannot create the session's control socket")?;
    // Python calls start in a pre-started interpreter, as one-shot runs do.
    let waiter = python_waiter(&RunSpec::new(Language::Python, ""));
    let range = (tier.uid_base, tier.uid_count);
    let mut sandbox =
        ProcessTier::launch(&spec.limits, Some(waiter), range, tier.allow_degraded, Some(OwnedFd::from(inside)))
            .await?;
    let prepare = sandbox.prepare.take().unwrap_or_default();
    let mut h = host.try_clone().context("control socket")?;
    tokio::task::spawn_blocking(move || h.write_all(&prepare))
        .await
        .context("control socket")?
        .context("cannot talk to the sandbox helper")?;
    // The helper's own output pipes carry nothing: each call brings its own.
    drop(sandbox.child.stdout.take());
    drop(sandbox.child.stderr.take());
    if let Err(e) = sandbox.wait_ready().await {
        sandbox.teardown().await;
        return Err(e);
    }
    Ok(Arc::new(ProcessSession {
        kept: tokio::sync::Mutex::new(Some(Kept { sandbox, ctl: host })),
        alive: AtomicBool::new(true),
        uid_range: range,
    }))
}

/// One call down the control socket: its length with the two pipes, then
/// its config.
fn send_call(ctl: &mut UnixStream, cfg: &[u8], out: OwnedFd, err: OwnedFd) -> std::io::Result<()> {
    let head = (cfg.len() as u64).to_le_bytes();
    let fds = [out.as_raw_fd(), err.as_raw_fd()];
    let mut sent = 0;
    while sent < head.len() {
        let iov = [IoSlice::new(&head[sent..])];
        // The pipes go with the first byte only.
        let rights = [ControlMessage::ScmRights(&fds)];
        let cmsgs: &[ControlMessage] = if sent == 0 { &rights } else { &[] };
        match sendmsg::<UnixAddr>(ctl.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    ctl.write_all(cfg)
}

impl TierSession for ProcessSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let mut held = self.kept.lock().await;
            let Some(kept) = held.as_mut() else { anyhow::bail!("the session's sandbox is gone") };
            let result = self.call(kept, &spec, &ctx).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            if result.is_err() || !kept.sandbox.alive() {
                // A sandbox that failed a call this way serves no more.
                self.alive.store(false, Ordering::Relaxed);
            }
            result
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            if let Some(k) = self.kept.lock().await.take() {
                // EOF on the control socket: init exits, the namespace ends.
                drop(k.ctl);
                k.sandbox.teardown().await;
            }
        })
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

impl ProcessSession {
    async fn call(&self, kept: &mut Kept, spec: &RunSpec, ctx: &RunContext) -> anyhow::Result<TierExit> {
        let limits = &spec.limits;
        let launched = &mut kept.sandbox;
        if !launched.alive() {
            anyhow::bail!("the session's sandbox is gone");
        }
        let cg = launched.cg.as_ref();
        let nproc = cg.is_none().then(|| count_user_processes(nix::unistd::getuid().as_raw()) + limits.pids);
        let config = SandboxConfig {
            code: spec.code.clone(),
            file_name: spec.language.file_name().into(),
            interpreter: spec.language.interpreter().iter().map(|s| s.to_string()).collect(),
            env: spec.sandbox_env("/work", "/tmp"),
            cpu_secs: limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64,
            data_limit: cg.is_none().then_some(limits.memory_bytes),
            file_size_bytes: limits.file_size_bytes,
            disk_bytes: limits.disk_bytes,
            open_files: limits.open_files,
            nproc,
        };
        // The cgroup's counters run for the whole session: this call is
        // judged on what they gain from here.
        let base = cg.map(|c| c.stats().counters()).unwrap_or_default();
        let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("cannot create the call's pipes")?;
        let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).context("cannot create the call's pipes")?;
        let payload = serde_json::to_vec(&config)?;
        let mut ctl = kept.ctl.try_clone().context("control socket")?;
        tokio::task::spawn_blocking(move || send_call(&mut ctl, &payload, out_w, err_w))
            .await
            .context("control socket")?
            .context("cannot hand the call to the session's sandbox")?;
        let out_rx = tokio::net::unix::pipe::Receiver::from_owned_fd(out_r).context("the call's stdout")?;
        let err_rx = tokio::net::unix::pipe::Receiver::from_owned_fd(err_r).context("the call's stderr")?;
        let mut out_task = tokio::spawn(pump(Some(out_rx), Stream::Stdout, ctx.clone()));
        let mut err_task = tokio::spawn(pump(Some(err_rx), Stream::Stderr, ctx.clone()));
        let status = launched.status.as_mut().ok_or_else(|| anyhow!("the session has no status pipe"))?;
        let child = &mut launched.child;

        let mut ticker = tokio::time::interval(SAMPLE_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut judge = Judge::new(limits);
        let mut isolation = json!({});
        let mut exit: Option<Status> = None;
        let mut error: Option<String> = None;
        let mut killed = false;
        let mut status_eof = false;
        let mut helper_done = false;
        let (mut out_done, mut err_done) = (false, false);
        let mut peak_mem: Option<u64> = None;
        let mut line = Vec::new();
        // The cgroup holds the call's processes only (init stays outside):
        // killing it ends the call, not the session.
        let kill = |killed: &mut bool| {
            *killed = true;
            if let Some(c) = cg {
                c.kill_all();
            }
        };
        while !((exit.is_some() || status_eof) && out_done && err_done) {
            let next = tokio::select! {
                r = read_line_bounded(status, &mut line), if !status_eof && exit.is_none() => match r {
                    Ok(0) | Err(_) => { status_eof = true; None }
                    Ok(_) => Some(sandbox::parse_status(&line)),
                },
                _ = &mut out_task, if !out_done => { out_done = true; None }
                _ = &mut err_task, if !err_done => { err_done = true; None }
                _ = child.wait(), if !helper_done => {
                    helper_done = true;
                    error.get_or_insert("the session's sandbox ended during the call".into());
                    if let Some(c) = cg { c.kill_all(); }
                    None
                }
                _ = ctx.stop.cancelled(), if !killed => { kill(&mut killed); None }
                _ = ticker.tick(), if exit.is_none() && !status_eof => {
                    if let Some(c) = cg {
                        let s = c.stats();
                        let mine = counters_since(s.counters(), base);
                        if let Some(m) = s.memory {
                            peak_mem = Some(peak_mem.map_or(m, |p| p.max(m)));
                        }
                        ctx.usage(UsageSample { cpu_ms: mine.cpu_ms, memory_bytes: s.memory, pids: s.pids }).await;
                        if judge.sample(ctx, &mine).await == judge::Action::KillForCpu && !killed {
                            kill(&mut killed);
                        }
                    }
                    None
                }
            };
            match next {
                None | Some(Status::Ready) => {}
                Some(Status::Started) => {
                    ctx.emit(EventKind::Phase(Phase::Running)).await;
                    ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
                }
                Some(Status::Isolation { landlock, seccomp, uid, user_ns, degraded }) => {
                    for d in &degraded {
                        ctx.note(format!("degraded: {d}")).await;
                    }
                    isolation = json!({
                        "landlock": landlock, "seccomp": seccomp, "uid": uid, "user_ns": user_ns, "degraded": degraded,
                    });
                }
                Some(Status::Warning { msg }) => ctx.note(msg).await,
                Some(Status::Error { msg }) => {
                    error.get_or_insert(msg);
                }
                Some(s @ Status::Exit { .. }) => exit = Some(s),
            }
            if status_eof && !(out_done && err_done) && exit.is_none() {
                // The sandbox is gone: nothing holds the call's pipes much longer.
                if let Some(c) = cg {
                    c.kill_all();
                }
            }
        }
        if status_eof && exit.is_none() {
            error.get_or_insert("the session's sandbox ended during the call".into());
        }
        let final_counters = cg.map(|c| counters_since(c.stats().counters(), base));
        if let Some(c) = &final_counters {
            judge.sample(ctx, c).await;
        }
        if let Some(msg) = error {
            if status_eof || helper_done {
                self.alive.store(false, Ordering::Relaxed);
            }
            return Err(anyhow!("{msg}"));
        }
        let Some(Status::Exit { code, signal, cpu_ms, max_rss_kb, fsize_hit, disk_full }) = exit else {
            return Err(anyhow!("the sandbox ended without reporting the program's exit (see the log)"));
        };
        let x = if killed && !judge.cpu_exhausted() {
            ExitStatus { code: None, signal: Some(libc::SIGKILL) }
        } else {
            ExitStatus { code, signal }
        };
        let mut counters = final_counters.unwrap_or_default();
        counters.cpu_ms = counters.cpu_ms.or(Some(cpu_ms));
        let facts = ExitFacts {
            status: x,
            counters,
            rlimit_signals_trusted: false,
            capped_files: fsize_hit.into_iter().collect(),
            full_mounts: if disk_full { vec!["/work, /tmp or /dev/shm".into()] } else { vec![] },
        };
        judge.exit(ctx, &facts).await;
        ctx.emit(EventKind::Exit(x)).await;
        let mut details = isolation_details(isolation, cg);
        details["exit_rusage"] = json!({ "cpu_ms": cpu_ms, "max_rss_bytes": max_rss_kb * 1024 });
        details["start"] = json!("session");
        let used = details.get("uid").cloned().unwrap_or(serde_json::Value::Null);
        let policy = uid_policy(self.uid_range.0, self.uid_range.1, &used);
        details["uid_policy"] = json!(format!("{policy} — one uid for the whole session"));
        details["warnings"] = json!(launched.warnings);
        let rss = max_rss_kb * 1024;
        let memory = Some(peak_mem.map_or(rss, |p| p.max(rss)));
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: counters.cpu_ms, memory_bytes: memory, pids: None }), details })
    }
}
