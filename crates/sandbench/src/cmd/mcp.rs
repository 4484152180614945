//! `sandbench mcp`: sandbench's tiers as a Model Context Protocol server, so
//! agents built in other tools (Claude Code, Cursor, their own loops) run
//! their code here. Stdio by default (the transport MCP clients start local
//! servers with); streamable HTTP on a loopback address with `--http`,
//! behind a bearer token and rmcp's Host/Origin checks (`mcp/http.rs`,
//! `mcp/token.rs`).
//!
//! The operator's flags and config decide which tiers a client may use, the
//! most it may ask of each limit and how many sessions it may keep
//! (`sandbench_core::policy`); a client only ever narrows them. What the
//! server holds at once is bounded whatever its clients do
//! (`sandbench_core::admission`): runs in flight, server-wide and per
//! client, a bounded queue of waiting calls, open sessions, and a budget of
//! memory and pids. A run's or a session's share is held until its sandbox
//! is gone, not until its client stops waiting. Runs go through the same
//! runner and judge as every other front end and are appended to the run log
//! with the client's name.
//!
//! A client, for every per-client bound, is who authenticated: the stdio
//! client, or one bearer token over HTTP, whatever form its requests take —
//! any number of MCP sessions, or the stateless requests of the 2026-07-28
//! transport, each of which gets a handler of its own (`client_of`).
//!
//! Sessions (`open_session`, `run_code {session}`, `close_session`) belong
//! to the connection that opened them: another client never sees them, and
//! they are closed when their client goes (stdio: the server exits; HTTP:
//! the MCP session ends), when they idle out or reach their cap. One opened
//! by a stateless request belongs to its token, seen by that token's
//! stateless requests only, and closes by `close_session`, idling out or its
//! cap (there is no connection whose end would close it). Files move
//! in and out of a session with `write_file`, `read_file` and `list_files`,
//! each a call of sandbench's own helper inside the session's sandbox
//! (`sandbench_core::session_files`). A long call streams its output and
//! violations to a client that asked (`mcp/stream.rs`); a call the client
//! cancels, or whose HTTP stream it drops, is stopped.
//!
//! Every tool reply leaves through one exit (`call_tool`, [`inert_reply`]):
//! each string of its text and of its structured content is made inert
//! there, whatever the tool built, so a program's text (output, file names,
//! link targets, an echoed path) reaches no client raw.

mod http;
mod stream;
mod token;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Need, Permit};
use crate::cli::McpArgs;
use crate::config::Config;
use crate::egress::secrets::Secrets;
use crate::policy::{Bounds, LimitRequest, Policy, SessionRequest};
use crate::report::{Outcome, RunReport};
use crate::runner::{RunHandle, Update};
use crate::sanitize::head_tail;
use crate::session::{CallError, Session, SessionInfo};
use crate::session_files::{FileOp, FileReply};
use crate::spec::RunSpec;
use crate::tier::{self, Tier};
use crate::{runlog, runner, sanitize};
pub use stream::inert_text;

use super::usage;

/// stdout and stderr each, in a reply (head and tail kept). An agent's
/// context is precious; the full output (up to the output limit) is in the
/// run log.
pub const MAX_REPLY_OUTPUT: usize = 32 << 10;

/// `run_code`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// "python", "sh" or "javascript" (aliases: python3, py, shell, js, node).
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
    /// Names of secrets the server offers (list_tiers: secrets): the program
    /// gets a placeholder in $NAME, which the egress proxy replaces by the
    /// value in requests to that secret's hosts only. Names only: a client
    /// never gives a value.
    #[serde(default)]
    pub secrets: Vec<String>,
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
    /// Secrets for the session's sandbox (names the server offers). A
    /// session is offline (no egress proxy), so any is refused with a reason.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// `close_session`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseSessionArgs {
    /// The id open_session returned.
    pub session: String,
}

/// Largest JSON-RPC message a client may send: one line over stdio, one
/// request body over HTTP. A `write_file` of the most content, as base64
/// or escaped text, fits.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// How long a run's slot waits for its sandbox's background teardown before
/// the log says so (the slot stays taken until the sandbox is gone).
const TEARDOWN_WAIT: Duration = Duration::from_secs(120);
/// How long `list_tiers` reuses a tier's probe (each probe builds a sandbox).
const PROBE_TTL: Duration = Duration::from_secs(60);

/// `write_file`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The id open_session returned.
    pub session: String,
    /// Where: relative to /work, or an absolute path under /work. Missing directories are made.
    pub path: String,
    /// The content as text (UTF-8). Give this or content_base64.
    #[serde(default)]
    pub content: Option<String>,
    /// The content as base64, for bytes that are not text.
    #[serde(default)]
    pub content_base64: Option<String>,
    /// Permission bits in octal, e.g. "755" (default: the file's, or 644 for a new one).
    #[serde(default)]
    pub mode: Option<String>,
}

/// `read_file`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The id open_session returned.
    pub session: String,
    /// Relative to /work, or an absolute path under /work.
    pub path: String,
    /// First byte to read (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Most bytes to read (default and most: 1 MiB, less when the session's output limit is lower).
    #[serde(default)]
    pub length: Option<u64>,
}

/// `list_files`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// The id open_session returned.
    pub session: String,
    /// The directory to list: relative to /work, or absolute under /work (default /work).
    #[serde(default)]
    pub path: Option<String>,
    /// How deep: 1 (default) lists the directory's own entries, at most 8.
    #[serde(default)]
    pub depth: Option<u32>,
}

/// What every connection shares: one server may serve many HTTP sessions.
struct Shared {
    policy: Policy,
    config: Config,
    /// The secrets the operator offers clients (`sandbench mcp --secret
    /// NAME`), values read at start; a call picks some by name.
    secrets: Secrets,
    /// One tier object per name for the server's life, so warm pools and
    /// spare sandboxes serve the next call.
    tiers: Mutex<HashMap<String, Arc<dyn Tier>>>,
    /// Runs in flight: the server waits for them (cancelled) before it exits,
    /// so nothing of a run outlives it.
    runs: TaskTracker,
    shutdown: CancellationToken,
    /// Open sessions, each with who may use it.
    sessions: Mutex<HashMap<String, (Owner, Session)>>,
    /// Runs in flight, the queue, sessions and the budget.
    admission: Arc<Admission>,
    /// Each tier's last probe; held while probing, so one probe at a time.
    probes: tokio::sync::Mutex<HashMap<String, (std::time::Instant, tier::Availability)>>,
    next_conn: AtomicU64,
}

impl Shared {
    /// Close the sessions of one connection (None: every session).
    fn sessions_of(&self, conn: Option<u64>) -> Vec<Session> {
        let Ok(mut m) = self.sessions.lock() else { return vec![] };
        let ids: Vec<String> = m
            .iter()
            .filter(|(_, (o, _))| conn.is_none_or(|k| *o == Owner::Conn(k)))
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter_map(|id| m.remove(id)).map(|(_, s)| s).collect()
    }
}

/// Who may use a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The connection that opened it (stdio's, or one MCP session over
    /// HTTP); closed when that goes.
    Conn(u64),
    /// A client's stateless requests (`client_of`): they have no connection
    /// to outlive, so the session lasts to its close, idle timeout or cap.
    Client(u64),
}

/// The client stdio serves (there is one): bearer tokens are 1 and up.
const STDIO_CLIENT: u64 = 0;

/// Who sent a request, for the per-client bounds: the bearer token it
/// carried over HTTP, else the stdio client. Never the handler or the MCP
/// session: a stateless request gets a handler of its own, and one token may
/// open many MCP sessions, so either would give each request a fresh
/// allowance.
fn client_of(ctx: &RequestContext<RoleServer>) -> u64 {
    http::principal(ctx).map_or(STDIO_CLIENT, |p| p.0 as u64 + 1)
}

/// One handler: stdio's one client, one MCP session over HTTP, or one
/// stateless request (which never says `initialize`). When the last handle
/// to it goes (the client is gone), the sessions it owns close.
struct Conn {
    id: u64,
    shared: Arc<Shared>,
    /// The log level the client set (`logging/setLevel`; `u8::MAX`: none).
    log_level: AtomicU8,
    /// It answered `initialize`: a connection, not a stateless request.
    initialized: AtomicBool,
}

impl Conn {
    fn new(id: u64, shared: Arc<Shared>) -> Conn {
        Conn { id, shared, log_level: AtomicU8::new(u8::MAX), initialized: AtomicBool::new(false) }
    }

    fn log_level(&self) -> Option<u8> {
        Some(self.log_level.load(Ordering::Relaxed)).filter(|l| *l != u8::MAX)
    }
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

fn bad(msg: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(msg.into(), None)
}

/// A refusal the model should see and may act on (the server is busy, the
/// session is closed, a file was refused): a tool error, not a protocol error.
fn refused(msg: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(msg.into())])
}

fn cancelled() -> ErrorData {
    ErrorData::internal_error("the client cancelled the call; the run was stopped", None)
}

/// Resolves when the client gave up on this call: it cancelled it, or (over
/// HTTP) dropped the call's response stream.
async fn abandoned(ctx: &RequestContext<RoleServer>) {
    let ct = ctx.ct.clone();
    match http::call_gone(ctx) {
        Some(gone) => tokio::select! {
            _ = ct.cancelled() => {}
            _ = gone.cancelled() => {}
        },
        None => ct.cancelled().await,
    }
}

/// How a finished call is logged: as its spec says, or, for a file tool,
/// by what it did (the helper's source and output would hold the content).
struct LogAs {
    spec: RunSpec,
    file_tool: bool,
}

#[tool_router]
impl Sandbench {
    pub fn new(policy: Policy, config: Config, secrets: Secrets) -> Sandbench {
        let admission = Admission::new(policy.bounds.clone(), policy.max_sessions);
        let shared = Shared {
            policy,
            config,
            secrets,
            tiers: Mutex::new(HashMap::new()),
            runs: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            sessions: Mutex::new(HashMap::new()),
            admission,
            probes: tokio::sync::Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        };
        let shared = Arc::new(shared);
        let conn = Arc::new(Conn::new(0, shared.clone()));
        Sandbench { shared, conn, tool_router: Self::tool_router() }
    }

    /// A handler for a new client connection, sharing tiers and policy.
    fn connection(&self) -> Sandbench {
        let id = self.shared.next_conn.fetch_add(1, Ordering::Relaxed) + 1;
        let conn = Arc::new(Conn::new(id, self.shared.clone()));
        Sandbench { shared: self.shared.clone(), conn, tool_router: Self::tool_router() }
    }

    /// A run slot for this client, waiting in the queue if need be; a tool
    /// error when the server refuses (the message names the limit), None
    /// when the client gave up while waiting.
    async fn admit(
        &self,
        need: Need,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Permit, Result<CallToolResult, ErrorData>> {
        let adm = self.shared.admission.clone();
        tokio::select! {
            r = adm.run(client_of(ctx), need) => r.map_err(|e| Ok(refused(e))),
            _ = abandoned(ctx) => Err(Err(cancelled())),
        }
    }

    /// Who the sessions this request opens belong to, and which it sees.
    fn owner(&self, ctx: &RequestContext<RoleServer>) -> Owner {
        if self.conn.initialized.load(Ordering::Relaxed) {
            Owner::Conn(self.conn.id)
        } else {
            Owner::Client(client_of(ctx))
        }
    }

    /// This requester's open session `id`.
    fn session(&self, id: &str, ctx: &RequestContext<RoleServer>) -> Result<Session, ErrorData> {
        let me = self.owner(ctx);
        let m = self.shared.sessions.lock().map_err(|_| ErrorData::internal_error("session table poisoned", None))?;
        match m.get(id) {
            Some((o, s)) if *o == me => Ok(s.clone()),
            _ => Err(bad(format!(
                "unknown session '{}': open one with open_session (a client sees only its own sessions)",
                sanitize::inert_line(id, 40)
            ))),
        }
    }

    /// Follow a started run to its report, logged with the client's name,
    /// its live events streamed to a client that asked. A call the client
    /// abandons (or a transport that drops) cancels its run; the tracked task
    /// still waits for the tier's clean-up, and holds the run's `permit`
    /// until then.
    async fn follow(
        &self,
        handle: RunHandle,
        log: LogAs,
        ctx: &RequestContext<RoleServer>,
        permit: Permit,
    ) -> Result<RunReport, ErrorData> {
        let client = ctx.client_info().map(|i| i.name);
        let cancel = handle.canceller();
        let on_drop = cancel.clone().drop_guard();
        let shutdown = self.shared.shutdown.clone();
        let shutdown_after = shutdown.clone();
        let stop = cancel.clone();
        let streamer = if log.file_tool { None } else { stream::Streamer::for_call(ctx, self.conn.log_level()) };
        let torn_down = handle.torn_down();
        let runs = self.shared.runs.clone();
        let task = self.shared.runs.spawn(async move {
            let report = consume(handle, streamer);
            tokio::pin!(report);
            let report = tokio::select! {
                r = &mut report => r,
                _ = shutdown.cancelled() => {
                    stop.cancel();
                    report.await
                }
            };
            // The reply goes out now; the run's share goes back once its
            // sandbox is gone (some tiers remove it in the background).
            let server_ends = shutdown_after.clone();
            runs.spawn(async move {
                // The slot is the bound on what a client holds: it goes back
                // when the sandbox is gone, never before (a teardown that
                // hangs keeps it taken, fail closed), or when the server ends.
                let gone = torn_down.wait();
                tokio::pin!(gone);
                if tokio::time::timeout(TEARDOWN_WAIT, &mut gone).await.is_err() {
                    tracing::warn!(
                        "a run's sandbox was not torn down within {TEARDOWN_WAIT:?}; its slot stays taken until it is"
                    );
                    tokio::select! {
                        _ = &mut gone => {}
                        _ = server_ends.cancelled() => {}
                    }
                }
                drop(permit);
            });
            // The log is a file under a lock another sandbench may hold:
            // written on a blocking thread beside the reply, not before it
            // (the server waits for it before it exits).
            let mut logged = report.clone();
            runs.spawn_blocking(move || {
                if log.file_tool {
                    logged.stdout = String::new();
                    logged.stderr = String::new();
                }
                runlog::record(&log.spec, &logged, client.as_deref());
            });
            report
        });
        let report = tokio::select! {
            r = task => r.map_err(|e| ErrorData::internal_error(format!("the run's task failed: {e}"), None))?,
            _ = abandoned(ctx) => {
                cancel.cancel();
                return Err(cancelled());
            }
        };
        on_drop.disarm();
        Ok(report)
    }

    /// This connection's session `id`, running sandbench's file helper for `op`.
    async fn file_op(
        &self,
        id: &str,
        op: FileOp,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<(Session, FileReply), CallToolResult>, ErrorData> {
        let s = self.session(id, ctx)?;
        let (spec, nonce) = op.spec(s.limits()).map_err(|e| ErrorData::internal_error(format!("{e:#}"), None))?;
        let permit = match self.admit(Need::default(), ctx).await {
            Ok(p) => p,
            Err(Ok(r)) => return Ok(Err(r)),
            Err(Err(e)) => return Err(e),
        };
        let handle = match s.start(spec.clone()) {
            Ok(h) => h,
            Err(CallError::Limits(e)) => return Err(bad(e)),
            Err(e) => return Ok(Err(refused(e.to_string()))),
        };
        let mut logged = spec;
        logged.code = op.describe();
        let report = self.follow(handle, LogAs { spec: logged, file_tool: true }, ctx, permit).await?;
        Ok(op.parse(&nonce, &report, s.limits()).map(|r| (s, r)).map_err(refused))
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
    #[tool(
        description = "Run a program (python, sh or javascript) in one of sandbench's isolation tiers and return its output \
        (stdout and stderr, head and tail kept when long), the verdict (outcome ok | violation | error | cancelled, \
        each violation with the time it happened, the exit code or signal) and timings in ms. Nothing of the host's \
        environment or files is visible to the program. It has no network unless the server allows hosts \
        (max_limits.network in list_tiers, e.g. allow=pypi.org): then HTTP(S) to those hosts only, through the \
        egress proxy the HTTP_PROXY/HTTPS_PROXY variables point at; limits.network may narrow that list (not in a \
        session, which is always offline). Limits default to the server's and may only be lowered up to the \
        ceilings list_tiers shows."
    )]
    async fn run_code(
        &self,
        Parameters(args): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let policy = &self.shared.policy;
        if let Some(id) = &args.session {
            if !args.secrets.is_empty() {
                return Err(bad(
                    "a session is offline (no egress proxy), so it cannot use secrets: run without a session",
                ));
            }
            let s = self.session(id, &ctx)?;
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
            // The session's sandbox holds its memory and pids already: a
            // call takes a run slot only.
            let permit = match self.admit(Need::default(), &ctx).await {
                Ok(p) => p,
                Err(r) => return r,
            };
            let handle = match s.start(spec.clone()) {
                Ok(h) => h,
                Err(CallError::Limits(e)) => return Err(bad(e)),
                // The session's state, for the model to act on.
                Err(e) => return Ok(refused(e.to_string())),
            };
            let report = self.follow(handle, LogAs { spec, file_tool: false }, &ctx, permit).await?;
            return Ok(reply(&report));
        }
        let (mut spec, tier_name) =
            policy.spec(&args.language, &args.code, args.tier.as_deref(), &args.limits).map_err(bad)?;
        if !args.secrets.is_empty() {
            spec.secrets = self.shared.secrets.pick(&args.secrets).map_err(bad)?;
            tier::check_secrets(&tier_name, &spec.secrets).map_err(bad)?;
            spec.secrets.check(&spec.limits.network, &spec.env).map_err(bad)?;
        }
        let tier = self.tier(&tier_name)?;
        spec.label = "mcp".into();
        let need = Need { memory: spec.limits.memory_bytes, pids: spec.limits.pids };
        let permit = match self.admit(need, &ctx).await {
            Ok(p) => p,
            Err(r) => return r,
        };
        let handle = runner::start(tier, spec.clone());
        let report = self.follow(handle, LogAs { spec, file_tool: false }, &ctx, permit).await?;
        Ok(reply(&report))
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
        if !args.secrets.is_empty() {
            return Err(bad(
                "a session is offline (no egress proxy), so it cannot use secrets: use run_code without a session",
            ));
        }
        let req = SessionRequest { idle_timeout: args.idle_timeout.clone(), max_life: args.max_life.clone() };
        let (spec, tier_name) = sh.policy.session(args.tier.as_deref(), &args.limits, &req).map_err(bad)?;
        let tier = self.tier(&tier_name)?;
        tier.sessions().map_err(|e| bad(format!("{e}; pick another tier (list_tiers says which keep sessions)")))?;
        if let Ok(mut m) = sh.sessions.lock() {
            m.retain(|_, (_, s)| !s.is_closed());
        }
        // The slot, memory and pids are held until the sandbox is torn
        // down, whatever the client does meanwhile: the permit goes with
        // the sandbox (`Session::open_holding`).
        let need = Need { memory: spec.limits.memory_bytes, pids: spec.limits.pids };
        let permit = match sh.admission.session(client_of(&ctx), need) {
            Ok(p) => p,
            Err(e) => return Ok(refused(e)),
        };
        let opened = tokio::select! {
            r = Session::open_holding(tier, spec, Box::new(permit)) => r,
            // A sandbox still being built is closed by Session::open itself.
            _ = abandoned(&ctx) => {
                return Err(ErrorData::internal_error("the client cancelled the call; no session was kept", None));
            }
        };
        let s = match opened {
            Ok(s) => s,
            Err(e) => {
                let msg =
                    format!("cannot open a {tier_name} session: {}", sanitize::inert_message(&format!("{e:#}"), 400));
                return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]));
            }
        };
        // The cancel arrived as the build finished: the client will never
        // read this session's id, so it is not kept (a cancel that arrives
        // after the answer finds it in list_sessions).
        if ctx.ct.is_cancelled() || http::call_gone(&ctx).is_some_and(|g| g.is_cancelled()) {
            s.close().await;
            return Err(ErrorData::internal_error("the client cancelled the call; no session was kept", None));
        }
        let info = s.info();
        if let Ok(mut m) = sh.sessions.lock() {
            m.insert(s.id().to_string(), (self.owner(&ctx), s.clone()));
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
    async fn close_session(
        &self,
        Parameters(args): Parameters<CloseSessionArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let s = self.session(&args.session, &ctx)?;
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

    /// This client's open sessions.
    #[tool(description = "List this client's open sessions (a client sees only its own): for each, its id, tier, \
        calls so far, age and idle time in ms, when it closes (idle_timeout_ms, max_life_ms) and its limits. Use it to \
        find a session whose open_session answer was lost (a call cancelled just as the session was made) and \
        close it.")]
    async fn list_sessions(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        let me = self.owner(&ctx);
        let all: Vec<SessionInfo> = match self.shared.sessions.lock() {
            Ok(m) => m.values().filter(|(o, _)| *o == me).map(|(_, s)| s.info()).collect(),
            Err(_) => return Err(ErrorData::internal_error("session table poisoned", None)),
        };
        // Sessions that ended by themselves (their sandbox died, a cap, idle)
        // stay listed with the reason until the client opens another.
        let (mut closed, mut mine): (Vec<SessionInfo>, Vec<SessionInfo>) =
            all.into_iter().partition(|i| i.closed.is_some());
        mine.sort_by(|a, b| a.age_ms.cmp(&b.age_ms).reverse());
        closed.sort_by(|a, b| a.age_ms.cmp(&b.age_ms).reverse());
        let mut lines: Vec<String> = mine
            .iter()
            .map(|i| format!("{} on {}: {} call(s), idle {} ms", i.id, i.tier, i.calls, i.idle_ms))
            .collect();
        if lines.is_empty() {
            lines.push("no open sessions".to_string());
        }
        lines.extend(closed.iter().map(|i| {
            format!("{} on {}: closed — {}", i.id, i.tier, sanitize::inert_line(i.closed.as_deref().unwrap_or(""), 300))
        }));
        let mut r = CallToolResult::success(vec![ContentBlock::text(lines.join("\n"))]);
        r.structured_content = Some(json!({ "sessions": mine, "closed": closed }));
        Ok(r)
    }

    /// Write a file into a session's /work.
    #[tool(description = "Write a file into a session's working directory (/work), as the session's own programs \
        would: the path is relative to /work or absolute under /work (missing directories are made), the content is \
        text (content) or bytes (content_base64), at most 1 MiB per call; mode is octal permission bits (\"755\"). \
        The file is replaced whole. Symbolic links are never followed or replaced, and only regular files are \
        written; the session's disk and file size limits apply. A refusal says why.")]
    async fn write_file(
        &self,
        Parameters(args): Parameters<WriteFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let data = match (args.content, args.content_base64) {
            (Some(t), None) => t.into_bytes(),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|e| bad(format!("content_base64 is not valid base64: {e}")))?,
            _ => return Err(bad("give exactly one of content (text) and content_base64 (bytes)")),
        };
        let mode = match args.mode.as_deref().map(str::trim) {
            None => None,
            Some(m) => Some(u32::from_str_radix(m.trim_start_matches("0o"), 8).map_err(|_| {
                bad(format!("mode '{}': octal permission bits, e.g. \"644\"", sanitize::inert_line(m, 20)))
            })?),
        };
        let op = FileOp::write(&args.path, data, mode).map_err(bad)?;
        let (s, r) = match self.file_op(&args.session, op, &ctx).await? {
            Ok(x) => x,
            Err(refusal) => return Ok(refusal),
        };
        let FileReply::Written { path, bytes, mode } = r else {
            return Err(ErrorData::internal_error("unexpected answer", None));
        };
        let mut out =
            CallToolResult::success(vec![ContentBlock::text(format!("wrote {bytes} bytes to {path} (mode {mode:o})"))]);
        out.structured_content =
            Some(json!({ "session": s.id(), "path": path, "bytes": bytes, "mode": format!("{mode:o}") }));
        Ok(out)
    }

    /// Read a file from a session's /work.
    #[tool(description = "Read a file from a session's working directory (/work): path relative to /work or absolute \
        under /work; offset and length pick a part (at most 1 MiB per call, less when the session's output limit is \
        lower: next_offset says where to go on). structuredContent has the exact bytes: content (UTF-8 text with no \
        control or invisible character but newlines and tabs) or content_base64 (anything else); the text block \
        shows them with control and invisible characters made visible. Symbolic \
        links, directories, FIFOs and devices are refused with the reason.")]
    async fn read_file(
        &self,
        Parameters(args): Parameters<ReadFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        if args.length == Some(0) {
            return Err(bad("length must be at least 1 (leave it out to read as much as a call may)"));
        }
        let op = FileOp::read(&args.path, args.offset.unwrap_or(0), args.length).map_err(bad)?;
        let (s, r) = match self.file_op(&args.session, op, &ctx).await? {
            Ok(x) => x,
            Err(refusal) => return Ok(refusal),
        };
        let FileReply::Read { path, size, offset, data } = r else {
            return Err(ErrorData::internal_error("unexpected answer", None));
        };
        let end = offset + data.len() as u64;
        let eof = end >= size;
        let mut value = json!({
            "session": s.id(), "path": path, "size": size, "offset": offset, "length": data.len(), "eof": eof,
        });
        if !eof {
            value["next_offset"] = json!(end);
        }
        let more = if eof { String::new() } else { format!("; more from offset {end}") };
        let text = match String::from_utf8(data) {
            Ok(t) => {
                let shown = inert_text(t.as_bytes());
                // Exact bytes as text only when the text is inert as it is;
                // else as base64, inert too (the reply's one exit would
                // otherwise change them).
                if shown == t {
                    value["encoding"] = json!("utf-8");
                    value["content"] = json!(t);
                } else {
                    value["encoding"] = json!("base64");
                    value["content_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(t.as_bytes()));
                }
                format!("{path}: bytes {offset}..{end} of {size}{more}\n{shown}")
            }
            Err(e) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                value["encoding"] = json!("base64");
                value["content_base64"] = json!(b64);
                format!("{path}: bytes {offset}..{end} of {size}{more} (not UTF-8 text; base64 follows)\n{b64}")
            }
        };
        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
        out.structured_content = Some(value);
        Ok(out)
    }

    /// List the files of a session's /work.
    #[tool(description = "List a directory of a session's working directory (/work; path relative to it or absolute \
        under it, default /work), depth levels deep (default 1, at most 8), at most 1000 entries: each with its \
        path relative to the listed directory, type (file, dir, symlink, fifo, socket, ...), size, octal mode, mtime \
        and, for a symbolic link, where it points (links are never followed). Names are the program's, shown with \
        control and invisible characters by name: path_hex has the exact bytes of a name that is not UTF-8 or \
        holds such a character.")]
    async fn list_files(
        &self,
        Parameters(args): Parameters<ListFilesArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let op = FileOp::list(args.path.as_deref(), args.depth).map_err(bad)?;
        let (s, r) = match self.file_op(&args.session, op, &ctx).await? {
            Ok(x) => x,
            Err(refusal) => return Ok(refusal),
        };
        let FileReply::Listed { path, entries, truncated } = r else {
            return Err(ErrorData::internal_error("unexpected answer", None));
        };
        let mut text = format!(
            "{path}: {} entr{}{}\n",
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" },
            if truncated { " (cut: more exist)" } else { "" }
        );
        for e in &entries {
            let link = e.link_target.as_ref().map(|t| format!(" -> {}", t.line(200))).unwrap_or_default();
            text.push_str(&format!("{:<7} {:>10} {:>4} {}{}\n", e.kind, e.size, e.mode, e.path.line(300), link));
        }
        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
        out.structured_content =
            Some(json!({ "session": s.id(), "path": path, "entries": entries, "truncated": truncated }));
        Ok(out)
    }

    /// The tiers this server offers, whether each works here, and the limits.
    #[tool(description = "List the isolation tiers this server offers, whether each is available on this machine \
        (as `sandbench doctor` sees it, with the checks and fixes), the default tier, and the default and maximum \
        limits a run_code call may ask for (durations in ms, sizes in bytes).")]
    async fn list_tiers(&self) -> Result<CallToolResult, ErrorData> {
        let mut tiers = vec![];
        let mut sessions = vec![];
        {
            // A probe builds a real sandbox: one at a time, and reused for a
            // while, so a client calling list_tiers in a loop holds nothing.
            let mut probes = self.shared.probes.lock().await;
            for name in &self.shared.policy.tiers {
                let t = self.tier(name)?;
                let fresh = probes.get(name).filter(|(at, _)| at.elapsed() < PROBE_TTL).map(|(_, a)| a.clone());
                let a = match fresh {
                    Some(a) => a,
                    None => {
                        let a = t.probe().await;
                        probes.insert(name.clone(), (std::time::Instant::now(), a.clone()));
                        a
                    }
                };
                tiers.push(a);
                sessions.push(t.sessions());
            }
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
            "secrets": self.shared.secrets.names(),
            "bounds": {
                "max_runs": p.bounds.max_runs,
                "max_runs_per_client": p.bounds.max_runs_per_client,
                "max_sessions_per_client": p.bounds.max_sessions_per_client,
                "max_queue": p.bounds.max_queue,
                "budget_memory_bytes": p.bounds.budget_memory,
                "budget_pids": p.bounds.budget_pids,
                "in_flight": self.shared.admission.load(),
            },
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

const INSTRUCTIONS: &str = "sandbench runs untrusted code in isolation tiers (process, docker, gvisor, microvm, e2b, \
    peers) and judges what happened from facts the program cannot forge. Call list_tiers to see what this server \
    offers, then run_code {language, code, tier?, limits?}. To keep files between calls, open_session {tier?, limits?} \
    and pass its id as run_code {session}; move files in and out with write_file, read_file and list_files; \
    close_session when done. Send a progressToken (or set a log level) to see a long run's output as it happens.";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Sandbench {
    #[allow(deprecated)] // logging: deprecated in the 2026-07-28 revision, still what older clients use
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder().enable_tools().enable_logging().build(),
        )
        .with_server_info(rmcp::model::Implementation::new("sandbench", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS.to_string())
    }

    /// A handler that answers `initialize` is a connection's (stdio, an MCP
    /// session); one that never does serves a stateless request.
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        self.conn.initialized.store(true, Ordering::Relaxed);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// Every tool's reply, through the one exit that makes it inert.
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let known = self.tool_router.has_route(&request.name);
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        match self.tool_router.call(tcc).await {
            Ok(rmcp::model::CallToolResponse::Complete(r)) => {
                Ok(rmcp::model::CallToolResponse::Complete(inert_reply(r)))
            }
            Ok(other) => Ok(other),
            // A known tool's bad arguments are a result the model can read
            // and correct (`isError: true`), as the MCP spec asks of input
            // validation; an unknown tool stays a protocol error.
            Err(e) if known && e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
                let text = inert_text(e.message.as_bytes());
                Ok(rmcp::model::CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(text)])))
            }
            Err(mut e) => {
                e.message = inert_text(e.message.as_bytes()).into();
                if let Some(d) = e.data.as_mut() {
                    inert_value(d);
                }
                Err(e)
            }
        }
    }

    /// The level below which this connection's log messages are not sent.
    #[allow(deprecated)] // what clients before the 2026-07-28 revision use
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let name = serde_json::to_value(request.level).ok().and_then(|v| v.as_str().map(str::to_string));
        let rank = name.as_deref().and_then(stream::level_rank).ok_or_else(|| bad("unknown log level"))?;
        self.conn.log_level.store(rank, Ordering::Relaxed);
        Ok(())
    }
}

/// A tool's reply made inert: every string of its text blocks and of its
/// structured content (keys too) with its hidden characters shown by name
/// (`sanitize::visible_controls`; newlines and tabs kept, which JSON escapes
/// anyway). What is inert already is left as it is, so the tools' own
/// sanitizing (head and tail, single-line names) stays what the client sees.
pub fn inert_reply(mut r: CallToolResult) -> CallToolResult {
    for c in r.content.iter_mut() {
        if let ContentBlock::Text(t) = c {
            if needs_inert(&t.text) {
                t.text = inert_text(t.text.as_bytes());
            }
        }
    }
    if let Some(v) = r.structured_content.as_mut() {
        inert_value(v);
    }
    r
}

fn needs_inert(s: &str) -> bool {
    s.chars().any(|c| c != '\n' && c != '\t' && sanitize::is_hidden(c))
}

/// Every string in `v`, and every key, made inert.
pub fn inert_value(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(s) if needs_inert(s) => *s = inert_text(s.as_bytes()),
        Value::Array(a) => a.iter_mut().for_each(inert_value),
        Value::Object(o) => {
            if o.keys().any(|k| needs_inert(k)) {
                *o = std::mem::take(o)
                    .into_iter()
                    .map(|(k, v)| if needs_inert(&k) { (inert_text(k.as_bytes()), v) } else { (k, v) })
                    .collect();
            }
            o.values_mut().for_each(inert_value);
        }
        _ => {}
    }
}

/// A run's events to its end: streamed if a streamer is given, then the report.
async fn consume(mut handle: RunHandle, streamer: Option<stream::Streamer>) -> RunReport {
    while let Some(u) = handle.events.recv().await {
        match u {
            Update::Event(ev) => {
                if let Some(s) = &streamer {
                    s.push(&ev);
                }
            }
            Update::Finished(r) => {
                if let Some(s) = streamer {
                    s.finish().await;
                }
                return *r;
            }
        }
    }
    RunReport::failed("?", "?", "mcp", "the run ended without a report (internal error; see the log)")
}

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
    for b in &report.incomplete {
        text.push_str(&format!("incomplete: {}: {}\n", b.bound, b.detail));
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
    let d = Bounds::default();
    let bounds = Bounds {
        max_runs: args.max_runs.map(|n| n as usize).or(m.max_runs).unwrap_or(d.max_runs),
        max_runs_per_client: args
            .max_runs_per_client
            .map(|n| n as usize)
            .or(m.max_runs_per_client)
            .unwrap_or(d.max_runs_per_client),
        max_sessions_per_client: args
            .max_sessions_per_client
            .map(|n| n as usize)
            .or(m.max_sessions_per_client)
            .unwrap_or(max.max(1)),
        max_queue: args.max_queue.or(m.max_queue).unwrap_or(d.max_queue),
        budget_memory: args.budget_memory.or(m.budget_memory_bytes).unwrap_or(d.budget_memory),
        budget_pids: args.budget_pids.or(m.budget_pids).unwrap_or(d.budget_pids),
    };
    Policy::new(tiers, base, ceiling).map_err(usage)?.with_sessions(max, idle, life).with_bounds(bounds).map_err(usage)
}

pub async fn run(args: McpArgs, config: &Config) -> anyhow::Result<i32> {
    let policy = policy(&args, config)?;
    // HTTP's listener and token first: a port in use or an unusable token
    // file is said before anything is started.
    let http = match args.http {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                anyhow::anyhow!("cannot listen on {addr}: {e}; pick another port with --http 127.0.0.1:PORT")
            })?;
            let local = listener.local_addr()?;
            let token_file = args.token_file.clone().or(config.mcp.token_file.clone());
            let (tokens, made, note) = match token_file {
                Some(f) => {
                    let t = token::from_file(&f).map_err(|e| usage(format!("{e:#}")))?;
                    (t, None, format!("bearer tokens from {}", f.display()))
                }
                None => {
                    let dir = token::default_dir(config.host.runtime_dir.as_deref(), config.state_dir.as_deref());
                    let (t, file) = token::generate(&dir, &format!("mcp-{}.token", local.port()))
                        .map_err(|e| anyhow::anyhow!("cannot make the bearer token: {e:#}"))?;
                    let note = format!("bearer token in {}", file.path.display());
                    (t, Some(file), note)
                }
            };
            let mut origins = args.allow_origins.clone();
            if origins.is_empty() {
                origins = config.mcp.allowed_origins.clone().unwrap_or_default();
            }
            let max_sessions = args
                .max_http_sessions
                .map(|n| n as usize)
                .or(config.mcp.max_http_sessions)
                .unwrap_or(http::DEFAULT_MAX_HTTP_SESSIONS);
            let opts = http::Options {
                tokens,
                token_note: note,
                allowed_origins: origins,
                max_sessions,
                max_message_bytes: MAX_MESSAGE_BYTES,
            };
            Some((listener, opts, made))
        }
    };
    let decls = crate::egress::secrets::declarations(&config.secrets, &args.secrets, &[]).map_err(usage)?;
    let secrets = crate::egress::secrets::resolve_all(&decls, &|var| std::env::var_os(var)).map_err(usage)?;
    let server = Sandbench::new(policy, config.clone(), secrets);
    let shared = server.shared.clone();
    let result = match http {
        None => serve_stdio(server).await,
        Some((listener, opts, made)) => {
            let cancel = server.shared.shutdown.clone();
            let r = http::serve(move || server.connection(), cancel, listener, opts).await;
            drop(made);
            r
        }
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
    // tokio's stdin and stdout hand every read and write to a blocking
    // thread, and after an idle spell (an agent's calls are seconds apart)
    // each of those hand-offs costs a thread wake-up (a no-op call took
    // 0.75 ms p50 here that way, 0.60 ms without). A pipe or socket (what every MCP host gives its
    // server) is read and written through the runtime's own poller instead;
    // anything else (a terminal, a file) keeps tokio's blocking stdio.
    use anyhow::Context;
    use std::os::fd::AsFd;
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    // Both ends or neither: one end made non-blocking and then read through
    // tokio's blocking stdio would meet EAGAIN.
    if let (Some(i), Some(o)) = (StdioKind::of(stdin.as_fd()), StdioKind::of(stdout.as_fd())) {
        // Whoever shares these open files after the server (a shell's next
        // command reading the same pipe) gets them back as they were.
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = [stdin.as_fd(), stdout.as_fd()].map(|fd| fcntl(fd, FcntlArg::F_GETFL).ok());
        let r = i.reader(stdin.as_fd()).context("cannot read stdin (the MCP client's pipe)");
        let w = o.writer(stdout.as_fd()).context("cannot write stdout (the MCP client's pipe)");
        let served = match (r, w) {
            (Ok(r), Ok(w)) => serve_on(server, r, w).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        for (fd, f) in [stdin.as_fd(), stdout.as_fd()].into_iter().zip(flags) {
            if let Some(f) = f {
                let _ = fcntl(fd, FcntlArg::F_SETFL(OFlag::from_bits_truncate(f)));
            }
        }
        return served;
    }
    serve_on(server, Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout())).await
}

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// What the server's stdin or stdout is, when the runtime can poll it.
#[derive(Clone, Copy)]
enum StdioKind {
    Pipe,
    Socket,
}

/// Duplicates of stdin and stdout (close-on-exec), polled by the runtime.
/// `O_NONBLOCK` reaches the open file each shares with fd 0 or 1: the client
/// holds the other end, and nothing else of the server reads stdin or writes
/// stdout (stdout carries only the protocol).
impl StdioKind {
    fn of(fd: std::os::fd::BorrowedFd<'_>) -> Option<StdioKind> {
        use std::os::fd::AsRawFd;
        match nix::sys::stat::fstat(fd).ok()?.st_mode & nix::libc::S_IFMT {
            nix::libc::S_IFIFO => Some(StdioKind::Pipe),
            nix::libc::S_IFSOCK => nix::sys::socket::getsockname::<nix::sys::socket::UnixAddr>(fd.as_raw_fd())
                .is_ok()
                .then_some(StdioKind::Socket),
            _ => None,
        }
    }

    fn reader(self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Reader> {
        let fd = fd.try_clone_to_owned()?;
        Ok(match self {
            StdioKind::Socket => Box::new(unix_stream(fd)?),
            StdioKind::Pipe => Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?),
        })
    }

    fn writer(self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Writer> {
        let fd = fd.try_clone_to_owned()?;
        Ok(match self {
            StdioKind::Socket => Box::new(unix_stream(fd)?),
            StdioKind::Pipe => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        })
    }
}

fn unix_stream(fd: std::os::fd::OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(s)
}

async fn serve_on(server: Sandbench, r: Reader, w: Writer) -> anyhow::Result<()> {
    use rmcp::transport::async_rw::AsyncRwTransport;
    // A line longer than the most a message may be is dropped, not buffered.
    let transport = AsyncRwTransport::<RoleServer, _, _>::new(r, w).with_max_line_length(MAX_MESSAGE_BYTES);
    let running = server
        .serve(transport)
        .await
        .map_err(|e| anyhow::anyhow!("the MCP client did not complete the handshake: {e}"))?;
    // Returns when the client closes stdin (or the connection breaks).
    let _ = running.waiting().await;
    Ok(())
}
