//! `sandbench mcp`: sandbench's tiers as a Model Context Protocol server, so
//! agents built in other tools (Claude Code, Cursor, their own loops) run
//! their code here. Stdio by default (the transport MCP clients start local
//! servers with); streamable HTTP on a loopback address with `--http`.
//!
//! The operator's flags and config decide which tiers a client may use, the
//! most it may ask of each limit and how many sessions it may keep
//! (`sandbench_core::policy`); a client only ever narrows them. Runs go
//! through the same runner and judge as every other front end and are
//! appended to the run log with the client's name.
//!
//! Sessions (`open_session`, `run_code {session}`, `close_session`) belong
//! to the connection that opened them: another client never sees them, and
//! they are closed when their client goes (stdio: the server exits; HTTP:
//! the MCP session ends), when they idle out or reach their cap.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::McpArgs;
use crate::config::Config;
use crate::policy::{LimitRequest, Policy, SessionRequest};
use crate::report::{Outcome, RunReport};
use crate::sanitize::head_tail;
use crate::session::{CallError, Session};
use crate::spec::RunSpec;
use crate::tier::{self, Tier};
use crate::{runlog, runner, sanitize};

use super::usage;

/// stdout and stderr each, in a reply (head and tail kept). An agent's
/// context is precious; the full output (up to the output limit) is in the
/// run log.
pub const MAX_REPLY_OUTPUT: usize = 32 << 10;

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// "python" or "sh".
    pub language: String,
    /// The program's source text.
    pub code: String,
    /// Tier to run on (see list_tiers); default: the server's first allowed tier.
    #[serde(default)]
    pub tier: Option<String>,
    /// Limits for this run, at most the server's ceilings (see list_tiers).
    /// In a session only cpu_time, wall_time and output, at most the session's.
    #[serde(default)]
    pub limits: LimitRequest,
    /// Run in this session's sandbox (from open_session): files in /work
    /// stay from earlier calls. Default: a fresh sandbox for this run alone.
    #[serde(default)]
    pub session: Option<String>,
}

/// `open_session`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenSessionArgs {
    /// Tier whose sandbox the session keeps (see list_tiers); default: the server's first.
    #[serde(default)]
    pub tier: Option<String>,
    /// The session's limits: memory, pids, disk and file_size for the whole
    /// sandbox; cpu_time, wall_time and output as the most any call may have.
    #[serde(default)]
    pub limits: LimitRequest,
    /// Close the session when no call used it for this long, e.g. "2m" (at most the server's).
    #[serde(default)]
    pub idle_timeout: Option<String>,
    /// Close the session this long after it opened, e.g. "30m" (at most the server's).
    #[serde(default)]
    pub max_life: Option<String>,
}

/// `close_session`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseSessionArgs {
    /// The id open_session returned.
    pub session: String,
}

/// What every connection shares: one server may serve many HTTP sessions.
struct Shared {
    policy: Policy,
    config: Config,
    /// One tier object per name for the server's life, so warm pools and
    /// spare sandboxes serve the next call.
    tiers: Mutex<HashMap<String, Arc<dyn Tier>>>,
    /// Runs in flight: the server waits for them (cancelled) before it exits,
    /// so nothing of a run outlives it.
    runs: TaskTracker,
    shutdown: CancellationToken,
    /// Open sessions, each with the connection that opened it.
    sessions: Mutex<HashMap<String, (u64, Session)>>,
    /// Sessions being opened (they count against the most allowed).
    opening: AtomicUsize,
    next_conn: AtomicU64,
}

impl Shared {
    /// Close the sessions of one connection (None: of every connection).
    fn sessions_of(&self, conn: Option<u64>) -> Vec<Session> {
        let Ok(mut m) = self.sessions.lock() else { return vec![] };
        let ids: Vec<String> =
            m.iter().filter(|(_, (c, _))| conn.is_none_or(|k| *c == k)).map(|(id, _)| id.clone()).collect();
        ids.iter().filter_map(|id| m.remove(id)).map(|(_, s)| s).collect()
    }
}

/// One client connection: stdio's one client, or one MCP session over HTTP.
/// When the last handle to it goes (the client is gone), its sessions close.
struct Conn {
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let gone = self.shared.sessions_of(Some(self.id));
        if gone.is_empty() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            self.shared.runs.spawn(async move {
                for s in gone {
                    s.close().await;
                }
            });
        }
        // Without a runtime the process is exiting: tier::shutdown closes them.
    }
}

#[derive(Clone)]
pub struct Sandbench {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    tool_router: ToolRouter<Self>,
}

/// Releases a reserved session slot however an open ends.
struct Opening<'a>(&'a AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn bad(msg: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(msg.into(), None)
}

#[tool_router]
impl Sandbench {
    pub fn new(policy: Policy, config: Config) -> Sandbench {
        let shared = Shared {
            policy,
            config,
            tiers: Mutex::new(HashMap::new()),
            runs: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            sessions: Mutex::new(HashMap::new()),
            opening: AtomicUsize::new(0),
            next_conn: AtomicU64::new(0),
        };
        let shared = Arc::new(shared);
        let conn = Arc::new(Conn { id: 0, shared: shared.clone() });
        Sandbench { shared, conn, tool_router: Self::tool_router() }
    }

    /// A handler for a new client connection, sharing tiers and policy.
    fn connection(&self) -> Sandbench {
        let id = self.shared.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let conn = Arc::new(Conn { id, shared: self.shared.clone() });
        Sandbench { shared: self.shared.clone(), conn, tool_router: Self::tool_router() }
    }

    /// This connection's open session `id`.
    fn session(&self, id: &str) -> Result<Session, ErrorData> {
        let m = self.shared.sessions.lock().map_err(|_| ErrorData::internal_error("session table poisoned", None))?;
        match m.get(id) {
            Some((c, s)) if *c == self.conn.id => Ok(s.clone()),
            _ => Err(bad(format!(
                "unknown session '{}': open one with open_session (a client sees only its own sessions)",
                sanitize::inert_line(id, 40)
            ))),
        }
    }

    /// Follow a started run to its report, logged with the client's name. A
    /// call the client abandons (or a transport that drops) cancels its run;
    /// the tracked task still waits for the tier's clean-up.
    async fn follow(
        &self,
        handle: runner::RunHandle,
        spec: RunSpec,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let client = ctx.client_info().map(|i| i.name);
        let cancel = handle.canceller();
        let on_drop = cancel.clone().drop_guard();
        let shutdown = self.shared.shutdown.clone();
        let stop = cancel.clone();
        let task = self.shared.runs.spawn(async move {
            let report = handle.report();
            tokio::pin!(report);
            let report = tokio::select! {
                r = &mut report => r,
                _ = shutdown.cancelled() => {
                    stop.cancel();
                    report.await
                }
            };
            runlog::record(&spec, &report, client.as_deref());
            report
        });
        let report = tokio::select! {
            r = task => r.map_err(|e| ErrorData::internal_error(format!("the run's task failed: {e}"), None))?,
            _ = ctx.ct.cancelled() => {
                cancel.cancel();
                return Err(ErrorData::internal_error("the client cancelled the call; the run was stopped", None));
            }
        };
        on_drop.disarm();
        Ok(reply(&report))
    }

    fn tier(&self, name: &str) -> Result<Arc<dyn Tier>, ErrorData> {
        let mut tiers = self.shared.tiers.lock().map_err(|_| ErrorData::internal_error("tier table poisoned", None))?;
        if let Some(t) = tiers.get(name) {
            return Ok(t.clone());
        }
        let t = tier::by_name(name, &self.shared.config).map_err(|e| bad(format!("{e:#}")))?;
        tiers.insert(name.to_string(), t.clone());
        // A server runs many programs: warm spares and pools for the next ones.
        let warm = t.clone();
        tokio::spawn(async move { warm.prewarm().await });
        Ok(t)
    }

    /// Run a program in a sandbox and return its output and verdict.
    #[tool(description = "Run a program (python or sh) in one of sandbench's isolation tiers and return its output \
        (stdout and stderr, head and tail kept when long), the verdict (outcome ok | violation | error | cancelled, \
        each violation with the time it happened, the exit code or signal) and timings in ms. Nothing of the host's \
        environment or files is visible to the program. It has no network unless the server allows hosts \
        (max_limits.network in list_tiers, e.g. allow=pypi.org): then HTTP(S) to those hosts only, through the \
        egress proxy the HTTP_PROXY/HTTPS_PROXY variables point at; limits.network may narrow that list (not in a \
        session, which is always offline). Limits default to the server's and may only be lowered up to the \
        ceilings list_tiers shows.")]
    async fn run_code(
        &self,
        Parameters(args): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let policy = &self.shared.policy;
        if let Some(id) = &args.session {
            let s = self.session(id)?;
            if let Some(t) = args.tier.as_deref().filter(|t| *t != s.tier()) {
                return Err(bad(format!(
                    "session {id} keeps a {} sandbox, not {}: leave tier out, or open a session on that tier",
                    s.tier(),
                    sanitize::inert_line(t, 40)
                )));
            }
            let mut spec = policy.program(&args.language, &args.code).map_err(bad)?;
            spec.limits = policy.call_limits(s.limits(), &args.limits).map_err(bad)?;
            spec.label = "mcp".into();
            let handle = match s.start(spec.clone()) {
                Ok(h) => h,
                Err(CallError::Limits(e)) => return Err(bad(e)),
                // The session's state, for the model to act on.
                Err(e) => return Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())])),
            };
            return self.follow(handle, spec, &ctx).await;
        }
        let (mut spec, tier_name) =
            policy.spec(&args.language, &args.code, args.tier.as_deref(), &args.limits).map_err(bad)?;
        let tier = self.tier(&tier_name)?;
        spec.label = "mcp".into();
        let handle = runner::start(tier, spec.clone());
        self.follow(handle, spec, &ctx).await
    }

    /// Keep one sandbox for several run_code calls.
    #[tool(description = "Open a session: one sandbox kept alive between run_code calls, so files a call writes in \
        /work (the working directory) are there for the next call. Each call is a fresh process; processes a call \
        starts are ended with it. memory, pids, disk and file_size apply to the whole session; cpu_time, wall_time \
        and output are the most any one call may have (a call may lower them). The session closes on close_session, \
        after idle_timeout without calls, at max_life, or when this client disconnects. Returns the session id for \
        run_code {session}.")]
    async fn open_session(
        &self,
        Parameters(args): Parameters<OpenSessionArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let sh = &self.shared;
        let req = SessionRequest { idle_timeout: args.idle_timeout.clone(), max_life: args.max_life.clone() };
        let (spec, tier_name) = sh.policy.session(args.tier.as_deref(), &args.limits, &req).map_err(bad)?;
        let tier = self.tier(&tier_name)?;
        tier.sessions().map_err(|e| bad(format!("{e}; pick another tier (list_tiers says which keep sessions)")))?;
        let _slot = {
            let mut m = sh.sessions.lock().map_err(|_| ErrorData::internal_error("session table poisoned", None))?;
            m.retain(|_, (_, s)| !s.is_closed());
            let max = sh.policy.max_sessions;
            if m.len() + sh.opening.load(Ordering::SeqCst) >= max {
                return Err(bad(format!(
                    "this server already has {max} session(s) open, its most (the operator sets it with \
                     sandbench mcp --max-sessions); close one with close_session"
                )));
            }
            sh.opening.fetch_add(1, Ordering::SeqCst);
            Opening(&sh.opening)
        };
        let opened = tokio::select! {
            r = Session::open(tier, spec) => r,
            // A sandbox still being built is closed by Session::open itself.
            _ = ctx.ct.cancelled() => {
                return Err(ErrorData::internal_error("the client cancelled the call; no session was kept", None));
            }
        };
        let s = match opened {
            Ok(s) => s,
            Err(e) => {
                let msg =
                    format!("cannot open a {tier_name} session: {}", sanitize::inert_line(&format!("{e:#}"), 400));
                return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]));
            }
        };
        let info = s.info();
        if let Ok(mut m) = sh.sessions.lock() {
            m.insert(s.id().to_string(), (self.conn.id, s.clone()));
        }
        let value = json!({
            "session": info.id,
            "tier": info.tier,
            "limits": info.limits,
            "idle_timeout_ms": info.idle_timeout_ms,
            "max_life_ms": info.max_life_ms,
            "per_call_limits": crate::session::per_call_limits().split(", ").collect::<Vec<_>>(),
            "work_dir": "/work",
        });
        let text = format!(
            "session {} open on {} (idle timeout {}, closes at the latest after {}); pass session: \"{}\" to run_code",
            info.id,
            info.tier,
            crate::spec::format_duration(Duration::from_millis(info.idle_timeout_ms)),
            crate::spec::format_duration(Duration::from_millis(info.max_life_ms)),
            info.id
        );
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(value);
        Ok(r)
    }

    /// Close a session and tear its sandbox down.
    #[tool(description = "Close a session from open_session: a call still running in it is cancelled, and its \
        sandbox and every file in it are gone when this returns.")]
    async fn close_session(&self, Parameters(args): Parameters<CloseSessionArgs>) -> Result<CallToolResult, ErrorData> {
        let s = self.session(&args.session)?;
        if let Ok(mut m) = self.shared.sessions.lock() {
            m.remove(s.id());
        }
        let was = s.info().closed;
        s.close().await;
        let info = s.info();
        let value = json!({ "session": info.id, "closed": true, "calls": info.calls, "already_closed": was });
        let text = match was {
            Some(why) => format!("session {} had closed already ({why}); {} call(s)", info.id, info.calls),
            None => format!("session {} closed after {} call(s); its sandbox is gone", info.id, info.calls),
        };
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(value);
        Ok(r)
    }

    /// The tiers this server offers, whether each works here, and the limits.
    #[tool(description = "List the isolation tiers this server offers, whether each is available on this machine \
        (as `sandbench doctor` sees it, with the checks and fixes), the default tier, and the default and maximum \
        limits a run_code call may ask for (durations in ms, sizes in bytes).")]
    async fn list_tiers(&self) -> Result<CallToolResult, ErrorData> {
        let mut tiers = vec![];
        let mut sessions = vec![];
        for name in &self.shared.policy.tiers {
            let t = self.tier(name)?;
            tiers.push(t.probe().await);
            sessions.push(t.sessions());
        }
        let p = &self.shared.policy;
        let listed: Vec<serde_json::Value> = tiers
            .iter()
            .zip(&sessions)
            .map(|(a, s)| {
                let mut v = serde_json::to_value(a).unwrap_or_default();
                v["sessions"] = json!(s.is_ok());
                if let Err(why) = s {
                    v["sessions_unavailable"] = json!(why);
                }
                v
            })
            .collect();
        let value = json!({
            "default": p.tiers[0],
            "tiers": listed,
            "default_limits": p.base,
            "max_limits": p.ceiling,
            "sessions": {
                "max_open": p.max_sessions,
                "idle_timeout_ms": p.session_idle.as_millis() as u64,
                "max_life_ms": p.session_life.as_millis() as u64,
                "per_call_limits": crate::session::per_call_limits().split(", ").collect::<Vec<_>>(),
            },
        });
        let mut text = String::new();
        for (a, s) in tiers.iter().zip(&sessions) {
            text.push_str(&format!(
                "{} {} {}{}\n",
                a.tier,
                if a.available { "available" } else { "unavailable" },
                a.summary,
                if s.is_ok() { " · sessions" } else { "" }
            ));
        }
        text.push_str(&format!("default tier: {}", p.tiers[0]));
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(value);
        Ok(r)
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "sandbench",
    instructions = "sandbench runs untrusted code in isolation tiers (process, docker, gvisor, microvm, e2b, peers) \
    and judges what happened from facts the program cannot forge. Call list_tiers to see what this server offers, \
    then run_code {language, code, tier?, limits?}. To keep files between calls, open_session {tier?, limits?} and \
    pass its id as run_code {session}; close_session when done."
)]
impl ServerHandler for Sandbench {}

/// A report as a tool result: the verdict as structured content and as text.
/// Output is bounded and its controls made visible (an MCP client may show it
/// on a terminal); a run sandbench could not make is a tool error.
pub fn reply(report: &RunReport) -> CallToolResult {
    let (stdout, stdout_omitted) = head_tail(&sanitize::visible_controls(report.stdout.as_bytes()), MAX_REPLY_OUTPUT);
    let (stderr, stderr_omitted) = head_tail(&sanitize::visible_controls(report.stderr.as_bytes()), MAX_REPLY_OUTPUT);
    let mut value = serde_json::to_value(report).unwrap_or_else(|_| json!({}));
    value["stdout"] = json!(stdout);
    value["stderr"] = json!(stderr);
    value["stdout_omitted_bytes"] = json!(stdout_omitted);
    value["stderr_omitted_bytes"] = json!(stderr_omitted);
    let t = &report.timings_ms;
    let mut text = format!("outcome: {}\nexit: {}\n", report.outcome.name(), report.exit.describe());
    if let Some(e) = &report.error {
        text.push_str(&format!("error: {e}\n"));
    }
    for v in &report.violations {
        text.push_str(&format!(
            "violation: {} at {}: {}\n",
            v.kind.name(),
            crate::units::duration_ms(v.at_ms),
            v.detail
        ));
    }
    for n in report.network.iter().filter(|n| n.decision == crate::egress::Decision::Denied).take(10) {
        text.push_str(&format!("network: {}\n", sanitize::visible_controls(n.line().as_bytes())));
    }
    let d = crate::units::duration_ms;
    text.push_str(&format!(
        "time: setup {}, run {}, teardown {}, total {} (tier {})\n",
        d(t.setup),
        d(t.run),
        d(t.teardown),
        d(t.total),
        report.tier
    ));
    let trunc = |cut: bool| if cut { " (truncated at the output limit)" } else { "" };
    text.push_str(&format!("--- stdout{} ---\n{stdout}\n", trunc(report.stdout_truncated)));
    text.push_str(&format!("--- stderr{} ---\n{stderr}\n", trunc(report.stderr_truncated)));
    let content = vec![ContentBlock::text(text)];
    let mut r = if report.outcome == Outcome::Error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    r.structured_content = Some(value);
    r
}

/// The operator's policy from the flags and the config.
pub fn policy(args: &McpArgs, config: &Config) -> anyhow::Result<Policy> {
    let m = &config.mcp;
    let tiers = match (&args.tiers, &m.tiers) {
        (Some(list), _) => tier::parse_list(list).map_err(usage)?,
        (None, Some(list)) => {
            tier::parse_list(&list.join(",")).map_err(|e| usage(format!("[mcp] tiers in the config: {e}")))?
        }
        (None, None) => vec![config.default_tier.clone()],
    };
    let base = args.limits.apply(config.limits.clone());
    // A ceiling from the flags, else from [mcp.max_limits], else the default.
    let mut ceiling = m.max_limits.apply(base.clone());
    if let Some(v) = args.max_cpu {
        ceiling.cpu_time = v;
    }
    if let Some(v) = args.max_wall {
        ceiling.wall_time = v;
    }
    if let Some(v) = args.max_memory {
        ceiling.memory_bytes = v;
    }
    if let Some(v) = args.max_pids {
        ceiling.pids = v;
    }
    if let Some(v) = args.max_file_size {
        ceiling.file_size_bytes = v;
    }
    if let Some(v) = args.max_disk {
        ceiling.disk_bytes = v;
    }
    if let Some(v) = args.max_output {
        ceiling.output_bytes = v;
    }
    let idle =
        args.session_idle.or(m.session_idle_secs.map(Duration::from_secs)).unwrap_or(crate::session::DEFAULT_IDLE);
    let life =
        args.session_life.or(m.session_life_secs.map(Duration::from_secs)).unwrap_or(crate::session::DEFAULT_MAX_LIFE);
    if idle.is_zero() || life.is_zero() {
        return Err(usage("session idle timeout and lifetime must be above zero"));
    }
    let max = args.max_sessions.or(m.max_sessions).unwrap_or(crate::policy::DEFAULT_MAX_SESSIONS);
    Ok(Policy::new(tiers, base, ceiling).map_err(usage)?.with_sessions(max, idle, life))
}

/// Parse `--http`: an IP address and port on the loopback interface only.
/// The server runs code for whoever reaches it; anything wider than this
/// machine needs a proxy that authenticates, in front of it.
pub fn loopback_addr(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s
        .parse()
        .map_err(|_| format!("invalid --http address '{s}': expected IP:PORT on loopback, e.g. 127.0.0.1:8765"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "refusing --http {addr}: sandbench mcp listens on loopback only (127.0.0.1 or [::1]), because \
             whoever reaches it can run code; put an authenticating proxy in front to serve other machines"
        ));
    }
    Ok(addr)
}

pub async fn run(args: McpArgs, config: &Config) -> anyhow::Result<i32> {
    let policy = policy(&args, config)?;
    let server = Sandbench::new(policy, config.clone());
    let shared = server.shared.clone();
    let result = match args.http {
        None => serve_stdio(server).await,
        Some(addr) => serve_http(server, addr).await,
    };
    // The client is gone (or the listener failed): stop what still runs and
    // wait until every run's and session's sandbox is torn down, then drop
    // the tiers (their spares and pools go with them).
    shared.shutdown.cancel();
    futures_util::future::join_all(shared.sessions_of(None).iter().map(|s| s.close())).await;
    shared.runs.close();
    shared.runs.wait().await;
    if let Ok(mut t) = shared.tiers.lock() {
        t.clear();
    }
    result.map(|_| 0)
}

async fn serve_stdio(server: Sandbench) -> anyhow::Result<()> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP client did not complete the handshake: {e}"))?;
    // Returns when the client closes stdin (or the connection breaks).
    let _ = running.waiting().await;
    Ok(())
}

async fn serve_http(server: Sandbench, addr: SocketAddr) -> anyhow::Result<()> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}; pick another port with --http 127.0.0.1:PORT"))?;
    let local = listener.local_addr()?;
    let cancel = server.shared.shutdown.clone();
    let mut cfg = StreamableHttpServerConfig::default();
    cfg.cancellation_token = cancel.child_token();
    // One handler per MCP session: its sessions close when it ends.
    let service =
        StreamableHttpService::new(move || Ok(server.connection()), Arc::new(LocalSessionManager::default()), cfg);
    // The one line a wrapper script waits for (stderr: stdout is not ours to use).
    eprintln!("sandbench: MCP over streamable HTTP at http://{local}/mcp");
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => r?,
            _ = cancel.cancelled() => return Ok(()),
        };
        let svc = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_is_loopback_only() {
        assert!(loopback_addr("127.0.0.1:8765").is_ok());
        assert!(loopback_addr("[::1]:8765").is_ok());
        let e = loopback_addr("0.0.0.0:8765").unwrap_err();
        assert!(e.contains("loopback only"), "{e}");
        assert!(loopback_addr("192.168.1.5:80").unwrap_err().contains("refusing"));
        assert!(loopback_addr("localhost").unwrap_err().contains("expected IP:PORT"));
    }
}
