//! The `docker` and `gvisor` tiers: one hardened container per run through
//! the Docker Engine API (bollard; never the docker CLI), on the daemon's
//! default runtime (runc) or on `runsc` (gVisor, a user-space kernel).
//! This file is the tier itself (its configuration, warm pool and the
//! `Tier` contract); each concern is a module:
//!
//! - `engine.rs`: DOCKER_HOST, version negotiation, errors a user can act on.
//! - `container.rs`: the hardened container shape and the resident loader
//!   that takes the program over the attached stdin.
//! - `lifecycle.rs`: create, start, attach, kill and remove one container.
//! - `probe.rs`: `doctor`'s checks, ending with a real container run.
//! - `run.rs`: a one-shot run — take or start a container, hand the loader
//!   the program, follow it, conclude, tear down.
//! - `session.rs`: a session's container and its calls.
//! - `pump.rs`: the one loop that follows an attached loader to its end, for
//!   a run and a session call alike.
//! - `cgroup.rs`: the container's cgroup, sampled for usage and counters.
//! - `watch.rs`: the host's watch of a run's scratch mounts.
//! - `pool.rs`: warm containers, single use, refilled in the background.
//! - `reap.rs`: owner labels; removing what provably dead sandbench processes left.
//! - `scratch.rs`: gVisor's host scratch mounts.
//! - `image.rs`: `sandbench setup docker` — use, pull, or build the image.

mod cgroup;
pub(crate) mod container;
pub(crate) mod engine;
pub(crate) mod image;
mod lifecycle;
pub(crate) mod pool;
mod probe;
mod pump;
pub(crate) mod reap;
mod run;
pub(crate) mod scratch;
pub(crate) mod session;
mod watch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::{Config, DockerConfig};
use crate::event::RunContext;
use crate::spec::RunSpec;
use crate::tier::contract::{Availability, BoxFuture, Tier, TierExit};
use cgroup::Cgroup;
use container::Shape;
use engine::Engine;
use pool::Pool;

/// The image a run uses: `$SANDBENCH_DOCKER_IMAGE`, else `[docker] image`.
pub(crate) fn configured_image(config: &Config) -> String {
    config.host.docker_image.clone().unwrap_or_else(|| config.docker.image.clone())
}

/// How long the engine has to answer a ping before a run counts it as
/// gone: a healthy one answers in a millisecond, even when busy.
const ENGINE_CHECK: Duration = Duration::from_secs(2);

pub struct DockerTier {
    name: &'static str,
    /// None = the daemon's default runtime; Some("runsc") for gVisor.
    runtime: Option<&'static str>,
    cfg: DockerConfig,
    image: String,
    endpoint: engine::Endpoint,
    /// The connected engine, until something says it changed (a probe, a
    /// runtime missing): then the next use connects again, so a restarted
    /// daemon or a runtime registered since is found without a restart.
    engine: tokio::sync::Mutex<Option<Engine>>,
    pool: OnceLock<Arc<Pool>>,
    runs: AtomicU64,
    prewarmed: AtomicBool,
    /// The configured limits: what `Tier::prewarm` warms containers for.
    limits: crate::spec::Limits,
    /// `[network]`: the egress proxy's resolver and upstream CAs.
    egress: crate::egress::Operator,
}

impl DockerTier {
    pub fn docker(config: &Config) -> DockerTier {
        Self::build("docker", None, config)
    }

    pub fn gvisor(config: &Config) -> DockerTier {
        Self::build("gvisor", Some("runsc"), config)
    }

    /// The tier `name` on `runtime` (`None`: the daemon's default): a kinds
    /// row with `Bench::Container`, built by the benchmarks with their own
    /// pool sizes.
    pub fn on_runtime(name: &'static str, runtime: Option<&'static str>, config: &Config) -> DockerTier {
        Self::build(name, runtime, config)
    }

    fn build(name: &'static str, runtime: Option<&'static str>, config: &Config) -> DockerTier {
        DockerTier {
            name,
            runtime,
            cfg: config.docker.clone(),
            image: configured_image(config),
            endpoint: engine::Endpoint::of(&config.host),
            engine: tokio::sync::Mutex::new(None),
            pool: OnceLock::new(),
            runs: AtomicU64::new(0),
            prewarmed: AtomicBool::new(false),
            limits: config.limits.clone(),
            egress: crate::egress::Operator::from_config(config),
        }
    }

    /// The engine, connected at first use and kept (a failure is retried
    /// next time).
    pub async fn engine(&self) -> anyhow::Result<Engine> {
        let mut slot = self.engine.lock().await;
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let e = Engine::connect(&self.endpoint).await?;
        *slot = Some(e.clone());
        Ok(e)
    }

    /// Whether the engine answers now (after a run failed: was it the
    /// engine?). When it does not, the next use connects afresh: a
    /// restarted engine is found again without a restart of sandbench.
    async fn engine_answers(&self) -> Result<(), String> {
        let Some(engine) = self.engine.lock().await.clone() else { return Ok(()) };
        let r = engine.answers(ENGINE_CHECK).await;
        if r.is_err() {
            self.reconnect().await;
        }
        r
    }

    /// The engine for a run, answering: a cached connection to an engine
    /// that restarted since is replaced, and an engine that does not answer
    /// (stopped, frozen) fails the run at once instead of holding it for
    /// the requests' long timeout.
    async fn engine_for_run(&self) -> anyhow::Result<Engine> {
        let engine = self.engine_with_runtime().await?;
        if engine.answers(ENGINE_CHECK).await.is_ok() {
            return Ok(engine);
        }
        self.reconnect().await;
        let engine = self.engine_with_runtime().await?;
        if let Err(why) = engine.answers(ENGINE_CHECK).await {
            self.reconnect().await;
            anyhow::bail!(
                "{} at {} ({why}): the run did not start; {}",
                engine::ENGINE_GONE,
                engine.host,
                engine::start_daemon_hint(&engine.host)
            );
        }
        Ok(engine)
    }

    /// Connect again at the next use: what the engine said about itself
    /// (its runtimes, its version) may have changed.
    pub(crate) async fn reconnect(&self) {
        *self.engine.lock().await = None;
    }

    /// The engine, with the runtime this tier needs: when the one known
    /// lacks it, ask again once (it may have been registered since).
    async fn engine_with_runtime(&self) -> anyhow::Result<Engine> {
        let engine = self.engine().await?;
        match self.runtime {
            Some(rt) if !engine.runtimes.contains(rt) => {
                self.reconnect().await;
                let engine = self.engine().await?;
                if !engine.runtimes.contains(rt) {
                    anyhow::bail!("the Docker daemon at {} has no '{rt}' runtime: {}", engine.host, runsc_fix());
                }
                Ok(engine)
            }
            _ => Ok(engine),
        }
    }

    fn runtime_name(&self) -> &'static str {
        self.runtime.unwrap_or("runc")
    }

    fn shape(&self, spec: &RunSpec) -> Shape {
        Shape::new(&self.image, self.runtime, &self.cfg.user, &spec.limits)
    }

    fn pool(&self, engine: &Engine) -> Option<&Arc<Pool>> {
        if self.cfg.pool_size == 0 {
            return None;
        }
        Some(self.pool.get_or_init(|| Pool::new(engine.clone(), self.cfg.pool_size, self.name)))
    }

    /// Fill the warm pool for runs with these limits, and wait until it is
    /// full (or cannot fill). Front ends that will run many programs call it;
    /// without it the pool starts filling at the second run of a process.
    pub async fn prewarm_for(&self, limits: &crate::spec::Limits) -> anyhow::Result<usize> {
        let engine = self.engine_with_runtime().await?;
        self.check_ready(&engine).await?;
        self.prewarmed.store(true, Ordering::Relaxed);
        let Some(pool) = self.pool(&engine) else {
            return Ok(0);
        };
        let shape = Shape::new(&self.image, self.runtime, &self.cfg.user, limits);
        pool.want(&shape);
        pool.settle().await;
        if pool.ready() == 0 {
            if let Some(e) = pool.last_error() {
                anyhow::bail!("{e}");
            }
        }
        Ok(pool.ready())
    }

    /// The containers the warm pool holds now (what `warm` counts).
    pub fn pool_ids(&self) -> Vec<String> {
        self.pool.get().map(|p| p.ready_ids()).unwrap_or_default()
    }

    /// Wait for background refills to finish (benchmarks use this so a
    /// refill never overlaps a measurement).
    pub async fn settle(&self) {
        if let Some(p) = self.pool.get() {
            p.settle().await;
        }
    }

    /// Runtime registered and image present, or one line saying what to do.
    async fn check_ready(&self, engine: &Engine) -> anyhow::Result<()> {
        if let Some(rt) = self.runtime {
            if !engine.runtimes.contains(rt) {
                anyhow::bail!("the Docker daemon at {} has no '{rt}' runtime: {}", engine.host, runsc_fix());
            }
        }
        if !engine.has_image(&self.image).await? {
            anyhow::bail!(
                "image {} is not present at {}: run `sandbench setup {}` (or set [docker] image in the config)",
                self.image,
                engine.host,
                self.name
            );
        }
        Ok(())
    }
}

/// `sandbench setup docker|gvisor`: the image present (used, pulled or
/// built, and then recorded in the config), and for gVisor the runtime
/// registered with the daemon. Idempotent: quick when nothing is missing.
pub(crate) async fn setup(
    config: &Config,
    runtime: Option<&str>,
    progress: &dyn crate::setup::Progress,
) -> anyhow::Result<()> {
    let engine = Engine::connect(&engine::Endpoint::of(&config.host)).await?;
    progress.line(&format!(
        "setup: Docker engine {} at {} (API {})",
        engine.server_version, engine.host, engine.api_version
    ));
    let wanted = configured_image(config);
    let done = image::ensure(&engine, &config.docker, &wanted, progress).await?;
    match &done {
        image::Ensured::Present(i) => progress.line(&format!("setup: image {i} is present")),
        image::Ensured::Pulled(i) => progress.line(&format!("setup: pulled {i}")),
        image::Ensured::Switched(i) | image::Ensured::Built(i) => {
            let path = Config::path().ok_or_else(|| anyhow::anyhow!("no config directory; set SANDBENCH_CONFIG"))?;
            image::record_image(&path, i)?;
            if matches!(done, image::Ensured::Built(_)) {
                progress.line(&format!("setup: built {i}"));
            }
            progress.line(&format!("setup: {} now says [docker] image = \"{i}\"", path.display()));
            if config.host.docker_image.is_some() {
                progress.line(&format!("setup: note: SANDBENCH_DOCKER_IMAGE={wanted} still overrides the config"));
            }
        }
    }
    if let Some(rt) = runtime {
        if !engine.runtimes.contains(rt) {
            anyhow::bail!("the image is ready, but the daemon has no '{rt}' runtime: {}", runsc_fix());
        }
        progress.line(&format!("setup: runtime {rt} is registered"));
    }
    progress.line("setup: ready (check with: sandbench doctor)");
    Ok(())
}

pub(crate) fn runsc_fix() -> String {
    "apt-get install runsc; add {\"runtimes\":{\"runsc\":{\"path\":\"/usr/bin/runsc\",\"runtimeArgs\":[\"--network=none\"]}}} to /etc/docker/daemon.json; then restart dockerd (or kill -HUP it)".into()
}

/// Drain the warm pools (at exit).
pub(crate) async fn shutdown() {
    pool::drain_all().await;
}

/// Containers carrying `token`; None when the engine cannot be asked.
pub(crate) async fn owned_containers(token: &str, env: &crate::config::HostEnv) -> Option<Vec<String>> {
    let work = async {
        let engine = Engine::connect(&engine::Endpoint::of(env)).await?;
        reap::owned(&engine, token).await
    };
    match tokio::time::timeout(Duration::from_secs(10), work).await {
        Ok(Ok(v)) => Some(v),
        _ => None,
    }
}

/// Remove containers of dead sandbench processes and stray runsc processes.
/// Quiet and quick when there is no daemon.
pub(crate) async fn reap_leftovers(env: &crate::config::HostEnv) {
    let work = async {
        let engine = Engine::connect(&engine::Endpoint::of(env)).await?;
        reap::reap(&engine).await
    };
    let outcome = tokio::time::timeout(Duration::from_secs(10), work).await;
    // After the containers: a dead owner's host scratch mounts.
    let s = scratch::reap();
    if s > 0 {
        tracing::info!("reaped {s} leftover gVisor scratch folder(s)");
    }
    match outcome {
        Ok(Ok((c, p))) if c + p > 0 => {
            tracing::info!("reaped {c} leftover container(s), {p} stray runsc process(es)")
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("docker leftovers not checked: {e:#}"),
        Err(_) => {
            tracing::debug!("docker leftovers not checked: the daemon did not answer in time")
        }
    }
}

impl Drop for DockerTier {
    fn drop(&mut self) {
        if let Some(p) = self.pool.take() {
            pool::release(p);
        }
    }
}

impl Tier for DockerTier {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Any allow list: the loader relays the egress port to the host proxy.
    fn check_network(&self, _: &crate::egress::Network) -> Result<(), String> {
        Ok(())
    }

    /// Secrets: the loader's relay leads to the proxy that substitutes them.
    fn check_secrets(&self, _: &crate::egress::secrets::Secrets) -> Result<(), String> {
        Ok(())
    }

    fn describe(&self) -> &'static str {
        match self.runtime {
            None => "hardened Docker container (runc): namespaces, cgroups, seccomp, no network, read-only root",
            Some(_) => "hardened Docker container on gVisor (runsc): a user-space kernel between program and host",
        }
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            let result = self.run_inner(spec, ctx).await;
            match result {
                Err(e) if !e.to_string().starts_with(engine::ENGINE_GONE) => match self.engine_answers().await {
                    // The engine is fine: the error is the run's own.
                    Ok(()) => Err(e),
                    Err(why) => Err(anyhow::anyhow!("{} ({why}) during the run: {e:#}", engine::ENGINE_GONE)),
                },
                other => other,
            }
        })
    }

    /// With the pooled containers' memory (their cgroups' usage; unknown
    /// on a remote engine).
    fn warm(&self) -> Option<String> {
        if self.cfg.pool_size == 0 {
            return None;
        }
        let ids = self.pool.get().map(|p| p.ready_ids()).unwrap_or_default();
        let bytes: u64 =
            ids.iter().filter_map(|id| Cgroup::find(id)).filter_map(|c| c.sample(true).usage.memory_bytes).sum();
        let mem = if bytes > 0 { format!(" · {} resident", crate::units::size(bytes)) } else { String::new() };
        Some(format!("{} of {} warm container(s) ready{mem}", ids.len(), self.cfg.pool_size))
    }

    /// Fill the warm pool for runs with the configured limits (a run with
    /// other limits starts cold and the pool follows it).
    fn prewarm(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            if let Err(e) = self.prewarm_for(&self.limits).await {
                tracing::warn!("{} warm pool: {e:#}", self.name);
            }
        })
    }

    /// The container stays between calls (`session.rs`).
    fn sessions(&self) -> Result<(), String> {
        Ok(())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<Arc<dyn crate::tier::contract::TierSession>>> {
        Box::pin(async move {
            let engine = self.engine_with_runtime().await?;
            self.check_ready(&engine).await?;
            let shape = Shape::new(&self.image, self.runtime, &self.cfg.user, &spec.limits);
            let s = session::open(&engine, shape, &self.cfg.user, self.name).await?;
            Ok(Arc::new(s) as Arc<dyn crate::tier::contract::TierSession>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_env_override() {
        let mut config = Config::default();
        assert_eq!(configured_image(&config), "python:3.12-slim");
        config.host.docker_image = Some("local/python".into());
        assert_eq!(configured_image(&config), "local/python");
    }
}
