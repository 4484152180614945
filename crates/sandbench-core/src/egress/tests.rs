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

async fn tls_server(from: u8, name: &str, ca: &Ca) -> Server {
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
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
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
    Run { eg: Egress::start(&network.parse().unwrap(), &h, &ctx).unwrap(), events }
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
        Run { eg: Egress::start(&format!("allow=rebind.test:{p}").parse().unwrap(), &h, &ctx).unwrap(), events }
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
