//! The per-run egress proxy: one client connection at a time, from
//! whatever transport a tier brings it over (the process tier's loopback
//! listener, a container's or guest's relayed stream). [`super::route`]
//! takes each connection through the steps below; here are the steps, the
//! plain tunnel and forward, and the bookkeeping `intercept` shares.
//!
//! It speaks HTTP/1.x proxy requests only: absolute-form requests
//! (`GET http://host/path`) whose Host header names the same host, and
//! CONNECT to a host whose TLS ClientHello names it in its SNI. Each request
//! is checked against the allow list, its name resolved here (pinned for the
//! run), every address checked again, and only then connected. One request
//! per connection: a plain HTTP connection ends with its response, so a
//! second request cannot ride on an allowed one, and its framing — the
//! request's and the response's — is read strictly and written again by the
//! proxy itself ([`super::framing`]), so the upstream and the program each
//! see one message that no parser can read two ways. Everything is bounded:
//! header sizes, ClientHello size, connections open and in total, and the
//! time every stage may take.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::framing::{self, Body, Feed, Stop};
use super::policy::{not_public, parse_authority, Host, Network};
use super::resolve::Resolver;
use crate::event::{Decision, EventKind, NetRecord, RunContext};

/// Largest request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 16 << 10;
/// Most headers in a request.
pub(crate) const MAX_HEADERS: usize = 64;
/// Largest TLS ClientHello (it may span records; 16 KiB is already generous).
pub(crate) const MAX_HELLO: usize = 32 << 10;
/// Connections open at once, and in a whole run.
pub(crate) const MAX_OPEN: usize = 32;
pub(crate) const MAX_TOTAL: u64 = 1024;
/// How long a client may take to send its request head, or its ClientHello.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to an upstream may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A tunnel or response with no byte in either direction for this long ends.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest host name or reason kept in a record.
const MAX_FIELD: usize = 200;

/// Totals of one run, for the report's details.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// What every connection of one run shares.
pub(crate) struct Shared {
    pub network: Network,
    pub resolver: Resolver,
    pub ctx: RunContext,
    pub stop: CancellationToken,
    next_id: AtomicU64,
    pub(super) open: Arc<Semaphore>,
    pub totals: Mutex<Totals>,
}

impl Shared {
    pub(crate) fn new(network: Network, resolver: Resolver, ctx: RunContext, stop: CancellationToken) -> Shared {
        Shared {
            network,
            resolver,
            ctx,
            stop,
            next_id: AtomicU64::new(0),
            open: Arc::new(Semaphore::new(MAX_OPEN)),
            totals: Mutex::new(Totals::default()),
        }
    }

    async fn emit(&self, rec: &NetRecord) {
        if rec.decision == Decision::Denied && !rec.open {
            crate::judge::network_denied(&self.ctx, rec).await;
        }
        self.ctx.emit(EventKind::Network(rec.clone())).await;
    }
}

pub(super) fn inert(s: &str) -> String {
    crate::sanitize::inert_line(s, MAX_FIELD)
}

/// One connection's record as it goes.
pub(super) struct Conn {
    pub(super) rec: NetRecord,
    t0: Instant,
}

impl Conn {
    pub(super) fn new(sh: &Shared) -> Conn {
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        Conn {
            rec: NetRecord {
                id,
                at_ms: round(sh.ctx.ms()),
                decision: Decision::Denied,
                method: String::new(),
                host: String::new(),
                port: 0,
                address: None,
                detail: String::new(),
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0.0,
                open: false,
                secrets: vec![],
                misdirected: None,
            },
            t0: Instant::now(),
        }
    }

    pub(super) async fn deny(mut self, sh: &Shared, why: String) {
        self.rec.decision = Decision::Denied;
        self.rec.detail = inert(&why);
        self.rec.duration_ms = round(self.t0.elapsed().as_secs_f64() * 1000.0);
        self.rec.open = false;
        if let Ok(mut t) = sh.totals.lock() {
            t.denied += 1;
        }
        sh.emit(&self.rec).await;
    }
}

fn round(ms: f64) -> f64 {
    (ms * 10.0).round() / 10.0
}

/// An HTTP error answer the client can read (curl, pip and urllib show it).
pub(super) async fn answer<W: AsyncWrite + Unpin>(w: &mut W, code: u16, reason: &str, text: &str) {
    let body = format!("sandbench egress proxy: {text}\n");
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = w.write_all(head.as_bytes()).await;
    let _ = w.write_all(body.as_bytes()).await;
    let _ = w.shutdown().await;
}

/// A parsed request head.
pub(super) struct Head {
    pub(super) method: String,
    pub(super) target: String,
    pub(super) version: u8,
    pub(super) headers: Vec<(String, Vec<u8>)>,
    /// The head's length in bytes.
    pub(super) len: usize,
    /// Bytes after the head that arrived with it.
    pub(super) rest: Vec<u8>,
}

pub(super) async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> Result<Head, (u16, String)> {
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        // A head ended by bare LFs never gets its CRLFs: refused now, not
        // at the timeout.
        if find(&buf, b"\n\n").is_some() {
            return Err((400, "a bare LF in the head (every line must end in CRLF)".into()));
        }
        if buf.len() > MAX_HEAD {
            return Err((431, format!("request head longer than {} KiB", MAX_HEAD >> 10)));
        }
        let n = match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Err(_) => return Err((408, format!("no complete request within {} s", HEAD_TIMEOUT.as_secs()))),
            Ok(Err(e)) => return Err((400, format!("reading the request: {e}"))),
            Ok(Ok(0)) if buf.is_empty() => return Err((0, "the client closed without a request".into())),
            Ok(Ok(0)) => return Err((400, "the client closed in the middle of its request".into())),
            Ok(Ok(n)) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
    };
    if end > MAX_HEAD {
        return Err((431, format!("request head longer than {} KiB", MAX_HEAD >> 10)));
    }
    // The bytes themselves first: httparse takes a bare LF for a CRLF,
    // which another parser upstream may not.
    framing::check_head(&buf[..end], MAX_HEADERS).map_err(|e| (400, e))?;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(&buf[..end]) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err((400, "an incomplete request head".into())),
        Err(httparse::Error::TooManyHeaders) => return Err((431, format!("more than {MAX_HEADERS} headers"))),
        Err(e) => return Err((400, format!("not an HTTP request ({e})"))),
    }
    // A name with `_` is a token, but a server or framework that maps
    // headers to variables (CGI, PHP, WSGI, Rails) reads `Transfer_Encoding`
    // as `Transfer-Encoding`, framing the proxy never decided. Refused, not
    // dropped (nginx drops them): a request that silently loses a field may
    // mean something else upstream, and a refusal says why.
    if let Some(h) = req.headers.iter().find(|h| h.name.contains('_')) {
        return Err((
            400,
            format!(
                "a header name with an underscore ('{}'): an upstream may read it as its hyphenated twin; use '-'",
                inert(h.name)
            ),
        ));
    }
    let head = Head {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        version: req.version.unwrap_or(1),
        headers: req.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect(),
        len: end,
        rest: buf[end..].to_vec(),
    };
    Ok(head)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where a request goes: CONNECT's authority, or an absolute-form URL.
pub(super) fn target(head: &Head) -> Result<(Host, u16, Option<String>), (u16, String)> {
    if head.method == "CONNECT" {
        let (h, p) = parse_authority(&head.target, None).map_err(|e| (400, format!("CONNECT target {e}")))?;
        return Ok((h, p, None));
    }
    let t = &head.target;
    let lower = t.get(..8).map(|s| s.to_ascii_lowercase()).unwrap_or_default();
    if lower.starts_with("https://") {
        return Err((400, "an https:// URL sent as a plain request: use CONNECT (set HTTPS_PROXY)".into()));
    }
    if !lower.starts_with("http://") {
        return Err((
            400,
            "not a proxy request: send absolute-form requests (GET http://host/path) or CONNECT host:port".into(),
        ));
    }
    let after = &t[7..];
    let cut = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (auth, path) = after.split_at(cut);
    if auth.contains('@') {
        return Err((400, "credentials in the URL's host part are refused (they hide the real host)".into()));
    }
    let (h, p) = parse_authority(auth, Some(80)).map_err(|e| (400, format!("URL host {e}")))?;
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err((400, "a control character or space in the URL".into()));
    }
    Ok((h, p, Some(path)))
}

pub(super) fn header<'a>(head: &'a Head, name: &str) -> Vec<&'a [u8]> {
    head.headers.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_slice()).collect()
}

/// A plain request's own checks: its Host header names the URL's host, and
/// it asks for no protocol upgrade. Its framing is [`framing::request_body`]'s.
pub(super) fn check_plain(head: &Head, host: &Host, port: u16) -> Result<(), String> {
    check_host_header(head, host, port, 80)
}

/// Exactly one Host header, naming `host:port` (`default`: the port a Host
/// without one means), and no protocol upgrade.
pub(super) fn check_host_header(head: &Head, host: &Host, port: u16, default: u16) -> Result<(), String> {
    let hosts = header(head, "host");
    let [value] = hosts.as_slice() else {
        return Err(format!("{} Host headers (exactly one must name {host})", hosts.len()));
    };
    let text = String::from_utf8_lossy(value);
    match parse_authority(text.trim(), Some(default)) {
        Ok((h, p)) if h == *host && p == port => {}
        _ => {
            return Err(format!(
                "the Host header '{}' does not match the request's host {host}:{port}",
                crate::sanitize::inert_line(&text, 80)
            ))
        }
    }
    if !header(head, "upgrade").is_empty() {
        return Err("protocol upgrades (WebSocket over plain HTTP) are not forwarded".into());
    }
    Ok(())
}

/// The addresses the proxy may connect to for `host`: resolved here, each
/// checked. Err carries the HTTP status to answer.
pub(super) async fn addresses(sh: &Shared, host: &Host) -> Result<Vec<IpAddr>, (u16, String)> {
    let (addrs, operator) = match host {
        Host::Ip(a) => (vec![*a], false),
        Host::Name(n) => match sh.resolver.resolve(n).await {
            Ok(r) => (r.addrs, r.pinned_by_operator),
            Err(e) => return Err((502, e)),
        },
    };
    let mut ok = vec![];
    let mut refused = vec![];
    for a in addrs {
        match not_public(a) {
            Some(why) if !operator && !sh.network.names_address(a) => refused.push(format!("{a}, {why}")),
            _ => ok.push(a),
        }
    }
    if ok.is_empty() {
        return Err((
            403,
            format!(
                "{host} resolves to {} (only public addresses pass unless the allow list names the address, or [network] hosts pins the name)",
                refused.join("; ")
            ),
        ));
    }
    Ok(ok)
}

pub(super) async fn dial(addrs: &[IpAddr], port: u16) -> Result<(TcpStream, IpAddr), String> {
    let mut last = String::from("no address");
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(SocketAddr::new(*a, port))).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, *a));
            }
            Ok(Err(e)) => last = format!("{a}: {e}"),
            Err(_) => last = format!("{a}: no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    Err(format!("cannot connect: {last}"))
}

/// What a ClientHello named: Ok(None) needs more bytes; Ok(Some(sni)).
fn hello_sni(buf: &[u8]) -> Result<Option<Option<String>>, String> {
    // A TLS handshake record starts 0x16 0x03: anything else is not TLS,
    // and a tunnel that is not TLS cannot be checked against its host.
    if (!buf.is_empty() && buf[0] != 0x16) || (buf.len() > 1 && buf[1] != 0x03) {
        return Err("the tunnel does not start with a TLS ClientHello".into());
    }
    let mut acc = rustls::server::Acceptor::default();
    let mut rd: &[u8] = buf;
    while !rd.is_empty() {
        match acc.read_tls(&mut rd) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("an unreadable ClientHello ({e})")),
        }
    }
    match acc.accept() {
        Ok(None) => Ok(None),
        Ok(Some(a)) => Ok(Some(a.client_hello().server_name().map(|s| s.to_ascii_lowercase()))),
        Err((e, _)) => Err(format!("an unreadable ClientHello ({e})")),
    }
}

/// The tunnel's TLS ClientHello, read whole before anything goes upstream,
/// its SNI checked against the CONNECT host. `Ok(None)`: the client closed
/// an unused tunnel.
pub(super) async fn client_hello<S>(client: &mut S, host: &Host, early: Vec<u8>) -> Result<Option<Vec<u8>>, String>
where
    S: AsyncRead + Unpin,
{
    // The ClientHello, read whole before anything goes upstream.
    let mut hello = early;
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let mut chunk = [0u8; 4096];
    let sni = loop {
        match hello_sni(&hello) {
            Ok(Some(sni)) => break sni,
            Ok(None) => {}
            Err(why) => return Err(why),
        }
        if hello.len() > MAX_HELLO {
            return Err(format!("a ClientHello longer than {} KiB", MAX_HELLO >> 10));
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(0)) if hello.is_empty() => return Ok(None), // an unused tunnel
            Ok(Ok(0)) | Ok(Err(_)) => return Err("the client left in the middle of its ClientHello".into()),
            Err(_) => return Err(format!("no ClientHello within {} s of the tunnel opening", HEAD_TIMEOUT.as_secs())),
            Ok(Ok(n)) => hello.extend_from_slice(&chunk[..n]),
        }
    };
    match (host, &sni) {
        (Host::Name(n), Some(s)) if Host::parse(s).ok().as_ref() == Some(&Host::Name(n.clone())) => {}
        (Host::Ip(_), None) => {}
        (_, Some(s)) => return Err(format!("the TLS SNI '{}' does not match the CONNECT host {host}", inert(s))),
        (Host::Name(_), None) => return Err(format!("the ClientHello names no host (SNI) for {host}")),
    }
    Ok(Some(hello))
}

pub(super) async fn connect_tunnel<S>(
    sh: &Shared,
    mut c: Conn,
    client: &mut S,
    host: &Host,
    port: u16,
    addrs: &[IpAddr],
    early: Vec<u8>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    let hello = match client_hello(client, host, early).await {
        Ok(Some(h)) => h,
        Ok(None) => return,
        Err(why) => return c.deny(sh, why).await,
    };
    let (mut up, addr) = match dial(addrs, port).await {
        Ok(x) => x,
        Err(why) => return c.deny(sh, why).await,
    };
    c.rec.address = Some(addr.to_string());
    allowed(sh, &mut c).await;
    if up.write_all(&hello).await.is_err() {
        return closed(sh, c, hello.len() as u64, 0).await;
    }
    let (u, d) = relay(client, &mut up, &sh.stop).await;
    closed(sh, c, hello.len() as u64 + u, d).await;
}

pub(super) async fn allowed(sh: &Shared, c: &mut Conn) {
    c.rec.decision = Decision::Allowed;
    c.rec.open = true;
    c.rec.detail = match &c.rec.address {
        Some(a) => format!("connected to {a}"),
        None => String::new(),
    };
    if !c.rec.secrets.is_empty() {
        c.rec.detail.push_str(&format!("; intercepted for secret {}", c.rec.secrets.join(", ")));
    }
    if let Ok(mut t) = sh.totals.lock() {
        t.allowed += 1;
    }
    sh.emit(&c.rec).await;
}

pub(super) async fn closed(sh: &Shared, mut c: Conn, up: u64, down: u64) {
    c.rec.open = false;
    c.rec.bytes_up = up;
    c.rec.bytes_down = down;
    c.rec.duration_ms = round(c.t0.elapsed().as_secs_f64() * 1000.0);
    if let Ok(mut t) = sh.totals.lock() {
        t.bytes_up += up;
        t.bytes_down += down;
    }
    sh.emit(&c.rec).await;
}

/// Request fields not passed on: hop-by-hop and proxy fields, the framing
/// (the proxy writes its own), `Expect` (answered here) and `Trailer` (the
/// trailers are dropped). The proxy adds its own `Connection: close`.
pub(super) const DROPPED_UP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-length",
    "transfer-encoding",
];
/// Response fields not passed on, for the same reasons.
pub(super) const DROPPED_DOWN: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "trailer", "upgrade", "content-length", "transfer-encoding"];

/// A connection refused after it was allowed (its framing broke part way):
/// the record says why, and is a denial (a `network` violation).
pub(super) async fn refused_after(sh: &Shared, mut c: Conn, up: u64, down: u64, why: String) {
    c.rec.decision = Decision::Denied;
    c.rec.detail = inert(&why);
    c.rec.open = false;
    c.rec.bytes_up = up;
    c.rec.bytes_down = down;
    c.rec.duration_ms = round(c.t0.elapsed().as_secs_f64() * 1000.0);
    if let Ok(mut t) = sh.totals.lock() {
        t.denied += 1;
        t.bytes_up += up;
        t.bytes_down += down;
    }
    sh.emit(&c.rec).await;
}

/// A writer that counts what it wrote.
pub(super) struct Counting<'a, W> {
    inner: &'a mut W,
    n: u64,
}

impl<'a, W> Counting<'a, W> {
    pub(super) fn new(inner: &'a mut W) -> Counting<'a, W> {
        Counting { inner, n: 0 }
    }

    pub(super) fn count(&self) -> u64 {
        self.n
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counting<'_, W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut *self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(k)) = r {
            self.n += k as u64;
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn forward_plain<S>(
    sh: &Shared,
    mut c: Conn,
    client: &mut S,
    head: &Head,
    body: Body,
    port: u16,
    addrs: &[IpAddr],
    path: &str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut up, addr) = match dial(addrs, port).await {
        Ok(x) => x,
        Err(why) => {
            answer(client, 502, "Bad Gateway", &why).await;
            return c.deny(sh, why).await;
        }
    };
    c.rec.address = Some(addr.to_string());
    allowed(sh, &mut c).await;
    // The head as the proxy writes it: origin-form, the program's fields
    // but the framing, then the framing it decided on.
    let mut out = format!("{} {path} HTTP/1.{}\r\n", head.method, head.version).into_bytes();
    out.extend(framing::fields_except(&head.headers, DROPPED_UP));
    out.extend_from_slice(framing::framing_field(body).as_bytes());
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    let head_len = head.len as u64;
    if up.write_all(&out).await.is_err() {
        return closed(sh, c, head_len, 0).await;
    }
    // A client waiting for `100 Continue` before its body gets it from here.
    let expects = header(head, "expect").iter().any(|v| v.eq_ignore_ascii_case(b"100-continue"));
    if expects && body != Body::Empty && head.rest.is_empty() {
        let _ = client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
    }
    // Only the declared body goes upstream, in the proxy's framing: what
    // follows it (a pipelined or smuggled second request) is never read.
    let (sent, up_bytes) = {
        let mut feed = Feed::new(head.rest.clone(), client, IDLE_TIMEOUT);
        let r = feed.body(body, &mut up).await;
        (r, head_len + feed.read())
    };
    match sent {
        Ok(()) => {}
        Err(Stop::Gone) => return closed(sh, c, up_bytes, 0).await,
        Err(Stop::Refused(why)) => {
            let why = format!("request body: {why}");
            answer(client, 400, "Bad Request", &why).await;
            return refused_after(sh, c, up_bytes, 0, why).await;
        }
    }
    let head_request = head.method == "HEAD";
    let mut to_client = Counting { inner: client, n: 0 };
    let down = relay_response(&mut up, &mut to_client, head_request).await;
    let n = to_client.n;
    match down {
        Ok(()) | Err((_, Stop::Gone)) => {
            let _ = client.shutdown().await;
            closed(sh, c, up_bytes, n).await
        }
        Err((false, Stop::Refused(why))) => {
            let why = format!("the upstream's response: {why}");
            answer(client, 502, "Bad Gateway", &why).await;
            refused_after(sh, c, up_bytes, n, why).await
        }
        Err((true, Stop::Refused(why))) => {
            let _ = client.shutdown().await;
            refused_after(sh, c, up_bytes, n, format!("the upstream's response, part way: {why}")).await
        }
    }
}

/// Read the upstream's response strictly and write it to the program
/// canonically: interim (1xx) responses dropped, its own framing fields
/// written again, the body as framed and nothing after it. Err carries
/// whether the head had already been written.
pub(super) async fn relay_response<U: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    up: &mut U,
    client: &mut W,
    head_request: bool,
) -> Result<(), (bool, Stop)> {
    let mut feed = Feed::new(vec![], up, IDLE_TIMEOUT);
    let refused = |why: String| (false, Stop::Refused(why));
    let (code, reason, fields) = response_head(&mut feed).await?;
    let body = framing::response_body(code, head_request, &fields).map_err(refused)?;
    let mut out = format!("HTTP/1.1 {code} {reason}\r\n").into_bytes();
    out.extend(framing::fields_except(&fields, DROPPED_DOWN));
    out.extend_from_slice(framing::framing_field(body).as_bytes());
    // A HEAD or 304 answer's length says what a GET would get: kept, canonical.
    let cl: Vec<&[u8]> = fields.iter().filter(|(n, _)| n == "content-length").map(|(_, v)| v.as_slice()).collect();
    if let (Body::Empty, Ok(Some(n))) = (body, framing::content_length(&cl)) {
        if head_request || code == 304 {
            out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
        }
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    client.write_all(&out).await.map_err(|_| (false, Stop::Gone))?;
    feed.body(body, client).await.map_err(|e| (true, e))
}

/// The final response's head, read strictly: interim (1xx) answers dropped
/// (bounded), 101 refused. Status, reason (visible ASCII) and fields.
pub(super) async fn response_head<U: AsyncRead + Unpin>(
    feed: &mut Feed<'_, U>,
) -> Result<(u16, String, Vec<(String, Vec<u8>)>), (bool, Stop)> {
    let refused = |why: String| (false, Stop::Refused(why));
    let mut interim = 0;
    loop {
        let raw = match feed.head(MAX_HEAD).await {
            Ok(Some(h)) => h,
            Ok(None) => return Err(refused("the upstream closed without a response".into())),
            Err(e) => return Err((false, e)),
        };
        framing::check_head(&raw, MAX_HEADERS).map_err(refused)?;
        let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut hs);
        match resp.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(refused(format!("more than {MAX_HEADERS} headers"))),
            _ => return Err(refused("an unreadable response head".into())),
        }
        let code = resp.code.unwrap_or(0);
        if code == 101 {
            return Err(refused("a protocol switch (101) the proxy never asked for".into()));
        }
        if (100..200).contains(&code) {
            interim += 1;
            if interim > framing::MAX_INTERIM {
                return Err(refused(format!("more than {} interim responses", framing::MAX_INTERIM)));
            }
            continue;
        }
        // The reason phrase as visible ASCII (it is only ever shown).
        let reason: String =
            resp.reason.unwrap_or("").chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(100).collect();
        let fields: Vec<(String, Vec<u8>)> =
            resp.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
        return Ok((code, reason, fields));
    }
}

/// Copy both ways until both sides are done, either side fails, nothing
/// moves for `IDLE_TIMEOUT`, or the run stops. Returns bytes up and down.
async fn relay<A, B>(a: &mut A, b: &mut B, stop: &CancellationToken) -> (u64, u64)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut ab = vec![0u8; 16 << 10];
    let mut ba = vec![0u8; 16 << 10];
    let (mut up, mut down) = (0u64, 0u64);
    let (mut a_open, mut b_open) = (true, true);
    let idle = tokio::time::sleep(IDLE_TIMEOUT);
    tokio::pin!(idle);
    while a_open || b_open {
        tokio::select! {
            r = ar.read(&mut ab), if a_open => match r {
                Ok(n) if n > 0 => {
                    if bw.write_all(&ab[..n]).await.is_err() { break; }
                    up += n as u64;
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
                }
                _ => { a_open = false; let _ = bw.shutdown().await; }
            },
            r = br.read(&mut ba), if b_open => match r {
                Ok(n) if n > 0 => {
                    if aw.write_all(&ba[..n]).await.is_err() { break; }
                    down += n as u64;
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE_TIMEOUT);
                }
                _ => { b_open = false; let _ = aw.shutdown().await; }
            },
            _ = &mut idle => break,
            _ = stop.cancelled() => break,
        }
    }
    (up, down)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_parsed_strictly() {
        let head = |m: &str, t: &str| Head {
            method: m.into(),
            target: t.into(),
            version: 1,
            headers: vec![],
            len: 0,
            rest: vec![],
        };
        let (h, p, path) = target(&head("GET", "http://PyPI.test/simple/?q=1")).unwrap();
        assert_eq!((h.to_string(), p, path.as_deref()), ("pypi.test".into(), 80, Some("/simple/?q=1")));
        let (h, p, path) = target(&head("GET", "http://[::1]:8080")).unwrap();
        assert_eq!((h.to_string(), p, path.as_deref()), ("[::1]".into(), 8080, Some("/")));
        let (_, p, path) = target(&head("CONNECT", "pypi.test:443")).unwrap();
        assert_eq!((p, path), (443, None));
        for (m, t) in [
            ("GET", "/simple/"),
            ("GET", "https://pypi.test/"),
            ("GET", "http://pypi.test@evil.test/"),
            ("CONNECT", "pypi.test"),
            ("GET", "http://127.1/"),
            ("GET", "http://2130706433/"),
        ] {
            assert!(target(&head(m, t)).is_err(), "{m} {t}");
        }
    }

    #[test]
    fn plain_requests_need_a_matching_host_and_no_upgrade() {
        let with = |hs: &[(&str, &str)]| Head {
            method: "POST".into(),
            target: "http://pypi.test/x".into(),
            version: 1,
            headers: hs.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect(),
            len: 0,
            rest: vec![],
        };
        let host = Host::parse("pypi.test").unwrap();
        assert!(check_plain(&with(&[("host", "PYPI.test:80")]), &host, 80).is_ok());
        assert!(check_plain(&with(&[("host", "evil.test")]), &host, 80).unwrap_err().contains("does not match"));
        assert!(check_plain(&with(&[("host", "pypi.test:8080")]), &host, 80).is_err());
        assert!(check_plain(&with(&[]), &host, 80).is_err());
        assert!(check_plain(&with(&[("host", "pypi.test"), ("host", "evil.test")]), &host, 80).is_err());
        assert!(check_plain(&with(&[("host", "pypi.test"), ("upgrade", "websocket")]), &host, 80).is_err());
    }

    #[test]
    fn only_a_tls_client_hello_opens_a_tunnel() {
        assert!(hello_sni(b"GET / HTTP/1.1\r\n").is_err());
        assert!(hello_sni(b"SSH-2.0-OpenSSH").is_err());
        assert_eq!(hello_sni(b"").unwrap(), None);
        assert_eq!(hello_sni(&[0x16, 0x03]).unwrap(), None, "a partial record asks for more");
    }
}
