//! The proxy against a small loopback "internet": plain HTTP and TLS servers
//! on 127.0.0.x (a test CA made here), names mapped to them through the
//! resolver's hosts map, clients speaking through an in-memory stream as a
//! tier's transport would bring them.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::event::{EventKind, RunEvent};

/// A server that counts connections and keeps what each sent.
struct Server {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<u8>>>,
}

/// Bind the first free 127.0.0.x (x from `from`) on an ephemeral port.
async fn bind(from: u8) -> TcpListener {
    for x in from..250 {
        if let Ok(l) = TcpListener::bind((IpAddr::from([127, 0, 0, x]), 0)).await {
            return l;
        }
    }
    panic!("no loopback address free")
}

async fn http_server(from: u8) -> Server {
    let l = bind(from).await;
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(vec![]));
    let (a, s) = (accepted.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = vec![];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf).await {
                        Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                // Whatever else arrives before the answer is kept too (a pipelined request).
                if let Ok(Ok(n)) = tokio::time::timeout(std::time::Duration::from_millis(100), c.read(&mut buf)).await {
                    got.extend_from_slice(&buf[..n]);
                }
                s.lock().unwrap().extend_from_slice(&got);
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
            });
        }
    });
    Server { addr, accepted, seen }
}

struct Ca {
    ca: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn ca() -> Ca {
    let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    Ca { ca: p.self_signed(&key).unwrap(), key }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS acceptor with a leaf for `name` signed by `ca`.
fn acceptor(name: &str, ca: &Ca) -> tokio_rustls::TlsAcceptor {
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().signed_by(&leaf_key, &ca.ca, &ca.key).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

async fn tls_server(from: u8, name: &str, ca: &Ca) -> Server {
    let acceptor = acceptor(name, ca);
    let l = bind(from).await;
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut t) = acceptor.accept(c).await {
                    let mut b = [0u8; 64];
                    let _ = t.read(&mut b).await;
                    let _ = t.write_all(b"tls hello").await;
                    let _ = t.shutdown().await;
                }
            });
        }
    });
    Server { addr, accepted, seen: Default::default() }
}

fn tls_client(ca: &Ca) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.ca.der().clone()).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

struct Run {
    eg: Egress,
    events: mpsc::Receiver<RunEvent>,
}

fn run(network: &str, hosts: &[(&str, IpAddr)]) -> Run {
    let (tx, events) = mpsc::channel(1024);
    let ctx = RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() };
    let mut h = Hosts::default();
    for (n, a) in hosts {
        h.insert(n, vec![*a]);
    }
    Run { eg: Egress::for_test(network, h, &ctx), events }
}

impl Run {
    fn client(&self) -> DuplexStream {
        let (a, b) = tokio::io::duplex(64 << 10);
        self.eg.server().serve(a);
        b
    }

    async fn finish(self) -> (serde_json::Value, Vec<NetRecord>, Vec<String>) {
        let Run { eg, mut events } = self;
        let summary = eg.finish().await;
        let mut recs: Vec<NetRecord> = vec![];
        let mut violations = vec![];
        while let Ok(ev) = events.try_recv() {
            match ev.kind {
                EventKind::Network(r) => match recs.iter().position(|x| x.id == r.id) {
                    Some(i) => recs[i] = r,
                    None => recs.push(r),
                },
                EventKind::Violation(v) => violations.push(v.detail),
                _ => {}
            }
        }
        (summary, recs, violations)
    }
}

async fn exchange(c: &mut DuplexStream, req: &[u8]) -> String {
    c.write_all(req).await.unwrap();
    let mut out = vec![];
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), c.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn an_allowed_plain_request_goes_through_once_and_is_recorded() {
    let srv = http_server(20).await;
    let r = run(&format!("allow=pypi.test:{}", srv.addr.port()), &[("pypi.test", srv.addr.ip())]);
    let p = srv.addr.port();
    let mut c = r.client();
    // A second request pipelined behind the first must never reach anyone.
    let req = format!(
        "GET http://pypi.test:{p}/simple/ HTTP/1.1\r\nHost: pypi.test:{p}\r\nProxy-Connection: keep-alive\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    );
    let answer = exchange(&mut c, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("hello"), "{answer}");
    let seen = String::from_utf8_lossy(&srv.seen.lock().unwrap()).into_owned();
    assert!(seen.starts_with("GET /simple/ HTTP/1.1\r\n"), "origin-form upstream: {seen}");
    assert!(seen.contains("Connection: close") && !seen.to_ascii_lowercase().contains("proxy-connection"), "{seen}");
    assert!(!seen.contains("evil"), "the pipelined request got through: {seen}");
    assert_eq!(srv.accepted.load(Ordering::SeqCst), 1);
    let (summary, recs, violations) = r.finish().await;
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = &recs[0];
    assert_eq!((rec.decision, rec.open, rec.method.as_str(), rec.port), (Decision::Allowed, false, "GET", p));
    assert_eq!(rec.address.as_deref(), Some(srv.addr.ip().to_string().as_str()));
    assert!(rec.bytes_up > 0 && rec.bytes_down > 0, "{rec:?}");
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!((summary["allowed"].as_u64(), summary["denied"].as_u64()), (Some(1), Some(0)));
}

#[tokio::test]
async fn tls_passes_through_when_the_sni_names_the_connect_host() {
    let ca = ca();
    let srv = tls_server(30, "pypi.test", &ca).await;
    let p = srv.addr.port();
    let r = run(&format!("allow=pypi.test:{p}"), &[("pypi.test", srv.addr.ip())]);
    let mut c = r.client();
    c.write_all(format!("CONNECT pypi.test:{p} HTTP/1.1\r\nHost: pypi.test:{p}\r\n\r\n").as_bytes()).await.unwrap();
    let mut head = [0u8; 39];
    c.read_exact(&mut head).await.unwrap();
    assert_eq!(&head[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
    let name = rustls::pki_types::ServerName::try_from("pypi.test").unwrap();
    let mut t = tls_client(&ca).connect(name, c).await.expect("a real TLS handshake through the tunnel");
    t.write_all(b"hi").await.unwrap();
    let mut got = vec![];
    let _ = t.read_to_end(&mut got).await;
    assert_eq!(got, b"tls hello");

    // The same tunnel opened with another name in its ClientHello: refused
    // before anything reaches the server.
    let mut c = r.client();
    c.write_all(format!("CONNECT pypi.test:{p} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    c.read_exact(&mut head).await.unwrap();
    let other = rustls::pki_types::ServerName::try_from("evil.test").unwrap();
    assert!(tls_client(&ca).connect(other, c).await.is_err());
    // And a tunnel that does not speak TLS at all.
    let mut c = r.client();
    let answer = exchange(
        &mut c,
        format!("CONNECT pypi.test:{p} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(answer, "HTTP/1.1 200 Connection established\r\n\r\n");
    assert_eq!(srv.accepted.load(Ordering::SeqCst), 1, "only the honest tunnel reached the server");
    let (_, recs, violations) = r.finish().await;
    let denied: Vec<&NetRecord> = recs.iter().filter(|r| r.decision == Decision::Denied).collect();
    assert_eq!(denied.len(), 2, "{recs:?}");
    assert!(denied[0].detail.contains("SNI 'evil.test' does not match"), "{:?}", denied[0]);
    assert!(denied[1].detail.contains("not start with a TLS ClientHello"), "{:?}", denied[1]);
    assert!(violations.first().is_some_and(|v| v.starts_with("egress refused: CONNECT pypi.test:")), "{violations:?}");
}

#[tokio::test]
async fn names_hosts_and_addresses_outside_the_list_are_refused() {
    let srv = http_server(40).await;
    let p = srv.addr.port();
    let ip = srv.addr.ip();
    let r = run(&format!("allow=pypi.test:{p},localhost:{p}"), &[("pypi.test", ip)]);
    let cases = [
        // Not in the list (and so never resolved).
        "CONNECT s3cr3t.exfil.test:443 HTTP/1.1\r\n\r\n".to_string(),
        // The allowed name's address, as a literal, and its IPv4-mapped IPv6 form.
        format!("GET http://{ip}:{p}/ HTTP/1.1\r\nHost: {ip}:{p}\r\n\r\n"),
        format!("GET http://[::ffff:{ip}]:{p}/ HTTP/1.1\r\nHost: [::ffff:{ip}]:{p}\r\n\r\n"),
        // A Host header naming another site behind the allowed address.
        format!("GET http://pypi.test:{p}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
        // Allowed by name, but DNS (here /etc/hosts) answers loopback.
        format!("GET http://localhost:{p}/ HTTP/1.1\r\nHost: localhost:{p}\r\n\r\n"),
        // Origin-form: not a proxy request.
        format!("GET / HTTP/1.1\r\nHost: pypi.test:{p}\r\n\r\n"),
        format!("GET http://pypi.test:{p}@evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
    ];
    for req in &cases {
        let mut c = r.client();
        let answer = exchange(&mut c, req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 4") || answer.starts_with("HTTP/1.1 5"), "{req}: {answer}");
        assert!(answer.contains("sandbench egress proxy:"), "{answer}");
    }
    let mut c = r.client();
    let huge = format!("GET http://pypi.test:{p}/ HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(proxy::MAX_HEAD));
    assert!(exchange(&mut c, huge.as_bytes()).await.starts_with("HTTP/1.1 431"));
    assert_eq!(srv.accepted.load(Ordering::SeqCst), 0, "nothing reached the server");
    let (summary, recs, _) = r.finish().await;
    assert_eq!(recs.len(), cases.len() + 1);
    assert!(recs.iter().all(|r| r.decision == Decision::Denied), "{recs:?}");
    let why = |i: usize| recs[i].detail.clone();
    assert!(why(0).contains("not in the allow list"), "{}", why(0));
    assert!(why(1).contains("not in the allow list") && why(2).contains("not in the allow list"));
    assert!(why(3).contains("Host header 'evil.test' does not match"), "{}", why(3));
    assert!(why(4).contains("a loopback address"), "{}", why(4));
    // Only an allowed name was ever looked up: the secret-bearing one never.
    assert_eq!(summary["dns_lookups"], serde_json::json!(["localhost"]));
}

#[tokio::test]
async fn a_name_keeps_its_first_answer_and_floods_are_bounded() {
    let good = http_server(50).await;
    let p = good.addr.port();
    // A canary on another address, same port: the name's second answer.
    let canary = TcpListener::bind((IpAddr::from([127, 0, 0, 66]), p)).await;
    let r = {
        let (tx, events) = mpsc::channel(4096);
        let ctx = RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() };
        let mut h = Hosts::default();
        h.insert("rebind.test", vec![good.addr.ip(), IpAddr::from([127, 0, 0, 66])]);
        Run { eg: Egress::for_test(&format!("allow=rebind.test:{p}"), h, &ctx), events }
    };
    for _ in 0..3 {
        let mut c = r.client();
        let answer = exchange(
            &mut c,
            format!("GET http://rebind.test:{p}/ HTTP/1.1\r\nHost: rebind.test:{p}\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(answer.ends_with("hello"), "{answer}");
    }
    assert_eq!(good.accepted.load(Ordering::SeqCst), 3);
    if let Ok(l) = canary {
        let hit = tokio::time::timeout(std::time::Duration::from_millis(50), l.accept()).await;
        assert!(hit.is_err(), "the rebound address was reached");
    }
    // More clients at once than the proxy keeps open: the rest are refused.
    let mut idle = vec![];
    for _ in 0..proxy::MAX_OPEN {
        idle.push(r.client());
    }
    let mut extra = r.client();
    assert!(exchange(&mut extra, b"").await.starts_with("HTTP/1.1 429"));
    drop(idle);
    let (summary, _, violations) = r.finish().await;
    assert!(summary["denied"].as_u64().unwrap() >= 1);
    assert!(violations.iter().any(|v| v.contains("connections open at once")), "{violations:?}");
}

/// An upstream that keeps exactly the bytes each connection sent it (until
/// the sender closes or goes quiet for 300 ms), then answers `answer`.
async fn witness(from: u8, answer: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let l = bind(from).await;
    let addr = l.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Default::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let (s, answer) = (s.clone(), answer.clone());
            tokio::spawn(async move {
                let mut got = vec![];
                let mut buf = vec![0u8; 8192];
                while let Ok(Ok(n)) =
                    tokio::time::timeout(std::time::Duration::from_millis(300), c.read(&mut buf)).await
                {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.lock().unwrap().push(got);
                let _ = c.write_all(&answer).await;
                let _ = c.shutdown().await;
            });
        }
    });
    (addr, seen)
}

/// Read `bytes` as HTTP/1.1 messages the strict way a well-behaved peer
/// would, framing taken from each head: how many messages, the first one's
/// head and body. A second message is the smuggled one.
fn messages(bytes: &[u8]) -> (usize, String, Vec<u8>) {
    let mut rest = bytes;
    let mut n = 0;
    let (mut first_head, mut first_body) = (String::new(), vec![]);
    while !rest.is_empty() {
        n += 1;
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else { break };
        let head = String::from_utf8_lossy(&rest[..end + 4]).into_owned();
        rest = &rest[end + 4..];
        let lower = head.to_ascii_lowercase();
        let cl =
            lower.lines().find_map(|l| l.strip_prefix("content-length: ")).map(|v| v.trim().parse::<usize>().unwrap());
        let chunked = lower.lines().any(|l| l == "transfer-encoding: chunked");
        let mut body = vec![];
        if chunked {
            loop {
                let Some(i) = rest.windows(2).position(|w| w == b"\r\n") else {
                    rest = &[];
                    break;
                };
                let size = usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap(), 16).unwrap();
                body.extend_from_slice(&rest[..i + 2]);
                rest = &rest[i + 2..];
                let take = (size + 2).min(rest.len());
                body.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if size == 0 {
                    break;
                }
            }
        } else if let Some(cl) = cl {
            let take = cl.min(rest.len());
            body.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        } else if head.starts_with("HTTP/") {
            body = rest.to_vec();
            rest = &[];
        }
        if n == 1 {
            (first_head, first_body) = (head, body);
        }
    }
    (n, first_head, first_body)
}

/// How the proxy must treat one smuggling variant.
#[derive(Debug)]
enum Want {
    /// A 400 to the program, nothing upstream.
    Refused,
    /// Forwarded with this body, in canonical framing; nothing after it.
    Forwarded(&'static str),
    /// Refused part way through its body: the upstream saw no more than a
    /// canonical prefix of one request.
    Cut,
}

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: pypi.test\r\n\r\n";

#[tokio::test]
async fn request_framing_is_canonical_or_refused_and_no_second_request_reaches_the_upstream() {
    let (addr, seen) =
        witness(60, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec()).await;
    let p = addr.port();
    let r = run(&format!("allow=pypi.test:{p}"), &[("pypi.test", addr.ip())]);
    let l = SMUGGLED.len();
    let post = |fields: &str, payload: &str| {
        format!("POST http://pypi.test:{p}/upload HTTP/1.1\r\nHost: pypi.test:{p}\r\n{fields}\r\n\r\n{payload}")
    };
    let s = SMUGGLED;
    let cases: Vec<(&str, String, Want)> = vec![
        ("CL with a sign", post(&format!("Content-Length: +{l}"), s), Want::Refused),
        ("CL in hex", post(&format!("Content-Length: 0x{l:x}"), s), Want::Refused),
        ("CL with inner space", post("Content-Length: 4 9", s), Want::Refused),
        ("CL too large", post("Content-Length: 18446744073709551616", s), Want::Refused),
        ("differing CLs", post(&format!("Content-Length: 0\r\nContent-Length: {l}"), s), Want::Refused),
        ("CL.TE", post("Content-Length: 5\r\nTransfer-Encoding: chunked", &format!("0\r\n\r\n{s}")), Want::Refused),
        ("TE.CL", post("Transfer-Encoding: chunked\r\nContent-Length: 3", "8\r\nSMUGGLED\r\n0\r\n\r\n"), Want::Refused),
        ("TE.TE, two fields", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: x", "0\r\n\r\n"), Want::Refused),
        ("TE xchunked", post("Transfer-Encoding: xchunked", s), Want::Refused),
        ("TE, space before the colon", post("Transfer-Encoding : chunked", "0\r\n\r\n"), Want::Refused),
        ("TE with a vertical tab", post("Transfer-Encoding: \x0bchunked", "0\r\n\r\n"), Want::Refused),
        ("TE list", post("Transfer-Encoding: chunked, identity", "0\r\n\r\n"), Want::Refused),
        ("TE folded", post("Transfer-Encoding:\r\n chunked", "0\r\n\r\n"), Want::Refused),
        ("CL behind a bare LF", post("Content-Length: 0\nTransfer-Encoding: chunked", "0\r\n\r\n"), Want::Refused),
        ("a bare CR", post("X: a\rTransfer-Encoding: chunked", "0\r\n\r\n"), Want::Refused),
        ("NUL in a value", post("X: a\0b", ""), Want::Refused),
        (
            "LF-only head",
            format!("POST http://pypi.test:{p}/ HTTP/1.1\nHost: pypi.test:{p}\nContent-Length: {l}\n\n{s}"),
            Want::Refused,
        ),
        (
            "TE in HTTP/1.0",
            format!("POST http://pypi.test:{p}/ HTTP/1.0\r\nHost: pypi.test:{p}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"),
            Want::Refused,
        ),
        ("CL with OWS", post(&format!("Content-Length:  {l} "), s), Want::Forwarded(SMUGGLED)),
        ("identical CLs", post("Content-Length: 5\r\nContent-Length: 5", &format!("hello{s}")), Want::Forwarded("hello")),
        ("a CL list", post("Content-Length: 5, 5", &format!("hello{s}")), Want::Forwarded("hello")),
        (
            "TE in odd case",
            post("Transfer-encoding: cHuNkEd", &format!("5\r\nhello\r\n0\r\n\r\n{s}")),
            Want::Forwarded("5\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "chunk extensions",
            post("Transfer-Encoding: chunked", &format!("5;a=\"b\"\r\nhello\r\n0;c\r\n\r\n{s}")),
            Want::Forwarded("5\r\nhello\r\n0\r\n\r\n"),
        ),
        (
            "trailers",
            post("Transfer-Encoding: chunked", &format!("0\r\nX-Trailer: {s}\r\n\r\n{s}")),
            Want::Forwarded("0\r\n\r\n"),
        ),
        ("chunk size overflow", post("Transfer-Encoding: chunked", &format!("10000000000000005\r\nhello\r\n0\r\n\r\n{s}")), Want::Cut),
        ("LF-only chunks", post("Transfer-Encoding: chunked", &format!("5\nhello\n0\n\n{s}")), Want::Cut),
        ("chunk longer than its size", post("Transfer-Encoding: chunked", &format!("1\r\nhello\r\n0\r\n\r\n{s}")), Want::Cut),
    ];
    for (name, req, want) in &cases {
        let before = seen.lock().unwrap().len();
        let mut c = r.client();
        let answer = exchange(&mut c, req.as_bytes()).await;
        // Let the witness note what it got.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let got: Vec<Vec<u8>> = seen.lock().unwrap()[before..].to_vec();
        let all: Vec<u8> = got.concat();
        let (n, head, body) = messages(&all);
        let shown = String::from_utf8_lossy(&all);
        assert!(n <= 1, "{name}: the upstream saw {n} requests:\n{shown}");
        assert!(
            !shown.contains("/smuggled") || matches!(want, Want::Forwarded(b) if b.contains("/smuggled")),
            "{name}: {shown}"
        );
        match want {
            Want::Refused => {
                assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer}");
                assert!(all.is_empty(), "{name}: the upstream saw {shown}");
            }
            Want::Forwarded(b) => {
                assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{name}: {answer}");
                assert_eq!(String::from_utf8_lossy(&body), *b, "{name}: {shown}");
                let lower = head.to_ascii_lowercase();
                let framing =
                    lower.lines().filter(|l| l.starts_with("content-length:") || l.starts_with("transfer-encoding:"));
                let framing: Vec<&str> = framing.collect();
                assert_eq!(framing.len(), 1, "{name}: one framing field, canonical: {head}");
                assert!(
                    framing[0] == "transfer-encoding: chunked" || framing[0] == format!("content-length: {}", b.len()),
                    "{name}: {head}"
                );
            }
            Want::Cut => {
                assert!(answer.starts_with("HTTP/1.1 400"), "{name}: {answer}");
            }
        }
    }
    let (_, recs, violations) = r.finish().await;
    let refused = cases.iter().filter(|(_, _, w)| !matches!(w, Want::Forwarded(_))).count();
    assert_eq!(recs.iter().filter(|r| r.decision == Decision::Denied).count(), refused, "{recs:#?}");
    assert!(violations.iter().any(|v| v.contains("Content-Length") && v.contains("decimal")), "{violations:?}");
}

#[tokio::test]
async fn response_framing_is_canonical_or_refused_and_no_second_response_reaches_the_program() {
    let cases: Vec<(&str, &[u8], Option<&str>)> = vec![
        ("CL with a sign", b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", None),
        ("CL and TE", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", None),
        ("TE gzip, chunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", None),
        ("LF-only head", b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello", None),
        ("folded field", b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 5\r\n\r\nhello", None),
        ("NUL in a value", b"HTTP/1.1 200 OK\r\nX: \0\r\nContent-Length: 5\r\n\r\nhello", None),
        (
            "a second response after the body",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil",
            Some("hello"),
        ),
        (
            "chunk extensions and a second response",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nHTTP/1.1 200 OK\r\n\r\nevil",
            Some("5\r\nhello\r\n0\r\n\r\n"),
        ),
        ("until close", b"HTTP/1.1 200 OK\r\n\r\nhello until close", Some("hello until close")),
        ("an interim response first", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", Some("hello")),
    ];
    let mut n_refused = 0;
    for (i, (name, answer, want)) in cases.iter().enumerate() {
        let (addr, _) = witness(70 + i as u8, answer.to_vec()).await;
        let p = addr.port();
        let r = run(&format!("allow=pypi.test:{p}"), &[("pypi.test", addr.ip())]);
        let mut c = r.client();
        let got =
            exchange(&mut c, format!("GET http://pypi.test:{p}/ HTTP/1.1\r\nHost: pypi.test:{p}\r\n\r\n").as_bytes())
                .await;
        let (n, head, body) = messages(got.as_bytes());
        match want {
            None => {
                n_refused += 1;
                assert!(got.starts_with("HTTP/1.1 502"), "{name}: {got}");
                assert!(got.contains("sandbench egress proxy:"), "{name}: {got}");
            }
            Some(b) => {
                assert_eq!(n, 1, "{name}: the program saw {n} responses:\n{got}");
                assert!(head.starts_with("HTTP/1.1 200 "), "{name}: {got}");
                assert_eq!(String::from_utf8_lossy(&body), *b, "{name}: {got}");
                assert!(!got.contains("evil"), "{name}: {got}");
            }
        }
        let (_, recs, violations) = r.finish().await;
        if want.is_none() {
            assert!(
                recs.iter().any(|r| r.decision == Decision::Denied && r.detail.contains("response")),
                "{name}: {recs:?}"
            );
            assert!(!violations.is_empty(), "{name}");
        }
    }
    assert_eq!(n_refused, 6);
}

/// A TLS server for `name` that reads one request head and answers with
/// what `reply` makes of it (`None`: closes without an answer); keeps every
/// head it got.
async fn tls_echo(from: u8, name: &str, ca: &Ca, reply: fn(&[u8]) -> Vec<u8>) -> Server {
    let acceptor = acceptor(name, ca);
    let l = bind(from).await;
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<u8>>> = Default::default();
    let (a, s) = (accepted.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let (acceptor, s) = (acceptor.clone(), s.clone());
            tokio::spawn(async move {
                if let Ok(mut t) = acceptor.accept(c).await {
                    let got = read_request_head(&mut t).await;
                    s.lock().unwrap().extend_from_slice(&got);
                    let _ = t.write_all(&reply(&got)).await;
                    let _ = t.shutdown().await;
                }
            });
        }
    });
    Server { addr, accepted, seen }
}

/// A plain HTTP server answering one request head with `reply`.
async fn http_echo(from: u8, reply: fn(&[u8]) -> Vec<u8>) -> Server {
    let l = bind(from).await;
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<u8>>> = Default::default();
    let (a, s) = (accepted.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let got = read_request_head(&mut c).await;
                s.lock().unwrap().extend_from_slice(&got);
                let _ = c.write_all(&reply(&got)).await;
                let _ = c.shutdown().await;
            });
        }
    });
    Server { addr, accepted, seen }
}

async fn read_request_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut got = vec![];
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") && got.len() < 65536 {
        match tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

/// The test secret's value: reserved characters and a space, so that every
/// percent-encoder writes it differently.
const SECRET: &str = "sk-live Zq8v/3Tz+P0a=W7~nY!4kR";

/// A run whose secret `K` is bound to `api.test` (TLS, the test CA trusted
/// upstream) and to `http://plain.test` (in clear).
fn secret_run(ca: &Ca, tls: SocketAddr, plain: SocketAddr) -> Run {
    let (tx, events) = mpsc::channel(1024);
    let ctx = RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() };
    let mut spec = crate::spec::RunSpec::new(crate::spec::Language::Sh, "");
    let (tp, pp) = (tls.port(), plain.port());
    spec.limits.network = format!("allow=api.test:{tp},plain.test:{pp}").parse().unwrap();
    spec.hosts.insert("api.test", vec![tls.ip()]);
    spec.hosts.insert("plain.test", vec![plain.ip()]);
    let d = secrets::Declared::parse(&format!("K=env:K@api.test:{tp},http://plain.test:{pp}")).unwrap();
    let s = d.resolve(&|_| Some(SECRET.into())).unwrap();
    spec.secrets = secrets::Secrets::new(vec![s]).unwrap();
    let op = Operator { hosts: Hosts::default(), upstream_ca: vec![ca.ca.pem()] };
    Run { eg: Egress::start(&spec, &op, &ctx).unwrap().unwrap(), events }
}

impl Run {
    fn placeholder(&self) -> String {
        let env = self.eg.sandbox_env(&Default::default(), "/bundle");
        env.into_iter().find(|(k, _)| k == "K").unwrap().1
    }

    /// One request inside an intercepted tunnel to `api.test:port`: the
    /// answer, as the program reads it.
    async fn intercepted(&self, port: u16, req: &[u8]) -> String {
        let mut c = self.client();
        c.write_all(format!("CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 39];
        c.read_exact(&mut head).await.unwrap();
        assert_eq!(&head[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
        let mut roots = rustls::RootCertStore::empty();
        for cert in ca::certs_from_pem(self.eg.ca_pem().unwrap().as_bytes()).unwrap() {
            roots.add(cert).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("api.test").unwrap();
        let mut t = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, c).await.expect("the run CA's TLS");
        t.write_all(req).await.unwrap();
        let mut out = vec![];
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), t.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Header names an upstream may read as another name (or as framing): not
/// a token of RFC 9110, or a token with `_`. Each through the plain proxy
/// path and inside an intercepted tunnel: a 400 to the program, a denied
/// record saying why, nothing upstream.
#[tokio::test]
async fn header_names_that_are_not_plain_tokens_are_refused_on_both_paths() {
    let ca = ca();
    let ok = |_: &[u8]| b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec();
    let tls = tls_echo(110, "api.test", &ca, ok).await;
    let plain = http_echo(120, ok).await;
    let r = secret_run(&ca, tls.addr, plain.addr);
    let (tp, pp) = (tls.addr.port(), plain.addr.port());
    let cases: &[(&str, &[u8])] = &[
        ("underscore for a framing name", b"Transfer_Encoding: chunked"),
        ("underscore for a length", b"Content_Length: 5"),
        ("underscore in any name", b"X_Api_Key: 1"),
        ("underscore at the end", b"Host_: evil.test"),
        ("space before the colon", b"transfer-encoding : chunked"),
        ("tab before the colon", b"Transfer-Encoding\t: chunked"),
        ("folded line", b"X-A: 1\r\n  folded"),
        ("folded with a tab", b"X-A: 1\r\n\tTransfer-Encoding: chunked"),
        ("non-ASCII", "Tr\u{e4}nsfer-Encoding: chunked".as_bytes()),
        ("Latin-1 byte", b"Transfer-Encodin\xe7: chunked"),
        ("NUL", b"X-A\x00: 1"),
        ("control", b"X-\x01A: 1"),
        ("DEL", b"X-A\x7f: 1"),
        ("empty name", b": value"),
        ("pseudo-header", b":authority: api.test"),
        ("quote", b"X-\"A\": 1"),
        ("slash", b"X/A: 1"),
        ("brackets", b"X-[A]: 1"),
        ("no colon", b"Transfer-Encoding chunked"),
    ];
    let mut refused = 0;
    for (what, line) in cases {
        let plain_req = [
            format!("GET http://plain.test:{pp}/ HTTP/1.1\r\nHost: plain.test:{pp}\r\n").as_bytes(),
            line,
            b"\r\n\r\n",
        ]
        .concat();
        let mut c = r.client();
        let answer = exchange(&mut c, &plain_req).await;
        assert!(answer.starts_with("HTTP/1.1 400 ") && !answer.contains("Host header"), "plain, {what}: {answer}");
        let tunnel_req = [format!("GET / HTTP/1.1\r\nHost: api.test:{tp}\r\n").as_bytes(), line, b"\r\n\r\n"].concat();
        let answer = r.intercepted(tp, &tunnel_req).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 ") && !answer.contains("Host header"),
            "intercepted, {what}: {answer}"
        );
        refused += 2;
    }
    // The same requests with an honest name pass both ways (the harness is not what refuses).
    let mut c = r.client();
    let good = format!("GET http://plain.test:{pp}/ HTTP/1.1\r\nHost: plain.test:{pp}\r\nX-Api-Key: 1\r\n\r\n");
    assert!(exchange(&mut c, good.as_bytes()).await.starts_with("HTTP/1.1 200 "));
    let good = format!("GET / HTTP/1.1\r\nHost: api.test:{tp}\r\nX-Api-Key: 1\r\n\r\n");
    let answer = r.intercepted(tp, good.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    assert_eq!(plain.accepted.load(Ordering::SeqCst), 1, "only the honest plain request reached the upstream");
    let seen = String::from_utf8_lossy(&tls.seen.lock().unwrap()).into_owned();
    assert_eq!(seen.matches("GET / HTTP/1.1").count(), 1, "only the honest intercepted request: {seen}");
    let (_, recs, violations) = r.finish().await;
    let denied: Vec<&NetRecord> = recs.iter().filter(|r| r.decision == Decision::Denied).collect();
    assert_eq!(denied.len(), refused, "{recs:?}");
    let underscore = denied.iter().filter(|r| r.detail.contains("underscore")).count();
    assert_eq!(underscore, 8, "{denied:?}");
    assert!(!violations.is_empty());
}

/// Percent-encodings of a value as common encoders write them, by hand
/// (the echo host): every byte (either hex case), reserved bytes
/// only, `+` for space, mixed case.
fn percent_spellings(v: &[u8]) -> Vec<Vec<u8>> {
    let pct = |keep: &dyn Fn(u8) -> bool, upper: bool, plus: bool| -> Vec<u8> {
        let mut o = vec![];
        for b in v {
            match *b {
                b' ' if plus => o.push(b'+'),
                b if keep(b) => o.push(b),
                b if upper => o.extend(format!("%{b:02X}").into_bytes()),
                b => o.extend(format!("%{b:02x}").into_bytes()),
            }
        }
        o
    };
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    let mut mixed = vec![];
    for (i, b) in v.iter().enumerate() {
        let s = format!("%{b:02X}");
        mixed.extend(if i % 3 == 0 { s.to_ascii_lowercase() } else { s }.into_bytes());
    }
    vec![
        pct(&|_| false, true, false),
        pct(&|_| false, false, false),
        pct(&|_| false, true, true),
        pct(&unreserved, true, false),
        pct(&unreserved, false, false),
        pct(&unreserved, true, true),
        pct(&|b| unreserved(b) || b"!'()*".contains(&b), true, false),
        pct(&|b| unreserved(b) || b == b'/', true, false),
        mixed,
    ]
}

/// The echo host: the request's Authorization value sent back
/// percent-encoded in every spelling, one a line.
fn percent_echo(req: &[u8]) -> Vec<u8> {
    let head = String::from_utf8_lossy(req);
    let value = head
        .lines()
        .find_map(|l| l.strip_prefix("authorization: Bearer ").or_else(|| l.strip_prefix("Authorization: Bearer ")))
        .unwrap_or("")
        .as_bytes()
        .to_vec();
    let mut body = vec![];
    for s in percent_spellings(&value) {
        body.extend_from_slice(b"q=");
        body.extend(s);
        body.push(b'\n');
    }
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
    r.extend(body);
    r
}

#[tokio::test]
async fn a_bound_echo_host_never_hands_back_the_value_percent_encoded() {
    let ca = ca();
    let tls = tls_echo(130, "api.test", &ca, percent_echo).await;
    let plain = http_echo(140, percent_echo).await;
    let r = secret_run(&ca, tls.addr, plain.addr);
    let ph = r.placeholder();
    let (tp, pp) = (tls.addr.port(), plain.addr.port());
    let spellings = percent_spellings(SECRET.as_bytes());
    let tunnel = r
        .intercepted(
            tp,
            format!("GET / HTTP/1.1\r\nHost: api.test:{tp}\r\nAuthorization: Bearer {ph}\r\n\r\n").as_bytes(),
        )
        .await;
    let mut c = r.client();
    let req =
        format!("GET http://plain.test:{pp}/ HTTP/1.1\r\nHost: plain.test:{pp}\r\nAuthorization: Bearer {ph}\r\n\r\n");
    let clear = exchange(&mut c, req.as_bytes()).await;
    for (path, answer) in [("intercepted", &tunnel), ("plain", &clear)] {
        assert!(answer.starts_with("HTTP/1.1 200 "), "{path}: {answer}");
        // Read as the program's client would: the chunks joined.
        let (_, head, chunked) = messages(answer.as_bytes());
        assert!(head.contains("Transfer-Encoding: chunked"), "{path}: {answer}");
        let answer = &dechunk(&chunked);
        assert_eq!(answer.matches(&format!("q={ph}\n")).count(), spellings.len(), "{path}: {answer}");
        for s in &spellings {
            assert!(!answer.contains(std::str::from_utf8(s).unwrap()), "{path}: {answer}");
        }
    }
    // The upstreams got the value itself.
    for s in [&tls, &plain] {
        assert!(String::from_utf8_lossy(&s.seen.lock().unwrap()).contains(&format!("Bearer {SECRET}\r\n")));
    }
    let (summary, _, _) = r.finish().await;
    let k = &summary["secrets"][0];
    let n = 2 * spellings.len() as u64;
    assert_eq!(k["scrubbed"].as_u64(), Some(n), "{summary}");
    assert_eq!(k["scrubbed_by"]["percent"].as_u64(), Some(n), "{summary}");
}

/// A bound host's body in a packed format (a value inside is in no
/// spelling the scrubber can find): a 502 to the program, not the bytes.
#[tokio::test]
async fn a_packed_body_from_a_bound_host_is_refused() {
    fn gz(req: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
        e.write_all(req).unwrap();
        let body = e.finish().unwrap();
        let mut r =
            format!("HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\n\r\n", body.len())
                .into_bytes();
        r.extend(body);
        r
    }
    let ca = ca();
    let tls = tls_echo(150, "api.test", &ca, gz).await;
    let plain = http_echo(160, gz).await;
    let r = secret_run(&ca, tls.addr, plain.addr);
    let ph = r.placeholder();
    let (tp, pp) = (tls.addr.port(), plain.addr.port());
    let answer = r
        .intercepted(
            tp,
            format!("GET / HTTP/1.1\r\nHost: api.test:{tp}\r\nAuthorization: Bearer {ph}\r\n\r\n").as_bytes(),
        )
        .await;
    assert!(answer.starts_with("HTTP/1.1 502 ") && answer.contains("gzip format"), "{answer}");
    let mut c = r.client();
    let req =
        format!("GET http://plain.test:{pp}/ HTTP/1.1\r\nHost: plain.test:{pp}\r\nAuthorization: Bearer {ph}\r\n\r\n");
    let answer = exchange(&mut c, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 502 ") && answer.contains("gzip format"), "{answer}");
    let (_, recs, _) = r.finish().await;
    assert_eq!(recs.iter().filter(|r| r.detail.contains("gzip format")).count(), 2, "{recs:?}");
}

fn dechunk(mut b: &[u8]) -> String {
    let mut out = vec![];
    while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&b[..i]).unwrap(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[i + 2..i + 2 + size]);
        b = &b[i + 4 + size..];
    }
    String::from_utf8_lossy(&out).into_owned()
}
