//! Shared by the MCP tests: a private config and state dir per server, the
//! official Python client (`tests/it/mcp_client.py`) driven step by step, a
//! server over `--http` with its bearer token, and raw HTTP requests for
//! what no well-behaved client sends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::common::{self, bin, OuterNet};

pub const SECRET: &str = "sk-mcp-test-secret-4f1c9e";

/// The Python that has the `mcp` SDK (the test names `mcp` in its needs).
pub fn sdk_python() -> PathBuf {
    common::mcp_python().expect("cannot run although its needs hold: no Python with the MCP SDK")
}

pub fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.py")
}

/// A private config and state dir for one server.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    /// The user's config (where `sandbench setup docker` named the image it
    /// built) with `extra`'s tables merged over it.
    pub fn new(extra: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let mut base: toml::Table = sandbench::config::Config::path()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| toml::from_str(&t).ok())
            .unwrap_or_default();
        let extra: toml::Table = toml::from_str(extra).unwrap();
        for (k, v) in extra {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(e)) => b.extend(e),
                (_, v) => {
                    base.insert(k, v);
                }
            }
        }
        std::fs::write(dir.path().join("config.toml"), toml::to_string(&base).unwrap()).unwrap();
        Home { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `sandbench mcp ARGS` with this home's config and state.
    pub fn server(&self, server_args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.arg("mcp")
            .args(server_args)
            .env("SANDBENCH_CONFIG", self.config())
            .env("SANDBENCH_STATE_DIR", self.state())
            // Generated tokens go under the state dir, not the user's runtime dir.
            .env_remove("XDG_RUNTIME_DIR")
            .env("SANDBENCH_TEST_SECRET", SECRET);
        c
    }

    /// The Python client driving a stdio server it starts itself.
    pub fn command(&self, py: &Path, steps: &Value, server_args: &[&str]) -> Command {
        let mut cmd = Command::new(py);
        cmd.arg(client_script())
            .arg(steps.to_string())
            .arg(bin())
            .arg("mcp")
            .args(server_args)
            .env("SANDBENCH_CONFIG", self.config())
            .env("SANDBENCH_STATE_DIR", self.state())
            .env_remove("XDG_RUNTIME_DIR")
            // sandbench's own environment holds a secret; no sandbox may see it.
            .env("ANTHROPIC_API_KEY", SECRET)
            .env("SANDBENCH_TEST_SECRET", SECRET);
        cmd
    }

    /// The run log's entries.
    pub fn runs(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state().join("runs.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The client's JSON lines, without the "calling" markers.
pub fn lines_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("client printed non-JSON {l:?}: {e}")))
        .filter(|v: &Value| v["op"] != "calling")
        .collect()
}

/// Run the client to the end; its JSON lines without the "calling" markers.
pub fn drive(home: &Home, py: &Path, steps: Value, server_args: &[&str]) -> Vec<Value> {
    let net = OuterNet::new();
    let out = net.output(&mut home.command(py, &steps, server_args), Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = lines_of(&stdout);
    assert_eq!(lines.len(), steps.as_array().unwrap().len(), "one result per step: {stdout}");
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
    lines
}

pub fn call(name: &str, args: Value) -> Value {
    json!({"op": "call", "name": name, "args": args})
}

/// A tool result's message, from a JSON-RPC error or a tool error.
pub fn message(v: &Value) -> String {
    v["mcp_error"]["message"].as_str().or(v["text"].as_str()).unwrap_or_default().to_string()
}

/// A server over `--http` on a free loopback port, in `net`.
pub struct HttpServer {
    pub child: Child,
    pub url: String,
    pub port: u16,
    /// The generated token's file (None with --token-file).
    pub token_path: Option<PathBuf>,
    pub token: String,
    /// What the server printed on stderr after its first line.
    pub stderr: Option<std::process::ChildStderr>,
}

impl HttpServer {
    pub fn start(home: &Home, net: &OuterNet, args: &[&str]) -> HttpServer {
        let mut all = vec!["--http", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut cmd = home.server(&all);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = net.spawn(&mut cmd);
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no URL in the server's first line: {line:?}"))
            .to_string();
        let port: u16 = url.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp").parse().unwrap();
        let token_path = line.split("bearer token in ").nth(1).map(|r| PathBuf::from(r.trim().trim_end_matches(')')));
        let token = token_path
            .as_ref()
            .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string())
            .unwrap_or_default();
        HttpServer { child, url, port, token_path, token, stderr: Some(err.into_inner()) }
    }

    /// The Python client against this server, with `token` (None: none).
    pub fn client(&self, py: &Path, steps: &Value, token: Option<&str>) -> Command {
        let mut c = Command::new(py);
        c.arg(client_script())
            .arg(steps.to_string())
            .arg(&self.url)
            // The client talks to loopback directly, never through a proxy.
            .env("NO_PROXY", "127.0.0.1")
            .env("no_proxy", "127.0.0.1");
        match token {
            Some(t) => c.env("SANDBENCH_MCP_TOKEN", t),
            None => c.env_remove("SANDBENCH_MCP_TOKEN"),
        };
        c
    }

    /// Run the client with this server's token to the end; its lines.
    pub fn drive(&self, net: &OuterNet, py: &Path, steps: Value) -> Vec<Value> {
        let out = net.output(&mut self.client(py, &steps, Some(&self.token)), Duration::from_secs(180));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "client failed: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // The SDK ends its MCP session (DELETE) as it closes, and logs any
        // answer but 200 or 204 as a failure the user sees.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("Session termination failed"), "{stderr}");
        lines_of(&stdout)
    }

    /// SIGTERM, and wait for the server to end.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        self.child.wait().unwrap()
    }
}

impl Drop for HttpServer {
    /// A test that failed before `stop` still ends the server it started.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTP response as it came.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Send `request` (a whole HTTP/1.1 request; `Connection: close` is the
/// caller's) to 127.0.0.1:`port` and read the response to its end, or
/// what came within `wait`.
pub fn raw(port: u16, request: &[u8], wait: Duration) -> Raw {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.set_write_timeout(Some(wait)).unwrap();
    // A server that answers before the whole request is in (413, 503) may
    // close while we still write: read what it said anyway.
    let _ = s.write_all(request);
    let mut buf = vec![];
    let mut chunk = [0u8; 8192];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 1 << 20 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Raw { status, head: head.to_string(), body: body.to_string() }
}

/// A POST of `body` (JSON-RPC) to /mcp with `headers` ("Name: value" each).
pub fn post(port: u16, host: &str, headers: &[&str], body: &str) -> Raw {
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, \
         text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    raw(port, req.as_bytes(), Duration::from_secs(20))
}

/// An `initialize` request body.
pub fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string()
}

/// The sandbench MCP server among the net's processes.
pub fn server_pid(net: &OuterNet) -> Option<u32> {
    net.remaining().into_iter().map(|p| p as u32).find(|p| {
        std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e.ends_with("sandbench"))
            && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"mcp"))
    })
}

/// Sample `f` every 20 ms on a thread until `stop` is set; the largest value seen.
pub struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Sampler {
    pub fn start(mut f: impl FnMut() -> usize + Send + 'static) -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut most = 0;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(f());
                std::thread::sleep(Duration::from_millis(20));
            }
            most.max(f())
        });
        Sampler { stop, thread: Some(thread) }
    }

    pub fn most(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Sampler {
    /// A test that failed early still stops its sampler (which may hold the
    /// outer net, whose drop ends what the test started).
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
