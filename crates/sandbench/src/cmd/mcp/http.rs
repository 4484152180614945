//! `sandbench mcp --http`: streamable HTTP on a loopback address, in front
//! of rmcp's `StreamableHttpService`. Loopback is no trust boundary (every
//! local user reaches it, and every web page through a browser), so:
//!
//! - `Host` and `Origin` are checked by rmcp itself
//!   (`StreamableHttpServerConfig::allowed_hosts` — this server's own
//!   address and `localhost`, at its port — and `allowed_origins`, empty by
//!   default with validation enforced: a request carrying any `Origin` not
//!   listed with `--allow-origin` gets 403, as the MCP transport requires).
//! - Every request must carry `Authorization: Bearer TOKEN` (`token.rs`).
//!   rmcp's Host/Origin checks are asked first — with a bodiless `OPTIONS`
//!   that rmcp answers 405 when they pass — so a foreign page gets 403
//!   whatever it sends, before its token or body is looked at; 401 follows.
//! - An MCP session belongs to the token that opened it: a request naming
//!   another token's `Mcp-Session-Id` gets 404, as if it did not exist; the
//!   tools bind sandbench's own sessions to the MCP session, so to the token.
//! - Everything a client can make the server hold is bounded: TCP
//!   connections ([`MAX_CONNECTIONS`]), the time to send a request's headers
//!   and their size, the time to send its body and its size
//!   ([`BODY_TIMEOUT`], `Options::max_message_bytes`),
//!   MCP sessions (`--max-http-sessions`; each ends after rmcp's idle
//!   keep-alive), and each stream's queue (rmcp's channel capacity).
//! - A call whose response stream is dropped (the client went away, or
//!   aborted the request as the 2026-07-28 transport cancels) is cancelled,
//!   so its sandbox does not run on to its wall limit for no one.
//!
//! It serves any MCP server handler (`serve` takes a factory of them): the
//! tools are the server's, this file is only the HTTP front.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::http::{self, HeaderValue, Method, Request, Response, StatusCode};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::token::Tokens;

/// TCP connections served at once; one more is answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send a request's headers (slow senders are cut off).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a request's head (line and headers) hyper buffers.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Time a client has to send a request's body, once its headers are in.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// MCP sessions over HTTP at once, unless the operator says otherwise.
pub const DEFAULT_MAX_HTTP_SESSIONS: usize = 16;
const SESSION_HEADER: &str = "mcp-session-id";

/// Which accepted token a request carried (its index in the token list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal(pub usize);

/// Cancelled when the HTTP response stream of the request is dropped
/// before its end.
#[derive(Debug, Clone)]
pub struct CallGone(pub CancellationToken);

/// The HTTP request a tool call came in.
fn parts(ctx: &RequestContext<RoleServer>) -> Option<&http::request::Parts> {
    ctx.extensions.get::<http::request::Parts>()
}

/// The token a request carried (every request that reaches a tool has one).
pub fn principal(ctx: &RequestContext<RoleServer>) -> Option<Principal> {
    parts(ctx)?.extensions.get::<Principal>().copied()
}

pub fn call_gone(ctx: &RequestContext<RoleServer>) -> Option<CancellationToken> {
    parts(ctx)?.extensions.get::<CallGone>().map(|c| c.0.clone())
}

pub struct Options {
    pub tokens: Tokens,
    /// Where the token is, for the line on stderr.
    pub token_note: String,
    pub allowed_origins: Vec<String>,
    pub max_sessions: usize,
    /// The largest request body (one MCP message) taken.
    pub max_message_bytes: usize,
}

struct Front<S: rmcp::ServerHandler + Send + 'static> {
    mcp: StreamableHttpService<S, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    tokens: Tokens,
    /// MCP session id → the principal that opened it.
    owners: Mutex<std::collections::HashMap<String, Principal>>,
    max_sessions: usize,
    max_message_bytes: usize,
}

/// Serve MCP on `listener` until `cancel`: `connect` makes the server
/// handler of each MCP session.
pub async fn serve<S: rmcp::ServerHandler + Send + 'static>(
    connect: impl Fn() -> S + Send + Sync + 'static,
    cancel: CancellationToken,
    listener: tokio::net::TcpListener,
    opts: Options,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};

    let local = listener.local_addr()?;
    let mut allowed_hosts = vec![format!("localhost:{}", local.port())];
    allowed_hosts.push(match local.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]:{}", local.port()),
        ip => format!("{ip}:{}", local.port()),
    });
    let cfg = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_allowed_origins(opts.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(opts.max_message_bytes)
        .with_cancellation_token(cancel.child_token());
    let manager = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(move || Ok(connect()), manager.clone(), cfg);
    let front = Arc::new(Front {
        mcp,
        manager,
        tokens: opts.tokens,
        owners: Mutex::default(),
        max_sessions: opts.max_sessions,
        max_message_bytes: opts.max_message_bytes,
    });
    // The one line a wrapper script waits for (stderr: stdout is not ours to use).
    eprintln!("sandbench: MCP over streamable HTTP at http://{local}/mcp ({})", opts.token_note);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (mut stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                // Out of descriptors and the like: wait, never spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = cancel.cancelled() => return Ok(()),
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let body = "Service Unavailable: too many connections to this MCP server; try again shortly\n";
                let head = format!(
                    "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all((head + body).as_bytes())).await;
            });
            continue;
        };
        let front = front.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req| {
                let front = front.clone();
                async move { Ok::<_, Infallible>(front.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

type Reply = Response<Out>;

impl<S: rmcp::ServerHandler + Send + 'static> Front<S> {
    async fn handle(&self, req: Request<Incoming>) -> Reply {
        if req.uri().path() != "/mcp" {
            return text(StatusCode::NOT_FOUND, "Not Found: this server's MCP endpoint is /mcp");
        }
        // rmcp's Host/Origin verdict first, before the token and before any
        // body is read: a foreign page gets 403 whatever else it sends.
        if let Some(refused) = self.host_and_origin(&req).await {
            return refused;
        }
        let auth = req.headers().get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes);
        let Some(who) = self.tokens.check(auth).map(Principal) else {
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                "Unauthorized: this MCP server needs Authorization: Bearer TOKEN (the token file's path is on the \
                 server's stderr; see the README's MCP section)",
            );
            r.headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"sandbench\""));
            return r;
        };
        let session = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Some(id) = &session {
            let owner = self.owners.lock().ok().and_then(|o| o.get(id).copied());
            if owner.is_some_and(|o| o != who) {
                // Another token's session: as if it did not exist.
                return text(StatusCode::NOT_FOUND, "Not Found: Session not found");
            }
            if owner.is_none() && req.method() == Method::DELETE {
                // rmcp ends an unknown id "successfully": no session was
                // ended, so none is said to be.
                return text(StatusCode::NOT_FOUND, "Not Found: Session not found");
            }
        }
        // The body, whole, within its time and size: a client that sends it
        // slowly, or without end, holds a connection only so long.
        let (parts, body) = req.into_parts();
        let limited = http_body_util::Limited::new(body, self.max_message_bytes);
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, http_body_util::BodyExt::collect(limited)).await {
            Err(_) => {
                return text(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("Request Timeout: the request's body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
                )
            }
            Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("Payload Too Large: a message may be at most {} bytes", self.max_message_bytes),
                )
            }
            Ok(Err(_)) => return text(StatusCode::BAD_REQUEST, "Bad Request: the request's body could not be read"),
            Ok(Ok(c)) => c.to_bytes(),
        };
        let mut req = Request::from_parts(parts, http_body_util::Full::new(bytes));
        let gone = CancellationToken::new();
        req.extensions_mut().insert(who);
        req.extensions_mut().insert(CallGone(gone.clone()));
        // A POST without a session may open one (`initialize`), or be a
        // stateless request that runs a whole call before rmcp answers (and
        // opens no MCP session): so no lock is held across it, and the count
        // is checked once a session is made. An opener that finds more than
        // the most closes its own (openers that race may all do so), so at
        // most `max_sessions` ever stay, and a stateless request is never
        // refused for them.
        let opening = session.is_none() && req.method() == Method::POST;
        let deleting = req.method() == Method::DELETE;
        let resp = self.mcp.handle(req).await;
        if opening {
            if let Some(id) = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string) {
                if let Ok(mut o) = self.owners.lock() {
                    o.insert(id.clone(), who);
                }
                let live = self.live_sessions().await;
                if live > self.max_sessions {
                    use rmcp::transport::streamable_http_server::session::SessionManager;
                    let _ = self.manager.close_session(&id.clone().into()).await;
                    if let Ok(mut o) = self.owners.lock() {
                        o.remove(&id);
                    }
                    return too_many_sessions(live - 1);
                }
            }
        }
        let (mut head, body) = resp.into_parts();
        if deleting && head.status == StatusCode::ACCEPTED {
            // rmcp answers a session's end 202; the SDKs take 200 or 204 as
            // "ended" (the Python one logs `Session termination failed: 202`
            // at every close of an HTTP client).
            head.status = StatusCode::OK;
            if let (Some(id), Ok(mut o)) = (&session, self.owners.lock()) {
                o.remove(id);
            }
        }
        Response::from_parts(head, Out::Mcp(Watched { inner: body, gone: Some(gone.drop_guard()) }))
    }

    /// MCP sessions alive now; the owners of ended ones are forgotten.
    async fn live_sessions(&self) -> usize {
        let live: std::collections::HashSet<String> =
            self.manager.sessions.read().await.keys().map(|k| k.to_string()).collect();
        if let Ok(mut o) = self.owners.lock() {
            o.retain(|id, _| live.contains(id));
        }
        live.len()
    }

    /// rmcp's own Host and Origin checks (its `StreamableHttpServerConfig`),
    /// asked with a bodiless `OPTIONS` of the request's `Host` and `Origin`,
    /// which rmcp answers 405 when they pass: its 403 (or 400) when not.
    async fn host_and_origin(&self, req: &Request<Incoming>) -> Option<Reply> {
        let mut probe = Request::builder().method(Method::OPTIONS).uri(req.uri().clone());
        for name in [http::header::HOST, http::header::ORIGIN] {
            for v in req.headers().get_all(&name) {
                probe = probe.header(&name, v);
            }
        }
        let probe = probe.body(Out::Text(None)).ok()?;
        let verdict = self.mcp.handle(probe).await;
        if !matches!(verdict.status(), StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST) {
            return None;
        }
        let (head, body) = verdict.into_parts();
        Some(Response::from_parts(head, Out::Mcp(Watched { inner: body, gone: None })))
    }
}

fn too_many_sessions(live: usize) -> Reply {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!(
            "Service Unavailable: this server has {live} MCP sessions, its most (sandbench mcp \
             --max-http-sessions); end one (DELETE) or wait for an idle one to expire"
        ),
    )
}

fn text(status: StatusCode, body: &str) -> Reply {
    let mut r = Response::new(Out::Text(Some(Bytes::from(format!("{body}\n")))));
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// rmcp's response body.
type McpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The response body: rmcp's, watched, or a short text of ours.
pub enum Out {
    Mcp(Watched),
    Text(Option<Bytes>),
}

/// rmcp's body; when dropped before its end, the call's token is cancelled.
pub struct Watched {
    inner: McpBody,
    gone: Option<DropGuard>,
}

impl Body for Out {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Out::Text(t) => Poll::Ready(t.take().map(|b| Ok(Frame::data(b)))),
            Out::Mcp(w) => {
                let r = Pin::new(&mut w.inner).poll_frame(cx);
                if let Poll::Ready(None) = r {
                    if let Some(g) = w.gone.take() {
                        g.disarm();
                    }
                }
                r
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Out::Text(t) => t.is_none(),
            Out::Mcp(w) => w.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Out::Text(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Out::Text(None) => SizeHint::with_exact(0),
            Out::Mcp(w) => w.inner.size_hint(),
        }
    }
}
