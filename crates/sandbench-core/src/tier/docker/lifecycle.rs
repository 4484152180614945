//! One container's life through the Engine API: create and start it (with
//! gVisor's host scratch folder when it gets one), attach to its stdio, kill
//! it without waiting, remove it for good. Nothing here is left behind on a
//! failure.

use std::time::Duration;

use anyhow::anyhow;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, RemoveContainerOptions,
};
use bollard::Docker;

use super::container::Shape;
use super::engine::{self, Engine};
use super::{reap, scratch};

/// How long a container killed without its loader's report may take to be
/// marked OOMKilled by the engine (gVisor's whole sandbox is killed at the
/// memory limit; the engine learns it from containerd a moment later, and
/// on a loaded machine later still: 3 s was once too short at load ~15).
/// Only a container that died without its report waits this long.
pub(super) const OOM_FLAG_WAIT: Duration = Duration::from_secs(10);

/// The container's stdin, stdout and stderr as one live stream (no logs
/// replayed): how sandbench talks to a run's loader and a session's agent.
pub(super) async fn attach(
    docker: &Docker,
    id: &str,
) -> Result<bollard::container::AttachContainerResults, bollard::errors::Error> {
    let opts = AttachContainerOptions {
        stdin: true,
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        ..Default::default()
    };
    docker.attach_container(id, Some(opts)).await
}

/// Create and start a hardened container whose loader waits for a program.
/// On failure nothing is left behind.
pub(crate) async fn launch(engine: &Engine, shape: &Shape, run_id: &str, tier: &str) -> anyhow::Result<String> {
    // gVisor's own tmpfs cannot be watched from the host: give it host
    // tmpfs mounts that can (see scratch.rs), where this process may.
    let host_scratch = if shape.gvisor() && engine.local && scratch::available() {
        match scratch::create(run_id, shape) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!("gVisor scratch stays inside the sandbox (only its final state is judged): {e:#}");
                None
            }
        }
    } else {
        None
    };
    let body = shape.body(reap::labels(run_id, tier)?, host_scratch.as_deref().map(scratch::binds));
    create_and_start(engine, body, shape, &format!("sandbench-{tier}-{run_id}"), tier, host_scratch).await
}

/// Create and start a container from `body` (of `shape`, with its host
/// scratch folder when it has one); on failure nothing is left behind.
pub(crate) async fn create_and_start(
    engine: &Engine,
    body: bollard::models::ContainerCreateBody,
    shape: &Shape,
    name: &str,
    tier: &str,
    host_scratch: Option<std::path::PathBuf>,
) -> anyhow::Result<String> {
    let name = name.to_string();
    let created = engine
        .docker
        .create_container(Some(CreateContainerOptions { name: Some(name), ..Default::default() }), body)
        .await;
    let created = match (created, host_scratch) {
        (Ok(c), Some(d)) => {
            scratch::register(&c.id, d);
            Ok(c)
        }
        (r, d) => {
            if let (Err(_), Some(d)) = (&r, d) {
                scratch::destroy(&d);
            }
            r
        }
    };
    let created = created.map_err(|e| {
        if engine::is_not_found(&e) {
            anyhow!(
                "image {} is not present at {}: run `sandbench setup {tier}` (or set [docker] image in the config)",
                shape.image,
                engine.host
            )
        } else {
            anyhow!("cannot create the container: {}", engine::cause(&e))
        }
    })?;
    let id = created.id;
    if let Err(e) = engine.docker.start_container(&id, None::<bollard::query_parameters::StartContainerOptions>).await {
        remove(&engine.docker, &id).await;
        let why = engine::cause(&e);
        if shape.runtime.as_deref() == Some("runsc") && why.contains("network") {
            anyhow::bail!(
                "cannot start the gVisor container: {why} (register runsc with runtimeArgs [\"--network=none\"])"
            );
        }
        anyhow::bail!("cannot start the container: {why}");
    }
    Ok(id)
}

/// Remove a container for good (kill if running). Errors are logged: the
/// next start reaps whatever this could not remove. An engine that does
/// not answer (restarting, stopped for a moment) is asked again in the
/// background until it does, for up to [`REMOVE_LATER`]: a restarted engine
/// keeps the containers it held, and these are sandbench's to remove.
pub(crate) async fn remove(docker: &Docker, id: &str) {
    if remove_now(docker, id).await.is_err() {
        let (docker, id) = (docker.clone(), id.to_string());
        crate::tier::background::spawn(async move {
            let end = tokio::time::Instant::now() + REMOVE_LATER;
            while tokio::time::Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if remove_now(&docker, &id).await.is_ok() {
                    return;
                }
            }
            tracing::warn!("cannot remove container {}: its engine did not answer again", short(&id));
        });
    }
}

/// How long a removal waits for an engine that stopped answering.
const REMOVE_LATER: Duration = Duration::from_secs(60);

/// Err only when the engine did not answer at all.
async fn remove_now(docker: &Docker, id: &str) -> Result<(), ()> {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    for attempt in 0..3 {
        match docker.remove_container(id, Some(opts.clone())).await {
            Ok(()) => {
                scratch::release(id);
                return Ok(());
            }
            Err(e) if engine::is_not_found(&e) => {
                scratch::release(id);
                return Ok(());
            }
            Err(e) if engine::is_unreachable(&e) => {
                tracing::debug!("remove {}: {}", short(id), engine::cause(&e));
                return Err(());
            }
            // "removal already in progress" and similar races settle quickly.
            Err(e) => {
                if attempt == 2 {
                    tracing::warn!("cannot remove container {}: {}", short(id), engine::cause(&e));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    Ok(())
}

/// A container's state, from the engine: its loader's pid (None when
/// unknown or remote) while it runs, else why it does not, in words for a
/// run's note or a session's end ("removed outside sandbench", …).
pub(super) async fn state_of(engine: &Engine, id: &str) -> Result<Option<i32>, String> {
    let opts = None::<bollard::query_parameters::InspectContainerOptions>;
    match engine.docker.inspect_container(id, opts).await {
        Ok(i) => {
            let state = i.state.unwrap_or_default();
            if state.running == Some(true) && state.restarting != Some(true) && state.paused != Some(true) {
                return Ok(state.pid.filter(|p| *p > 0).map(|p| p as i32));
            }
            // A paused container says it runs: its loader is frozen all the same.
            let action = match (state.oom_killed, state.paused) {
                (Some(true), _) => "oom",
                (_, Some(true)) => "pause",
                _ => "die",
            };
            let code = state.exit_code.map(|c| c.to_string());
            Err(super::pool::reason(action, code.as_deref()).unwrap_or_else(|| "not running".into()))
        }
        Err(e) if engine::is_not_found(&e) => {
            Err(super::pool::reason("destroy", None).unwrap_or_else(|| "removed".into()))
        }
        Err(e) => Err(format!("{ENGINE_SILENT} ({}): stopped or restarting?", engine::cause(&e))),
    }
}

/// How `state_of` starts when the engine, not the container, is the news.
pub(super) const ENGINE_SILENT: &str = "the Docker engine does not answer";

pub(super) fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
}

/// Kill in the background: the engine answers a SIGKILL only once the
/// container has stopped, and it stops only once its output is drained — so
/// the run loop must keep reading output meanwhile, never wait for the kill.
pub(super) fn kill(docker: &Docker, id: &str) {
    let (docker, id) = (docker.clone(), id.to_string());
    tokio::spawn(async move {
        if let Err(e) = docker.kill_container(&id, Some(KillContainerOptions { signal: "SIGKILL".into() })).await {
            // 409: not running any more — the goal is reached.
            tracing::debug!("kill {}: {}", short(&id), engine::cause(&e));
        }
    });
}
