//! A fake E2B speaking the published shapes: the REST API (`POST
//! /v2/sandboxes`, `DELETE /sandboxes/{id}`, `GET /v2/sandboxes` paged with
//! `x-next-token`, `X-API-Key`, `{code,message}` errors; the deprecated v1
//! create and list answer 410 so a client still on them fails here) and envd (`POST /files` multipart, `GET /metrics`, Connect-RPC
//! `process.Process/Start` with JSON envelopes, `X-Access-Token`). A
//! "sandbox" is a temp directory; Start really runs the given command there
//! (on this host: tests only send benign programs) and streams its output,
//! so the tier's command line, streaming and exit mapping are exercised for
//! real. Like envd, a Start that does not say `"stdin": false` gives the
//! program a stdin pipe that stays open, so a program reading it hangs until
//! it is killed. Knobs make each error path happen.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::http::{serve, Chunk, Reply, Request};

pub const WORK_DIR: &str = "/home/user/sandbench";
pub const MEM_USED: u64 = 123_456_789;

#[derive(Clone, Debug, PartialEq)]
pub enum StartMode {
    /// Run the command and stream it.
    Real,
    /// Start event and one stdout chunk, then the connection drops.
    DropAfterFirstChunk,
    /// The edge proxy says the sandbox is gone.
    Http502,
    /// The end-of-stream envelope carries a Connect error.
    RpcError,
}

#[derive(Clone, Debug)]
pub struct Knobs {
    /// Statuses `POST /v2/sandboxes` answers before succeeding, with retry-after.
    pub create_failures: Vec<(u16, Option<u64>)>,
    pub start: StartMode,
    /// How many DELETEs fail with 500 before they work.
    pub kill_failures: u32,
    /// Most sandboxes per list page whatever `limit` asks (the server may
    /// send fewer than asked; the rest follows with `nextToken`).
    pub max_page: Option<usize>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs { create_failures: vec![], start: StartMode::Real, kill_failures: 0, max_page: None }
    }
}

pub struct Sandbox {
    pub template: String,
    pub timeout: u64,
    pub body: Value,
    pub token: String,
    pub dir: tempfile::TempDir,
    pub stop: CancellationToken,
}

#[derive(Default)]
pub struct State {
    pub key: String,
    pub knobs: Knobs,
    pub live: HashMap<String, Sandbox>,
    pub created: Vec<String>,
    pub killed: Vec<String>,
    /// Bodies of POST /v2/sandboxes.
    pub create_bodies: Vec<Value>,
    /// Headers of each Start call.
    pub start_headers: Vec<Vec<(String, String)>>,
    /// The `process` config of each Start call.
    pub start_process: Vec<Value>,
    /// The whole StartRequest message of each Start call.
    pub start_messages: Vec<Value>,
    /// Programs still running (pid) in the fake.
    pub running: Vec<u32>,
    /// Which sandbox each running program belongs to.
    pub running_in: Vec<(String, u32)>,
    /// Sandboxes whose user's processes a session's cleanup ended, in order.
    pub cleanups: Vec<String>,
    pub log: Vec<String>,
}

#[derive(Clone)]
pub struct FakeE2b {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
    /// Held while the fake lives: see [`exclusive`].
    _shared: Option<Arc<tokio::sync::OwnedRwLockReadGuard<()>>>,
}

/// The e2b tier's registry of live sandboxes is process-wide, and
/// `tier::shutdown` kills every sandbox in it — those of other tests' fakes
/// too. Each fake holds this lock shared; a test that calls shutdown takes it
/// exclusively (before starting its own fake with [`FakeE2b::start_alone`]).
fn registry_lock() -> Arc<tokio::sync::RwLock<()>> {
    static LOCK: std::sync::OnceLock<Arc<tokio::sync::RwLock<()>>> = std::sync::OnceLock::new();
    LOCK.get_or_init(Default::default).clone()
}

/// Wait until no other fake is alive, and keep it so while the guard lives.
pub async fn exclusive() -> tokio::sync::OwnedRwLockWriteGuard<()> {
    registry_lock().write_owned().await
}

impl FakeE2b {
    pub async fn start(key: &str) -> FakeE2b {
        let guard = registry_lock().read_owned().await;
        let mut f = FakeE2b::start_alone(key).await;
        f._shared = Some(Arc::new(guard));
        f
    }

    /// A fake that does not take the shared lock: for a test holding [`exclusive`].
    pub async fn start_alone(key: &str) -> FakeE2b {
        let state = Arc::new(Mutex::new(State { key: key.into(), ..Default::default() }));
        let s = state.clone();
        let addr = serve(move |req| handle(s.clone(), req)).await;
        FakeE2b { addr, state, _shared: None }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn knobs(&self, k: Knobs) {
        self.state.lock().unwrap().knobs = k;
    }

    /// A sandbox created by someone else (another process, another host).
    pub fn insert_foreign(&self, id: &str, metadata: Value) {
        let sb = Sandbox {
            template: "base".into(),
            timeout: 300,
            body: json!({"templateID": "base", "metadata": metadata}),
            token: format!("tok-{id}"),
            dir: tempfile::tempdir().unwrap(),
            stop: CancellationToken::new(),
        };
        self.state.lock().unwrap().live.insert(id.into(), sb);
    }

    pub fn live_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.state.lock().unwrap().live.keys().cloned().collect();
        v.sort();
        v
    }

    pub fn live_count(&self) -> usize {
        self.state.lock().unwrap().live.len()
    }

    pub fn created(&self) -> Vec<String> {
        self.state.lock().unwrap().created.clone()
    }

    pub fn killed(&self) -> Vec<String> {
        self.state.lock().unwrap().killed.clone()
    }

    /// Wait until every program the fake started has ended (a kill reached it).
    pub async fn wait_programs_gone(&self, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            if self.state.lock().unwrap().running.is_empty() {
                return true;
            }
            if tokio::time::Instant::now() > until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn settings(&self, key: &str) -> sandbench::internals::e2b::Settings {
        sandbench::internals::e2b::Settings {
            api_key: Some(key.into()),
            domain: "e2b.test".into(),
            api_url: self.url(),
            sandbox_url: Some(self.url()),
            debug: false,
            template: "base".into(),
            timeout_margin: Duration::from_secs(30),
        }
    }
}

fn err(status: u16, message: &str) -> Reply {
    Reply::json(status, json!({"code": status, "message": message}))
}

fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flags];
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(if i <= c.len() { T[(n >> (18 - 6 * i)) as usize & 63] as char } else { '=' });
        }
    }
    out
}

fn event(v: Value) -> Chunk {
    Chunk::Data(envelope(0, &serde_json::to_vec(&json!({ "event": v })).unwrap()))
}

async fn handle(state: Arc<Mutex<State>>, req: Request) -> Reply {
    state.lock().unwrap().log.push(format!("{} {}", req.method, req.path()));
    let path = req.path().to_string();
    match (req.method.as_str(), path.as_str()) {
        // Deprecated in E2B's spec in favour of the v2 forms.
        ("POST", "/sandboxes") | ("GET", "/sandboxes") => {
            err(410, &format!("{} {path} is deprecated; use {} /v2/sandboxes", req.method, req.method))
        }
        ("POST", "/v2/sandboxes") => create(&state, &req),
        ("GET", "/v2/sandboxes") => list(&state, &req),
        ("DELETE", p) if p.starts_with("/sandboxes/") => {
            if let Some(r) = check_key(&state, &req) {
                return r;
            }
            let id = p.trim_start_matches("/sandboxes/").to_string();
            let mut st = state.lock().unwrap();
            if st.knobs.kill_failures > 0 {
                st.knobs.kill_failures -= 1;
                return err(500, "kill failed");
            }
            match st.live.remove(&id) {
                Some(s) => {
                    s.stop.cancel();
                    st.killed.push(id);
                    Reply::empty(204)
                }
                None => err(404, &format!("sandbox {id} not found")),
            }
        }
        ("POST", "/files") => upload(&state, &req),
        ("GET", "/metrics") => match sandbox_for(&state, &req) {
            Ok(_) => Reply::json(
                200,
                json!({"ts": 1, "cpu_count": 2, "cpu_used_pct": 3.5, "mem_total": 1u64 << 30, "mem_used": MEM_USED, "disk_used": 1, "disk_total": 2}),
            ),
            Err(r) => r,
        },
        ("POST", "/process.Process/Start") => start(state, req).await,
        _ => err(404, "no such route"),
    }
}

/// `GET /v2/sandboxes`: `metadata` (`k=v&k2=v2`, url-encoded), `state`
/// (comma list), `limit`, `nextToken`; the next page's token in `x-next-token`.
fn list(state: &Arc<Mutex<State>>, req: &Request) -> Reply {
    if let Some(r) = check_key(state, req) {
        return r;
    }
    let filter: Vec<(String, String)> = req
        .query("metadata")
        .map(|m| {
            m.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
        })
        .unwrap_or_default();
    let states: Vec<String> = req
        .query("state")
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| vec!["running".into(), "paused".into()]);
    if states.iter().any(|s| s != "running" && s != "paused") {
        return err(400, "state must be running or paused");
    }
    let limit: usize = match req.query("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => return err(400, "limit must be between 1 and 100"),
    };
    let st = state.lock().unwrap();
    let page = st.knobs.max_page.map_or(limit, |m| m.min(limit));
    let mut ids: Vec<&String> = st
        .live
        .iter()
        .filter(|(_, s)| filter.iter().all(|(k, v)| s.body["metadata"][k] == v.as_str()))
        .map(|(id, _)| id)
        .collect();
    ids.sort();
    let start = match req.query("nextToken") {
        None => 0,
        Some(t) => match ids.iter().position(|id| **id == t) {
            Some(i) => i,
            None => return err(400, "invalid nextToken"),
        },
    };
    // Every fake sandbox is running.
    let running = states.iter().any(|s| s == "running");
    let items: Vec<Value> = if running {
        ids[start..]
            .iter()
            .take(page)
            .map(|id| {
                let s = &st.live[*id];
                json!({"sandboxID": id, "templateID": s.template, "clientID": "6532622b", "state": "running",
                       "envdVersion": "0.2.4", "metadata": s.body["metadata"]})
            })
            .collect()
    } else {
        vec![]
    };
    let reply = Reply::json(200, Value::Array(items));
    match ids.get(start + page).filter(|_| running) {
        Some(next) => reply.with_header("x-next-token", next),
        None => reply,
    }
}

fn check_key(state: &Arc<Mutex<State>>, req: &Request) -> Option<Reply> {
    let st = state.lock().unwrap();
    (req.header("x-api-key") != Some(st.key.as_str())).then(|| err(401, "Invalid API key, it must start with 'e2b_'"))
}

fn create(state: &Arc<Mutex<State>>, req: &Request) -> Reply {
    if let Some(r) = check_key(state, req) {
        return r;
    }
    let mut st = state.lock().unwrap();
    if !st.knobs.create_failures.is_empty() {
        let (status, retry) = st.knobs.create_failures.remove(0);
        let r = err(status, "simulated failure");
        return match retry {
            Some(s) => r.with_header("retry-after", &s.to_string()),
            None => r,
        };
    }
    let body = req.json();
    st.create_bodies.push(body.clone());
    let Some(template) = body.get("templateID").and_then(|t| t.as_str()) else {
        return err(400, "templateID is required");
    };
    if template != "base" {
        return err(404, &format!("template '{template}' not found"));
    }
    if let Some(n) = body.get("network") {
        if let Err(why) = check_network(n) {
            return err(400, &why);
        }
    }
    // Unique in the test process: tests run side by side in one process and
    // share sandbench's registry of live sandboxes, which
    // `assert_nothing_left` checks against this fake's ids.
    static FAKE_IDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let id = format!("sbx{:04}", FAKE_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
    let token = format!("tok-{id}");
    let sb = Sandbox {
        template: template.into(),
        timeout: body.get("timeout").and_then(|t| t.as_u64()).unwrap_or(15),
        body: body.clone(),
        token: token.clone(),
        dir: tempfile::tempdir().unwrap(),
        stop: CancellationToken::new(),
    };
    st.live.insert(id.clone(), sb);
    st.created.push(id.clone());
    Reply::json(
        201,
        json!({"templateID": template, "sandboxID": id, "clientID": "6532622b", "envdVersion": "0.2.4",
               "envdAccessToken": token, "trafficAccessToken": null, "domain": null}),
    )
}

/// `SandboxNetworkConfig` as E2B's spec and docs have it: `allowOut` takes
/// IPs, CIDRs and domain names (`*.example.com` too), `denyOut` IPs and CIDRs
/// only, and a domain in `allowOut` needs all other traffic denied
/// (`0.0.0.0/0` in `denyOut`).
fn check_network(n: &Value) -> Result<(), String> {
    let list = |k: &str| -> Result<Vec<String>, String> {
        match n.get(k) {
            None => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| format!("network.{k} must hold strings")))
                .collect(),
            Some(_) => Err(format!("network.{k} must be an array")),
        }
    };
    for k in n.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
        if !["allowOut", "denyOut", "allowPublicTraffic", "maskRequestHost"].contains(&k.as_str()) {
            return Err(format!("unknown field network.{k}"));
        }
    }
    let is_addr = |s: &str| {
        let (ip, bits) = s.split_once('/').unwrap_or((s, "32"));
        ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
    };
    let deny = list("denyOut")?;
    if let Some(d) = deny.iter().find(|d| !is_addr(d)) {
        return Err(format!("denyOut takes IPs and CIDR blocks only, not '{d}'"));
    }
    let allow = list("allowOut")?;
    for a in &allow {
        let name = a.strip_prefix("*.").unwrap_or(a);
        let domain = name.contains('.')
            && name.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !is_addr(a) && !domain {
            return Err(format!("allowOut entry '{a}' is not an IP, CIDR block or domain"));
        }
        if !is_addr(a) && !deny.iter().any(|d| d == "0.0.0.0/0") {
            return Err("domain-based filtering needs all other traffic denied (0.0.0.0/0 in denyOut)".into());
        }
    }
    Ok(())
}

/// The sandbox a request to envd is for: E2B's edge routes by
/// `E2b-Sandbox-Id` + `E2b-Sandbox-Port` (envd's port), envd checks `X-Access-Token`.
fn sandbox_for(
    state: &Arc<Mutex<State>>,
    req: &Request,
) -> Result<(String, std::path::PathBuf, CancellationToken), Reply> {
    let st = state.lock().unwrap();
    if req.header("e2b-sandbox-port") != Some("49983") {
        return Err(err(400, "E2b-Sandbox-Port must name envd's port, 49983"));
    }
    let id = req.header("e2b-sandbox-id").unwrap_or("");
    let Some(sb) = st.live.get(id) else {
        return Err(err(502, &format!("The sandbox {id} was not found")));
    };
    if req.header("x-access-token") != Some(sb.token.as_str()) {
        return Err(err(401, "invalid access token"));
    }
    Ok((id.to_string(), sb.dir.path().to_path_buf(), sb.stop.clone()))
}

fn local_path(dir: &std::path::Path, sandbox_path: &str) -> Option<std::path::PathBuf> {
    let rel = sandbox_path.strip_prefix(WORK_DIR)?.trim_start_matches('/');
    Some(dir.join(rel))
}

fn upload(state: &Arc<Mutex<State>>, req: &Request) -> Reply {
    let (_, dir, _) = match sandbox_for(state, req) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let Some(path) = req.query("path") else {
        return err(400, "path is required");
    };
    if req.query("username").as_deref() != Some("user") {
        return err(400, "username must be user");
    }
    let ct = req.header("content-type").unwrap_or("");
    let Some(boundary) = ct.strip_prefix("multipart/form-data; boundary=") else {
        return err(400, "expected multipart/form-data");
    };
    let body = &req.body;
    let Some(start) = body.windows(4).position(|w| w == b"\r\n\r\n") else {
        return err(400, "bad multipart");
    };
    let head = String::from_utf8_lossy(&body[..start]);
    if !head.contains("name=\"file\"") {
        return err(400, "missing file field");
    }
    let end_marker = format!("\r\n--{boundary}--");
    let Some(end) = body.windows(end_marker.len()).rposition(|w| w == end_marker.as_bytes()) else {
        return err(400, "unterminated multipart");
    };
    let content = &body[start + 4..end];
    let Some(local) = local_path(&dir, &path) else {
        return err(400, "path outside the work dir");
    };
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    std::fs::write(&local, content).unwrap();
    Reply::json(200, json!([{"path": path, "name": local.file_name().unwrap().to_string_lossy(), "type": "file"}]))
}

async fn start(state: Arc<Mutex<State>>, req: Request) -> Reply {
    let (sandbox_id, dir, stop) = match sandbox_for(&state, &req) {
        Ok(x) => x,
        Err(r) => return r,
    };
    state.lock().unwrap().start_headers.push(req.headers.clone());
    if req.header("content-type") != Some("application/connect+json") {
        return err(415, "expected application/connect+json");
    }
    if req.header("authorization") != Some("Basic dXNlcjo=") {
        return err(401, "user must be 'user'");
    }
    let b = &req.body;
    if b.len() < 5 || b[0] != 0 || u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize != b.len() - 5 {
        return err(400, "bad envelope");
    }
    let msg: Value = serde_json::from_slice(&b[5..]).unwrap_or(Value::Null);
    let p = &msg["process"];
    state.lock().unwrap().start_process.push(p.clone());
    state.lock().unwrap().start_messages.push(msg.clone());
    // envd reads a missing `stdin` as true: the process gets a pipe that
    // stays open until the process ends, so a program that reads stdin
    // waits until it is killed.
    let stdin_open = msg.get("stdin") != Some(&Value::Bool(false));
    // The Connect deadline: envd ends the call and kills the process at it.
    let deadline = match req.header("connect-timeout-ms") {
        None => None,
        Some(v) if !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()) => {
            Some(Duration::from_millis(v.parse().unwrap()))
        }
        Some(_) => return err(400, "invalid Connect-Timeout-Ms"),
    };
    let mode = state.lock().unwrap().knobs.start.clone();
    if mode == StartMode::Http502 {
        return err(502, "The sandbox was not found");
    }
    let (tx, rx) = mpsc::channel(64);
    let reply = Reply::Stream {
        status: 200,
        headers: vec![("content-type".into(), "application/connect+json".into())],
        chunks: rx,
    };
    match mode {
        StartMode::DropAfterFirstChunk => {
            tokio::spawn(async move {
                let _ = tx.send(event(json!({"start": {"pid": 1}}))).await;
                let _ = tx.send(event(json!({"data": {"stdout": b64(b"partial\n")}}))).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(Chunk::Abort).await;
            });
            return reply;
        }
        StartMode::RpcError => {
            tokio::spawn(async move {
                let _ = tx
                    .send(Chunk::Data(envelope(
                        2,
                        br#"{"error":{"code":"internal","message":"failed to start process: exec format error"}}"#,
                    )))
                    .await;
            });
            return reply;
        }
        _ => {}
    }
    // A session's cleanup is `kill -KILL -1` as the VM's user. Here programs
    // run on the test host as the test's user: it must never run for real.
    // The fake does what it means in a VM: it ends that sandbox's programs.
    let args_text = p["args"].to_string();
    if args_text.contains("kill") && args_text.contains("-1") {
        assert!(args_text.contains(sandbench::internals::e2b::CLEANUP_SCRIPT), "unexpected kill: {args_text}");
        let pids: Vec<u32> = {
            let mut st = state.lock().unwrap();
            st.cleanups.push(sandbox_id.clone());
            st.running_in.iter().filter(|(s, _)| *s == sandbox_id).map(|(_, p)| *p).collect()
        };
        for pid in pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
        tokio::spawn(async move {
            let _ = tx.send(event(json!({"start": {"pid": 1}}))).await;
            let _ = tx.send(event(json!({"end": {"exited": true, "status": "exit status 0"}}))).await;
            let _ = tx.send(Chunk::Data(envelope(2, b"{}"))).await;
        });
        return reply;
    }
    let map = |s: &str| s.replace(WORK_DIR, &dir.to_string_lossy());
    let cmd = p["cmd"].as_str().unwrap_or("").to_string();
    let args: Vec<String> =
        p["args"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).map(map).collect()).unwrap_or_default();
    let cwd = p["cwd"].as_str().map(map).unwrap_or_else(|| dir.to_string_lossy().into_owned());
    let envs: Vec<(String, String)> = p["envs"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect())
        .unwrap_or_default();
    let child = tokio::process::Command::new(&cmd)
        .args(&args)
        .env_clear()
        .envs(envs)
        .current_dir(&cwd)
        .stdin(if stdin_open { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.try_send(Chunk::Data(envelope(
                2,
                json!({"error": {"code": "internal", "message": e.to_string()}}).to_string().as_bytes(),
            )));
            return reply;
        }
    };
    let pid = child.id().unwrap_or(0);
    state.lock().unwrap().running.push(pid);
    state.lock().unwrap().running_in.push((sandbox_id.clone(), pid));
    let st = state.clone();
    // Held (never written, never closed) for as long as the program runs.
    let stdin_pipe = child.stdin.take();
    tokio::spawn(async move {
        let _stdin_pipe = stdin_pipe;
        let _ = tx.send(event(json!({"start": {"pid": pid}}))).await;
        let mut out = child.stdout.take().unwrap();
        let mut errs = child.stderr.take().unwrap();
        let (mut ob, mut eb) = ([0u8; 4096], [0u8; 4096]);
        let (mut o_done, mut e_done) = (false, false);
        let expiry = async {
            match deadline {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expiry);
        let mut expired = false;
        let status = loop {
            tokio::select! {
                n = out.read(&mut ob), if !o_done => match n {
                    Ok(0) | Err(_) => o_done = true,
                    Ok(n) => { let _ = tx.send(event(json!({"data": {"stdout": b64(&ob[..n])}}))).await; }
                },
                n = errs.read(&mut eb), if !e_done => match n {
                    Ok(0) | Err(_) => e_done = true,
                    Ok(n) => { let _ = tx.send(event(json!({"data": {"stderr": b64(&eb[..n])}}))).await; }
                },
                s = child.wait(), if o_done && e_done => break s.ok(),
                _ = stop.cancelled() => {
                    let _ = child.kill().await;
                    break child.wait().await.ok();
                }
                _ = &mut expiry => {
                    expired = true;
                    let _ = child.kill().await;
                    break child.wait().await.ok();
                }
            }
        };
        if expired {
            {
                let mut st = st.lock().unwrap();
                st.running.retain(|p| *p != pid);
                st.running_in.retain(|(_, p)| *p != pid);
            }
            let trailer = json!({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}});
            let _ = tx.send(Chunk::Data(envelope(2, trailer.to_string().as_bytes()))).await;
            return;
        }
        {
            let mut st = st.lock().unwrap();
            st.running.retain(|p| *p != pid);
            st.running_in.retain(|(_, p)| *p != pid);
        }
        use std::os::unix::process::ExitStatusExt;
        let end = match status {
            Some(s) if s.code().is_some() => {
                // protobuf JSON leaves out zero values, as envd's encoder does.
                let code = s.code().unwrap();
                if code == 0 {
                    json!({"exited": true, "status": "exit status 0"})
                } else {
                    json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
                }
            }
            Some(s) => {
                let name = match s.signal() {
                    Some(9) => "killed",
                    Some(24) => "CPU time limit exceeded",
                    Some(25) => "file size limit exceeded",
                    Some(15) => "terminated",
                    _ => "segmentation fault",
                };
                json!({"exitCode": -1, "status": format!("signal: {name}")})
            }
            None => json!({"exitCode": -1, "status": "unknown", "error": "wait failed"}),
        };
        let _ = tx.send(event(json!({"end": end}))).await;
        let _ = tx.send(Chunk::Data(envelope(2, b"{}"))).await;
    });
    reply
}
