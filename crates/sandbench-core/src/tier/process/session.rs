//! Process-tier sessions, the host side. The sandbox of a session is the one
//! a run gets (same helper, namespaces, root, scratch tmpfs, run cgroup,
//! Landlock, seccomp, a uid of its own leased for the session's life), kept:
//! each call goes down the helper's stdin as a frame after its Prepare (see
//! `sandbox/session.rs` for the inside), and every call's program writes to
//! the session's stdout and stderr pipes. A call's output is complete when
//! init reports its exit, because init reports only once every process of the
//! call is gone. A call is judged on the cgroup counters it added, on files
//! changed during it and on scratch mounts that filled during it; a cancel or
//! a CPU kill ends the cgroup's processes — the call's program and what it
//! started, never init — and the session goes on. Closing stdin ends init,
//! and with it the namespace.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe::Receiver;

use super::launch::{launch, Launched};
use super::probe::uid_policy;
use super::pump::{self, Pump, Scope};
use super::run::count_user_processes;
use super::sandbox::{self, SandboxConfig};
use super::spare::waiter_for;
use super::ProcessTier;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::spec::{Language, RunSpec};
use crate::tier::contract::{BoxFuture, SessionSpec, TierExit, TierSession};

/// The longest a session's sandbox may take to be built (a few hundred
/// milliseconds normally, seconds on a loaded machine).
const BUILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) struct ProcessSession {
    kept: tokio::sync::Mutex<Option<Kept>>,
    alive: AtomicBool,
    uid_range: (u32, u32),
}

struct Kept {
    sandbox: Launched,
    /// Where calls go (framed), after the sandbox's Prepare.
    stdin: tokio::net::UnixStream,
    /// The session's output pipes: every call's program writes to them.
    out: Receiver,
    err: Receiver,
}

pub(crate) async fn open(tier: &ProcessTier, spec: SessionSpec) -> anyhow::Result<Arc<dyn TierSession>> {
    // Python calls start in a pre-started interpreter, as one-shot runs do;
    // other calls exec from it.
    let waiter = waiter_for(&RunSpec::new(Language::Python, ""));
    let range = (tier.uid_base, tier.uid_count);
    // Sessions keep no egress proxy: `Session::open` refused an allow list.
    let mut sandbox =
        launch(&spec.limits, Some(waiter), None, None, true, &tier.shape(), std::time::Instant::now()).await?;
    let pipes = (|| -> anyhow::Result<_> {
        let stdin = sandbox.stdin.take().ok_or_else(|| anyhow!("helper has no stdin"))?;
        let out = sandbox.child.stdout.take().ok_or_else(|| anyhow!("helper has no stdout"))?.into_owned_fd()?;
        let err = sandbox.child.stderr.take().ok_or_else(|| anyhow!("helper has no stderr"))?.into_owned_fd()?;
        Ok((stdin, Receiver::from_owned_fd(out)?, Receiver::from_owned_fd(err)?))
    })();
    let ready = match pipes {
        // A sandbox that never says ready must not hold the opener (and a
        // server's session slot) for ever.
        Ok(p) => match tokio::time::timeout(BUILD_DEADLINE, sandbox.wait_ready()).await {
            Ok(r) => r.map(|_| p),
            Err(_) => {
                tracing::warn!("a process session's sandbox was not ready within {BUILD_DEADLINE:?}; torn down");
                Err(anyhow!(
                    "the session's sandbox was not ready within {} s (is the machine overloaded?); try again",
                    BUILD_DEADLINE.as_secs()
                ))
            }
        },
        Err(e) => Err(e),
    };
    match ready {
        Ok((stdin, out, err)) => Ok(Arc::new(ProcessSession {
            kept: tokio::sync::Mutex::new(Some(Kept { sandbox, stdin, out, err })),
            alive: AtomicBool::new(true),
            uid_range: range,
        })),
        Err(e) => {
            sandbox.teardown().await;
            Err(e)
        }
    }
}

/// Read what is in a pipe now, without waiting: the call is over (every
/// process that could write to it is gone), so this is the rest of its output.
async fn drain_now(rx: &Receiver, stream: Stream, ctx: &RunContext) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match nix::unistd::read(rx.as_fd(), &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => ctx.emit(EventKind::Output(stream, buf[..n].to_vec())).await,
        }
    }
}

/// End the running call: init's kill(-1) reaches all of the call's
/// processes at once and nothing else; should the pipe fail, the cgroup —
/// the call's processes only — is killed from here.
async fn ask_kill(stdin: &mut tokio::net::UnixStream, cg: Option<&super::cgroup::RunCgroup>) {
    let sent = async {
        stdin.write_all(&sandbox::KILL_FRAME).await?;
        stdin.flush().await
    };
    if sent.await.is_err() {
        if let Some(c) = cg {
            c.kill_all();
        }
    }
}

/// Read what a readable pipe holds; false once it is closed.
async fn take_ready(rx: &Receiver, stream: Stream, ctx: &RunContext, buf: &mut [u8]) -> bool {
    loop {
        match rx.try_read(buf) {
            Ok(0) => return false,
            Ok(n) => ctx.emit(EventKind::Output(stream, buf[..n].to_vec())).await,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

impl TierSession for ProcessSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let mut held = self.kept.lock().await;
            let Some(kept) = held.as_mut() else { anyhow::bail!("the session's sandbox is gone") };
            let result = self.call(kept, &spec, &ctx).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            if !kept.sandbox.alive() {
                self.alive.store(false, Ordering::Relaxed);
            }
            result
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            if let Some(k) = self.kept.lock().await.take() {
                // EOF on stdin: init exits, the namespace ends.
                drop(k.stdin);
                drop(k.out);
                drop(k.err);
                k.sandbox.teardown().await;
            }
        })
    }

    fn alive(&self) -> bool {
        if !self.alive.load(Ordering::Relaxed) {
            return false;
        }
        // Between calls (the lock is free): the sandbox's helper, from the
        // kernel. During a call the call itself finds out.
        if let Ok(mut kept) = self.kept.try_lock() {
            if !kept.as_mut().is_some_and(|k| k.sandbox.alive()) {
                self.alive.store(false, Ordering::Relaxed);
                return false;
            }
        }
        true
    }
}

impl ProcessSession {
    async fn call(&self, kept: &mut Kept, spec: &RunSpec, ctx: &RunContext) -> anyhow::Result<TierExit> {
        let limits = &spec.limits;
        if !kept.sandbox.alive() {
            anyhow::bail!("the session's sandbox is gone");
        }
        let cg = kept.sandbox.cg.as_ref();
        let nproc = cg.is_none().then(|| count_user_processes(nix::unistd::getuid().as_raw()) + limits.pids);
        let config = SandboxConfig {
            code: spec.code.clone(),
            file_name: spec.language.program_file(&spec.code).into(),
            interpreter: spec.interpreter(),
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
        let frame = sandbox::frame_call(&config);
        kept.stdin.write_all(&frame).await.context("cannot hand the call to the session's sandbox")?;
        kept.stdin.flush().await.context("cannot hand the call to the session's sandbox")?;
        let mut side = CallSide {
            out: &kept.out,
            err: &kept.err,
            stdin: &mut kept.stdin,
            out_open: true,
            err_open: true,
            buf: vec![0u8; 64 * 1024],
        };
        let launched = &mut kept.sandbox;
        let mut pump = Pump::new(ctx, limits, Scope::Call { base });
        // The call is over when init says the program exited: by then every
        // process of the call is gone, and what they wrote is in the pipes.
        pump.drive(launched, &mut side).await?;
        drain_now(side.out, Stream::Stdout, ctx).await;
        drain_now(side.err, Stream::Stderr, ctx).await;
        let cg = launched.cg.as_ref();
        if pump.status_eof && !pump.has_exit() {
            pump.error.get_or_insert("the session's sandbox ended during the call".into());
        }
        let final_counters = pump.final_sample(cg.map(|c| c.stats())).await;
        if let Some(msg) = pump.error.take() {
            if pump.status_eof || pump.helper_done {
                self.alive.store(false, Ordering::Relaxed);
            }
            return Err(anyhow!("{msg}"));
        }
        let Some(e) = pump.exited() else {
            return Err(anyhow!("the sandbox ended without reporting the program's exit (see the log)"));
        };
        let shown = if pump.killed && !pump.judge.cpu_exhausted() {
            ExitStatus { code: None, signal: Some(libc::SIGKILL) }
        } else {
            e.status
        };
        let rss = e.max_rss_kb * 1024;
        // init's look at its namespace: the session's cgroup is the next
        // call's as soon as this one has ended.
        let after = super::pump::processes_after(true, e.left, None).await;
        let (mut details, counters) = pump.conclude(e, shown, final_counters, cg, launched, false).await;
        after.record(&mut details, ctx).await;
        details["start"] = json!("session");
        let used = details.get("uid").cloned().unwrap_or(serde_json::Value::Null);
        let policy = uid_policy(self.uid_range.0, self.uid_range.1, &used);
        details["uid_policy"] = json!(format!("{policy} — one uid for the whole session"));
        details["warnings"] = json!(launched.warnings);
        let memory = Some(pump.peak_mem.map_or(rss, |p| p.max(rss)));
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: counters.cpu_ms, memory_bytes: memory, pids: None }), details })
    }
}

/// A session call's side of the pump: every call's program writes to the
/// session's pipes, taken as they become readable (they never reach EOF
/// while the session lives); a stop asks init to end the call's processes.
struct CallSide<'a> {
    out: &'a Receiver,
    err: &'a Receiver,
    stdin: &'a mut tokio::net::UnixStream,
    out_open: bool,
    err_open: bool,
    buf: Vec<u8>,
}

impl pump::Side for CallSide<'_> {
    async fn output_ready(&mut self) -> Stream {
        tokio::select! {
            r = self.out.readable(), if self.out_open => {
                self.out_open = r.is_ok();
                Stream::Stdout
            }
            r = self.err.readable(), if self.err_open => {
                self.err_open = r.is_ok();
                Stream::Stderr
            }
            else => std::future::pending().await,
        }
    }

    async fn take(&mut self, stream: Stream, ctx: &RunContext) {
        let (rx, open) = match stream {
            Stream::Stdout => (self.out, &mut self.out_open),
            Stream::Stderr => (self.err, &mut self.err_open),
        };
        if *open {
            *open = take_ready(rx, stream, ctx, &mut self.buf).await;
        }
    }

    /// What the call's processes wrote is in the pipes once init reports
    /// the exit (taken then by `drain_now`).
    fn drained(&self) -> bool {
        true
    }

    async fn kill(&mut self, _: &mut tokio::process::Child, cg: Option<&super::cgroup::RunCgroup>) {
        ask_kill(self.stdin, cg).await;
    }
}
