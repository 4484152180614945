//! A one-shot run in a container: take a warm one or start one, attach,
//! hand its loader the program (and, with an allow list, carry the egress
//! relay on the same stream), follow it with the pump, conclude — the exit
//! as the loader reported it, or as the engine saw the container end — and
//! remove the container in the background.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::anyhow;
use bollard::query_parameters::WaitContainerOptions;
use bollard::Docker;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::cgroup::Cgroup;
use super::container;
use super::engine::{self, Engine};
use super::lifecycle::{attach, kill, launch, remove, short, OOM_FLAG_WAIT};
use super::pump::{Beside, LoaderFacts, Pump, Scope, Side};
use super::watch::start_watch;
use super::{scratch, DockerTier};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, UsageSample};
use crate::highwater;
use crate::spec::RunSpec;
use crate::tier::contract::TierExit;

impl DockerTier {
    pub(super) async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let engine = &self.engine_for_run().await?;
        let shape = self.shape(&spec);
        let nth = self.runs.fetch_add(1, Ordering::Relaxed);
        let pool = self.pool(engine);
        let use_pool = pool.filter(|_| self.prewarmed.load(Ordering::Relaxed) || nth >= 1);
        let (mut warm, mut pool_gone) = match use_pool.map(|p| p.take(&shape)) {
            Some(t) => (t.id, t.gone),
            None => (None, None),
        };
        // The event watch drops a member the moment the engine says it
        // died; this closes the window between that event and the take (a
        // container killed a moment ago would take the run with it).
        let mut known_pid = None;
        if let (Some(id), Some(p)) = (warm.clone(), use_pool) {
            match super::lifecycle::state_of(engine, &id).await {
                Ok(pid) => known_pid = pid,
                Err(why) => {
                    p.forget(&id, &why);
                    let (docker, id) = (engine.docker.clone(), id);
                    crate::tier::background::spawn(async move { remove(&docker, &id).await });
                    warm = None;
                    pool_gone = Some(why);
                }
            }
        }
        let run_id = container::new_run_id();
        let (id, start) = match warm {
            Some(id) => {
                ctx.note(format!("warm container {}", short(&id))).await;
                (id, "warm")
            }
            None => {
                match &pool_gone {
                    Some(why) => {
                        ctx.note(format!("creating a {} container (pool member gone: {why})", self.runtime_name()))
                            .await
                    }
                    None => ctx.note(format!("creating a {} container", self.runtime_name())).await,
                }
                (launch(engine, &shape, &run_id, self.name).await?, "cold")
            }
        };
        let mut timeline: Vec<(&'static str, f64)> =
            vec![(if start == "warm" { "container_taken" } else { "container_started" }, ctx.ms())];
        let host_binds = scratch::of(&id).map(|d| scratch::binds(&d));
        let result = self.execute(engine, &id, known_pid, &spec, &ctx, &mut timeline).await;
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        // The program has exited and its output is in (the loader's exit
        // frame comes after every output frame): the report is final now.
        // The single-use container goes in the background, awaited at
        // shutdown and by the benchmarks; a killed sandbench leaves it to
        // the next start's reaper (its owner label).
        let (docker, gone) = (engine.docker.clone(), id.clone());
        let (result, ending) = match result {
            Ok(Executed { usage, details, writer, exit }) => (Ok((usage, details)), Some((writer, exit))),
            Err(e) => (Err(e), None),
        };
        crate::tier::background::spawn(async move {
            if let Some((writer, exit)) = ending {
                // The loader's acknowledgement first, so that it ends as it
                // would: everything was received.
                let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
                // Then its own exit, which ends the container: removing a
                // container that still runs costs the runtime a kill (under
                // gVisor one more `runsc` process per run). Bounded; the
                // removal below forces whatever is still running.
                if let Some(mut exit) = exit {
                    let _ = tokio::time::timeout(EXIT_AFTER_ACK, exit.next()).await;
                }
            }
            remove(&docker, &gone).await;
        });
        // Refill (and retarget to this run's shape) only now, off this run's path.
        if let Some(p) = use_pool {
            p.want(&shape);
        }
        let (usage, mut details) = result?;
        let mut t = serde_json::Map::new();
        for (k, v) in &timeline {
            t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
        }
        details["timeline_ms"] = serde_json::Value::Object(t);
        details["runtime"] = json!(self.runtime_name());
        details["start"] = json!(start);
        if let (Some(why), "cold") = (&pool_gone, start) {
            details["start_note"] = json!(format!("pool member gone: {why}"));
        }
        details["image"] = json!(self.image);
        details["container"] = json!(short(&id));
        details["engine"] =
            json!({ "host": engine.host, "api_version": engine.api_version, "server_version": engine.server_version });
        details["hardening"] = shape.hardening();
        if let Some(binds) = host_binds {
            details["hardening"]["mounts"] = json!(binds);
            details["hardening"]["scratch"] =
                json!("host tmpfs mounts (size and inode limits as above), watched from the host");
        }
        Ok(TierExit { usage: Some(usage), details })
    }

    /// Hand the loader the program and follow it to its end.
    async fn execute(
        &self,
        engine: &Engine,
        id: &str,
        known_pid: Option<i32>,
        spec: &RunSpec,
        ctx: &RunContext,
        timeline: &mut Vec<(&'static str, f64)>,
    ) -> anyhow::Result<Executed> {
        let docker = &engine.docker;
        let limits = &spec.limits;
        // The program's uid comes from a scan of /proc (a stat per process):
        // on a blocking thread, beside the attach, not on a runtime worker.
        let (user, local) = (self.cfg.user.clone(), engine.local);
        let ids = tokio::task::spawn_blocking(move || container::choose_ids(&user, local));
        let attach =
            attach(docker, id).await.map_err(|e| anyhow!("cannot attach to the container: {}", engine::cause(&e)))?;
        let (uid, gid) = ids.await.map_err(|e| anyhow!("choosing the program's uid failed: {e}"))??;
        timeline.push(("attached", ctx.ms()));
        let mut output = attach.output;
        let input = attach.input;
        let wait = Box::pin(docker.wait_container(id, Some(WaitContainerOptions { condition: "not-running".into() })));

        ctx.emit(EventKind::Phase(Phase::Running)).await;
        // The program exists from now on: count it even if it exits before
        // the first sample.
        ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
        // High-water marks of the scratch space, from the host where it can
        // (see host_watch); the loader's own checks stay as the fallback.
        let (watch, loader_pid) = self.host_watch(engine, id, known_pid, limits, ctx).await;
        let guard_wanted = watch.as_ref().is_some_and(|w| w.sees_files()) && loader_pid.is_some();
        let files_watched = watch.as_ref().is_some_and(|w| w.sees_files());
        let egress = crate::egress::Egress::start(spec, &self.egress, ctx)?;
        let net = egress.as_ref().map(|eg| container::Net {
            port: crate::egress::SANDBOX_PORT,
            env: eg.sandbox_env(&spec.env, container::CA_BUNDLE),
            ca: eg.ca_pem(),
        });
        let payload = container::payload(spec, uid, gid, guard_wanted, net.as_ref());
        let (mux, mux_out) = match &egress {
            Some(eg) => {
                let (m, out) = crate::egress::mux::Mux::new(eg.server());
                (Some(m), Some(out))
            }
            None => (None, None),
        };
        // Stdin stays open after the payload: the loader waits for one more
        // byte (the acknowledgement that every frame arrived) before it ends
        // the container. With egress it carries the relay's messages first,
        // and the acknowledgement is a frame.
        let (ack_tx, ack_rx) = tokio::sync::oneshot::channel::<()>();
        // The cgroup and its OOM notice before the program's first byte.
        let cgroup = if engine.local { Cgroup::find(id).map(Cgroup::watching_oom) } else { None };
        let writer = spawn_writer(input, payload, mux_out, ack_rx);

        let guest_pids = self.runtime.is_none();
        // Under runc the cgroup also counts the loader (PID 1) and, with an
        // allow list, its relay thread: not the program's processes.
        let loader_tasks = 1 + u64::from(!limits.network.is_none());
        let mut side = RunSide {
            docker,
            id,
            wait,
            exit_code: None,
            wait_error: None,
            watch,
            guard_wanted,
            loader_pid,
            running: None,
            guarded: None,
            mux,
            ack: Some(ack_tx),
            kill_sent: None,
        };
        let mut frames = container::Frames::default();
        let mut pump =
            Pump::new(ctx, limits, &mut *timeline, docker, id, cgroup.clone(), guest_pids, Scope::Run { loader_tasks });
        pump.drive(&mut output, &mut frames, &mut side).await;
        if pump.broken.is_some() && !pump.killed {
            pump.killed = true;
            kill(docker, id);
        }
        // The writer goes on: it sends the loader's acknowledgement (see
        // run_inner, which waits for it in the background).
        if let Some(m) = side.mux.as_mut() {
            m.close_all();
        }
        let network = match egress {
            Some(eg) => {
                let mut n = eg.finish().await;
                n["relay_protocol_violations"] = json!(side.mux.as_ref().map_or(0, |m| m.violations));
                n
            }
            None => json!("none (network_mode none)"),
        };
        if let Some(why) = pump.broken.take() {
            if why.starts_with(engine::ENGINE_GONE) {
                return Err(anyhow!("{why}"));
            }
            return Err(anyhow!("the container's loader sent an unreadable stream ({why}); the run is void"));
        }
        if let Some(e) = side.wait_error.take() {
            if !(pump.killed || ctx.stop.is_cancelled()) {
                return Err(anyhow!("lost the container while waiting for it: {e}"));
            }
        }
        if let Some(why) = pump.failed.take() {
            return Err(anyhow!("the container could not set up the program: {why}"));
        }
        let reported = pump.reported;
        let state = if reported.is_none() {
            docker
                .inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>)
                .await
                .ok()
                .and_then(|i| i.state)
        } else {
            None
        };
        let mut oom = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
        let raw = side.exit_code.or_else(|| state.as_ref().and_then(|s| s.exit_code)).unwrap_or(137);
        let status = match reported {
            Some((status, _, _)) => status,
            None if pump.killed => ExitStatus { code: None, signal: Some(libc::SIGKILL) },
            None => {
                let (code, signal) = container::split_exit(raw);
                if signal == Some(libc::SIGKILL) && !oom {
                    oom = oom_killed(docker, id, &mut pump).await;
                }
                if !oom {
                    // Nothing the program can do ends the loader; a container
                    // that ended without its report is a broken sandbox.
                    let why = crate::sanitize::inert_line(&String::from_utf8_lossy(&pump.loader_err), 300);
                    return Err(anyhow!(
                        "the container ended (exit {raw}) without the loader reporting the program's exit{}",
                        if why.is_empty() { String::new() } else { format!(": {why}") }
                    ));
                }
                ExitStatus { code, signal }
            }
        };
        let mut counters = pump.counters();
        if oom {
            counters.oom_kills = Some(counters.oom_kills.unwrap_or(0).max(1));
        }
        let facts = pump.facts(status, counters);
        pump.judge.exit(ctx, &facts).await;
        let exit = if pump.killed && !pump.cpu_killed && reported.is_none() {
            ExitStatus { code: None, signal: Some(libc::SIGKILL) }
        } else {
            status
        };
        ctx.emit(EventKind::Exit(exit)).await;
        let usage = UsageSample { cpu_ms: pump.last.cpu_ms, memory_bytes: pump.peak_mem, pids: None };
        let produced = reported.map(|(_, o, e)| [o, e]);
        let details = json!({
            "oom_killed": oom,
            "container_exit_code": raw,
            "program_uid": pump.started_uid,
            "program_uid_policy": container::describe_user(&self.cfg.user),
            "scratch_watch": if files_watched {
                json!({ "from": "host", "file_events": files_watched, "guarded_calls": side.guarded })
            } else {
                json!({ "from": "loader: free space every 100 ms and a scan at exit" })
            },
            "output": {
                "stdout_bytes": pump.delivered[0],
                "stderr_bytes": pump.delivered[1],
                // Every byte the program wrote reached sandbench (before the
                // runner's output limit); false only when the run was cut.
                "complete": produced == Some(pump.delivered),
            },
            "network": network,
        });
        // The container's end, unless the pump already saw it.
        let exit = (side.exit_code.is_none() && side.wait_error.is_none()).then_some(side.wait);
        Ok(Executed { usage, details, writer, exit })
    }
}

/// How long a run's container may take to end by itself once its loader
/// has the acknowledgement (it exits, and as PID 1 ends with it whatever
/// the program left).
const EXIT_AFTER_ACK: Duration = Duration::from_secs(5);

/// A run that reached its conclusion: its usage and details, the writer
/// still sending the loader's acknowledgement, and the container's wait
/// stream if the container has not ended yet.
struct Executed {
    usage: UsageSample,
    details: serde_json::Value,
    writer: tokio::task::JoinHandle<()>,
    exit: Option<Wait>,
}

/// How long after the loader's last frame its acknowledgement goes: the
/// loader then exits and the container ends, and the engine's work on that
/// end (the shim, containerd, dockerd; under gVisor the sandbox's own
/// teardown) shared the 2 CPUs with the report and its delivery (an MCP
/// fresh call's own overhead 1.05–1.96 ms p50 on docker and 1.60–2.80 on
/// gVisor, against 0.75–0.85 and 0.78–1.01 with the acknowledgement 5 ms
/// later, `benches/mcp-roundtrip.py`, side by side). The report does not
/// wait for it; only the container's removal, in the background, does.
const ACK_AFTER: Duration = Duration::from_millis(5);

/// Write the payload, then (with egress) the relay's messages, then the
/// acknowledgement [`ACK_AFTER`] after `ack` fires; the container's stdin
/// closes after it.
fn spawn_writer(
    mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    payload: Vec<u8>,
    mut mux_out: Option<tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>>,
    ack_rx: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let r = async {
            input.write_all(&payload).await?;
            input.flush().await?;
            match mux_out.as_mut() {
                None => {
                    let _ = ack_rx.await;
                    tokio::time::sleep(ACK_AFTER).await;
                    input.write_all(b"\n").await?;
                }
                Some(out) => {
                    tokio::pin!(ack_rx);
                    loop {
                        tokio::select! {
                            m = out.recv() => match m {
                                Some(m) => input.write_all(&container::host_frame(b'n', &m)).await?,
                                None => { let _ = (&mut ack_rx).await; break }
                            },
                            _ = &mut ack_rx => break,
                        }
                    }
                    tokio::time::sleep(ACK_AFTER).await;
                    input.write_all(&container::host_frame(b'k', b"")).await?;
                }
            }
            input.flush().await?;
            input.shutdown().await
        }
        .await;
        if let Err(e) = r {
            tracing::debug!("writing to the container's stdin: {e}");
        }
    })
}

/// Whether the memory limit killed a container that was SIGKILLed without
/// its loader's report. First the kernel's OOM notice (a v1 cgroup's
/// eventfd, see `OomWatch`): the OOM killer can end gVisor's whole sandbox,
/// one host process, and runsc's shim sets no engine flag for it. Then the
/// engine's flag, recorded after the exit (later still on a loaded machine):
/// it is asked again for a while. Last the cgroup's counters, if it is still
/// there and saw the limit bite.
async fn oom_killed(docker: &Docker, id: &str, pump: &mut Pump<'_>) -> bool {
    // The kernel's own notice, held since before the program started, is
    // there even when the cgroup is already gone.
    if let Some(w) = pump.cgroup.as_ref().and_then(|c| c.oom_watch()) {
        if w.settled().await > 0 {
            return true;
        }
    }
    let deadline = tokio::time::Instant::now() + OOM_FLAG_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let oom = docker
            .inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.oom_killed)
            .unwrap_or(false);
        if oom {
            return true;
        }
    }
    pump.final_counters();
    let c = pump.cg_counters;
    c.oom_kills.unwrap_or(0) > 0 || c.memory_limit_hits.unwrap_or(0) > 0
}

type Wait = Pin<
    Box<
        dyn futures_util::Stream<Item = Result<bollard::models::ContainerWaitResponse, bollard::errors::Error>>
            + Send
            + 'static,
    >,
>;

/// A one-shot run's side of the pump: the engine's kill, the container's
/// wait, the host's scratch watch, the egress relay and the writer's
/// acknowledgement.
struct RunSide<'a> {
    docker: &'a Docker,
    id: &'a str,
    wait: Wait,
    exit_code: Option<i64>,
    wait_error: Option<String>,
    /// The host's watch, until the program starts; then `running`.
    watch: Option<highwater::Watch>,
    guard_wanted: bool,
    loader_pid: Option<i32>,
    running: Option<highwater::Running>,
    /// Calls the scratch guard served, once the watch finished.
    guarded: Option<u64>,
    mux: Option<crate::egress::mux::Mux>,
    ack: Option<tokio::sync::oneshot::Sender<()>>,
    /// When the first kill was asked for: an engine that has not carried it
    /// out within [`KILL_ANSWER`] (frozen, wedged) would hold the run past
    /// its limits.
    kill_sent: Option<tokio::time::Instant>,
}

/// How long the engine has to end a container it was told to kill before
/// the run stops waiting for it (a SIGKILL'd container ends in
/// milliseconds; its output then has [`super::pump`]'s grace on top).
const KILL_ANSWER: Duration = Duration::from_secs(3);

/// How long a container the engine answers about may take to end after
/// its kill (a large sandbox's teardown under gVisor on a loaded machine
/// takes seconds) before the run stops waiting for it.
const KILL_GIVE_UP: Duration = Duration::from_secs(30);

/// When a kill was not carried out within [`KILL_ANSWER`]: ask the engine.
/// An engine that answers is alive and the container is still ending (the
/// program cannot make that read as the engine's failure): wait on, up to
/// [`KILL_GIVE_UP`]. One that does not answer voids the run, naming it.
async fn kill_overdue(docker: &Docker, at: tokio::time::Instant) -> String {
    let mut next = at + KILL_ANSWER;
    loop {
        tokio::time::sleep_until(next).await;
        match tokio::time::timeout(Duration::from_secs(2), docker.ping()).await {
            Ok(Ok(_)) if next.duration_since(at) < KILL_GIVE_UP => next += KILL_ANSWER,
            Ok(Ok(_)) => {
                return format!(
                    "the container did not end within {} s of its kill, though the engine answers; the run is void",
                    KILL_GIVE_UP.as_secs()
                )
            }
            Ok(Err(e)) => return engine_unanswered_kill(&engine::cause(&e)),
            Err(_) => return engine_unanswered_kill("no answer within 2 s"),
        }
    }
}

fn engine_unanswered_kill(why: &str) -> String {
    format!(
        "{} ({why}): it did not end the container within {} s of being told to kill it (stopped, frozen or overloaded?); the run is void",
        engine::ENGINE_GONE,
        KILL_ANSWER.as_secs()
    )
}

impl Side for RunSide<'_> {
    async fn kill(&mut self) -> Result<(), String> {
        kill(self.docker, self.id);
        self.kill_sent.get_or_insert_with(tokio::time::Instant::now);
        Ok(())
    }

    async fn beside(&mut self) -> Beside {
        if self.exit_code.is_some() || self.wait_error.is_some() {
            // The container ended: the kill was carried out, and what is
            // left is its output, which the pump bounds by its own grace.
            return std::future::pending().await;
        }
        let docker = self.docker;
        let unanswered = async {
            match self.kill_sent {
                Some(at) => kill_overdue(docker, at).await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            n = self.wait.next() => n,
            why = unanswered => return Beside::Broken(why),
        };
        match next {
            Some(Ok(r)) => self.exit_code = Some(r.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => self.exit_code = Some(code),
            Some(Err(e)) => self.wait_error = Some(engine::cause(&e)),
            None => self.wait_error = Some("the wait stream ended without a status".into()),
        }
        Beside::Exited
    }

    fn started(&mut self, guard: Option<i32>) -> Result<(), String> {
        if let Some(w) = self.watch.take() {
            self.running = Some(start_watch(w, self.guard_wanted, guard, self.loader_pid)?);
        }
        Ok(())
    }

    async fn relay(&mut self, message: Vec<u8>) -> Result<(), String> {
        match self.mux.as_mut() {
            Some(mux) => {
                mux.incoming(&message).await;
                Ok(())
            }
            // Relay messages in a run without egress: the stream is not what
            // sandbench's loader writes.
            None => Err("a relay frame in a run without egress".into()),
        }
    }

    async fn exited(&mut self, ctx: &RunContext, loader: &mut LoaderFacts) {
        // The program is gone: the watch's last look.
        if let Some(r) = self.running.take() {
            if let Ok((found, served)) = tokio::task::spawn_blocking(move || r.finish()).await {
                for gap in &found.gaps {
                    ctx.note(gap.clone()).await;
                }
                loader.absorb_found(found);
                self.guarded = Some(served);
            }
        }
    }

    async fn acknowledge(&mut self) -> Result<(), String> {
        if let Some(tx) = self.ack.take() {
            let _ = tx.send(());
        }
        Ok(())
    }
}
