//! Docker and gVisor sessions: the container stays between calls.
//!
//! A session container has the hardened shape of a one-shot run (no
//! network, read-only root, tmpfs scratch, no capabilities but SETUID/SETGID,
//! no-new-privileges, memory/pids/CPU limits, the owner labels the reapers
//! read), with the session keeper (`guest/docker_keeper.py`) as PID 1. Each
//! call gets a fresh loader (`guest/docker_loader.py`, the same one a run
//! uses), started with the Engine's exec API while the session is idle and
//! waiting for its payload, in session mode: it drops the program to
//! the session's uid (one per session, so the files of earlier calls stay
//! the program's), frames its output, status and exit on the exec's stdout,
//! and when the program exits — or sandbench sends a byte on the exec's
//! stdin (cancel, CPU limit) — kills every process of that uid, so nothing a
//! call started outlives it. Each call is judged on its own share of the
//! container's cgroup counters, on files changed during the call and on
//! scratch mounts that filled during the call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::anyhow;
use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::container::{self, Shape};
use super::engine::{self, Engine};
use super::{reap, remove, sample_loop, short, Cgroup, LoaderFacts, Sample};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::judge::{self, ExitFacts, Judge};
use crate::session::counters_since;
use crate::spec::RunSpec;
use crate::tier::contract::{BoxFuture, TierExit, TierSession};

/// PID 1 of a session container.
pub const KEEPER: &str = include_str!("../../../../../guest/docker_keeper.py");

/// How long the loader may take to end after sandbench asked it to kill the
/// program; longer, and the container is judged broken.
const KILL_GRACE: Duration = Duration::from_secs(15);
/// Files changed this long before a call began still count as the call's
/// (tmpfs timestamps come from a coarse clock).
const CTIME_SLACK_S: f64 = 0.05;

type Output = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type Input = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A call's loader, started through exec and waiting for its payload.
struct Loader {
    output: Output,
    input: Input,
}

/// Start a loader in session mode. Files changed before now belong to
/// earlier calls: no process of the session runs between a call's end and
/// the next call, so a loader made ahead may say so at its start.
async fn start_loader(docker: &bollard::Docker, id: &str) -> anyhow::Result<Loader> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() - CTIME_SLACK_S)
        .unwrap_or(0.0);
    let exec = docker
        .create_exec(
            id,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                privileged: Some(false),
                user: Some("0:0".into()),
                env: Some(vec!["SANDBENCH_SESSION=1".into(), format!("SANDBENCH_CALL_SINCE={since:.3}")]),
                cmd: Some(vec!["python3".into(), "-I".into(), "-u".into(), "-c".into(), container::LOADER.into()]),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow!("cannot start the call in the session's container: {}", engine::cause(&e)))?;
    let started = docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| anyhow!("cannot start the call in the session's container: {}", engine::cause(&e)))?;
    let StartExecResults::Attached { output, input } = started else {
        anyhow::bail!("the engine started the call detached");
    };
    Ok(Loader { output, input })
}

pub(crate) struct DockerSession {
    engine: Engine,
    id: String,
    gvisor: bool,
    shape: Shape,
    uid: u32,
    gid: u32,
    image: String,
    user_policy: String,
    alive: AtomicBool,
    /// The next call's loader, started while the session is idle.
    next: std::sync::Arc<tokio::sync::Mutex<Option<Loader>>>,
}

/// Create and start a session's container; nothing is left behind on failure.
pub(crate) async fn open(
    engine: &Engine,
    shape: Shape,
    user: &str,
    tier: &'static str,
) -> anyhow::Result<DockerSession> {
    let (uid, gid) = container::choose_ids(user, engine.local)?;
    let run_id = format!("session-{}", container::new_run_id());
    // A session's scratch stays inside the container: no host scratch
    // folder (gVisor's high-water watch) for a sandbox that outlives a run.
    let mut body = shape.body(reap::labels(&run_id, tier)?, None);
    body.entrypoint = Some(vec!["python3".into(), "-I".into(), "-u".into(), "-c".into(), KEEPER.into()]);
    // The keeper reads nothing (calls come in through exec), but its stdin
    // is open all the same: a container without one is given the host's
    // /dev/null, and runsc chowns its sandbox's stdio to the sandbox user
    // (nobody), which took the host's /dev/null from root.
    body.open_stdin = Some(true);
    body.stdin_once = Some(false);
    body.attach_stdin = Some(false);
    body.attach_stdout = Some(false);
    body.attach_stderr = Some(false);
    let gvisor = shape.runtime.as_deref() == Some("runsc");
    if let Some(h) = body.host_config.as_mut() {
        if !gvisor {
            // The keeper and the call's loader are the two processes that
            // are not the program's.
            h.pids_limit = Some(shape.pids.saturating_add(2) as i64);
        }
    }
    let id = super::create_and_start(engine, body, &shape, &format!("sandbench-{tier}-{run_id}"), tier, None).await?;
    let s = DockerSession {
        engine: engine.clone(),
        id,
        gvisor,
        image: shape.image.clone(),
        user_policy: container::describe_user(user),
        shape,
        uid,
        gid,
        alive: AtomicBool::new(true),
        next: Default::default(),
    };
    s.prestart();
    Ok(s)
}

impl TierSession for DockerSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let result = self.call(&spec, &ctx).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            if result.is_err() && !self.container_running().await {
                self.alive.store(false, Ordering::Relaxed);
            }
            if self.alive() {
                self.prestart();
            }
            let (usage, mut details) = result?;
            details["runtime"] = json!(if self.gvisor { "runsc" } else { "runc" });
            details["start"] = json!("session");
            details["image"] = json!(self.image);
            details["container"] = json!(short(&self.id));
            details["engine"] = json!({ "host": self.engine.host, "api_version": self.engine.api_version,
                "server_version": self.engine.server_version });
            let mut hardening = self.shape.hardening();
            hardening["init"] = json!("sandbench's session keeper as PID 1, uid 0 with no capabilities (reaps orphans; not ptrace-able or signalable by the program); each call's loader runs through exec as uid 0 with SETUID/SETGID only, kept to kill the call's processes at its end, no-new-privileges, python3 -I (nothing of the scratch on its path), writing the program's file as the program's uid without following what is at its name");
            details["hardening"] = hardening;
            Ok(TierExit { usage: Some(usage), details })
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            // A loader made ahead waits for a payload that never comes.
            drop(self.next.lock().await.take());
            remove(&self.engine.docker, &self.id).await;
        })
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}

impl DockerSession {
    /// Start the next call's loader in the background (its interpreter's
    /// start-up is then off the next call's path).
    fn prestart(&self) {
        let (next, docker, id) = (self.next.clone(), self.engine.docker.clone(), self.id.clone());
        tokio::spawn(async move {
            let mut slot = next.lock().await;
            if slot.is_none() {
                match start_loader(&docker, &id).await {
                    Ok(l) => *slot = Some(l),
                    Err(e) => tracing::debug!("session loader not made ahead: {e:#}"),
                }
            }
        });
    }

    async fn container_running(&self) -> bool {
        self.engine
            .docker
            .inspect_container(&self.id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.running)
            .unwrap_or(false)
    }

    /// One call: a fresh loader through exec, followed to its end.
    async fn call(&self, spec: &RunSpec, ctx: &RunContext) -> anyhow::Result<(UsageSample, serde_json::Value)> {
        let docker = &self.engine.docker;
        let limits = &spec.limits;
        let guest_pids = !self.gvisor;
        let cgroup = if self.engine.local { Cgroup::find(&self.id) } else { None };
        // The container's counters run for the whole session: this call is
        // judged on what they gained from here.
        let base = cgroup.as_ref().map(|c| c.sample(guest_pids).counters).unwrap_or_default();
        let taken = self.next.lock().await.take();
        let Loader { mut output, mut input } = match taken {
            Some(l) => l,
            None => start_loader(docker, &self.id).await?,
        };
        ctx.emit(EventKind::Phase(Phase::Running)).await;
        ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;

        // The loader's stdin: the payload, then a byte that means "kill the
        // program" (cancel, CPU limit) or "all frames arrived" (the ack).
        let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        // The loader counts every process but itself; the keeper is not the program's.
        let mut payload_spec = spec.clone();
        payload_spec.limits.pids = limits.pids.saturating_add(1);
        // No host-side scratch guard here (the loader's own watch judges a
        // call) and no network: a session is offline.
        let _ = in_tx.send(container::payload(&payload_spec, self.uid, self.gid, false, None));
        let writer = tokio::spawn(async move {
            while let Some(b) = in_rx.recv().await {
                if input.write_all(&b).await.is_err() || input.flush().await.is_err() {
                    return;
                }
            }
            let _ = input.shutdown().await;
        });
        let mut in_tx = Some(in_tx);

        let (sample_tx, mut sample_rx) = mpsc::channel::<Sample>(4);
        let sampler = tokio::spawn(sample_loop(docker.clone(), self.id.clone(), cgroup.clone(), guest_pids, sample_tx));
        let mut frames = container::Frames::default();
        let mut judge = Judge::new(limits);
        let mut loader = LoaderFacts::default();
        let mut cg_counters = base;
        let mut last = UsageSample::default();
        let mut peak_mem: Option<u64> = None;
        let mut reported: Option<(ExitStatus, u64, u64)> = None;
        let mut failed: Option<String> = None;
        let mut killed = false;
        let mut delivered = [0u64; 2];
        let mut prior_full: Vec<String> = vec![];
        let mut loader_err: Vec<u8> = vec![];
        let kill_deadline = tokio::time::sleep(Duration::from_secs(86_400 * 365));
        tokio::pin!(kill_deadline);
        let ask_kill = |killed: &mut bool, tx: &Option<mpsc::UnboundedSender<Vec<u8>>>| {
            if !*killed {
                *killed = true;
                if let Some(tx) = tx {
                    let _ = tx.send(b"k".to_vec());
                }
            }
        };
        let mut broken: Option<String> = None;
        // The container ending mid-call (gVisor: a memory limit hit takes the
        // whole sandbox) ends the call and the session; the exec stream may
        // never end on its own then.
        let mut wait = Box::pin(docker.wait_container(
            &self.id,
            Some(bollard::query_parameters::WaitContainerOptions { condition: "not-running".into() }),
        ));
        let mut container_ended = false;
        loop {
            tokio::select! {
                _ = wait.next(), if !container_ended => {
                    container_ended = true;
                    self.alive.store(false, Ordering::Relaxed);
                    break;
                }
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message })) => {
                        for frame in frames.feed(&message) {
                            match frame {
                                container::Frame::Stdout(b) => {
                                    delivered[0] += b.len() as u64;
                                    ctx.emit(EventKind::Output(Stream::Stdout, b)).await
                                }
                                container::Frame::Stderr(b) => {
                                    delivered[1] += b.len() as u64;
                                    ctx.emit(EventKind::Output(Stream::Stderr, b)).await
                                }
                                container::Frame::Status(found) => {
                                    for m in found.get("prior").and_then(|v| v.as_array()).into_iter().flatten() {
                                        if let Some(m) = m.as_str() {
                                            prior_full.push(crate::sanitize::inert_line(m, 80));
                                        }
                                    }
                                    loader.absorb(&found);
                                    judge.sample(ctx, &loader.counters(counters_since(cg_counters, base))).await;
                                }
                                // No relay in a session (it is offline): a relay
                                // frame is the loader's mistake, dropped.
                                container::Frame::Started { .. } | container::Frame::Net(_) => {}
                                container::Frame::Failed(why) => {
                                    failed = Some(why);
                                    in_tx.take().map(|tx| tx.send(b"\n".to_vec()));
                                }
                                container::Frame::Exit { status, stdout_bytes, stderr_bytes } => {
                                    reported = Some((status, stdout_bytes, stderr_bytes));
                                    // Every process of the call is gone (the loader
                                    // killed them): the counters are this call's.
                                    if let Some(cg) = &cgroup {
                                        cg_counters = cg_counters.max(cg.sample(guest_pids).counters);
                                    }
                                    in_tx.take().map(|tx| tx.send(b"\n".to_vec()));
                                }
                            }
                        }
                        if let Some(why) = frames.broken.clone() {
                            broken = Some(why);
                            break;
                        }
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        let room = 4096usize.saturating_sub(loader_err.len());
                        loader_err.extend_from_slice(&message[..message.len().min(room)]);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!("exec stream: {e}");
                        break;
                    }
                    None => break,
                },
                _ = ctx.stop.cancelled(), if !killed => {
                    ask_kill(&mut killed, &in_tx);
                    kill_deadline.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                }
                _ = &mut kill_deadline => {
                    broken = Some("the call's loader did not end after sandbench asked it to kill the program".into());
                    break;
                }
                Some(s) = sample_rx.recv() => {
                    if reported.is_some() {
                        continue;
                    }
                    let mut u = s.usage;
                    u.cpu_ms = u.cpu_ms.map(|c| c.saturating_sub(base.cpu_ms.unwrap_or(0)));
                    last = u;
                    if let Some(m) = u.memory_bytes {
                        peak_mem = Some(peak_mem.map_or(m, |p| p.max(m)));
                    }
                    ctx.usage(u).await;
                    cg_counters = cg_counters.max(s.counters);
                    let mine = loader.counters(counters_since(cg_counters, base));
                    if judge.sample(ctx, &mine).await == judge::Action::KillForCpu && !killed {
                        ask_kill(&mut killed, &in_tx);
                        kill_deadline.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                    }
                }
            }
        }
        sampler.abort();
        drop(in_tx);
        writer.abort();
        // No exit report: did the memory limit end the whole sandbox? (gVisor's
        // sandbox is one host process.) The exec's stream can end before the
        // engine has marked the container stopped and OOM-killed: wait for
        // that as the one-shot run does.
        let oom_ended = if reported.is_none() && broken.is_none() && failed.is_none() {
            let deadline = tokio::time::Instant::now() + super::OOM_FLAG_WAIT;
            loop {
                let state = docker
                    .inspect_container(&self.id, None::<bollard::query_parameters::InspectContainerOptions>)
                    .await
                    .ok()
                    .and_then(|i| i.state);
                let oom = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
                let running = state.as_ref().and_then(|s| s.running).unwrap_or(false);
                if !running {
                    container_ended = true;
                    self.alive.store(false, Ordering::Relaxed);
                }
                // Still running at the deadline: the loader alone died.
                if oom || !running || tokio::time::Instant::now() >= deadline {
                    break oom;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        } else {
            false
        };
        if container_ended && !oom_ended && reported.is_none() {
            anyhow::bail!("the session's container ended during the call; the session closes");
        }
        if oom_ended {
            // The engine saw the memory limit end the container: the call was
            // stopped by it, and the session is over.
            self.alive.store(false, Ordering::Relaxed);
            ctx.note("the memory limit ended the session's whole sandbox; the session closes").await;
            let mut counters = loader.counters(counters_since(cg_counters, base));
            counters.oom_kills = Some(counters.oom_kills.unwrap_or(0).max(1));
            let status = ExitStatus { code: None, signal: Some(libc::SIGKILL) };
            let facts = ExitFacts { status, counters, ..Default::default() };
            judge.exit(ctx, &facts).await;
            ctx.emit(EventKind::Exit(status)).await;
            let usage = UsageSample { cpu_ms: last.cpu_ms, memory_bytes: peak_mem, pids: None };
            return Ok((usage, json!({ "program_uid": self.uid, "oom_killed": true, "session_ended": true })));
        }
        if let Some(why) = broken {
            // The loader cannot be trusted to have cleaned up: the container goes.
            self.alive.store(false, Ordering::Relaxed);
            return Err(anyhow!("the session's container is no longer usable ({why}); the session closes"));
        }
        if let Some(why) = failed {
            return Err(anyhow!("the container could not set up the program: {why}"));
        }
        let Some((status, out_bytes, err_bytes)) = reported else {
            let why = crate::sanitize::inert_line(&String::from_utf8_lossy(&loader_err), 300);
            // No exit report: the loader died (the container may have too).
            self.alive.store(false, Ordering::Relaxed);
            return Err(anyhow!(
                "the call ended without the loader reporting the program's exit{}; the session closes",
                if why.is_empty() { String::new() } else { format!(": {why}") }
            ));
        };
        if !prior_full.is_empty() {
            ctx.note(format!(
                "scratch space already full when this call began (an earlier call filled it): {}",
                prior_full.join(", ")
            ))
            .await;
        }
        let counters = loader.counters(counters_since(cg_counters, base));
        let facts = ExitFacts {
            status,
            counters,
            rlimit_signals_trusted: false,
            capped_files: loader.fsize.clone(),
            full_mounts: loader.disk.clone(),
        };
        judge.exit(ctx, &facts).await;
        ctx.emit(EventKind::Exit(status)).await;
        let usage = UsageSample { cpu_ms: last.cpu_ms.or(counters.cpu_ms), memory_bytes: peak_mem, pids: None };
        let details = json!({
            "program_uid": self.uid,
            "program_uid_policy": format!("{} — one uid for the whole session", self.user_policy),
            "output": {
                "stdout_bytes": delivered[0],
                "stderr_bytes": delivered[1],
                "complete": ([out_bytes, err_bytes] == delivered),
            },
            "prior_full_mounts": prior_full,
        });
        Ok((usage, details))
    }
}
