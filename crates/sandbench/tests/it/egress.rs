//! Network egress end to end: `sandbench run --network allow=pypi.test` on
//! the process, docker, gvisor and microvm tiers against a small loopback
//! "internet" made here: an HTTP server on port 80 and a TLS server on port
//! 443 of a random 127.x.y.z address (a test CA made in the test), the name
//! mapped to it through the proxy's `[network] hosts`, so no DNS is needed.
//! The allowed host is reached through the proxy (plain HTTP and HTTPS with
//! the certificate checked inside the sandbox); another name, a direct
//! connection and the server's address are refused and reported. Then the
//! egress bypass samples through the gauntlet on the process tier (every
//! tier runs them in the full gauntlet). Nothing listens off loopback.

use crate::support::common;
use crate::support::loopback_web::{bind_80_and_443, test_ca, TestCa};

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{bin, is_root, required, samples_dir, OuterNet};
use sandbench::egress::Decision;
use sandbench::report::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What reached the test's servers: one Host header per request.
#[derive(Default)]
struct Seen {
    requests: AtomicUsize,
    hosts: Mutex<Vec<String>>,
}

struct Internet {
    ip: Ipv4Addr,
    ca_pem: String,
    http: Arc<Seen>,
    https: Arc<Seen>,
    _rt: tokio::runtime::Runtime,
}

/// Answer one HTTP/1.1 request on `s` with `body`, recording its Host.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S, seen: Arc<Seen>, body: &str) {
    let mut head = vec![];
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
        match s.read(&mut b).await {
            Ok(n) if n > 0 => head.extend_from_slice(&b[..n]),
            _ => return,
        }
    }
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let text = String::from_utf8_lossy(&head).into_owned();
    if let Some(h) = text.lines().find_map(|l| l.strip_prefix("Host: ").or_else(|| l.strip_prefix("host: "))) {
        seen.hosts.lock().unwrap().push(h.trim().to_string());
    }
    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}

impl Internet {
    /// Ports 80 and 443 (what a bare allow entry means) need root.
    fn start() -> Internet {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let TestCa { pem: ca_pem, acceptor } = test_ca("sandbench egress test CA", "pypi.test");
        let (http, https) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
        let ip = rt.block_on(async {
            let (ip, h, t) = bind_80_and_443(66).await;
            let seen = http.clone();
            tokio::spawn(async move {
                while let Ok((c, _)) = h.accept().await {
                    tokio::spawn(answer(c, seen.clone(), "simple index of pypi.test over http\n"));
                }
            });
            let (seen, acceptor) = (https.clone(), acceptor.clone());
            tokio::spawn(async move {
                while let Ok((c, _)) = t.accept().await {
                    let (seen, acceptor) = (seen.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(c).await {
                            answer(tls, seen, "simple index of pypi.test over https\n").await;
                        }
                    });
                }
            });
            ip
        });
        Internet { ip, ca_pem, http, https, _rt: rt }
    }

    /// A config that is the user's (image, microVM paths) plus the name.
    fn config(&self, dir: &Path) -> std::path::PathBuf {
        let mut c = sandbench::config::Config::load().expect("the user's config loads");
        c.network.hosts.insert("pypi.test", vec![IpAddr::V4(self.ip)]);
        let path = dir.join("config.toml");
        std::fs::write(&path, toml::to_string(&c).unwrap()).unwrap();
        path
    }
}

const PROGRAM: &str = r#"
import os, socket, ssl, urllib.request
print(urllib.request.urlopen("http://pypi.test/simple/", timeout=20).read().decode().strip())
ctx = ssl.create_default_context(cadata=os.environ["TEST_CA"])
print(urllib.request.urlopen("https://pypi.test/simple/", context=ctx, timeout=20).read().decode().strip())
for url in ("http://evil.test/", "https://evil.test/", "http://%s/" % os.environ["PYPI_IP"]):
    try:
        urllib.request.urlopen(url, timeout=20, context=ctx if url.startswith("https") else None)
        print("REACHED", url)
    except Exception as e:
        print("refused", url, type(e).__name__)
s = socket.socket()
s.settimeout(3)
try:
    s.connect((os.environ["PYPI_IP"], 80))
    print("DIRECT CONNECTION")
except OSError as e:
    print("no direct connection:", e.errno)
"#;

/// `doctor` once for every tier this module tests.
fn available() -> &'static serde_json::Value {
    static A: OnceLock<serde_json::Value> = OnceLock::new();
    A.get_or_init(|| {
        let out = Command::new(bin()).args(["doctor", "--format", "json"]).output().expect("run sandbench doctor");
        serde_json::from_slice(&out.stdout).expect("doctor prints JSON")
    })
}

fn ready(tier: &str) -> bool {
    if !is_root() {
        assert!(
            !required(tier),
            "SANDBENCH_REQUIRE_TIERS names {tier}, but the egress test needs root (ports 80, 443)"
        );
        panic!("cannot run although its needs hold: the egress test listens on ports 80 and 443 of a loopback address: run it as root");
    }
    let me = available().as_array().and_then(|a| a.iter().find(|t| t["tier"] == tier)).cloned().unwrap_or_default();
    if me["available"] == true {
        return true;
    }
    assert!(!required(tier), "SANDBENCH_REQUIRE_TIERS names {tier}, but it is unavailable: {}", me["summary"]);
    panic!("cannot run although its needs hold: {tier} tier unavailable: {}", me["summary"]);
}

fn allowed_host_is_reached_and_nothing_else(tier: &str) {
    if !ready(tier) {
        return;
    }
    let net = Internet::start();
    let dir = tempfile::tempdir().unwrap();
    let config = net.config(dir.path());
    let prog = dir.path().join("fetch.py");
    std::fs::write(&prog, PROGRAM).unwrap();
    let outer = OuterNet::new();
    let out = outer.output(
        Command::new(bin())
            .env("SANDBENCH_CONFIG", &config)
            .env("SANDBENCH_STATE_DIR", dir.path())
            .args(["run", "--tier", tier, "--network", "allow=pypi.test", "--timeout", "60s", "--format", "json"])
            .arg("--env")
            .arg(format!("TEST_CA={}", net.ca_pem))
            .arg("--env")
            .arg(format!("PYPI_IP={}", net.ip))
            .arg(&prog),
        Duration::from_secs(240),
    );
    let r = common::report(&out);
    let says = format!("{}\n{}\n{:#?}", r.stdout, r.stderr, r.network);
    assert!(r.stdout.contains("simple index of pypi.test over http\n"), "{says}");
    assert!(r.stdout.contains("simple index of pypi.test over https\n"), "{says}");
    assert_eq!(r.stdout.matches("refused").count(), 3, "{says}");
    assert!(!r.stdout.contains("REACHED") && !r.stdout.contains("DIRECT"), "{says}");
    // Refusals make the run a network violation; every decision is listed.
    assert_eq!(r.outcome, Outcome::Violation, "{says}");
    assert!(r.violations.iter().any(|v| v.kind == sandbench::event::ViolationKind::Network), "{says}");
    let find = |d: Decision, method: &str, host: &str, port: u16| {
        r.network.iter().find(|n| n.decision == d && n.method == method && n.host == host && n.port == port)
    };
    for (method, port) in [("GET", 80), ("CONNECT", 443)] {
        let n = find(Decision::Allowed, method, "pypi.test", port).unwrap_or_else(|| panic!("{method}: {says}"));
        assert!(!n.open && n.bytes_up > 0 && n.bytes_down > 0, "{n:?}");
        assert_eq!(n.address.as_deref(), Some(net.ip.to_string().as_str()));
    }
    assert!(find(Decision::Denied, "GET", "evil.test", 80).is_some(), "{says}");
    assert!(find(Decision::Denied, "CONNECT", "evil.test", 443).is_some(), "{says}");
    assert!(find(Decision::Denied, "GET", &net.ip.to_string(), 80).is_some(), "{says}");
    assert_eq!(r.details["network"]["dns_lookups"], serde_json::json!([]), "the name came from the hosts map");
    // The servers saw exactly the two honest requests, for their own name.
    assert_eq!(net.http.requests.load(Ordering::SeqCst), 1);
    assert_eq!(net.https.requests.load(Ordering::SeqCst), 1);
    assert_eq!(*net.http.hosts.lock().unwrap(), ["pypi.test"]);
    assert_eq!(*net.https.hosts.lock().unwrap(), ["pypi.test"]);
    assert!(outer.remaining().is_empty(), "processes left behind: {:?}", outer.remaining());
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_reaches_the_allowed_host_only() {
    allowed_host_is_reached_and_nothing_else("process");
}

#[sandbench_testkit::test(needs = ["docker", "root"])]
fn docker_reaches_the_allowed_host_only() {
    allowed_host_is_reached_and_nothing_else("docker");
}

#[sandbench_testkit::test(needs = ["gvisor", "root"])]
fn gvisor_reaches_the_allowed_host_only() {
    allowed_host_is_reached_and_nothing_else("gvisor");
}

#[sandbench_testkit::test(needs = ["microvm", "root"])]
fn microvm_reaches_the_allowed_host_only() {
    allowed_host_is_reached_and_nothing_else("microvm");
}

/// The bypass samples and the benign fetch, through the gauntlet (its own
/// internet, its own judge) on the process tier; and a tier without an
/// egress path (a peer) refuses an allow list instead of widening it.
#[sandbench_testkit::test]
fn bypass_samples_are_contained_and_tiers_without_egress_refuse() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["benign", "hostile"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        for e in std::fs::read_dir(samples_dir().join(sub)).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("egress_") {
                std::fs::copy(e.path(), dir.path().join(sub).join(e.file_name())).unwrap();
            }
        }
    }
    let outer = OuterNet::new();
    let out = outer.output(
        Command::new(bin())
            .env("SANDBENCH_STATE_DIR", dir.path())
            .args(["gauntlet", "--tiers", "process", "--repeat", "1", "--format", "json", "--samples"])
            .arg(dir.path()),
        Duration::from_secs(300),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cells = m["cells"].as_array().unwrap();
    assert!(cells.len() >= 12, "{m:#}");
    for c in cells {
        assert_eq!(c["as_expected"], true, "{:#}", c);
    }
    let cell = |n: &str| cells.iter().find(|c| c["sample"] == n).unwrap();
    assert!(cell("egress-allowed")["report"]["stdout"].as_str().unwrap().contains("hello from allowed host"));
    assert!(cell("egress-sni-mismatch")["by"].as_str().unwrap().contains("network"));
    assert_eq!(out.status.code(), Some(0));

    // bwrap cannot enforce an allow list: the run is refused, one line, exit 2.
    let out = Command::new(bin())
        .args(["run", "--tier", "bwrap", "--network", "allow=pypi.test"])
        .arg(samples_dir().join("benign/hello.py"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot enforce a network allow list"), "{err}");
    let out = Command::new(bin()).args(["run", "--network", "allow=a b", "-"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a host name"));
}
