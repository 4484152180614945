//! The `e2b` tier: the program runs in a fresh E2B sandbox (a Firecracker
//! microVM on E2B's hosts), created for the run and killed after it. This is
//! how a user outgrows one machine: nothing runs on the local kernel, and the
//! number of sandboxes at once is E2B's quota, not local cores.
//!
//! Flow: `POST /v2/sandboxes` (REST API, `api.rs`) → upload the program to envd
//! (`envd.rs`) → `process.Process/Start` streams stdout/stderr and the exit →
//! `DELETE /sandboxes/{id}`, always: on a normal end, on cancel, wall timeout,
//! error, and — through [`kill_live`] and a SIGTERM/SIGHUP hook — when
//! sandbench itself exits. A sandbench that is SIGKILLed cannot make HTTP
//! calls, so every sandbox is also created with an E2B timeout of wall time +
//! a margin: E2B reaps it by itself shortly after the run could have ended.
//!
//! Configuration: `E2B_API_KEY` (required), `E2B_DOMAIN` (default
//! `e2b.app`), `E2B_API_URL` (default `https://api.<domain>`),
//! `E2B_SANDBOX_URL` (every envd call goes there) and `E2B_DEBUG` — the names
//! and meanings of E2B's own SDK, read by the config ([`crate::config::RemoteEnv`]), never
//! here — and `[e2b] template`, `[e2b] timeout_margin_secs` in the config.
//!
//! envd routing follows the SDK (`ConnectionConfig.get_sandbox_url`, e2b
//! 2.63): on E2B's own domains every envd call goes to
//! `https://sandbox.<domain>`, and E2B's edge routes it by the
//! `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers; on other domains (self-hosted
//! E2B) to the per-sandbox host `https://49983-<id>.<domain>`, which the SDK
//! keeps for direct signed file URLs (sandbench makes none).

pub(crate) mod api;
pub(crate) mod envd;
pub(crate) mod session;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::anyhow;
use serde_json::json;

use crate::config::Config;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample, ViolationKind};
use crate::spec::{format_size, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, Check, Tier, TierExit};
use api::Api;
use envd::{Envd, ProcEvent};

/// Where the program lives inside the sandbox (the template's user home).
pub(crate) const WORK_DIR: &str = "/home/user/sandbench";
const METRICS_EVERY: Duration = Duration::from_millis(500);
/// How long after the wall time envd's own deadline kills the program (if
/// sandbench's kill did not arrive); never later than the sandbox's timeout.
const ENVD_DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// The domains whose edge routes envd traffic by headers at
/// `sandbox.<domain>` (the SDK's `SUPPORTED_SANDBOX_DOMAINS`, e2b 2.63).
pub(crate) const HEADER_ROUTED_DOMAINS: &[&str] =
    &["e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev", "e2b-tango.dev", "e2b-juliett.dev", "foxtrot-2.e2b.dev"];
/// Where the SDK's debug mode finds the API (a local E2B).
const DEBUG_API_URL: &str = "http://localhost:3000";

/// Where and how to reach E2B. Built from the config, or given directly
/// (tests, the TUI).
#[derive(Debug, Clone)]
pub struct Settings {
    pub api_key: Option<String>,
    pub domain: String,
    pub api_url: String,
    /// Every envd call goes here when set (`E2B_SANDBOX_URL`).
    pub sandbox_url: Option<String>,
    /// The SDK's debug mode: envd at `http://localhost:49983`.
    pub debug: bool,
    pub template: String,
    /// Added to the wall time for the sandbox's own E2B timeout.
    pub timeout_margin: Duration,
}

impl Settings {
    /// The SDK's precedence: an explicit URL, then debug mode, then the domain.
    pub fn from_config(config: &Config) -> Settings {
        let env = &config.env;
        let domain = env.e2b_domain.clone().unwrap_or_else(|| "e2b.app".into());
        let api_url = match (&env.e2b_api_url, env.e2b_debug) {
            (Some(u), _) => u.clone(),
            (None, true) => DEBUG_API_URL.into(),
            (None, false) => format!("https://api.{domain}"),
        };
        Settings {
            api_key: env.e2b_api_key.clone(),
            api_url,
            sandbox_url: env.e2b_sandbox_url.clone(),
            debug: env.e2b_debug,
            domain,
            template: config.e2b.template.clone(),
            timeout_margin: Duration::from_secs(config.e2b.timeout_margin_secs),
        }
    }

    /// envd's base URL for a sandbox; `sandbox_domain` is the `domain` the
    /// create answered (null unless the sandbox lives elsewhere).
    pub fn envd_url(&self, id: &str, sandbox_domain: Option<&str>) -> String {
        if let Some(u) = &self.sandbox_url {
            return u.clone();
        }
        if self.debug {
            return format!("http://localhost:{}", envd::ENVD_PORT);
        }
        let domain = sandbox_domain.map(str::trim).filter(|d| !d.is_empty()).unwrap_or(&self.domain);
        if HEADER_ROUTED_DOMAINS.contains(&domain) {
            format!("https://sandbox.{domain}")
        } else {
            format!("https://{}-{id}.{domain}", envd::ENVD_PORT)
        }
    }
}

pub struct E2bTier {
    settings: Settings,
}

impl E2bTier {
    pub fn new(config: &Config) -> Self {
        E2bTier { settings: Settings::from_config(config) }
    }

    pub fn with_settings(settings: Settings) -> Self {
        E2bTier { settings }
    }

    fn key(&self) -> anyhow::Result<&str> {
        self.settings.api_key.as_deref().ok_or_else(|| {
            anyhow!("E2B_API_KEY is not set: export E2B_API_KEY=e2b_... (from https://e2b.dev/dashboard?tab=keys) to use the e2b tier")
        })
    }
}

// ── live sandboxes: killed at exit whatever happens to the run ───────────────

struct LiveEntry {
    api_url: String,
    api_key: String,
    sandbox_url: Option<String>,
    debug: bool,
}

fn live() -> &'static Mutex<HashMap<String, LiveEntry>> {
    static LIVE: OnceLock<Mutex<HashMap<String, LiveEntry>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// Ids of sandboxes this process created and has not killed yet.
pub fn live_sandboxes() -> Vec<String> {
    live().lock().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// Kill every sandbox this process still has (sandbench exiting). Bounded:
/// a few seconds at most, whatever the network does. Returns what the user
/// should know (sandboxes that could not be killed).
pub(crate) async fn kill_live() -> Vec<String> {
    let entries: Vec<(String, LiveEntry)> = match live().lock() {
        Ok(mut m) => m.drain().collect(),
        Err(_) => return vec![],
    };
    let kills = entries.into_iter().map(|(id, e)| async move {
        let s = Settings {
            api_key: Some(e.api_key.clone()),
            domain: String::new(),
            api_url: e.api_url,
            sandbox_url: e.sandbox_url,
            debug: e.debug,
            template: String::new(),
            timeout_margin: Duration::ZERO,
        };
        let Ok(api) = Api::new(&s, &e.api_key) else {
            return Some(format!("could not kill e2b sandbox {id} at exit (no client); E2B stops it at its timeout"));
        };
        match tokio::time::timeout(Duration::from_secs(5), api.kill(&id)).await {
            Ok(Ok(_)) => {
                tracing::info!("killed e2b sandbox {id} at exit");
                None
            }
            Ok(Err(err)) => {
                Some(format!("could not kill e2b sandbox {id} at exit ({err}); E2B stops it at its timeout"))
            }
            Err(_) => Some(format!("killing e2b sandbox {id} timed out; E2B stops it at its timeout")),
        }
    });
    futures_util::future::join_all(kills).await.into_iter().flatten().collect()
}

/// Metadata every sandbox gets, so that a later sandbench can tell its own
/// orphans (a sandbench killed with SIGKILL cannot clean up) from anyone
/// else's: the owner token (see `owner`). Without one the sandbox is never
/// judged an orphan and E2B's own timeout ends it.
pub(crate) fn ownership_metadata() -> serde_json::Value {
    json!({
        "created_by": "sandbench",
        "sandbench_owner": crate::owner::token().unwrap_or(""),
        "sandbench_pid": std::process::id().to_string(),
    })
}

/// Kill the sandboxes that a dead sandbench process on this host left
/// running. Only ours: created by sandbench, with an owner token of this host
/// and boot whose owner lock is free (its process is gone, whatever pid
/// namespace it ran in). Runs once per process, in the background, the first
/// time the tier is used (not at every start: that would be a network call
/// for every command). E2B's own timeout reaps them anyway; this is sooner.
fn reap_orphans_once(s: &Settings, key: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    if ONCE.set(()).is_err() {
        return;
    }
    let Ok(api) = Api::new(s, key) else { return };
    tokio::spawn(async move {
        let n = reap_orphans(&api).await;
        if n > 0 {
            tracing::info!("killed {n} e2b sandbox(es) left by dead sandbench processes");
        }
    });
}

/// The reaping itself; returns how many were killed.
pub async fn reap_orphans(api: &Api) -> usize {
    let Ok(list) = api.list_by_metadata("created_by=sandbench").await else {
        return 0;
    };
    let mut sweep = crate::owner::Sweep::new();
    let mut killed = 0;
    for sb in list {
        let md = &sb["metadata"];
        let (Some(id), Some(owner)) = (sb["sandboxID"].as_str(), md["sandbench_owner"].as_str()) else {
            continue;
        };
        if md["created_by"] != "sandbench" || !sweep.dead(owner) {
            continue;
        }
        if matches!(api.kill(id).await, Ok(true)) {
            killed += 1;
        }
    }
    killed
}

struct LiveGuard {
    id: String,
}

impl LiveGuard {
    fn register(id: &str, s: &Settings, key: &str) -> LiveGuard {
        if let Ok(mut m) = live().lock() {
            m.insert(
                id.to_string(),
                LiveEntry {
                    api_url: s.api_url.clone(),
                    api_key: key.to_string(),
                    sandbox_url: s.sandbox_url.clone(),
                    debug: s.debug,
                },
            );
        }
        LiveGuard { id: id.to_string() }
    }

    fn killed(self) {
        if let Ok(mut m) = live().lock() {
            m.remove(&self.id);
        }
    }
}

// ── the tier ─────────────────────────────────────────────────────────────────

impl Tier for E2bTier {
    fn name(&self) -> &'static str {
        "e2b"
    }

    fn check_network(&self, network: &crate::egress::Network) -> Result<(), String> {
        check_allow_list(network)
    }

    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
        refuse_secrets(secrets)
    }

    fn describe(&self) -> &'static str {
        "hosted Firecracker microVM per run (E2B, over HTTPS)"
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }

    /// The E2B sandbox stays between calls (`session.rs`).
    fn sessions(&self) -> Result<(), String> {
        self.key().map(|_| ()).map_err(|e| e.to_string())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<std::sync::Arc<dyn crate::tier::contract::TierSession>>> {
        let key = self.key().map(str::to_string);
        let settings = self.settings.clone();
        Box::pin(async move { session::open(settings, key?, spec).await })
    }
}

/// E2B's "all traffic" selector (the SDK's `ALL_TRAFFIC`).
pub(crate) const ALL_TRAFFIC: &str = "0.0.0.0/0";

/// E2B's sandboxes reach the internet through E2B's own network, which
/// sandbench's egress proxy never sees: a secret could only be handed to
/// the program, so a run with one is refused.
pub(crate) fn refuse_secrets(secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
    if secrets.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the e2b tier's sandbox uses E2B's own network, which sandbench's egress proxy never sees: a secret could only be handed to the program; run it on {}",
        crate::tier::kinds::with_proxy_or()
    ))
}

/// The allow list as E2B's `allowOut`: names and `*.` wildcards only.
pub(crate) fn allow_out(n: &crate::egress::Network) -> Vec<String> {
    n.entries().iter().map(|e| e.to_string()).collect()
}

/// E2B filters names on port 80 (Host header) and 443 (SNI) only, and an
/// address for every port: only bare names (sandbench's 80 and 443) map
/// onto its rules without widening them.
pub(crate) fn check_allow_list(n: &crate::egress::Network) -> Result<(), String> {
    use crate::egress::policy::Pattern;
    for e in n.entries() {
        let why = match (&e.host, e.port) {
            (Pattern::Ip(_), _) => "E2B would allow an address on every port, not only 80 and 443",
            (_, Some(_)) => "E2B filters names on ports 80 and 443 together and cannot limit one port",
            _ => continue,
        };
        return Err(format!("the e2b tier cannot enforce the allow entry {e}: {why}; allow the bare name instead"));
    }
    Ok(())
}

/// What the tier does with each limit: E2B gives a VM of the template's size
/// and nothing finer, so what it cannot enforce is said, never dropped.
pub(crate) fn limit_enforcement(spec: &RunSpec) -> serde_json::Value {
    let l = &spec.limits;
    json!({
        "wall_time": "enforced: sandbench kills the sandbox; E2B's own timeout is wall time + margin",
        "output": "enforced by sandbench (stops reading and kills the sandbox)",
        "network": if l.network.is_none() {
            "blocked by E2B (allow_internet_access=false)".to_string()
        } else {
            format!("E2B's own egress rules: allowOut {:?}, denyOut [{ALL_TRAFFIC}] (HTTP Host on port 80, TLS SNI on 443; E2B lets DNS to its nameserver through); not seen by sandbench", allow_out(&l.network))
        },
        "cpu_time": "per process only (ulimit -t inside the VM), not for the sandbox as a whole",
        "file_size": "enforced per process (ulimit -f inside the VM)",
        "open_files": "enforced per process (ulimit -n inside the VM)",
        "memory": format!("not enforced: {} requested; the template's VM memory applies", format_size(l.memory_bytes)),
        "pids": format!("not enforced: {} requested; E2B has no process limit", l.pids),
        "disk": format!("not enforced: {} requested; the template's disk applies", format_size(l.disk_bytes)),
        "cpus": format!("not enforced: {} requested; the template's vCPUs apply", l.cpus),
    })
}

/// The command envd starts, the way the SDK's `commands.run` starts one:
/// `/bin/bash -l -c <script>` (a login shell, so the template's profile sets
/// the environment E2B users expect). The script sets the rlimits E2B can
/// honour, then execs the interpreter on the uploaded file so that signals and
/// the exit are the program's. An `sh` program is not handed to bash as the
/// script text (what `commands.run(code)` would do): it runs as a file under
/// `/bin/sh`, the interpreter it gets on every other tier, after the limits.
pub(crate) fn command(spec: &RunSpec) -> (String, Vec<String>) {
    let l = &spec.limits;
    let file = format!("{WORK_DIR}/{}", spec.language.program_file(&spec.code));
    let interp = spec.language.interpreter().join(" ");
    // The CPU hard limit sits one second above the soft one: at the soft
    // limit the kernel sends SIGXCPU (reported as a cpu_time violation); with
    // soft == hard it would SIGKILL, indistinguishable from any other kill.
    let cpu = l.cpu_time.as_secs_f64().ceil().max(1.0) as u64;
    let script = format!(
        "ulimit -S -t {cpu} && ulimit -H -t {} && ulimit -f {} && ulimit -n {} && exec {interp} {file}",
        cpu + 1,
        l.file_size_bytes.div_ceil(1024).max(1),
        l.open_files,
    );
    ("/bin/bash".into(), vec!["-l".into(), "-c".into(), script])
}

impl E2bTier {
    async fn probe_inner(&self) -> Availability {
        let s = &self.settings;
        let mut checks = vec![];
        let unavailable = |summary: String, checks: Vec<Check>| Availability {
            tier: "e2b".into(),
            available: false,
            summary,
            checks,
        };
        let Some(key) = s.api_key.as_deref() else {
            checks.push(Check::fail(
                "key",
                "E2B_API_KEY is not set",
                "export E2B_API_KEY=e2b_... (get one at https://e2b.dev/dashboard?tab=keys)",
            ));
            return unavailable("no key: E2B_API_KEY is not set".into(), checks);
        };
        checks.push(Check::ok("key", "E2B_API_KEY is set"));
        let api = match Api::new(s, key) {
            Ok(a) => a,
            Err(e) => return unavailable(format!("cannot build an HTTP client: {e}"), checks),
        };
        match api.list().await {
            Ok(list) => {
                checks.push(Check::ok(
                    "api",
                    format!("{} answers; the key is accepted ({} sandbox(es) running)", api.base(), list.len()),
                ));
                checks.push(Check::ok("template", format!("'{}' (set [e2b] template in the config)", s.template)));
                Availability {
                    tier: "e2b".into(),
                    available: true,
                    summary: format!(
                        "ready ({}, template {}; no sandbox was started by this check)",
                        api.base(),
                        s.template
                    ),
                    checks,
                }
            }
            Err(e @ api::ApiError::Unauthorized { .. }) => {
                checks.push(Check::fail(
                    "key",
                    e.to_string(),
                    "create a new key at https://e2b.dev/dashboard?tab=keys and export E2B_API_KEY",
                ));
                unavailable("key rejected by E2B".into(), checks)
            }
            Err(e @ api::ApiError::Unreachable { .. }) => {
                checks.push(Check::fail("api", e.to_string(), "check the network, or E2B_DOMAIN / E2B_API_URL"));
                unavailable(format!("unreachable: {}", api.base()), checks)
            }
            Err(e) => {
                checks.push(Check::fail("api", e.to_string(), "see https://status.e2b.dev and try again"));
                unavailable(format!("E2B API error: {e}"), checks)
            }
        }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let s = &self.settings;
        let key = self.key()?;
        let api = Api::new(s, key)?;
        reap_orphans_once(s, key);
        let ttl = (spec.limits.wall_time + s.timeout_margin).as_secs_f64().ceil() as u64;
        ctx.emit(EventKind::Phase(Phase::Booting)).await;
        // Not raced against ctx.stop: a create that completes after we gave up
        // would leave a sandbox whose id we never learnt.
        let created = api
            .create(&s.template, ttl, &spec.limits.network, &|m| {
                // Live (the callback cannot await; a full channel only loses the note).
                let _ = ctx.tx.try_send(crate::event::RunEvent {
                    at_ms: ctx.ms(),
                    kind: EventKind::Note(crate::sanitize::inert_line(&m, crate::event::MAX_DETAIL)),
                });
            })
            .await;
        let created = created?;
        let guard = LiveGuard::register(&created.sandbox_id, s, key);
        ctx.note(format!("e2b sandbox {} (template {})", created.sandbox_id, s.template)).await;

        let envd_url = s.envd_url(&created.sandbox_id, created.domain.as_deref());
        // Everything between create and kill is in here, so that no `?`
        // can skip the kill.
        let result = async {
            let http = crate::http::client(&[envd_url.as_str()])?;
            let envd = Envd::new(http, envd_url.clone(), created.sandbox_id.clone(), created.envd_access_token.clone());
            if ctx.stop.is_cancelled() {
                ctx.emit(EventKind::Exit(ExitStatus::default())).await;
                Ok(Usage::default())
            } else {
                execute(&envd, &spec, &ctx, s.timeout_margin).await
            }
        }
        .await;

        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        let kill = api.kill_with_retry(&created.sandbox_id).await;
        let killed = match &kill {
            Ok(_) => {
                guard.killed();
                true
            }
            Err(e) => {
                ctx.note(format!(
                    "warning: could not kill e2b sandbox {} ({e}); E2B stops it at its {ttl} s timeout",
                    created.sandbox_id
                ))
                .await;
                // Left in the registry: sandbench tries again when it exits.
                drop(guard);
                false
            }
        };
        let usage = result?;
        let details = json!({
            "start": "cold",
            "sandbox_id": created.sandbox_id,
            "template": created.template_id.clone().unwrap_or_else(|| s.template.clone()),
            "envd_version": created.envd_version,
            "api_url": api.base(),
            "envd_url": envd_url,
            "transport": "envd process.Process/Start (Connect-RPC, JSON, server-streaming)",
            "sandbox_timeout_s": ttl,
            "sandbox_killed": killed,
            "isolation": "Firecracker microVM on E2B's hosts",
            "limits": limit_enforcement(&spec),
            "usage_source": if usage.sampled { "envd /metrics: memory of the whole VM, guest OS included" } else { "unavailable: envd /metrics did not answer" },
        });
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: None, memory_bytes: usage.peak_memory, pids: None }), details })
    }
}

#[derive(Default)]
struct Usage {
    peak_memory: Option<u64>,
    sampled: bool,
}

/// Upload, start, stream; returns once the program ended or was stopped.
async fn execute(envd: &Envd, spec: &RunSpec, ctx: &RunContext, timeout_margin: Duration) -> anyhow::Result<Usage> {
    let file = format!("{WORK_DIR}/{}", spec.language.program_file(&spec.code));
    tokio::select! {
        r = envd.upload(&file, spec.code.as_bytes()) => r?,
        _ = ctx.stop.cancelled() => {
            ctx.emit(EventKind::Exit(ExitStatus::default())).await;
            return Ok(Usage::default());
        }
    }
    let (cmd, args) = command(spec);
    let envs: BTreeMap<String, String> = spec.sandbox_env("/home/user", "/tmp").into_iter().collect();
    let deadline = spec.limits.wall_time + ENVD_DEADLINE_GRACE.min(timeout_margin);
    let mut stream = tokio::select! {
        r = envd.start(&cmd, &args, &envs, WORK_DIR, Some(deadline)) => r?,
        _ = ctx.stop.cancelled() => {
            ctx.emit(EventKind::Exit(ExitStatus::default())).await;
            return Ok(Usage::default());
        }
    };
    let mut ticker = tokio::time::interval(METRICS_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut usage = Usage::default();
    let mut metrics_ok = true;
    let mut started = false;
    let mut end: Option<envd::EndInfo> = None;
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Ok(Some(ProcEvent::Start { .. })) => {
                    if !started {
                        started = true;
                        ctx.emit(EventKind::Phase(Phase::Running)).await;
                    }
                }
                Ok(Some(ProcEvent::Stdout(b))) => ctx.emit(EventKind::Output(Stream::Stdout, b)).await,
                Ok(Some(ProcEvent::Stderr(b))) => ctx.emit(EventKind::Output(Stream::Stderr, b)).await,
                Ok(Some(ProcEvent::End(e))) => end = Some(e),
                Ok(Some(ProcEvent::KeepAlive)) => {}
                Ok(None) => break,
                Err(e) => {
                    if end.is_some() {
                        // The exit arrived; only the trailer was lost.
                        ctx.note(format!("warning: {e}")).await;
                        break;
                    }
                    return Err(e.into());
                }
            },
            _ = ctx.stop.cancelled() => {
                // Dropping the stream abandons the call; killing the sandbox
                // (next, in run_inner) kills the program with it.
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                return Ok(usage);
            }
            _ = ticker.tick(), if metrics_ok && started => {
                match envd.metrics().await {
                    Some(m) => {
                        let mem = m.get("mem_used").and_then(|v| v.as_u64());
                        if mem.is_some() {
                            usage.sampled = true;
                            usage.peak_memory = usage.peak_memory.max(mem);
                            ctx.usage(UsageSample { cpu_ms: None, memory_bytes: mem, pids: None }).await;
                        }
                    }
                    None => metrics_ok = false,
                }
            }
        }
    }
    let Some(end) = end else {
        return Err(anyhow!("envd ended the process stream without the program's exit status"));
    };
    if !started {
        ctx.emit(EventKind::Phase(Phase::Running)).await;
    }
    if let Some(err) = end.error.as_deref().filter(|e| !e.is_empty()) {
        ctx.note(format!("envd: {}", crate::http::message_line(err, 200))).await;
    }
    let signal = envd::signal_from_status(&end.status);
    let x = if let Some(sig) = signal {
        ExitStatus { code: None, signal: Some(sig) }
    } else {
        ExitStatus { code: Some(end.exit_code), signal: None }
    };
    match signal {
        Some(libc::SIGXCPU) => {
            ctx.violation(
                ViolationKind::CpuTime,
                format!(
                    "CPU time limit {} hit — killed (SIGXCPU, per-process rlimit)",
                    crate::spec::format_duration(spec.limits.cpu_time)
                ),
            )
            .await
        }
        Some(libc::SIGXFSZ) => {
            ctx.violation(
                ViolationKind::FileSize,
                format!("file size limit {} hit — killed (SIGXFSZ)", format_size(spec.limits.file_size_bytes)),
            )
            .await
        }
        _ => {}
    }
    ctx.emit(EventKind::Exit(x)).await;
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Language;

    #[test]
    fn command_sets_rlimits_and_execs() {
        let spec = RunSpec::new(Language::Python, "print(1)");
        let (cmd, args) = command(&spec);
        assert_eq!(cmd, "/bin/bash");
        assert_eq!(args[..2], ["-l", "-c"]);
        assert!(args[2].contains("ulimit -S -t 5"), "{}", args[2]);
        assert!(args[2].contains("ulimit -f 16384"), "{}", args[2]);
        assert!(args[2].ends_with("exec python3 -u /home/user/sandbench/main.py"), "{}", args[2]);
    }

    #[test]
    fn every_limit_is_accounted_for() {
        let spec = RunSpec::new(Language::Sh, "true");
        let e = limit_enforcement(&spec);
        let limits = serde_json::to_value(&spec.limits).unwrap();
        for k in limits.as_object().unwrap().keys() {
            let name = k.trim_end_matches("_bytes");
            assert!(e.get(name).is_some(), "limit {k} is not described");
        }
        assert!(e["memory"].as_str().unwrap().starts_with("not enforced"));
        assert!(e["pids"].as_str().unwrap().starts_with("not enforced"));
    }

    #[test]
    fn envd_routing_follows_the_sdk() {
        let mut s = Settings::from_config(&Config::default());
        assert_eq!(s.api_url, "https://api.e2b.app");
        // E2B's domains: one host, routed by the E2b-Sandbox-* headers.
        assert_eq!(s.envd_url("abc", None), "https://sandbox.e2b.app");
        assert_eq!(s.envd_url("abc", Some("e2b.dev")), "https://sandbox.e2b.dev");
        // Any other domain (self-hosted): the per-sandbox host.
        assert_eq!(s.envd_url("abc", Some("e2b.example.org")), "https://49983-abc.e2b.example.org");
        s.sandbox_url = Some("http://127.0.0.1:9".into());
        assert_eq!(s.envd_url("abc", Some("e2b.dev")), "http://127.0.0.1:9");
    }
}
