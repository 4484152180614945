//! Docker and gVisor sessions: the container stays between calls.
//!
//! A session container has the hardened shape of a one-shot run (no
//! network, read-only root, tmpfs scratch, no capabilities but SETUID/SETGID/SETPCAP,
//! no-new-privileges, memory/pids/CPU limits, the owner labels the reapers
//! read), with the session agent (`guest/docker_keeper.py`) as PID 1.
//! sandbench attaches to the container's stdin and stdout once, when it
//! starts, and every call goes over that one stream: the agent forks each
//! call's loader (`guest/docker_loader.py`, the one a run uses, in session
//! mode) as soon as the previous call has ended, so a call costs no Engine
//! exec (create, start, attach: 50–130 ms) and no interpreter start. The
//! loader reads the call's payload, drops the program to the session's uid
//! (one per session, so the files of earlier calls stay the program's),
//! frames its output, status and exit, and when the program exits — or
//! sandbench sends a `k` (cancel, CPU limit) — kills every process of that
//! uid, so nothing a call started outlives it; it ends once sandbench has
//! acknowledged the exit frame (a newline). Each call is judged on its own
//! share of the container's cgroup counters, on files changed during the
//! call and on scratch mounts that filled during the call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::cgroup::Cgroup;
use super::container::{self, Shape};
use super::engine::{self, Engine};
use super::lifecycle::{attach, create_and_start, remove, short, OOM_FLAG_WAIT};
use super::pump::{Beside, LoaderFacts, Output, Pump, Scope, Side};
use super::reap;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, UsageSample};
use crate::spec::RunSpec;
use crate::tier::contract::{BoxFuture, TierExit, TierSession};

/// PID 1 of a session container: the agent, then the loader its children
/// run (after the filters and the relay the loader's code refers to).
pub(crate) const AGENT: &str = concat!(
    include_str!("../../../../../guest/program_filter.py"),
    include_str!("../../../../../guest/scratch_guard.py"),
    include_str!("../../../../../guest/egress_relay.py"),
    include_str!("../../../../../guest/docker_keeper.py"),
    include_str!("../../../../../guest/docker_loader.py")
);

/// The agent's resident memory, added to a session container's memory
/// limit (measured: a session container idles at ~37 MiB on gVisor against
/// ~27 MiB for the keeper and a loader before the agent; a fork there copies
/// the interpreter's written pages).
const AGENT_MEMORY: u64 = 10 << 20;

/// How long the loader may take to end after sandbench asked it to kill the
/// program; longer, and the container is judged broken.
const KILL_GRACE: Duration = Duration::from_secs(15);

type Input = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// The session's one attached stream: the agent's loaders read calls from
/// `input` and write frames on `output`. Held by one call at a time.
struct Channel {
    output: Output,
    input: Input,
    /// The frame decoder, kept across calls: a call's frames must end with
    /// its exit frame, with nothing left over.
    frames: container::Frames,
    /// A call is under way on the stream: set when its payload goes out,
    /// cleared once it was acknowledged. Still set at the next call, the
    /// last one was dropped midway and the stream is in no known state.
    in_call: bool,
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
    /// The container's cgroup on a local engine, found once.
    cgroup: Option<Cgroup>,
    /// None once the stream broke (the session is then over).
    stream: tokio::sync::Mutex<Option<Channel>>,
    /// Fires when the engine says the container stopped (gVisor: a memory
    /// limit hit ends the whole sandbox; the stream may not end on its own).
    ended: CancellationToken,
    /// Why the container ended, as the engine told it when the watch saw
    /// it stop (removed, killed, OOM, the engine gone).
    ended_why: Arc<std::sync::Mutex<Option<String>>>,
    /// Ends the watch of the container when the session closes.
    watch: tokio::task::AbortHandle,
}

/// Create and start a session's container and attach to it; nothing is left
/// behind on failure.
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
    body.entrypoint = Some(vec!["python3".into(), "-I".into(), "-u".into(), "-c".into(), AGENT.into()]);
    // Calls come in on stdin, which is open (so the engine never hands
    // runsc the host's /dev/null to chown to the sandbox user) and closes
    // when sandbench's one attach ends: the agent then ends the container.
    body.open_stdin = Some(true);
    body.stdin_once = Some(true);
    // The agent's loaders make each call's program process ahead, as the
    // session's uid (popped from its environment before anything else runs;
    // every payload must name the same ids).
    body.env.get_or_insert_with(Vec::new).push(format!("SANDBENCH_SESSION_IDS={uid}:{gid}"));
    let gvisor = shape.runtime.as_deref() == Some("runsc");
    if let Some(h) = body.host_config.as_mut() {
        // The agent is one resident interpreter more than a one-shot run's
        // container holds (there the loader is PID 1): its share is added,
        // so a call's program has what a run's has under the same limit.
        let memory = shape.memory_bytes.saturating_add(AGENT_MEMORY).min(i64::MAX as u64) as i64;
        h.memory = Some(memory);
        h.memory_swap = Some(memory);
        if !gvisor {
            // The agent and the call's loader are the two processes that
            // are not the program's.
            h.pids_limit = Some(shape.pids.saturating_add(2) as i64);
        }
    }
    let id = create_and_start(engine, body, &shape, &format!("sandbench-{tier}-{run_id}"), tier, None).await?;
    let attached = attach(&engine.docker, &id).await;
    let attached = match attached {
        Ok(a) => a,
        Err(e) => {
            remove(&engine.docker, &id).await;
            anyhow::bail!("cannot attach to the session's container: {}", engine::cause(&e));
        }
    };
    let ended = CancellationToken::new();
    let ended_why: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let (docker, cid, fire) = (engine.docker.clone(), id.clone(), ended.clone());
    let (at, why) = (engine.clone(), ended_why.clone());
    let watch = tokio::spawn(async move {
        loop {
            let mut wait = docker.wait_container(
                &cid,
                Some(bollard::query_parameters::WaitContainerOptions { condition: "not-running".into() }),
            );
            let _ = wait.next().await;
            // The wait also ends when the engine's connection drops: only a
            // container the engine no longer runs, or an engine gone, ends
            // the session.
            match super::lifecycle::state_of(&at, &cid).await {
                Ok(_) => {}
                // The wait's connection dropped and the engine does not
                // answer: the daemon ended (a crash, a restart). The
                // session's one attach went through it and is lost with it
                // (a restarted daemon does not restore attaches), so the
                // session cannot go on even if its container lives. (A
                // frozen engine keeps the wait open: that is not this.)
                Err(cause) if cause.starts_with(super::lifecycle::ENGINE_SILENT) => {
                    let cause = format!(
                        "the Docker engine went away (restarted or stopped) and the session's attach to its container with it — {cause}"
                    );
                    tracing::debug!("session {}: {cause}", short(&cid));
                    if let Ok(mut w) = why.lock() {
                        w.get_or_insert(cause);
                    }
                    fire.cancel();
                    return;
                }
                Err(mut cause) => {
                    // `docker rm -f` kills first and removes a moment later:
                    // asked again shortly, the removal is the better reason.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    if let Err(later) = super::lifecycle::state_of(&at, &cid).await {
                        if !later.starts_with(super::lifecycle::ENGINE_SILENT) {
                            cause = later;
                        }
                    }
                    if let Ok(mut w) = why.lock() {
                        w.get_or_insert(cause);
                    }
                    fire.cancel();
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .abort_handle();
    Ok(DockerSession {
        engine: engine.clone(),
        // The OOM notice is held from before the first call's program.
        cgroup: if engine.local { Cgroup::find(&id).map(Cgroup::watching_oom) } else { None },
        id,
        gvisor,
        image: shape.image.clone(),
        user_policy: container::describe_user(user),
        shape,
        uid,
        gid,
        alive: AtomicBool::new(true),
        stream: tokio::sync::Mutex::new(Some(Channel {
            output: attached.output,
            input: attached.input,
            frames: Default::default(),
            in_call: false,
        })),
        ended,
        ended_why,
        watch,
    })
}

impl TierSession for DockerSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let mut timeline: Vec<(&'static str, f64)> = vec![];
            let result = self.call(&spec, &ctx, &mut timeline).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            if result.is_err() && !self.container_running().await {
                self.alive.store(false, Ordering::Relaxed);
            }
            let (usage, mut details) = result?;
            let mut t = serde_json::Map::new();
            for (k, v) in &timeline {
                t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
            }
            details["timeline_ms"] = serde_json::Value::Object(t);
            details["runtime"] = json!(if self.gvisor { "runsc" } else { "runc" });
            details["start"] = json!("session");
            details["image"] = json!(self.image);
            details["container"] = json!(short(&self.id));
            details["engine"] = json!({ "host": self.engine.host, "api_version": self.engine.api_version,
                "server_version": self.engine.server_version });
            let mut hardening = self.shape.hardening();
            hardening["init"] = json!("sandbench's session agent as PID 1, uid 0 with SETUID/SETGID/SETPCAP only (for its loaders), not dumpable, environment blanked, python3 -I with its working directory /, opening no path; it forks each call's loader ahead of the call; the loader drops the program to the session's uid and kills that uid's processes at the call's end, writing the program's file as the program's uid without following what is at its name");
            hardening["status_channel"] = json!("the container's stdin and stdout, attached once for the session: only the call's loader reads and writes them (the program's output arrives framed by it)");
            details["hardening"] = hardening;
            Ok(TierExit { usage: Some(usage), details })
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            self.watch.abort();
            // The attach goes with the container (its stdin closing would
            // end the agent anyway).
            drop(self.stream.lock().await.take());
            remove(&self.engine.docker, &self.id).await;
        })
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed) && !self.ended.is_cancelled()
    }

    fn ended_why(&self) -> Option<String> {
        self.ended_why.lock().ok()?.clone()
    }
}

impl DockerSession {
    async fn container_running(&self) -> bool {
        match super::lifecycle::state_of(&self.engine, &self.id).await {
            Ok(_) => true,
            Err(why) => {
                if let Ok(mut w) = self.ended_why.lock() {
                    w.get_or_insert(why);
                }
                false
            }
        }
    }

    /// Why the container is gone: what the watch saw, else asked now.
    async fn why_gone(&self) -> String {
        if let Some(w) = self.ended_why() {
            return w;
        }
        match super::lifecycle::state_of(&self.engine, &self.id).await {
            Err(why) => why,
            Ok(_) => "its program's loader ended".into(),
        }
    }

    /// One call over the session's stream: the payload to the loader that
    /// waits for it, its frames followed to the exit frame.
    async fn call(
        &self,
        spec: &RunSpec,
        ctx: &RunContext,
        timeline: &mut Vec<(&'static str, f64)>,
    ) -> anyhow::Result<(UsageSample, serde_json::Value)> {
        let mut slot = self.stream.lock().await;
        let Some(ch) = slot.as_mut().filter(|ch| !ch.in_call) else {
            self.alive.store(false, Ordering::Relaxed);
            *slot = None;
            anyhow::bail!("the session's stream to its container broke in an earlier call; the session closes");
        };
        let r = self.call_on(ch, spec, ctx, timeline).await;
        if !self.alive() {
            // A call that broke the stream (or outlived the container)
            // leaves it in no known state.
            *slot = None;
        }
        r
    }

    async fn call_on(
        &self,
        ch: &mut Channel,
        spec: &RunSpec,
        ctx: &RunContext,
        timeline: &mut Vec<(&'static str, f64)>,
    ) -> anyhow::Result<(UsageSample, serde_json::Value)> {
        let docker = &self.engine.docker;
        let limits = &spec.limits;
        let guest_pids = !self.gvisor;
        // The container's counters run for the whole session: this call is
        // judged on what they gained from here.
        let base = self.cgroup.as_ref().map(|c| c.sample(guest_pids).counters).unwrap_or_default();
        let oom_watch = self.cgroup.as_ref().and_then(|c| c.oom_watch());
        let oom_base = oom_watch.map(|w| w.seen());
        // The loader counts every process but itself; the agent is not the program's.
        let mut payload_spec = spec.clone();
        payload_spec.limits.pids = limits.pids.saturating_add(1);
        // No host-side scratch guard here (the loader's own watch judges a
        // call) and no network: a session is offline. The loader reads the
        // whole payload before it writes a frame, so writing it first
        // cannot deadlock against unread output.
        let payload = container::payload(&payload_spec, self.uid, self.gid, false, None);
        ch.in_call = true;
        if let Err(e) = async {
            ch.input.write_all(&payload).await?;
            ch.input.flush().await
        }
        .await
        {
            self.alive.store(false, Ordering::Relaxed);
            anyhow::bail!("cannot send the call to the session's container ({e}); the session closes");
        }
        timeline.push(("payload_sent", ctx.ms()));
        ctx.emit(EventKind::Phase(Phase::Running)).await;
        ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;

        let mut side = CallSide {
            input: &mut ch.input,
            ended: &self.ended,
            kill_deadline: Box::pin(tokio::time::sleep(Duration::from_secs(86_400 * 365))),
            acked: false,
        };
        let mut pump =
            Pump::new(ctx, limits, timeline, docker, &self.id, self.cgroup.clone(), guest_pids, Scope::Call { base });
        pump.drive(&mut ch.output, &mut ch.frames, &mut side).await;
        if side.acked {
            ch.in_call = false;
        }
        if let Some(e) = pump.stream_error.take() {
            pump.broken.get_or_insert(format!("the stream from the session's container failed: {e}"));
        }
        let (reported, failed) = (pump.reported, pump.failed.take());
        let mut container_ended = pump.gone;
        if container_ended {
            self.alive.store(false, Ordering::Relaxed);
        }
        // No exit report: did the memory limit end the whole sandbox? (gVisor's
        // sandbox is one host process.) The stream can end before the engine
        // has marked the container stopped and OOM-killed: wait for that as
        // the one-shot run does.
        let oom_ended = if reported.is_none() && pump.broken.is_none() && failed.is_none() {
            let deadline = tokio::time::Instant::now() + OOM_FLAG_WAIT;
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
                    // The kernel's notice, which outlives the cgroup (see
                    // `OomWatch`), before the engine's flag.
                    if let (Some(w), Some(b)) = (oom_watch, oom_base) {
                        if w.settled().await > b {
                            break true;
                        }
                    }
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
            let why = self.why_gone().await;
            anyhow::bail!("the session's container ended during the call ({why}); the session closes");
        }
        if oom_ended {
            // The engine saw the memory limit end the container: the call was
            // stopped by it, and the session is over.
            self.alive.store(false, Ordering::Relaxed);
            ctx.note("the memory limit ended the session's whole sandbox; the session closes").await;
            let mut counters = pump.counters();
            counters.oom_kills = Some(counters.oom_kills.unwrap_or(0).max(1));
            let status = ExitStatus { code: None, signal: Some(libc::SIGKILL) };
            let facts = crate::judge::ExitFacts { status, counters, ..Default::default() };
            pump.judge.exit(ctx, &facts).await;
            ctx.emit(EventKind::Exit(status)).await;
            let usage = UsageSample { cpu_ms: pump.last.cpu_ms, memory_bytes: pump.peak_mem, pids: None };
            return Ok((usage, json!({ "program_uid": self.uid, "oom_killed": true, "session_ended": true })));
        }
        if let Some(why) = pump.broken.take() {
            // The loader cannot be trusted to have cleaned up: the container goes.
            self.alive.store(false, Ordering::Relaxed);
            return Err(anyhow!("the session's container is no longer usable ({why}); the session closes"));
        }
        if let Some(why) = failed {
            return Err(anyhow!("the container could not set up the program: {why}"));
        }
        let Some((status, out_bytes, err_bytes)) = reported else {
            let why = crate::sanitize::inert_line(&String::from_utf8_lossy(&pump.loader_err), 300);
            // No exit report: the loader died (the container may have too).
            self.alive.store(false, Ordering::Relaxed);
            return Err(anyhow!(
                "the call ended without the loader reporting the program's exit{}; the session closes",
                if why.is_empty() { String::new() } else { format!(": {why}") }
            ));
        };
        if !pump.prior_full.is_empty() {
            ctx.note(format!(
                "scratch space already full when this call began (an earlier call filled it): {}",
                pump.prior_full.join(", ")
            ))
            .await;
        }
        let counters = pump.counters();
        let facts = pump.facts(status, counters);
        pump.judge.exit(ctx, &facts).await;
        ctx.emit(EventKind::Exit(status)).await;
        let usage =
            UsageSample { cpu_ms: pump.last.cpu_ms.or(counters.cpu_ms), memory_bytes: pump.peak_mem, pids: None };
        let details = json!({
            "program_uid": self.uid,
            "program_uid_policy": format!("{} — one uid for the whole session", self.user_policy),
            "output": {
                "stdout_bytes": pump.delivered[0],
                "stderr_bytes": pump.delivered[1],
                "complete": ([out_bytes, err_bytes] == pump.delivered),
            },
            "prior_full_mounts": pump.prior_full,
        });
        Ok((usage, details))
    }
}

/// A session call's side of the pump: a stop is a `k` to the call's loader
/// (which kills every process of the session's uid) with a deadline, the
/// container's end ends the call, and the acknowledgement is a newline.
struct CallSide<'a> {
    input: &'a mut Input,
    ended: &'a CancellationToken,
    kill_deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    acked: bool,
}

impl Side for CallSide<'_> {
    async fn kill(&mut self) -> Result<(), String> {
        // One byte; the loader reads it while the program runs, or (sent as
        // the call ended) before its acknowledgement.
        let sent = async {
            self.input.write_all(b"k").await?;
            self.input.flush().await
        };
        sent.await.map_err(|e| format!("cannot send the kill to the session's container: {e}"))?;
        self.kill_deadline.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
        Ok(())
    }

    async fn beside(&mut self) -> Beside {
        tokio::select! {
            _ = self.ended.cancelled() => Beside::Gone,
            _ = &mut self.kill_deadline => {
                Beside::Broken("the call's loader did not end after sandbench asked it to kill the program".into())
            }
        }
    }

    fn started(&mut self, _guard: Option<i32>) -> Result<(), String> {
        Ok(())
    }

    /// No relay in a session (it is offline): a relay frame is the loader's
    /// mistake, dropped.
    async fn relay(&mut self, _message: Vec<u8>) -> Result<(), String> {
        Ok(())
    }

    async fn exited(&mut self, _ctx: &RunContext, _loader: &mut LoaderFacts) {}

    /// The acknowledgement: the loader ends, and the agent starts the next
    /// call's loader while this call's report goes out.
    async fn acknowledge(&mut self) -> Result<(), String> {
        let sent = async {
            self.input.write_all(b"\n").await?;
            self.input.flush().await
        };
        sent.await.map_err(|e| format!("cannot acknowledge the call to the session's container: {e}"))?;
        self.acked = true;
        Ok(())
    }
}
