//! The `docker` and `gvisor` tiers: one hardened container per run through
//! the Docker Engine API (bollard; never the docker CLI), on the daemon's
//! default runtime (runc) or on `runsc` (gVisor, a user-space kernel).
//!
//! - `engine.rs`: DOCKER_HOST, version negotiation, errors a user can act on.
//! - `container.rs`: the hardened container shape and the resident loader
//!   that takes the program over the attached stdin.
//! - `pool.rs`: warm containers, single use, refilled in the background.
//! - `reap.rs`: owner labels; removing what provably dead sandbench processes left.
//! - `image.rs`: `sandbench setup docker` — use, pull, or build the image.

pub mod container;
pub mod engine;
pub mod image;
pub mod pool;
pub mod reap;
pub mod scratch;
pub mod session;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::anyhow;
use bollard::container::LogOutput;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, RemoveContainerOptions, StatsOptions,
    WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::config::{Config, DockerConfig};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::highwater;
use crate::judge::{self, ExitFacts, Judge};
use crate::spec::{Language, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, Check, Tier, TierExit};
use container::Shape;
use engine::Engine;
use pool::Pool;

/// The container's stdin, stdout and stderr as one live stream (no logs
/// replayed): how sandbench talks to a run's loader and a session's agent.
async fn attach(
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

const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// How long a container killed without its loader's report may take to be
/// marked OOMKilled by the engine (gVisor's whole sandbox is killed at the
/// memory limit; the engine learns it from containerd a moment later).
const OOM_FLAG_WAIT: Duration = Duration::from_secs(3);
/// After the container exited, how long the output stream may take to end.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// Whether the image has Node, from the probe's `command -v node` (the
/// image is the user's choice: its answer is bounded and made inert).
fn node_check(stdout: &str, image: &str, tier: &str) -> Check {
    let line = stdout.lines().next().unwrap_or("").trim();
    if line.starts_with('/') && line.len() <= 200 {
        Check::ok("javascript", format!("node at {} in the image", crate::sanitize::inert_line(line, 200)))
    } else {
        Check::warn(
            "javascript",
            format!("no node in {image}: JavaScript programs cannot run"),
            format!("sandbench setup {tier} (builds the sandbench/runtime image with nodejs), or set [docker] image to one with node"),
        )
    }
}

/// The image a run uses: `$SANDBENCH_DOCKER_IMAGE`, else `[docker] image`.
pub fn configured_image(config: &Config) -> String {
    config.host.docker_image.clone().unwrap_or_else(|| config.docker.image.clone())
}

pub struct DockerTier {
    name: &'static str,
    /// None = the daemon's default runtime; Some("runsc") for gVisor.
    runtime: Option<&'static str>,
    cfg: DockerConfig,
    image: String,
    endpoint: engine::Endpoint,
    engine: tokio::sync::OnceCell<Engine>,
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
            engine: tokio::sync::OnceCell::new(),
            pool: OnceLock::new(),
            runs: AtomicU64::new(0),
            prewarmed: AtomicBool::new(false),
            limits: config.limits.clone(),
            egress: crate::egress::Operator::from_config(config),
        }
    }

    /// The engine, connected once per tier (a failure is retried next time).
    pub async fn engine(&self) -> anyhow::Result<&Engine> {
        self.engine.get_or_try_init(|| Engine::connect(&self.endpoint)).await
    }

    /// What the warm pool costs while it waits, measured on one container
    /// started now (as the pool starts them) and removed.
    async fn warm_check(&self, engine: &Engine) -> String {
        let n = self.cfg.pool_size;
        if n == 0 {
            return "no warm pool ([docker] pool_size = 0): every run starts cold".into();
        }
        let shape = Shape::new(&self.image, self.runtime, &self.cfg.user, &self.limits);
        let each = match launch(engine, &shape, &format!("doctor-{}", container::new_run_id()), self.name).await {
            Ok(id) => {
                // The loader needs a moment to be resident and waiting.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let m = Cgroup::find(&id).and_then(|c| c.sample(true).usage.memory_bytes);
                remove(&engine.docker, &id).await;
                m
            }
            Err(_) => None,
        };
        format!(
            "long-lived front ends keep {n} container(s) started ahead{}; [docker] pool_size bounds it",
            each.map(|b| format!(", {} each while waiting (measured now)", crate::units::size(b))).unwrap_or_default()
        )
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
        let engine = self.engine().await?;
        self.check_ready(engine).await?;
        self.prewarmed.store(true, Ordering::Relaxed);
        let Some(pool) = self.pool(engine) else {
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
pub async fn setup(
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
            let path = Config::path().ok_or_else(|| anyhow!("no config directory; set SANDBENCH_CONFIG"))?;
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

pub fn runsc_fix() -> String {
    "apt-get install runsc; add {\"runtimes\":{\"runsc\":{\"path\":\"/usr/bin/runsc\",\"runtimeArgs\":[\"--network=none\"]}}} to /etc/docker/daemon.json; then restart dockerd (or kill -HUP it)".into()
}

/// Drain the warm pools (at exit).
pub async fn shutdown() {
    pool::drain_all().await;
}

/// Containers carrying `token`; None when the engine cannot be asked.
pub async fn owned_containers(token: &str, env: &crate::config::HostEnv) -> Option<Vec<String>> {
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
pub async fn reap_leftovers(env: &crate::config::HostEnv) {
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
/// next start reaps whatever this could not remove.
pub(crate) async fn remove(docker: &Docker, id: &str) {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    for attempt in 0..3 {
        match docker.remove_container(id, Some(opts.clone())).await {
            Ok(()) => return scratch::release(id),
            Err(e) if engine::is_not_found(&e) => return scratch::release(id),
            // "removal already in progress" and similar races settle quickly.
            Err(e) => {
                if attempt == 2 {
                    tracing::warn!("cannot remove container {}: {}", short(id), engine::cause(&e));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn short(id: &str) -> &str {
    &id[..12.min(id.len())]
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
        Box::pin(self.run_inner(spec, ctx))
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
            let engine = self.engine().await?;
            self.check_ready(engine).await?;
            let shape = Shape::new(&self.image, self.runtime, &self.cfg.user, &spec.limits);
            let s = session::open(engine, shape, &self.cfg.user, self.name).await?;
            Ok(Arc::new(s) as Arc<dyn crate::tier::contract::TierSession>)
        })
    }
}

/// What the sampler learned; judged in the run loop.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    usage: UsageSample,
    /// The cgroup's own high-water mark of charged memory (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`): the run's peak memory,
    /// which catches what happened between two samples.
    peak: Option<u64>,
    /// Kernel counters of the container's cgroup (local engines only).
    counters: judge::Counters,
}

impl DockerTier {
    async fn probe_inner(&self) -> Availability {
        let mut checks = vec![];
        let name = self.name.to_string();
        let engine = match self.engine().await {
            Ok(e) => e,
            Err(e) => {
                checks.push(Check::fail("daemon", format!("{e:#}"), engine::start_daemon_hint(&self.endpoint.host)));
                return Availability {
                    tier: name,
                    available: false,
                    summary: "unavailable: no Docker daemon answers".into(),
                    checks,
                };
            }
        };
        checks.push(Check::ok(
            "daemon",
            format!("{} — engine {}, API {} (negotiated)", engine.host, engine.server_version, engine.api_version),
        ));
        let mut ok = true;
        match container::choose_ids(&self.cfg.user, engine.local) {
            Ok(_) => {
                let mut detail = container::describe_user(&self.cfg.user);
                if engine.local && self.cfg.user.trim() != container::AUTO_USER {
                    if let Ok((uid, _)) = container::program_ids(&self.cfg.user) {
                        if host_has_uid(uid) {
                            detail.push_str(&format!(" — a host process has uid {uid} too: it shares per-uid quotas"));
                        }
                    }
                }
                checks.push(Check::ok("uid", detail));
            }
            Err(e) => {
                ok = false;
                checks.push(Check::fail("uid", format!("{e:#}"), "set [docker] user = \"auto\" in the config"));
            }
        }
        if let Some(rt) = self.runtime {
            if engine.runtimes.contains(rt) {
                checks.push(Check::ok("runtime", format!("{rt} registered")));
            } else {
                ok = false;
                checks.push(Check::fail(
                    "runtime",
                    format!(
                        "the daemon has no '{rt}' runtime (it has: {})",
                        engine.runtimes.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    runsc_fix(),
                ));
            }
        }
        match engine.has_image(&self.image).await {
            Ok(true) => checks.push(Check::ok("image", self.image.clone())),
            Ok(false) => {
                ok = false;
                checks.push(Check::fail(
                    "image",
                    format!("{} is not present", self.image),
                    format!("sandbench setup {}", self.name),
                ));
            }
            Err(e) => {
                ok = false;
                checks.push(Check::fail("image", format!("{e:#}"), format!("sandbench setup {}", self.name)));
            }
        }
        if ok {
            // The honest test: a real container runs a trivial program,
            // which also says whether the image has Node (a shell builtin:
            // nothing more is started).
            let mut spec = RunSpec::new(Language::Sh, "command -v node || true\n");
            spec.label = "doctor probe".into();
            let probe = DockerTier {
                name: self.name,
                runtime: self.runtime,
                cfg: DockerConfig { pool_size: 0, ..self.cfg.clone() },
                image: self.image.clone(),
                endpoint: self.endpoint.clone(),
                engine: self.engine.clone(),
                pool: OnceLock::new(),
                runs: AtomicU64::new(0),
                prewarmed: AtomicBool::new(false),
                limits: self.limits.clone(),
                egress: Default::default(),
            };
            let report = crate::runner::run(Arc::new(probe), spec).await;
            if report.outcome == crate::report::Outcome::Ok && report.exit.code == Some(0) {
                checks.push(Check::ok(
                    "container",
                    format!(
                        "a hardened container ran a trivial program in {}",
                        crate::units::duration_ms(report.timings_ms.total)
                    ),
                ));
                checks.push(Check::ok(
                    "holds",
                    "no capability but SETUID/SETGID in the container's bounding set; a one-shot loader drops both once \
the program is its own uid; a session's agent (PID 1, not dumpable, another uid than the program's) and its loaders keep them \
(as root) to make each call's program the session's uid and end the call's processes",
                ));
                checks.push(node_check(&report.stdout, &self.image, self.name));
                checks.push(Check::ok("warm", self.warm_check(engine).await));
            } else {
                ok = false;
                let why = report.error.clone().unwrap_or_else(|| report.summary_line());
                checks.push(Check::fail(
                    "container",
                    format!("a trivial program failed: {why}"),
                    "see the log (sandbench.log) and the daemon's log",
                ));
            }
        }
        let summary = if ok {
            format!("ready ({}, image {}, engine API {})", self.runtime_name(), self.image, engine.api_version)
        } else {
            "unavailable: see the failed checks".into()
        };
        Availability { tier: name, available: ok, summary, checks }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let engine = self.engine().await?;
        if let Some(rt) = self.runtime {
            if !engine.runtimes.contains(rt) {
                anyhow::bail!("the Docker daemon at {} has no '{rt}' runtime: {}", engine.host, runsc_fix());
            }
        }
        let shape = self.shape(&spec);
        let nth = self.runs.fetch_add(1, Ordering::Relaxed);
        let pool = self.pool(engine);
        let use_pool = pool.filter(|_| self.prewarmed.load(Ordering::Relaxed) || nth >= 1);
        let warm = use_pool.and_then(|p| p.take(&shape));
        let run_id = container::new_run_id();
        let (id, start) = match warm {
            Some(id) => {
                ctx.note(format!("warm container {}", short(&id))).await;
                (id, "warm")
            }
            None => {
                ctx.note(format!("creating a {} container", self.runtime_name())).await;
                (launch(engine, &shape, &run_id, self.name).await?, "cold")
            }
        };
        let mut timeline: Vec<(&'static str, f64)> =
            vec![(if start == "warm" { "container_taken" } else { "container_started" }, ctx.ms())];
        let host_binds = scratch::of(&id).map(|d| scratch::binds(&d));
        let result = self.execute(engine, &id, &spec, &ctx, &mut timeline).await;
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        // The program has exited and its output is in (the loader's exit
        // frame comes after every output frame): the report is final now.
        // The single-use container goes in the background, awaited at
        // shutdown and by the benchmarks; a killed sandbench leaves it to
        // the next start's reaper (its owner label).
        let (docker, gone) = (engine.docker.clone(), id.clone());
        let ack = result.as_ref().ok().map(|r| r.2.abort_handle());
        super::background::spawn(async move {
            if let Some(w) = ack {
                // The loader's acknowledgement first, so that it ends as it
                // would: everything was received.
                let t = tokio::time::Instant::now();
                while !w.is_finished() && t.elapsed() < Duration::from_secs(2) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            remove(&docker, &gone).await;
        });
        // Refill (and retarget to this run's shape) only now, off this run's path.
        if let Some(p) = use_pool {
            p.want(&shape);
        }
        let (usage, mut details, _) = result?;
        let mut t = serde_json::Map::new();
        for (k, v) in &timeline {
            t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
        }
        details["timeline_ms"] = serde_json::Value::Object(t);
        details["runtime"] = json!(self.runtime_name());
        details["start"] = json!(start);
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

    /// The host's watch of the container's scratch mounts: runc on a local
    /// engine with sandbench as root marks them through the loader's
    /// `/proc/<pid>/root` (and serves the guard: the loader's pid is
    /// returned). Otherwise None, and the loader's own checks judge.
    async fn host_watch(
        &self,
        engine: &Engine,
        id: &str,
        limits: &crate::spec::Limits,
        ctx: &RunContext,
    ) -> (Option<highwater::Watch>, Option<i32>) {
        if !engine.local {
            return (None, None);
        }
        if self.runtime.is_some() {
            // gVisor: its host scratch mounts, if it has them; no guard
            // (runsc 20221219 has no seccomp user notification).
            let Some(dir) = scratch::of(id) else {
                ctx.note("gVisor scratch space judged by the loader alone (no host scratch mounts: not root, or they could not be made)").await;
                return (None, None);
            };
            let mounts: Vec<highwater::Scratch> =
                scratch::MOUNTS.iter().map(|(name, inside)| highwater::Scratch::new(inside, dir.join(name))).collect();
            return match highwater::Watch::new(&mounts, limits.file_size_bytes, highwater::Mode::Handles) {
                Ok(w) if w.sees_files() => (Some(w), None),
                Ok(_) | Err(_) => (None, None),
            };
        }
        if !nix::unistd::geteuid().is_root() {
            ctx.note("scratch space judged by the loader alone (sandbench is not root): a full scratch emptied at once, or a capped file deleted or truncated, may go unreported").await;
            return (None, None);
        }
        let pid =
            match engine.docker.inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>).await
            {
                Ok(i) => i.state.and_then(|s| s.pid).filter(|p| *p > 0).map(|p| p as i32),
                Err(e) => {
                    tracing::debug!("inspect {}: {}", short(id), engine::cause(&e));
                    None
                }
            };
        let Some(pid) = pid else {
            ctx.note("scratch space judged by the loader alone (the container's process was not found)").await;
            return (None, None);
        };
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mounts: Vec<highwater::Scratch> = [container::WORKDIR, container::TMPDIR, container::SHMDIR]
            .iter()
            .map(|m| highwater::Scratch::new(m, root.join(m.trim_start_matches('/'))))
            .collect();
        match highwater::Watch::new(&mounts, limits.file_size_bytes, highwater::Mode::Pin) {
            Ok(w) if w.sees_files() => (Some(w), Some(pid)),
            Ok(w) => {
                ctx.note(format!(
                    "scratch files not watched from the host ({}): the loader's checks judge",
                    w.why_not().unwrap_or("?")
                ))
                .await;
                (None, None)
            }
            Err(e) => {
                ctx.note(format!("scratch space not watched from the host ({e}): the loader's checks judge")).await;
                (None, None)
            }
        }
    }

    async fn execute(
        &self,
        engine: &Engine,
        id: &str,
        spec: &RunSpec,
        ctx: &RunContext,
        timeline: &mut Vec<(&'static str, f64)>,
    ) -> anyhow::Result<(UsageSample, serde_json::Value, tokio::task::JoinHandle<()>)> {
        let docker = &engine.docker;
        let limits = &spec.limits;
        let (uid, gid) = container::choose_ids(&self.cfg.user, engine.local)?;
        let attach =
            attach(docker, id).await.map_err(|e| anyhow!("cannot attach to the container: {}", engine::cause(&e)))?;
        timeline.push(("attached", ctx.ms()));
        let mut output = attach.output;
        let mut input = attach.input;
        let mut wait =
            Box::pin(docker.wait_container(id, Some(WaitContainerOptions { condition: "not-running".into() })));

        ctx.emit(EventKind::Phase(Phase::Running)).await;
        // The program exists from now on: count it even if it exits before
        // the first sample.
        ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
        let mut frames = container::Frames::default();
        let mut judge = Judge::new(limits);
        let mut loader = LoaderFacts::default();
        // High-water marks of the scratch space, from the host where it can
        // (see host_watch); the loader's own checks stay as the fallback.
        let (mut watch, loader_pid) = self.host_watch(engine, id, limits, ctx).await;
        let guard_wanted = watch.as_ref().is_some_and(|w| w.sees_files()) && loader_pid.is_some();
        let mut running: Option<highwater::Running> = None;
        let mut guarded: Option<u64> = None;
        let files_watched = watch.as_ref().is_some_and(|w| w.sees_files());
        let egress = crate::egress::Egress::start(spec, &self.egress, ctx)?;
        let net = egress.as_ref().map(|eg| container::Net {
            port: crate::egress::SANDBOX_PORT,
            env: eg.sandbox_env(&spec.env, container::CA_BUNDLE),
            ca: eg.ca_pem(),
        });
        let payload = container::payload(spec, uid, gid, guard_wanted, net.as_ref());
        let (mut mux, mut mux_out) = match &egress {
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
        let mut ack_tx = Some(ack_tx);
        let writer = tokio::spawn(async move {
            let r = async {
                input.write_all(&payload).await?;
                input.flush().await?;
                match mux_out.as_mut() {
                    None => {
                        let _ = ack_rx.await;
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
        });

        let (sample_tx, mut sample_rx) = mpsc::channel::<Sample>(4);
        let guest_pids = self.runtime.is_none();
        // Under runc the cgroup also counts the loader (PID 1) and, with an
        // allow list, its relay thread: not the program's processes.
        let loader_tasks = 1 + u64::from(!limits.network.is_none());
        let cgroup = if engine.local { Cgroup::find(id) } else { None };
        let sampler = tokio::spawn(sample_loop(docker.clone(), id.to_string(), cgroup.clone(), guest_pids, sample_tx));

        let mut exit_code: Option<i64> = None;
        let mut wait_error: Option<String> = None;
        let mut output_done = false;
        let mut killed = false;
        let mut last = UsageSample::default();
        let mut peak_mem: Option<u64> = None;
        let mut cpu_killed = false;
        let mut cg_counters = judge::Counters::default();
        // From the loader's own channel, which the program cannot write.
        let mut reported: Option<(ExitStatus, u64, u64)> = None;
        let mut failed: Option<String> = None;
        let mut started_uid: Option<u32> = None;
        let mut delivered = [0u64; 2];
        // The loader's own failures (never the program's output), bounded.
        let mut loader_err: Vec<u8> = vec![];
        let grace = tokio::time::sleep(Duration::from_secs(86_400 * 365));
        tokio::pin!(grace);

        // Until the loader's exit frame (every output frame comes before it)
        // or its failure; else until the container is gone and its stream ended.
        while reported.is_none() && failed.is_none() && (exit_code.is_none() && wait_error.is_none() || !output_done) {
            tokio::select! {
                item = output.next(), if !output_done => match item {
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
                                    loader.absorb(&found);
                                    judge.sample(ctx, &loader.counters(cg_counters)).await;
                                }
                                container::Frame::Started { uid, guard } => {
                                    timeline.push(("program_started", ctx.ms()));
                                    started_uid = Some(uid);
                                    if let Some(w) = watch.take() {
                                        match start_watch(w, guard_wanted, guard, loader_pid) {
                                            Ok(r) => running = Some(r),
                                            Err(why) => {
                                                // Guarded calls would wait for ever: end it.
                                                failed = Some(why);
                                                if !killed {
                                                    killed = true;
                                                    kill(docker, id);
                                                }
                                            }
                                        }
                                    }
                                }
                                container::Frame::Net(m) => match mux.as_mut() {
                                    Some(mux) => mux.incoming(&m).await,
                                    // Relay messages in a run without egress: the stream is not
                                    // what sandbench's loader writes.
                                    None => frames.broken = Some("a relay frame in a run without egress".into()),
                                },
                                container::Frame::Failed(why) => {
                                    failed = Some(why);
                                    if let Some(tx) = ack_tx.take() {
                                        let _ = tx.send(());
                                    }
                                }
                                container::Frame::Exit { status, stdout_bytes, stderr_bytes } => {
                                    timeline.push(("program_exited", ctx.ms()));
                                    reported = Some((status, stdout_bytes, stderr_bytes));
                                    // The program is gone: the watch's last look.
                                    if let Some(r) = running.take() {
                                        if let Ok((found, served)) = tokio::task::spawn_blocking(move || r.finish()).await {
                                            for gap in &found.gaps {
                                                ctx.note(gap.clone()).await;
                                            }
                                            loader.absorb_found(found);
                                            guarded = Some(served);
                                        }
                                    }
                                    // The container is still up (the loader waits for the
                                    // acknowledgement): its cgroup's counters are final now,
                                    // including OOM kills of children the program survived.
                                    if let Some(cg) = &cgroup {
                                        cg_counters = cg_counters.max(cg.sample(guest_pids).counters);
                                    }
                                    if let Some(tx) = ack_tx.take() {
                                        let _ = tx.send(());
                                    }
                                }
                            }
                        }
                        if frames.broken.is_some() && !killed {
                            killed = true;
                            kill(docker, id);
                        }
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        let room = 4096usize.saturating_sub(loader_err.len());
                        loader_err.extend_from_slice(&message[..message.len().min(room)]);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!("attach stream: {e}");
                        output_done = true;
                    }
                    None => output_done = true,
                },
                w = wait.next(), if exit_code.is_none() && wait_error.is_none() => {
                    match w {
                        Some(Ok(r)) => exit_code = Some(r.status_code),
                        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => exit_code = Some(code),
                        Some(Err(e)) => wait_error = Some(engine::cause(&e)),
                        None => wait_error = Some("the wait stream ended without a status".into()),
                    }
                    grace.as_mut().reset(tokio::time::Instant::now() + OUTPUT_GRACE);
                }
                _ = &mut grace, if !output_done => {
                    tracing::debug!("output stream did not end after the container exited");
                    output_done = true;
                }
                _ = ctx.stop.cancelled(), if !killed => {
                    killed = true;
                    kill(docker, id);
                }
                Some(mut s) = sample_rx.recv() => {
                    if exit_code.is_some() {
                        continue;
                    }
                    s.usage.pids = s.usage.pids.map(|p| p.saturating_sub(loader_tasks));
                    last = s.usage;
                    if let Some(m) = s.peak.or(s.usage.memory_bytes) {
                        peak_mem = Some(peak_mem.map_or(m, |p| p.max(m)));
                    }
                    ctx.usage(s.usage).await;
                    cg_counters = cg_counters.max(s.counters);
                    if judge.sample(ctx, &loader.counters(cg_counters)).await == judge::Action::KillForCpu && !killed {
                        killed = true;
                        cpu_killed = true;
                        kill(docker, id);
                    }
                }
            }
        }
        sampler.abort();
        // The cgroup's high-water mark once more, while it is still there: a
        // bomb killed between two samples peaked after the last one.
        if let Some(p) = cgroup.as_ref().and_then(|cg| cg.sample(guest_pids).peak) {
            peak_mem = Some(peak_mem.map_or(p, |m| m.max(p)));
        }
        // The writer goes on: it sends the loader's acknowledgement (see
        // run_inner, which waits for it in the background).
        if let Some(m) = mux.as_mut() {
            m.close_all();
        }
        let network = match egress {
            Some(eg) => {
                let mut n = eg.finish().await;
                n["relay_protocol_violations"] = json!(mux.map_or(0, |m| m.violations));
                n
            }
            None => json!("none (network_mode none)"),
        };
        if let Some(e) = wait_error {
            if !(killed || ctx.stop.is_cancelled()) {
                return Err(anyhow!("lost the container while waiting for it: {e}"));
            }
        }
        if let Some(why) = frames.broken {
            return Err(anyhow!("the container's loader sent an unreadable stream ({why}); the run is void"));
        }
        if let Some(why) = failed {
            return Err(anyhow!("the container could not set up the program: {why}"));
        }
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
        let raw = exit_code.or_else(|| state.as_ref().and_then(|s| s.exit_code)).unwrap_or(137);
        let status = match reported {
            Some((status, _, _)) => status,
            None if killed => ExitStatus { code: None, signal: Some(libc::SIGKILL) },
            None => {
                let (code, signal) = container::split_exit(raw);
                // The engine records the OOM event after the exit, later
                // still on a loaded machine: ask again for a while.
                let deadline = tokio::time::Instant::now() + OOM_FLAG_WAIT;
                while signal == Some(libc::SIGKILL) && !oom && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    oom = docker
                        .inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>)
                        .await
                        .ok()
                        .and_then(|i| i.state)
                        .and_then(|s| s.oom_killed)
                        .unwrap_or(false);
                }
                if !oom && signal == Some(libc::SIGKILL) {
                    // No flag (gVisor's sandbox, one host process, can die at
                    // the limit before the engine notes it): the container's
                    // own cgroup is the fact, if it saw the limit bite.
                    if let Some(cg) = &cgroup {
                        cg_counters = cg_counters.max(cg.sample(guest_pids).counters);
                    }
                    oom = cg_counters.oom_kills.unwrap_or(0) > 0 || cg_counters.memory_limit_hits.unwrap_or(0) > 0;
                }
                if !oom {
                    // Nothing the program can do ends the loader; a container
                    // that ended without its report is a broken sandbox.
                    let why = crate::sanitize::inert_line(&String::from_utf8_lossy(&loader_err), 300);
                    return Err(anyhow!(
                        "the container ended (exit {raw}) without the loader reporting the program's exit{}",
                        if why.is_empty() { String::new() } else { format!(": {why}") }
                    ));
                }
                ExitStatus { code, signal }
            }
        };
        let mut counters = loader.counters(cg_counters);
        if oom {
            counters.oom_kills = Some(counters.oom_kills.unwrap_or(0).max(1));
        }
        let facts = ExitFacts {
            status,
            counters,
            rlimit_signals_trusted: false,
            capped_files: loader.fsize.clone(),
            full_mounts: loader.disk.clone(),
        };
        judge.exit(ctx, &facts).await;
        let exit = if killed && !cpu_killed && reported.is_none() {
            ExitStatus { code: None, signal: Some(libc::SIGKILL) }
        } else {
            status
        };
        ctx.emit(EventKind::Exit(exit)).await;
        let usage = UsageSample { cpu_ms: last.cpu_ms, memory_bytes: peak_mem, pids: None };
        let produced = reported.map(|(_, o, e)| [o, e]);
        let details = json!({
            "oom_killed": oom,
            "container_exit_code": raw,
            "program_uid": started_uid,
            "program_uid_policy": container::describe_user(&self.cfg.user),
            "scratch_watch": if files_watched {
                json!({ "from": "host", "file_events": files_watched, "guarded_calls": guarded })
            } else {
                json!({ "from": "loader: free space every 100 ms and a scan at exit" })
            },
            "output": {
                "stdout_bytes": delivered[0],
                "stderr_bytes": delivered[1],
                // Every byte the program wrote reached sandbench (before the
                // runner's output limit); false only when the run was cut.
                "complete": produced == Some(delivered),
            },
            "network": network,
        });
        Ok((usage, details, writer))
    }
}

/// Does any host process run as `uid` now?
fn host_has_uid(uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())
            && e.metadata().is_ok_and(|m| m.uid() == uid)
    })
}

/// Start the host's watch thread once the program's process exists, with
/// the scratch guard's listener taken from the loader when one was asked for.
fn start_watch(
    w: highwater::Watch,
    wanted: bool,
    guard: Option<i32>,
    loader_pid: Option<i32>,
) -> Result<highwater::Running, String> {
    let guard = match (wanted, guard, loader_pid) {
        (false, _, _) => None,
        (true, Some(fd), Some(pid)) => Some(
            highwater::take_fd(pid, fd)
                .and_then(highwater::Guard::new)
                .map_err(|e| format!("cannot serve the scratch guard ({e})"))?,
        ),
        (true, _, _) => return Err("the loader did not hand over the scratch guard".into()),
    };
    highwater::Running::spawn(w, guard)
}

/// What the loader reported from inside the container.
#[derive(Debug, Default)]
struct LoaderFacts {
    pids_refused: u64,
    fsize: Vec<String>,
    disk: Vec<String>,
}

impl LoaderFacts {
    /// The host watch's findings (names as the sandbox sees them).
    fn absorb_found(&mut self, found: highwater::Found) {
        for f in found.capped {
            if self.fsize.len() < 16 && !self.fsize.contains(&f) {
                self.fsize.push(f);
            }
        }
        for d in found.full {
            if self.disk.len() < 16 && !self.disk.contains(&d) {
                self.disk.push(d);
            }
        }
    }

    fn absorb(&mut self, found: &serde_json::Value) {
        if found.get("pids").and_then(|v| v.as_u64()).is_some() {
            self.pids_refused = self.pids_refused.max(1);
        }
        let names = |key: &str| -> Vec<String> {
            found
                .get(key)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|d| d.as_str()).take(16).map(str::to_string).collect())
                .unwrap_or_default()
        };
        for f in names("fsize") {
            if self.fsize.len() < 16 && !self.fsize.contains(&f) {
                self.fsize.push(f);
            }
        }
        for d in names("disk") {
            if self.disk.len() < 16 && !self.disk.contains(&d) {
                self.disk.push(d);
            }
        }
    }

    /// The loader's counts combined with the host's cgroup counters.
    fn counters(&self, cg: judge::Counters) -> judge::Counters {
        let max = |a: Option<u64>, b: u64| Some(a.unwrap_or(0).max(b));
        judge::Counters {
            cpu_ms: cg.cpu_ms,
            oom_kills: cg.oom_kills,
            memory_limit_hits: cg.memory_limit_hits,
            pids_refused: max(cg.pids_refused, self.pids_refused),
        }
    }
}

/// Kill in the background: the engine answers a SIGKILL only once the
/// container has stopped, and it stops only once its output is drained — so
/// the run loop must keep reading output meanwhile, never wait for the kill.
fn kill(docker: &Docker, id: &str) {
    let (docker, id) = (docker.clone(), id.to_string());
    tokio::spawn(async move {
        if let Err(e) = docker.kill_container(&id, Some(KillContainerOptions { signal: "SIGKILL".into() })).await {
            // 409: not running any more — the goal is reached.
            tracing::debug!("kill {}: {}", short(&id), engine::cause(&e));
        }
    });
}

/// Where the container's cgroup lives on this machine (local engines with
/// the cgroupfs or systemd driver, v1 or v2).
#[derive(Debug, Clone)]
enum Cgroup {
    V1 { cpu: PathBuf, memory: PathBuf, pids: PathBuf },
    V2(PathBuf),
}

impl Cgroup {
    fn find(id: &str) -> Option<Cgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let v1 = |c: &str| root.join(c).join("docker").join(id);
        if v1("memory").join("memory.usage_in_bytes").exists() {
            let cpu =
                ["cpuacct", "cpu,cpuacct", "cpu"].iter().map(|c| v1(c)).find(|p| p.join("cpuacct.usage").exists())?;
            return Some(Cgroup::V1 { cpu, memory: v1("memory"), pids: v1("pids") });
        }
        [root.join("docker").join(id), root.join("system.slice").join(format!("docker-{id}.scope"))]
            .into_iter()
            .find(|p| p.join("cgroup.procs").exists())
            .map(Cgroup::V2)
    }

    fn read(p: PathBuf) -> Option<String> {
        std::fs::read_to_string(p).ok()
    }

    fn num(p: PathBuf) -> Option<u64> {
        Self::read(p)?.trim().parse().ok()
    }

    fn field(p: PathBuf, key: &str) -> Option<u64> {
        Self::read(p)?.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// Usage and the kernel's counters of the container's cgroup.
    fn sample(&self, count_pids: bool) -> Sample {
        match self {
            // Memory as the kernel charges it (what the limit is enforced
            // against), the same figure the process tier shows.
            Cgroup::V1 { cpu, memory, pids } => {
                let mem = Self::num(memory.join("memory.usage_in_bytes"));
                let peak = Self::num(memory.join("memory.max_usage_in_bytes"));
                let cpu_ms = Self::num(cpu.join("cpuacct.usage")).map(|ns| ns / 1_000_000);
                let usage = UsageSample {
                    cpu_ms,
                    memory_bytes: mem,
                    pids: if count_pids { Self::num(pids.join("pids.current")) } else { None },
                };
                let counters = judge::Counters {
                    cpu_ms,
                    oom_kills: Self::field(memory.join("memory.oom_control"), "oom_kill"),
                    memory_limit_hits: Self::num(memory.join("memory.failcnt")),
                    pids_refused: if count_pids { Self::field(pids.join("pids.events"), "max") } else { None },
                };
                Sample { usage, peak, counters }
            }
            Cgroup::V2(dir) => {
                let mem = Self::num(dir.join("memory.current"));
                let peak = Self::num(dir.join("memory.peak"));
                let cpu_ms = Self::field(dir.join("cpu.stat"), "usage_usec").map(|us| us / 1000);
                let usage = UsageSample {
                    cpu_ms,
                    memory_bytes: mem,
                    pids: if count_pids { Self::num(dir.join("pids.current")) } else { None },
                };
                let counters = judge::Counters {
                    cpu_ms,
                    oom_kills: Self::field(dir.join("memory.events"), "oom_kill"),
                    memory_limit_hits: Self::field(dir.join("memory.events"), "max"),
                    pids_refused: if count_pids { Self::field(dir.join("pids.events"), "max") } else { None },
                };
                Sample { usage, peak, counters }
            }
        }
    }
}

/// Sample the container: its cgroup files when the engine is local (cheap
/// and immediate), else the engine's stats stream (one sample a second).
/// `guest_pids` is false on gVisor, where the host only sees the sandbox's
/// own threads, not the program's processes.
async fn sample_loop(docker: Docker, id: String, cgroup: Option<Cgroup>, guest_pids: bool, tx: mpsc::Sender<Sample>) {
    {
        if let Some(cg) = cgroup {
            let mut ticker = tokio::time::interval(SAMPLE_EVERY);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if tx.send(cg.sample(guest_pids)).await.is_err() {
                    return;
                }
            }
        }
    }
    let mut stream = docker.stats(&id, Some(StatsOptions { stream: true, one_shot: false }));
    while let Some(Ok(s)) = stream.next().await {
        // The cgroup's charge as the engine reports it (its high-water mark
        // only on cgroup v1 engines).
        let mem = s.memory_stats.as_ref().and_then(|m| m.usage);
        let peak = s.memory_stats.as_ref().and_then(|m| m.max_usage);
        let cpu_ms = s
            .cpu_stats
            .as_ref()
            .and_then(|c| c.cpu_usage.as_ref())
            .and_then(|u| u.total_usage)
            .map(|ns| ns / 1_000_000);
        let pids = if guest_pids { s.pids_stats.as_ref().and_then(|p| p.current) } else { None };
        // A remote engine's stats carry no refusal or OOM counters.
        let counters = judge::Counters { cpu_ms, ..Default::default() };
        let sample = Sample { usage: UsageSample { cpu_ms, memory_bytes: mem, pids }, peak, counters };
        if tx.send(sample).await.is_err() {
            return;
        }
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

    #[test]
    fn node_check_reads_only_a_path_and_keeps_it_inert() {
        use crate::tier::contract::CheckLevel;
        let c = node_check("/usr/bin/node\n", "img", "docker");
        assert_eq!((c.level, c.detail.as_str()), (CheckLevel::Ok, "node at /usr/bin/node in the image"));
        for out in ["", "sh: node: not found\n", "v20\n"] {
            let c = node_check(out, "img", "gvisor");
            assert_eq!(c.level, CheckLevel::Warn, "{out:?}");
            assert!(c.fix.unwrap().contains("sandbench setup gvisor"));
        }
        let c = node_check("/x\x1b]52;c;AAAA\x07\n", "img", "docker");
        assert!(!c.detail.contains('\x1b') && !c.detail.contains('\x07'), "{}", c.detail);
    }
}
