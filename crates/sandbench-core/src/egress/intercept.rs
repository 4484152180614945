//! The proxy's side of a run's secrets ([`super::secrets`]).
//!
//! A `CONNECT` to a host a secret is bound to is not tunnelled: the proxy
//! answers the program's TLS itself with a certificate from the run's CA
//! ([`super::ca`]), reads one HTTP/1.1 request, puts each bound secret's
//! value in place of its placeholder where the secret may go (header
//! values; the query and the body on opt-in), and sends it on over its own
//! TLS connection to the real host, verified as any client would. A plain
//! request to an `http://` binding is handled the same way without TLS.
//!
//! Nothing comes back: every form of every value ([`super::scrub`]) is
//! replaced by its placeholder in the response's head and body — a
//! compressed body is decoded first (gzip, deflate; the request asks for
//! `identity`, and any other coding is refused), a chunked one is scrubbed
//! across its chunks — and the response goes to the program re-chunked.
//!
//! A placeholder anywhere it may not go — in a request to a host its secret
//! is not bound to (a plain request the proxy can read), in the URL's path,
//! in the query or the body without the opt-in — refuses the request before
//! that part leaves, and the record says which secret and where
//! (`secret_misdirected`), never the value. Tunnels to hosts no secret is
//! bound to stay opaque: a placeholder inside them is only a placeholder.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::ClientConfig;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use zeroize::Zeroizing;

use super::ca::{self, RunCa};
use super::framing::{self, Body, Feed, Pieces, Stop};
use super::policy::Host;
use super::proxy::{self, Conn, Head, Shared, CONNECT_TIMEOUT, HEAD_TIMEOUT, IDLE_TIMEOUT};
use super::scrub::{ByForm, Needles, Refused, Scrubber, FORMS, TABLE};
use super::secrets::{placeholder, Binding, Place, Places, Secrets};

/// Largest request body a secret may be substituted into (it is read whole
/// to write its new length).
pub(crate) const MAX_SUBSTITUTED_BODY: u64 = 4 << 20;

/// One secret as a run's proxy holds it.
struct RunSecret {
    name: String,
    placeholder: String,
    value: Zeroizing<Vec<u8>>,
    bindings: Vec<Binding>,
    places: Places,
}

/// What the proxy did with one secret, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    /// Requests that carried the value to a bound host.
    pub substituted: u64,
    /// Forms of the value taken out of responses.
    pub scrubbed: u64,
    /// The same, by row of the encodings' table.
    pub scrubbed_by: ByForm,
    /// Requests refused because the placeholder was where it may not go.
    pub misdirected: u64,
}

/// A run's secrets, in its proxy.
pub(crate) struct RunSecrets {
    list: Vec<RunSecret>,
    ca: Option<RunCa>,
    upstream: Option<Arc<ClientConfig>>,
    /// Every placeholder, each refused where found.
    refuse_all: Needles,
    /// Every form of every value → that secret's placeholder.
    scrub: Needles,
    counts: Mutex<Vec<Counts>>,
}

/// A placeholder where it may not go: which secret, and why (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misplaced {
    pub secret: String,
    pub why: String,
}

impl RunSecrets {
    /// Placeholders made for this run; a CA when any secret goes over TLS;
    /// the upstream client trusting the system's roots and `extra`.
    pub(crate) fn new(secrets: &Secrets, extra: &[CertificateDer<'static>]) -> Result<RunSecrets, String> {
        let mut list = vec![];
        for s in secrets.iter() {
            list.push(RunSecret {
                name: s.name.clone(),
                placeholder: placeholder(&s.name).map_err(|e| format!("cannot make a placeholder: {e}"))?,
                value: Zeroizing::new(s.value().to_vec()),
                bindings: s.bindings.clone(),
                places: s.places,
            });
        }
        let mut tls_hosts: Vec<Host> = vec![];
        for b in list.iter().flat_map(|s| &s.bindings).filter(|b| b.tls) {
            if !tls_hosts.contains(&b.host) {
                tls_hosts.push(b.host.clone());
            }
        }
        let (ca, upstream) = if tls_hosts.is_empty() {
            (None, None)
        } else {
            (Some(RunCa::new(&tls_hosts)?), Some(ca::upstream_config(extra)?))
        };
        let refuse_all = Needles::new(
            list.iter()
                .enumerate()
                .map(|(i, s)| (Zeroizing::new(s.placeholder.clone().into_bytes()), i, None))
                .collect(),
        );
        let values: Vec<(&[u8], Vec<u8>)> =
            list.iter().map(|s| (s.value.as_slice(), s.placeholder.clone().into_bytes())).collect();
        let scrub = Needles::values(&values);
        let counts = Mutex::new(vec![Counts::default(); list.len()]);
        Ok(RunSecrets { list, ca, upstream, refuse_all, scrub, counts })
    }

    /// `NAME=placeholder` for the program's environment.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.list.iter().map(|s| (s.name.clone(), s.placeholder.clone())).collect()
    }

    /// The run CA's certificate, when a secret goes over TLS.
    pub(crate) fn ca_pem(&self) -> Option<String> {
        self.ca.as_ref().map(RunCa::pem)
    }

    /// The secrets bound to this target.
    pub(crate) fn bound(&self, host: &Host, port: u16, tls: bool) -> Vec<usize> {
        (0..self.list.len())
            .filter(|i| self.list[*i].bindings.iter().any(|b| b.tls == tls && b.port == port && b.host == *host))
            .collect()
    }

    fn names(&self, which: &[usize]) -> Vec<String> {
        which.iter().map(|i| self.list[*i].name.clone()).collect()
    }

    fn count(&self, i: usize, f: impl FnOnce(&mut Counts)) {
        if let Ok(mut c) = self.counts.lock() {
            if let Some(c) = c.get_mut(i) {
                f(c)
            }
        }
    }

    /// Per secret: its hosts, where it may go and what the proxy did.
    pub(crate) fn report(&self) -> serde_json::Value {
        let counts = self.counts.lock().map(|c| c.clone()).unwrap_or_default();
        json!(self
            .list
            .iter()
            .zip(counts)
            .map(|(s, c)| json!({
                "name": s.name,
                "hosts": s.bindings.iter().map(Binding::to_string).collect::<Vec<_>>(),
                "in": s.places.to_string(),
                "substituted": c.substituted,
                "scrubbed": c.scrubbed,
                "scrubbed_by": by_form(&c.scrubbed_by),
                "misdirected": c.misdirected,
            }))
            .collect::<Vec<_>>())
    }

    /// For `place` of a request to a target with these bound secrets: a
    /// bound secret that may go there becomes its value, any other
    /// placeholder is refused.
    fn needles_for(&self, bound: &[usize], place: Place) -> Needles {
        Needles::new(
            self.list
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let with = (bound.contains(&i) && s.places.allows(place)).then(|| s.value.clone());
                    (Zeroizing::new(s.placeholder.clone().into_bytes()), i, with)
                })
                .collect(),
        )
    }

    fn misplaced(&self, i: usize, bound: &[usize], to: &str, place: &str) -> Misplaced {
        let s = &self.list[i];
        let why = if bound.contains(&i) {
            format!("secret {} in {place}, where it may not go (it may go in: {})", s.name, s.places)
        } else {
            let hosts: Vec<String> = s.bindings.iter().map(Binding::to_string).collect();
            format!("secret {} sent to {to}, which it is not bound to (it goes to {} only)", s.name, hosts.join(", "))
        };
        Misplaced { secret: s.name.clone(), why }
    }

    /// The request line and fields to send upstream (without framing and
    /// `Connection`), each placeholder substituted where its secret may go;
    /// with `scrubbing`, the response is asked for uncompressed.
    pub(super) fn request_head(
        &self,
        head: &Head,
        target: &str,
        bound: &[usize],
        to: &str,
        scrubbing: bool,
    ) -> Result<(Vec<u8>, Vec<usize>), Misplaced> {
        let mut used = vec![0u64; self.list.len()];
        let refuse = |hay: &[u8], place: &str| match self.refuse_all.find(hay) {
            Some((_, _, i)) => Err(self.misplaced(i, bound, to, place)),
            None => Ok(()),
        };
        refuse(head.method.as_bytes(), "the request method")?;
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        refuse(path.as_bytes(), "the URL's path")?;
        let mut line = format!("{} {path}", head.method).into_bytes();
        if let Some(q) = query {
            let n = self.needles_for(bound, Place::Query);
            let q2 = n
                .replace_all(q.as_bytes(), &mut used)
                .map_err(|Refused(i)| self.misplaced(i, bound, to, "the query"))?;
            line.push(b'?');
            line.extend_from_slice(q2.as_deref().unwrap_or(q.as_bytes()));
        }
        line.extend_from_slice(format!(" HTTP/1.{}\r\n", head.version).as_bytes());
        let hn = self.needles_for(bound, Place::Headers);
        let mut fields = vec![];
        for (name, value) in &head.headers {
            if proxy::DROPPED_UP.contains(&name.as_str()) || (scrubbing && name == "accept-encoding") {
                continue;
            }
            // Names arrive lowercased: a placeholder in one is looked for so.
            if let Some(i) = self.list.iter().position(|s| name.contains(&s.placeholder.to_ascii_lowercase())) {
                return Err(self.misplaced(i, bound, to, "a header name"));
            }
            let v = hn
                .replace_all(value, &mut used)
                .map_err(|Refused(i)| self.misplaced(i, bound, to, &format!("the {name} header")))?;
            fields.push((name.clone(), v.unwrap_or_else(|| value.clone())));
        }
        line.extend(framing::fields_except(&fields, &[]));
        if scrubbing {
            line.extend_from_slice(b"Accept-Encoding: identity\r\n");
        }
        Ok((line, (0..used.len()).filter(|i| used[*i] > 0).collect()))
    }

    /// The server side of an interception of `host`.
    fn server_config(&self, host: &Host) -> Result<Arc<rustls::ServerConfig>, String> {
        self.ca.as_ref().ok_or_else(|| "no run CA (no secret goes over TLS)".to_string())?.server_config(host)
    }
}

/// Counts by row, named; rows with none left out.
pub(crate) fn by_form(f: &ByForm) -> serde_json::Map<String, serde_json::Value> {
    TABLE.iter().zip(f).filter(|(_, n)| **n > 0).map(|(r, n)| (r.name.to_string(), json!(n))).collect()
}

/// The bytes a ClientHello already brought, then the stream.
pub(super) struct Prefixed<S> {
    first: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(super) fn new(first: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed { first, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.first.len() {
            let n = buf.remaining().min(self.first.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.first[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn server_name(host: &Host) -> Result<ServerName<'static>, String> {
    match host {
        Host::Ip(a) => Ok(ServerName::IpAddress((*a).into())),
        Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| format!("'{n}' is not a TLS server name: {e}")),
    }
}

/// How the target is named in a reason: `api.test:443`, `http://api.test:80`.
fn shown_target(host: &Host, port: u16, tls: bool) -> String {
    if tls {
        format!("{host}:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// A connection refused for a placeholder where it may not go.
async fn deny_misplaced(sh: &Shared, rs: &RunSecrets, mut c: Conn, m: Misplaced, after: Option<(u64, u64)>) {
    if let Some(i) = rs.list.iter().position(|s| s.name == m.secret) {
        rs.count(i, |c| c.misdirected += 1);
    }
    c.rec.misdirected = Some(m.secret);
    match after {
        None => c.deny(sh, m.why).await,
        Some((up, down)) => proxy::refused_after(sh, c, up, down, m.why).await,
    }
}

/// A plain request in a run with secrets: substituted and scrubbed for an
/// `http://` binding, only checked for placeholders otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) async fn plain<S>(
    sh: &Shared,
    rs: &RunSecrets,
    mut c: Conn,
    client: &mut S,
    head: &Head,
    body: Body,
    host: &Host,
    port: u16,
    addrs: &[IpAddr],
    path: &str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let bound = rs.bound(host, port, false);
    let to = shown_target(host, port, false);
    let (out, used) = match rs.request_head(head, path, &bound, &to, !bound.is_empty()) {
        Ok(x) => x,
        Err(m) => {
            proxy::answer(client, 403, "Forbidden", &m.why).await;
            return deny_misplaced(sh, rs, c, m, None).await;
        }
    };
    let (mut up, addr) = match proxy::dial(addrs, port).await {
        Ok(x) => x,
        Err(why) => {
            proxy::answer(client, 502, "Bad Gateway", &why).await;
            return c.deny(sh, why).await;
        }
    };
    c.rec.address = Some(addr.to_string());
    c.rec.secrets = rs.names(&bound);
    proxy::allowed(sh, &mut c).await;
    exchange(sh, rs, c, client, &mut up, head, out, used, body, &bound, &to).await
}

/// A CONNECT to a host a secret is bound to: TLS answered with the run's
/// CA, one request substituted, re-originated over verified TLS, scrubbed.
#[allow(clippy::too_many_arguments)]
pub(super) async fn tunnel<S>(
    sh: &Shared,
    rs: &RunSecrets,
    mut c: Conn,
    client: &mut S,
    host: &Host,
    port: u16,
    addrs: &[IpAddr],
    early: Vec<u8>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let bound = rs.bound(host, port, true);
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    let hello = match proxy::client_hello(client, host, early).await {
        Ok(Some(h)) => h,
        Ok(None) => return,
        Err(why) => return c.deny(sh, why).await,
    };
    let (server_cfg, upstream_cfg) = match (rs.server_config(host), rs.upstream.clone()) {
        (Ok(s), Some(u)) => (s, u),
        (Err(e), _) => return c.deny(sh, e).await,
        (_, None) => return c.deny(sh, "no upstream TLS client".into()).await,
    };
    c.rec.secrets = rs.names(&bound);
    // The program's handshake and the real host's go on at once.
    let client_side = async {
        let acceptor = tokio_rustls::TlsAcceptor::from(server_cfg);
        match tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(Prefixed::new(hello, &mut *client))).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(format!(
                "the program's TLS client did not complete a handshake with the run's CA for {host} ({e}): a client with its own trust store, a pinned certificate, or an ALPN other than http/1.1"
            )),
            Err(_) => Err(format!("no TLS handshake within {} s", HEAD_TIMEOUT.as_secs())),
        }
    };
    let upstream_side = async {
        let (tcp, addr) = proxy::dial(addrs, port).await?;
        let name = server_name(host)?;
        let connector = tokio_rustls::TlsConnector::from(upstream_cfg);
        match tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp)).await {
            Ok(Ok(t)) => Ok((t, addr)),
            Ok(Err(e)) => Err(format!("TLS to {host}:{port} ({addr}) failed verification or the handshake: {e}")),
            Err(_) => Err(format!("no TLS handshake from {host}:{port} within {} s", CONNECT_TIMEOUT.as_secs())),
        }
    };
    // A client that refuses the run's CA is refused at once, not after the
    // real host's handshake: a program that does not wait for the answer
    // (and ends) must still find the refusal in its report.
    tokio::pin!(client_side, upstream_side);
    let (cs, us) = tokio::select! {
        cs = &mut client_side => match cs {
            Err(why) => return c.deny(sh, why).await,
            ok => (ok, (&mut upstream_side).await),
        },
        us = &mut upstream_side => ((&mut client_side).await, us),
    };
    let mut tls = match cs {
        Ok(t) => t,
        Err(why) => return c.deny(sh, why).await,
    };
    let (mut up, addr) = match us {
        Ok(x) => x,
        Err(why) => {
            proxy::answer(&mut tls, 502, "Bad Gateway", &why).await;
            return c.deny(sh, why).await;
        }
    };
    c.rec.address = Some(addr.to_string());
    let head = match proxy::read_head(&mut tls).await {
        Ok(h) => h,
        Err((0, _)) => return, // a handshake and nothing more
        Err((code, why)) => {
            proxy::answer(&mut tls, code, "Bad Request", &why).await;
            return c.deny(sh, why).await;
        }
    };
    let checked = inner_request(&head, host, port).and_then(|()| framing::request_body(head.version, &head.headers));
    let body = match checked {
        Ok(b) => b,
        Err(why) => {
            proxy::answer(&mut tls, 400, "Bad Request", &why).await;
            return c.deny(sh, why).await;
        }
    };
    let to = shown_target(host, port, true);
    let (out, used) = match rs.request_head(&head, &head.target, &bound, &to, true) {
        Ok(x) => x,
        Err(m) => {
            proxy::answer(&mut tls, 403, "Forbidden", &m.why).await;
            return deny_misplaced(sh, rs, c, m, None).await;
        }
    };
    proxy::allowed(sh, &mut c).await;
    exchange(sh, rs, c, &mut tls, &mut up, &head, out, used, body, &bound, &to).await;
    let _ = tls.shutdown().await;
}

/// A request inside an intercepted tunnel: origin-form, its Host the
/// tunnel's, no upgrade (HTTP/1.1 is all the interception speaks).
fn inner_request(head: &Head, host: &Host, port: u16) -> Result<(), String> {
    if head.method == "CONNECT" || head.method == "PRI" {
        return Err(format!("{} inside a tunnel to a secret's host (HTTP/1.1 requests only)", head.method));
    }
    let t = &head.target;
    if !t.starts_with('/') || t.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err("a request target that is not a path (origin-form) inside a tunnel".into());
    }
    proxy::check_host_header(head, host, port, 443)
}

/// Send the request on and the response back, the secrets' rules applied.
/// `out`: the request line and fields; `used`: the secrets substituted in them.
#[allow(clippy::too_many_arguments)]
async fn exchange<C, U>(
    sh: &Shared,
    rs: &RunSecrets,
    c: Conn,
    client: &mut C,
    up: &mut U,
    head: &Head,
    mut out: Vec<u8>,
    mut used: Vec<usize>,
    body: Body,
    bound: &[usize],
    to: &str,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send,
    U: AsyncRead + AsyncWrite + Unpin + Send,
{
    let head_len = head.len as u64;
    let expects = head.headers.iter().any(|(n, v)| n == "expect" && v.eq_ignore_ascii_case(b"100-continue"));
    if expects && body != Body::Empty && head.rest.is_empty() {
        let _ = client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
    }
    let into_body = body != Body::Empty && bound.iter().any(|i| rs.list[*i].places.body);
    let mut feed = Feed::new(head.rest.clone(), &mut *client, IDLE_TIMEOUT);
    let sent: Result<(), Result<Misplaced, Stop>> = async {
        if into_body {
            // Read whole: its length changes with the value.
            let n = rs.needles_for(bound, Place::Body);
            let mut pieces = Pieces::new(body);
            let mut all = vec![];
            while let Some(p) = feed.piece(&mut pieces).await.map_err(Err)? {
                all.extend_from_slice(&p);
                if all.len() as u64 > MAX_SUBSTITUTED_BODY {
                    return Err(Err(Stop::Refused(format!(
                        "a body longer than {} MiB to a host a secret may be substituted into the body of",
                        MAX_SUBSTITUTED_BODY >> 20
                    ))));
                }
            }
            let mut counts = vec![0; rs.list.len()];
            let all = match n.replace_all(&all, &mut counts) {
                Ok(Some(b)) => Zeroizing::new(b),
                Ok(None) => Zeroizing::new(all),
                Err(Refused(i)) => return Err(Ok(rs.misplaced(i, bound, to, "the body"))),
            };
            used.extend((0..counts.len()).filter(|i| counts[*i] > 0));
            out.extend_from_slice(framing::framing_field(Body::Length(all.len() as u64)).as_bytes());
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            up.write_all(&out).await.map_err(|_| Err(Stop::Gone))?;
            up.write_all(&all).await.map_err(|_| Err(Stop::Gone))?;
            return Ok(());
        }
        // Streamed in its own framing: a placeholder in it is refused
        // before the piece that holds it leaves.
        out.extend_from_slice(framing::framing_field(body).as_bytes());
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        up.write_all(&out).await.map_err(|_| Err(Stop::Gone))?;
        let mut scan = Scrubber::new(&rs.refuse_all, rs.list.len());
        let mut pieces = Pieces::new(body);
        let chunked = body == Body::Chunked;
        let misplaced = |Refused(i)| Err(Ok(rs.misplaced(i, bound, to, "the body")));
        while let Some(p) = feed.piece(&mut pieces).await.map_err(Err)? {
            let clean = scan.push(&p).or_else(misplaced)?;
            send(up, &clean, chunked).await.map_err(Err)?;
        }
        let tail = scan.finish().or_else(misplaced)?;
        send(up, &tail, chunked).await.map_err(Err)?;
        if chunked {
            framing::end_chunks(up).await.map_err(Err)?;
        }
        Ok(())
    }
    .await;
    let up_bytes = head_len + feed.read();
    drop(feed);
    used.sort();
    used.dedup();
    for i in &used {
        rs.count(*i, |c| c.substituted += 1);
    }
    match sent {
        Ok(()) => {}
        Err(Err(Stop::Gone)) => return proxy::closed(sh, c, up_bytes, 0).await,
        Err(Err(Stop::Refused(why))) => {
            let why = format!("request body: {why}");
            proxy::answer(client, 400, "Bad Request", &why).await;
            return proxy::refused_after(sh, c, up_bytes, 0, why).await;
        }
        Err(Ok(m)) => {
            proxy::answer(client, 403, "Forbidden", &m.why).await;
            return deny_misplaced(sh, rs, c, m, Some((up_bytes, 0))).await;
        }
    }
    let head_request = head.method == "HEAD";
    let mut to_client = proxy::Counting::new(client);
    let down = if bound.is_empty() {
        proxy::relay_response(up, &mut to_client, head_request).await
    } else {
        relay_scrubbed(rs, up, &mut to_client, head_request).await
    };
    let n = to_client.count();
    match down {
        Ok(()) | Err((_, Stop::Gone)) => {
            let _ = client.flush().await;
            proxy::closed(sh, c, up_bytes, n).await
        }
        Err((false, Stop::Refused(why))) => {
            let why = format!("the upstream's response: {why}");
            proxy::answer(client, 502, "Bad Gateway", &why).await;
            proxy::refused_after(sh, c, up_bytes, n, why).await
        }
        Err((true, Stop::Refused(why))) => {
            proxy::refused_after(sh, c, up_bytes, n, format!("the upstream's response, part way: {why}")).await
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8], chunked: bool) -> Result<(), Stop> {
    if chunked {
        framing::write_chunk(w, data).await
    } else {
        w.write_all(data).await.map_err(|_| Stop::Gone)
    }
}

/// A response body's content coding, decoded so that it can be scrubbed.
enum Decoder {
    Identity,
    Gzip(flate2::write::GzDecoder<Vec<u8>>),
    Deflate(flate2::write::ZlibDecoder<Vec<u8>>),
}

impl Decoder {
    /// From the `Content-Encoding` fields: none or identity, or one of
    /// gzip, x-gzip, deflate. Anything else cannot be scrubbed.
    fn of(fields: &[(String, Vec<u8>)]) -> Result<Decoder, String> {
        let codings: Vec<String> = fields
            .iter()
            .filter(|(n, _)| n == "content-encoding")
            .flat_map(|(_, v)| v.split(|b| *b == b','))
            .map(|c| String::from_utf8_lossy(c).trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity")
            .collect();
        match codings.as_slice() {
            [] => Ok(Decoder::Identity),
            [c] if c == "gzip" || c == "x-gzip" => Ok(Decoder::Gzip(flate2::write::GzDecoder::new(vec![]))),
            [c] if c == "deflate" => Ok(Decoder::Deflate(flate2::write::ZlibDecoder::new(vec![]))),
            _ => Err(format!(
                "Content-Encoding '{}', which the proxy cannot decode to scrub a secret from (the request asked for identity)",
                crate::sanitize::inert_line(&codings.join(", "), 60)
            )),
        }
    }

    fn decodes(&self) -> bool {
        !matches!(self, Decoder::Identity)
    }

    fn feed(&mut self, data: &[u8]) -> Result<Vec<u8>, String> {
        use std::io::Write;
        let bad = |e: std::io::Error| format!("a compressed body that does not decode ({e})");
        match self {
            Decoder::Identity => Ok(data.to_vec()),
            Decoder::Gzip(d) => {
                d.write_all(data).map_err(bad)?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Deflate(d) => {
                d.write_all(data).map_err(bad)?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }

    fn finish(&mut self) -> Result<Vec<u8>, String> {
        let bad = |e: std::io::Error| format!("a compressed body cut short ({e})");
        match self {
            Decoder::Identity => Ok(vec![]),
            Decoder::Gzip(d) => {
                d.try_finish().map_err(bad)?;
                Ok(std::mem::take(d.get_mut()))
            }
            Decoder::Deflate(d) => {
                d.try_finish().map_err(bad)?;
                Ok(std::mem::take(d.get_mut()))
            }
        }
    }
}

/// Compressed input fed this much at a time: what one step may inflate to
/// stays small whatever the ratio.
const INFLATE_STEP: usize = 512;

/// How many of a body's first bytes (decoded) are looked at for a packed format.
const SNIFF: usize = 10;

/// A packed format at the start of a body the proxy has decoded: inside it
/// a value is in no spelling the scrubber knows, so the body is refused.
/// (Brotli has no signature: as a Content-Encoding it is refused; as the
/// body itself it is not seen.)
fn packed(b: &[u8]) -> Option<&'static str> {
    const SIGNATURES: &[(&[u8], &str)] = &[
        (b"\x1f\x8b", "gzip"),
        (b"\x78\x01", "zlib"),
        (b"\x78\x9c", "zlib"),
        (b"\x78\xda", "zlib"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\xfd7zXZ\x00", "xz"),
        (b"PK\x03\x04", "zip"),
        (b"7z\xbc\xaf\x27\x1c", "7z"),
        (b"\x04\x22\x4d\x18", "lz4"),
    ];
    if let Some((_, name)) = SIGNATURES.iter().find(|(sig, _)| b.starts_with(sig)) {
        return Some(name);
    }
    // bzip2: `BZh`, the block size, then the block magic (text may start with `BZh`).
    let bz = b.len() >= 10
        && b.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&b[3])
        && b[4..10] == *b"\x31\x41\x59\x26\x53\x59";
    bz.then_some("bzip2")
}

/// A response from a host a secret went to: read strictly, every form of
/// every value replaced by its placeholder in the head and the body (decoded
/// first), written to the program re-chunked. The head waits for the body's
/// first bytes: a body in a packed format is refused before anything of the
/// response is written. Err carries whether the head had already been written.
async fn relay_scrubbed<U, W>(
    rs: &RunSecrets,
    up: &mut U,
    client: &mut W,
    head_request: bool,
) -> Result<(), (bool, Stop)>
where
    U: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut feed = Feed::new(vec![], up, IDLE_TIMEOUT);
    let refused = |why: String| (false, Stop::Refused(why));
    let (code, reason, fields) = proxy::response_head(&mut feed).await?;
    let body = framing::response_body(code, head_request, &fields).map_err(refused)?;
    let mut decoder = if body == Body::Empty { Decoder::Identity } else { Decoder::of(&fields).map_err(refused)? };
    let n = rs.list.len();
    let (mut counts, mut forms) = (vec![0u64; n], vec![[0u64; FORMS]; n]);
    let scrub = |b: &[u8], counts: &mut Vec<u64>, forms: &mut Vec<ByForm>| -> Vec<u8> {
        rs.scrub.replace_all_by_form(b, counts, forms).ok().flatten().unwrap_or_else(|| b.to_vec())
    };
    let reason = String::from_utf8_lossy(&scrub(reason.as_bytes(), &mut counts, &mut forms)).into_owned();
    let mut out = format!("HTTP/1.1 {code} {reason}\r\n").into_bytes();
    let kept: Vec<(String, Vec<u8>)> = fields
        .iter()
        .filter(|(n, _)| !(decoder.decodes() && n == "content-encoding"))
        .map(|(n, v)| {
            let name = String::from_utf8_lossy(&scrub(n.as_bytes(), &mut counts, &mut forms)).into_owned();
            (name, scrub(v, &mut counts, &mut forms))
        })
        .collect();
    out.extend(framing::fields_except(&kept, proxy::DROPPED_DOWN));
    if body != Body::Empty {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    let mut scrubber = Scrubber::new(&rs.scrub, n);
    let result = async {
        if body == Body::Empty {
            return client.write_all(&out).await.map_err(|_| (false, Stop::Gone));
        }
        // The body's first bytes, decoded, until they are judged.
        let mut early: Option<Vec<u8>> = Some(vec![]);
        let mut pieces = Pieces::new(body);
        loop {
            let written = early.is_none();
            let piece = feed.piece(&mut pieces).await.map_err(|e| (written, e))?;
            let Some(p) = piece else { break };
            for step in p.chunks(INFLATE_STEP) {
                let plain = decoder.feed(step).map_err(|why| (early.is_none(), Stop::Refused(why)))?;
                pass(client, &mut scrubber, &mut early, &out, plain, false).await?;
            }
        }
        let plain = decoder.finish().map_err(|why| (early.is_none(), Stop::Refused(why)))?;
        pass(client, &mut scrubber, &mut early, &out, plain, true).await?;
        framing::end_chunks(client).await.map_err(|e| (true, e))
    }
    .await;
    for (c, n) in counts.iter_mut().zip(&scrubber.counts) {
        *c += n;
    }
    for (f, g) in forms.iter_mut().zip(&scrubber.forms) {
        for (a, b) in f.iter_mut().zip(g) {
            *a += b;
        }
    }
    for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        rs.count(i, |c| {
            c.scrubbed += n;
            for (a, b) in c.scrubbed_by.iter_mut().zip(&forms[i]) {
                *a += b;
            }
        });
    }
    result
}

/// One decoded piece of a scrubbed body on its way: held with the body's
/// first bytes until they are judged (then the head goes, or the body is
/// refused), scrubbed, written as a chunk; at the `end`, what the scrubber
/// held back too.
async fn pass<W: AsyncWrite + Unpin>(
    client: &mut W,
    scrubber: &mut Scrubber<'_>,
    early: &mut Option<Vec<u8>>,
    head: &[u8],
    plain: Vec<u8>,
    end: bool,
) -> Result<(), (bool, Stop)> {
    let plain = match early.as_mut() {
        Some(e) => {
            e.extend_from_slice(&plain);
            if e.len() < SNIFF && !end {
                return Ok(());
            }
            if let Some(what) = packed(e) {
                return Err((
                    false,
                    Stop::Refused(format!(
                        "a body in {what} format, which the proxy cannot look inside to scrub a secret from"
                    )),
                ));
            }
            client.write_all(head).await.map_err(|_| (false, Stop::Gone))?;
            early.take().unwrap_or_default()
        }
        None => plain,
    };
    let mut clean = scrubber.push(&plain).unwrap_or_default();
    if end {
        clean.extend(scrubber.finish().unwrap_or_default());
    }
    framing::write_chunk(client, &clean).await.map_err(|e| (true, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::secrets::Declared;

    fn secrets(decls: &[&str]) -> Secrets {
        let env = |_: &str| Some(std::ffi::OsString::from("sk-live-0123456789abcdef"));
        Secrets::new(decls.iter().map(|d| Declared::parse(d).unwrap().resolve(&env).unwrap()).collect()).unwrap()
    }

    fn head(method: &str, target: &str, headers: &[(&str, &str)]) -> Head {
        Head {
            method: method.into(),
            target: target.into(),
            version: 1,
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect(),
            len: 0,
            rest: vec![],
        }
    }

    #[test]
    fn the_head_is_substituted_where_allowed_and_refused_elsewhere() {
        let rs = RunSecrets::new(&secrets(&["K=env:K@api.test", "J=env:J@http://other.test"]), &[]).unwrap();
        let env: std::collections::HashMap<String, String> = rs.env().into_iter().collect();
        let (k, j) = (&env["K"], &env["J"]);
        let api = Host::parse("api.test").unwrap();
        let bound = rs.bound(&api, 443, true);
        assert_eq!(bound, [0]);
        assert!(rs.bound(&api, 443, false).is_empty() && rs.bound(&api, 8443, true).is_empty());
        let h = head(
            "GET",
            "/v1?x=1",
            &[("host", "api.test"), ("authorization", &format!("Bearer {k}")), ("accept-encoding", "br")],
        );
        let (out, used) = rs.request_head(&h, &h.target, &bound, "api.test:443", true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("GET /v1?x=1 HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("authorization: Bearer sk-live-0123456789abcdef\r\n"), "{text}");
        assert!(text.contains("Accept-Encoding: identity\r\n") && !text.contains("br"), "{text}");
        assert_eq!(used, [0]);
        for (h, place) in [
            (head("GET", &format!("/v1?key={k}"), &[]), "the query"),
            (head("GET", &format!("/{k}/x"), &[]), "the URL's path"),
            (head("GET", "/", &[(&k.to_lowercase(), "x")]), "a header name"),
        ] {
            let m = rs.request_head(&h, &h.target, &bound, "api.test:443", true).unwrap_err();
            assert_eq!(m.secret, "K");
            assert!(m.why.contains(place) && !m.why.contains("sk-live"), "{}", m.why);
        }
        // J is bound elsewhere: its placeholder here is misdirected, wherever it is.
        let h = head("GET", "/", &[("x-token", j)]);
        let m = rs.request_head(&h, &h.target, &bound, "api.test:443", true).unwrap_err();
        assert_eq!(m.secret, "J");
        assert!(m.why.contains("not bound") && m.why.contains("http://other.test"), "{}", m.why);
        // Opted in: the query takes it.
        let rs = RunSecrets::new(&secrets(&["K=env:K@api.test"]), &[]).unwrap();
        let mut rs = rs;
        rs.list[0].places.query = true;
        let k = rs.env()[0].1.clone();
        let h = head("GET", &format!("/v1?key={k}&b=2"), &[]);
        let (out, _) = rs.request_head(&h, &h.target, &[0], "api.test:443", true).unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("GET /v1?key=sk-live-0123456789abcdef&b=2 HTTP/1.1"));
    }

    #[test]
    fn only_scrubbable_codings_pass() {
        let f = |v: &str| vec![("content-encoding".to_string(), v.as_bytes().to_vec())];
        assert!(matches!(Decoder::of(&[]), Ok(Decoder::Identity)));
        assert!(matches!(Decoder::of(&f("identity")), Ok(Decoder::Identity)));
        assert!(matches!(Decoder::of(&f("GZIP")), Ok(Decoder::Gzip(_))));
        assert!(matches!(Decoder::of(&f("deflate")), Ok(Decoder::Deflate(_))));
        for bad in ["br", "zstd", "gzip, gzip", "compress", "gzip, br"] {
            assert!(Decoder::of(&f(bad)).is_err(), "{bad}");
        }
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
        e.write_all(&b"echo: sk-live-0123456789abcdef ".repeat(1000)).unwrap();
        let gz = e.finish().unwrap();
        let mut d = Decoder::of(&f("gzip")).unwrap();
        let mut plain = vec![];
        for step in gz.chunks(7) {
            plain.extend(d.feed(step).unwrap());
        }
        plain.extend(d.finish().unwrap());
        assert_eq!(plain.len(), 31_000);
        let mut d = Decoder::of(&f("gzip")).unwrap();
        let _ = d.feed(&gz[..gz.len() / 2]);
        assert!(d.finish().is_err(), "cut short");
    }
}
