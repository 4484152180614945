//! `sandbench mcp`: sandbench's tiers as a Model Context Protocol server, so
//! agents built in other tools (Claude Code, Cursor, their own loops) run
//! their code here. Stdio by default (the transport MCP clients start local
//! servers with); streamable HTTP on a loopback address with `--http`.
//!
//! The operator's flags and config decide which tiers a client may use and
//! the most it may ask of each limit (`sandbench_core::policy`); a client only
//! ever narrows them. Runs go through the same runner and judge as every
//! other front end and are appended to the run log with the client's name.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

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
use crate::policy::{LimitRequest, Policy};
use crate::report::{Outcome, RunReport};
use crate::sanitize::head_tail;
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
    #[serde(default)]
    pub limits: LimitRequest,
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
}

#[derive(Clone)]
pub struct Sandbench {
    shared: Arc<Shared>,
    tool_router: ToolRouter<Self>,
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
        };
        Sandbench { shared: Arc::new(shared), tool_router: Self::tool_router() }
    }

    fn tier(&self, name: &str) -> Result<Arc<dyn Tier>, ErrorData> {
        let mut tiers = self.shared.tiers.lock().map_err(|_| ErrorData::internal_error("tier table poisoned", None))?;
        if let Some(t) = tiers.get(name) {
            return Ok(t.clone());
        }
        let t = tier::by_name(name, &self.shared.config).map_err(|e| bad(format!("{e:#}")))?;
        tiers.insert(name.to_string(), t.clone());
        // A session runs many programs: warm spares and pools for the next ones.
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
        egress proxy the HTTP_PROXY/HTTPS_PROXY variables point at; limits.network may narrow that list. Limits \
        default to the server's and may only be lowered up to the ceilings list_tiers shows.")]
    async fn run_code(
        &self,
        Parameters(args): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (mut spec, tier_name) =
            self.shared.policy.spec(&args.language, &args.code, args.tier.as_deref(), &args.limits).map_err(bad)?;
        let tier = self.tier(&tier_name)?;
        spec.label = "mcp".into();
        let client = ctx.client_info().map(|i| i.name);
        let handle = runner::start(tier, spec.clone());
        let cancel = handle.canceller();
        // A call the client abandons (or a transport that drops) cancels its
        // run; the tracked task below still waits for the tier's clean-up.
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

    /// The tiers this server offers, whether each works here, and the limits.
    #[tool(description = "List the isolation tiers this server offers, whether each is available on this machine \
        (as `sandbench doctor` sees it, with the checks and fixes), the default tier, and the default and maximum \
        limits a run_code call may ask for (durations in ms, sizes in bytes).")]
    async fn list_tiers(&self) -> Result<CallToolResult, ErrorData> {
        let mut tiers = vec![];
        for name in &self.shared.policy.tiers {
            let t = self.tier(name)?;
            tiers.push(t.probe().await);
        }
        let p = &self.shared.policy;
        let value = json!({
            "default": p.tiers[0],
            "tiers": tiers,
            "default_limits": p.base,
            "max_limits": p.ceiling,
        });
        let mut text = String::new();
        for a in &tiers {
            text.push_str(&format!(
                "{} {} {}\n",
                a.tier,
                if a.available { "available" } else { "unavailable" },
                a.summary
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
    then run_code {language, code, tier?, limits?}."
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
        text.push_str(&format!("violation: {} at {:.0} ms: {}\n", v.kind.name(), v.at_ms, v.detail));
    }
    for n in report.network.iter().filter(|n| n.decision == crate::egress::Decision::Denied).take(10) {
        text.push_str(&format!("network: {}\n", sanitize::visible_controls(n.line().as_bytes())));
    }
    text.push_str(&format!(
        "time: setup {:.1} ms, run {:.1} ms, teardown {:.1} ms, total {:.1} ms (tier {})\n",
        t.setup, t.run, t.teardown, t.total, report.tier
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
    let tiers = match &args.tiers {
        Some(list) => tier::parse_list(list).map_err(usage)?,
        None => vec![config.default_tier.clone()],
    };
    let base = args.limits.apply(config.limits.clone());
    let mut ceiling = base.clone();
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
    Policy::new(tiers, base, ceiling).map_err(usage)
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
    // wait until every run's sandbox is torn down, then drop the tiers (their
    // spares and pools go with them).
    shared.shutdown.cancel();
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
    let service = StreamableHttpService::new(move || Ok(server.clone()), Arc::new(LocalSessionManager::default()), cfg);
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
