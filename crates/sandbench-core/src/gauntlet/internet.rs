//! The gauntlet's own small "internet", planted for a sample that declares a
//! network limit: an allowed host (an HTTP server and a TLS port on one
//! random 127.x.y.z address), a canary host on another (every connection it
//! gets is an escape), and a canary DNS server (every datagram is one). The
//! names reach the egress proxy through the run's hosts map, never DNS. All of
//! it listens on loopback addresses only.
//!
//! The allowed host is a witness too: it keeps the head of every request and
//! every ClientHello it gets, so a request that reached it for another name
//! (an IP literal, a mismatched Host or SNI, a second request riding on an
//! allowed connection, a direct connection that skipped the proxy) is seen
//! even though the host itself is allowed.
//!
//! A bound host (`bound::Bound`, HTTPS beside the allowed host) is what a
//! sample's secret goes to: it echoes and logs, and `secret_escapes` says
//! where the secret's value showed up that it must not.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::egress::Hosts;

pub(crate) const ALLOWED: &str = "allowed.gauntlet.test";
pub(crate) const REBIND: &str = "rebind.gauntlet.test";
pub(crate) const EVIL: &str = "evil.gauntlet.test";

/// Bytes kept per connection, and per host in all.
const KEEP: usize = 16 << 10;
const KEEP_ALL: usize = 256 << 10;
const READ_FOR: Duration = Duration::from_millis(300);

/// What one listener saw: a connection count and, per connection, its first bytes.
#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    firsts: Mutex<Vec<Vec<u8>>>,
}

struct Host {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Accept on `l` until stopped; each connection's first bytes go to `seen`,
/// then `answer` (if any) is written back.
fn serve(l: TcpListener, seen: Arc<Seen>, stop: Arc<AtomicBool>, answer: Option<&'static [u8]>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = l.set_nonblocking(true);
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut c, _)) => {
                    seen.connections.fetch_add(1, Ordering::Relaxed);
                    let _ = c.set_nonblocking(false);
                    let _ = c.set_read_timeout(Some(READ_FOR));
                    let mut got = vec![];
                    let mut buf = [0u8; 4096];
                    // Read the whole head (and whatever rides behind it) for a while.
                    while got.len() < KEEP {
                        match c.read(&mut buf) {
                            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                            _ => break,
                        }
                        if answer.is_some() && got.windows(4).any(|w| w == b"\r\n\r\n") {
                            // Keep reading briefly: a pipelined second request shows here.
                            let _ = c.set_read_timeout(Some(Duration::from_millis(100)));
                        }
                    }
                    if let Some(a) = answer {
                        let _ = c.write_all(a);
                    }
                    if let Ok(mut f) = seen.firsts.lock() {
                        if f.iter().map(Vec::len).sum::<usize>() < KEEP_ALL {
                            f.push(got);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    })
}

/// Random bytes for addresses (a fixed address would collide with a
/// concurrent gauntlet's).
fn random(n: usize) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// Two TCP listeners on two random loopback addresses with the same port
/// (the rebinding name answers both), then another such pair.
fn bind_pairs() -> std::io::Result<(Ipv4Addr, Ipv4Addr, [TcpListener; 4])> {
    for _ in 0..32 {
        let r = random(4)?;
        let a = Ipv4Addr::new(127, 77, r[0], r[1].max(1));
        let c = Ipv4Addr::new(127, 78, r[2], r[3].max(1));
        let Ok(ah) = TcpListener::bind((a, 0)) else { continue };
        let port = ah.local_addr()?.port();
        let Ok(ch) = TcpListener::bind((c, port)) else { continue };
        let Ok(at) = TcpListener::bind((a, 0)) else { continue };
        let tport = at.local_addr()?.port();
        let Ok(ct) = TcpListener::bind((c, tport)) else { continue };
        return Ok((a, c, [ah, ch, at, ct]));
    }
    Err(std::io::Error::other("no free loopback addresses for the gauntlet's internet"))
}

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\nhello from allowed host\n";

/// The planted internet of one cell.
pub(crate) struct Internet {
    pub allowed: Ipv4Addr,
    pub canary: Ipv4Addr,
    pub http_port: u16,
    pub tls_port: u16,
    pub dns: std::net::SocketAddr,
    http: Arc<Seen>,
    tls: Arc<Seen>,
    canary_seen: Arc<Seen>,
    dns_hits: Arc<AtomicU64>,
    pub bound: super::bound::Bound,
    _hosts: Vec<Host>,
}

impl Internet {
    pub(crate) fn plant() -> std::io::Result<Internet> {
        let (a, c, [ah, ch, at, ct]) = bind_pairs()?;
        let (http_port, tls_port) = (ah.local_addr()?.port(), at.local_addr()?.port());
        let stop = Arc::new(AtomicBool::new(false));
        let (http, tls, canary_seen) =
            (Arc::new(Seen::default()), Arc::new(Seen::default()), Arc::new(Seen::default()));
        let mut threads = vec![
            serve(ah, http.clone(), stop.clone(), Some(ANSWER)),
            serve(at, tls.clone(), stop.clone(), None),
            serve(ch, canary_seen.clone(), stop.clone(), None),
            serve(ct, canary_seen.clone(), stop.clone(), None),
        ];
        let d = random(2)?;
        let udp = UdpSocket::bind((Ipv4Addr::new(127, 79, d[0], d[1].max(1)), 0))?;
        let dns = udp.local_addr()?;
        let bound = super::bound::Bound::plant(a)?;
        udp.set_read_timeout(Some(Duration::from_millis(20)))?;
        let dns_hits = Arc::new(AtomicU64::new(0));
        let (h, s) = (dns_hits.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                if udp.recv_from(&mut buf).is_ok() {
                    h.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
        Ok(Internet {
            allowed: a,
            canary: c,
            http_port,
            tls_port,
            dns,
            http,
            tls,
            canary_seen,
            dns_hits,
            bound,
            _hosts: vec![Host { stop, threads }],
        })
    }

    /// `{http_port}`, `{tls_port}` and `{bound_port}` of a sample's
    /// `network:` and `secret:` lines.
    pub(crate) fn fill(&self, template: &str) -> String {
        template
            .replace("{http_port}", &self.http_port.to_string())
            .replace("{tls_port}", &self.tls_port.to_string())
            .replace("{bound_port}", &self.bound.port.to_string())
    }

    /// The names the run's proxy resolves (the rebinding name answers the
    /// allowed address first, the canary's next).
    pub(crate) fn hosts(&self) -> Hosts {
        let mut h = Hosts::default();
        h.insert(ALLOWED, vec![IpAddr::V4(self.allowed)]);
        h.insert(REBIND, vec![IpAddr::V4(self.allowed), IpAddr::V4(self.canary)]);
        h.insert(EVIL, vec![IpAddr::V4(self.canary)]);
        h.insert(super::bound::BOUND, vec![IpAddr::V4(self.allowed)]);
        h
    }

    /// What the samples read to find their targets.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("GAUNTLET_HTTP".into(), format!("{ALLOWED}:{}", self.http_port)),
            ("GAUNTLET_TLS".into(), format!("{ALLOWED}:{}", self.tls_port)),
            ("GAUNTLET_REBIND".into(), format!("{REBIND}:{}", self.http_port)),
            ("GAUNTLET_EVIL".into(), EVIL.into()),
            ("GAUNTLET_ALLOWED_IP".into(), self.allowed.to_string()),
            ("GAUNTLET_CANARY_IP".into(), self.canary.to_string()),
            ("GAUNTLET_HTTP_PORT".into(), self.http_port.to_string()),
            ("GAUNTLET_TLS_PORT".into(), self.tls_port.to_string()),
            ("GAUNTLET_DNS".into(), self.dns.to_string()),
            ("GAUNTLET_BOUND".into(), format!("{}:{}", super::bound::BOUND, self.bound.port)),
        ]
    }

    /// What got out. `lookups`: the names the run's proxy asked DNS for;
    /// `marker`: the run's marker (a sample puts it in the names it tries).
    pub(crate) fn escapes(&self, lookups: &[String], marker: &str) -> Vec<String> {
        // Let a connection in flight land.
        std::thread::sleep(Duration::from_millis(30));
        let mut out = vec![];
        let n = self.canary_seen.connections.load(Ordering::Relaxed);
        if n > 0 {
            out.push(format!("{n} connection(s) reached the gauntlet's canary host {}", self.canary));
        }
        let d = self.dns_hits.load(Ordering::Relaxed);
        if d > 0 {
            out.push(format!("{d} DNS datagram(s) reached the gauntlet's canary resolver {}", self.dns));
        }
        if let Some(l) = lookups.iter().find(|l| l.contains(marker) || l.ends_with(".gauntlet.test")) {
            out.push(format!("the egress proxy asked DNS for a name the program chose ({l})"));
        }
        let good = [format!("{ALLOWED}:{}", self.http_port), format!("{REBIND}:{}", self.http_port)];
        for head in self.http.firsts.lock().map(|f| f.clone()).unwrap_or_default() {
            let text = String::from_utf8_lossy(&head);
            let (requests, framing) = requests_in(&head);
            if let Some(why) = framing {
                out.push(format!("framing a strict server refuses reached the allowed host: {why}"));
            }
            let hosts: Vec<String> = text
                .lines()
                .filter_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("host")).map(|(_, v)| v))
                .map(|v| crate::sanitize::inert_line(v.trim(), 80))
                .collect();
            if let Some(h) = hosts.iter().find(|h| !good.iter().any(|g| g.eq_ignore_ascii_case(h))) {
                out.push(format!("the allowed host received a request for {h}"));
            } else if hosts.is_empty() && !head.is_empty() {
                out.push("the allowed host received a request naming no host".into());
            }
            if requests > 1 {
                out.push(format!("{requests} requests reached the allowed host over one connection"));
            }
        }
        for hello in self.tls.firsts.lock().map(|f| f.clone()).unwrap_or_default() {
            match sni(&hello) {
                Some(Some(name)) if name == ALLOWED => {}
                Some(Some(name)) => out.push(format!(
                    "a TLS ClientHello for {} reached the allowed host",
                    crate::sanitize::inert_line(&name, 80)
                )),
                Some(None) => out.push("a TLS ClientHello naming no host reached the allowed host".into()),
                None if hello.is_empty() => {}
                None => out.push("bytes that are not a TLS ClientHello reached the allowed host's TLS port".into()),
            }
        }
        out
    }
}

impl Internet {
    /// Where a secret's `value` (bound to the bound host, headers only) got
    /// that it must not: any byte any other host or the canary resolver
    /// received, a name the proxy looked up, and a place in a request to the
    /// bound host other than its header values. Notes say what the bound
    /// host did get, for the verdict.
    pub(crate) fn secret_escapes(&self, value: &str, lookups: &[String]) -> (Vec<String>, Vec<String>) {
        let v = value.as_bytes();
        let holds = |b: &[u8]| b.windows(v.len()).any(|w| w == v);
        let mut out = vec![];
        for (what, seen) in [
            ("the allowed (unbound) host's HTTP port", &self.http),
            ("the allowed (unbound) host's TLS port", &self.tls),
            ("the canary host", &self.canary_seen),
        ] {
            let n = seen.firsts.lock().map(|f| f.iter().filter(|b| holds(b)).count()).unwrap_or(0);
            if n > 0 {
                out.push(format!("the secret's value reached {what} ({n} connection(s))"));
            }
        }
        if lookups.iter().any(|l| l.contains(value)) {
            out.push("the egress proxy asked DNS for a name holding the secret's value".into());
        }
        let requests = self.bound.requests();
        let mut carried = 0;
        for r in &requests {
            let head_end = r.windows(4).position(|w| w == b"\r\n\r\n").map_or(r.len(), |i| i + 4);
            let line_end = r.iter().position(|b| *b == b'\n').unwrap_or(r.len()).min(head_end);
            if holds(&r[..line_end]) {
                out.push("the secret's value went to its host in a request line (headers only were allowed)".into());
            }
            if holds(&r[head_end..]) {
                out.push("the secret's value went to its host in a request body (headers only were allowed)".into());
            }
            let head = String::from_utf8_lossy(&r[line_end..head_end]);
            if head.lines().any(|l| l.split_once(':').is_some_and(|(k, _)| k.contains(value))) {
                out.push("the secret's value went to its host in a header name".into());
            }
            carried += usize::from(holds(&r[..head_end]));
        }
        out.dedup();
        let notes = vec![format!(
            "the bound host got {} request(s), {carried} carrying the secret's value in a header",
            requests.len()
        )];
        (out, notes)
    }
}

/// One connection's bytes read the way a strict HTTP/1.1 server reads them
/// (the proxy's own rules, `egress::framing`): how many requests they hold,
/// and the first framing such a server refuses — which a lenient one might
/// read another way, so it counts as an escape of its own. A body, however
/// request-like its bytes, is a body.
fn requests_in(b: &[u8]) -> (usize, Option<String>) {
    use crate::egress::framing::{self, Body};
    let crlf = |r: &[u8]| r.windows(2).position(|w| w == b"\r\n");
    let mut rest = b;
    let mut n = 0;
    while !rest.is_empty() {
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) else {
            // Cut short by what the witness keeps, unless it never can end.
            if rest.windows(2).any(|w| w == b"\n\n") {
                return (n + 1, Some("a head ended by bare LFs".into()));
            }
            return (n, None);
        };
        n += 1;
        let head = &rest[..end];
        rest = &rest[end..];
        if let Err(e) = framing::check_head(head, 64) {
            return (n, Some(e));
        }
        let mut hs = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut hs);
        if !matches!(req.parse(head), Ok(httparse::Status::Complete(_))) {
            return (n, Some("an unreadable request head".into()));
        }
        let fields: Vec<(String, Vec<u8>)> =
            req.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
        match framing::request_body(req.version.unwrap_or(1), &fields) {
            Err(e) => return (n, Some(e)),
            Ok(Body::Empty | Body::Close) => {}
            Ok(Body::Length(l)) => rest = &rest[usize::try_from(l).unwrap_or(usize::MAX).min(rest.len())..],
            Ok(Body::Chunked) => loop {
                let Some(i) = crlf(rest) else {
                    rest = &[];
                    break;
                };
                let size = match framing::chunk_size(&rest[..i]) {
                    Ok(s) => s,
                    Err(e) => return (n, Some(e)),
                };
                rest = &rest[i + 2..];
                if size == 0 {
                    // Trailer lines up to the empty one.
                    while let Some(i) = crlf(rest) {
                        let empty = i == 0;
                        rest = &rest[i + 2..];
                        if empty {
                            break;
                        }
                    }
                    break;
                }
                rest = &rest[usize::try_from(size).unwrap_or(usize::MAX).saturating_add(2).min(rest.len())..];
            },
        }
    }
    (n, None)
}

/// The SNI of a ClientHello: None when `b` is not one, Some(None) when it names no host.
fn sni(b: &[u8]) -> Option<Option<String>> {
    let mut acc = rustls::server::Acceptor::default();
    let mut rd: &[u8] = b;
    while !rd.is_empty() {
        if acc.read_tls(&mut rd).ok()? == 0 {
            break;
        }
    }
    let a = acc.accept().ok()??;
    Some(a.client_hello().server_name().map(|s| s.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    #[test]
    fn the_witnesses_see_what_they_must() {
        let net = Internet::plant().unwrap();
        assert!(net.allowed.is_loopback() && net.canary.is_loopback() && net.dns.ip().is_loopback());
        // An honest request, through the name and port the allow list has.
        let mut c = TcpStream::connect((net.allowed, net.http_port)).unwrap();
        c.write_all(format!("GET / HTTP/1.1\r\nHost: {ALLOWED}:{}\r\n\r\n", net.http_port).as_bytes()).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.ends_with("hello from allowed host\n"));
        assert!(net.escapes(&[], "m").is_empty(), "{:?}", net.escapes(&[], "m"));
        // Another name behind the allowed address, two requests on one
        // connection, the canary host, the canary resolver, a chosen name resolved.
        let mut c = TcpStream::connect((net.allowed, net.http_port)).unwrap();
        c.write_all(format!("GET / HTTP/1.1\r\nHost: {EVIL}\r\n\r\nGET / HTTP/1.1\r\nHost: {EVIL}\r\n\r\n").as_bytes())
            .unwrap();
        let _ = c.read_to_string(&mut answer);
        drop(TcpStream::connect((net.canary, net.http_port)).unwrap());
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"q", net.dns).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // A sign in a Content-Length, and a body that only looks like a request.
        let mut c = TcpStream::connect((net.allowed, net.http_port)).unwrap();
        let fake = "GET /x HTTP/1.1\r\n\r\n";
        c.write_all(
            format!(
                "POST / HTTP/1.1\r\nHost: {ALLOWED}:{}\r\nContent-Length: +{}\r\n\r\n{fake}",
                net.http_port,
                fake.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let _ = c.read_to_string(&mut answer);
        let all = net.escapes(&["x-m-y.exfil.test".into()], "m-y").join("\n");
        for want in [
            "request for evil.gauntlet.test",
            "2 requests",
            "canary host",
            "canary resolver",
            "asked DNS",
            "not a decimal",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
        assert_eq!(
            net.fill("allow=a:{http_port},b:{tls_port}"),
            format!("allow=a:{},b:{}", net.http_port, net.tls_port)
        );
    }
}
