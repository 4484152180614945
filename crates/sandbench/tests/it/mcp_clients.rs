//! A client of `sandbench mcp --http` is its bearer token, whatever form its
//! requests take: MCP sessions (the `initialize` handshake of the revisions
//! before 2026-07-28), the stateless requests of 2026-07-28 (each served by
//! a handler of its own), or both at once. Every per-client bound counts
//! them all, and no client's run holds up another client's requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::common::OuterNet;
use crate::support::docker_common::eventually;
use crate::support::mcp::{initialize, post, Home, HttpServer, Raw};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    /// An MCP session of its own (`initialize`, then `Mcp-Session-Id`).
    Session,
    /// 2026-07-28's stateless requests: no session, each request stands alone.
    Stateless,
}
use Form::*;

/// A server that knows Alice's and Bob's tokens, with `args`.
fn server(home: &Home, net: &OuterNet, args: &[&str]) -> HttpServer {
    let file = home.dir.path().join("tokens");
    std::fs::write(&file, format!("{ALICE}\n{BOB}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut all = vec!["--token-file", file.to_str().unwrap(), "--tiers", "process", "--timeout", "120s"];
    all.extend_from_slice(args);
    HttpServer::start(home, net, &all)
}

/// One way a client calls: through an MCP session of its own, or stateless.
struct Caller {
    port: u16,
    token: &'static str,
    session: Option<String>,
}

impl Caller {
    fn new(port: u16, token: &'static str, form: Form) -> Caller {
        let host = format!("127.0.0.1:{port}");
        let session = (form == Session).then(|| {
            let auth = format!("Authorization: Bearer {token}");
            let r = post(port, &host, &[&auth], &initialize());
            assert_eq!(r.status, 200, "{r:?}");
            let id = r.header("mcp-session-id").expect("a session id");
            let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
            let r = post(port, &host, &[&auth, &format!("Mcp-Session-Id: {id}")], &done);
            assert_eq!(r.status, 202, "{r:?}");
            id
        });
        Caller { port, token, session }
    }

    /// The whole HTTP request of `method`; `progress`: with a progress
    /// token, so a run that prints streams (and its answer's head comes
    /// before its end).
    fn request(&self, method: &str, mut params: Value, progress: bool) -> Vec<u8> {
        let mut headers = vec![format!("Authorization: Bearer {}", self.token)];
        let meta = &mut params["_meta"];
        *meta = json!({});
        if progress {
            meta["progressToken"] = json!(1);
        }
        match &self.session {
            Some(id) => headers.push(format!("Mcp-Session-Id: {id}")),
            None => {
                headers.push("MCP-Protocol-Version: 2026-07-28".into());
                headers.push(format!("Mcp-Method: {method}"));
                if let Some(name) = params["name"].as_str() {
                    headers.push(format!("Mcp-Name: {name}"));
                }
                let meta = &mut params["_meta"];
                meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
                meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
                meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "1"});
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, \
             text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.port,
            body.len()
        );
        for h in headers {
            req.push_str(&h);
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        req.push_str(&body);
        req.into_bytes()
    }

    fn tool(&self, name: &str, args: Value, progress: bool) -> Vec<u8> {
        self.request("tools/call", json!({"name": name, "arguments": args}), progress)
    }

    /// Send `method` and wait for its answer: the JSON-RPC response.
    fn rpc(&self, method: &str, params: Value) -> Value {
        let r = send(self.port, self.request(method, params, false), Duration::from_secs(60));
        answer(&r).unwrap_or_else(|| panic!("no answer to {method}: {r:?}"))
    }

    fn call(&self, name: &str, args: Value) -> Value {
        self.rpc("tools/call", json!({"name": name, "arguments": args}))
    }

    /// Runs in flight and calls waiting, as the server counts them.
    fn load(&self) -> (u64, u64) {
        let r = self.call("list_tiers", json!({}));
        let l = &r["result"]["structuredContent"]["bounds"]["in_flight"];
        (l["runs"].as_u64().unwrap_or_else(|| panic!("{r}")), l["queued"].as_u64().unwrap())
    }
}

/// Send a whole request and read the response to its end (or `wait`).
fn send(port: u16, request: Vec<u8>, wait: Duration) -> Raw {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let _ = s.write_all(&request);
    let mut buf = vec![];
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Raw { status, head: head.to_string(), body: body.to_string() }
}

/// The JSON-RPC response in a JSON or SSE body (progress notifications skipped).
fn answer(r: &Raw) -> Option<Value> {
    r.body
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
}

fn tool_error(v: &Value) -> Option<String> {
    (v["result"]["isError"] == true).then(|| v["result"]["content"][0]["text"].as_str().unwrap_or("").to_string())
}

/// Prints (a streamed answer's head goes out), then runs until the server stops it.
fn long_run() -> Value {
    json!({"language": "sh", "code": "echo started; sleep 600"})
}

/// The forms of a client's callers, cycled: all sessions, all stateless, mixed.
const FORMS: [(&str, [Form; 2]); 3] =
    [("sessions", [Session, Session]), ("stateless", [Stateless, Stateless]), ("mixed", [Session, Stateless])];

/// A bound, the server's flags, Alice's concurrent calls, of which run and
/// wait, and the refusal's words.
type Row = (&'static str, &'static [&'static str], usize, u64, u64, &'static str);

#[sandbench_testkit::test(needs = ["mcp"])]
fn every_run_bound_counts_a_client_by_its_token_in_every_form() {
    let rows: [Row; 2] = [
        (
            "runs in flight per client",
            &["--max-runs", "4", "--max-runs-per-client", "1", "--max-queue", "0"],
            2,
            1,
            0,
            "the most one client may have (sandbench mcp --max-runs-per-client 1)",
        ),
        (
            "calls waiting per client",
            &["--max-runs", "4", "--max-runs-per-client", "1", "--max-queue", "2"],
            3,
            1,
            1,
            "this client already has 1 run(s) in flight and 1 waiting",
        ),
    ];
    for (bound, flags, sent, running, waiting, refusal) in rows {
        for (form_name, forms) in FORMS {
            let case = format!("{bound}, {form_name}");
            let home = Home::new("[process]\nspare = false\n");
            let net = OuterNet::new();
            let server = server(&home, &net, flags);
            let port = server.port;
            // Bob watches the server's counts through an MCP session of his own.
            let bob = Caller::new(port, BOB, Session);
            let (tx, rx) = mpsc::channel();
            let mut threads = vec![];
            for i in 0..sent {
                let alice = Caller::new(port, ALICE, forms[i % 2]);
                let req = alice.tool("run_code", long_run(), true);
                let tx = tx.clone();
                threads.push(std::thread::spawn(move || {
                    let _ = tx.send(send(port, req, Duration::from_secs(200)));
                }));
            }
            // Every call of Alice's is running, waiting or answered (refused).
            let mut answered: Vec<Raw> = vec![];
            let settled = eventually(90, || {
                answered.extend(rx.try_iter());
                let (runs, queued) = bob.load();
                runs + queued + answered.len() as u64 == sent as u64
            });
            let (runs, queued) = bob.load();
            assert!(settled, "{case}: never settled: {runs} running, {queued} waiting, {} answered", answered.len());
            assert_eq!((runs, queued), (running, waiting), "{case}: Alice's calls in flight and waiting");
            assert_eq!(answered.len() as u64, sent as u64 - running - waiting, "{case}: {answered:?}");
            for r in &answered {
                let m = answer(r).as_ref().and_then(tool_error).unwrap_or_else(|| panic!("{case}: not refused: {r:?}"));
                assert!(m.contains(refusal), "{case}: wanted {refusal:?} in {m}");
            }
            // The server had room: Bob's run goes through at once.
            let b = bob.call("run_code", json!({"language": "sh", "code": "echo bob"}));
            assert_eq!(b["result"]["structuredContent"]["stdout"], "bob\n", "{case}: {b}");
            server.stop();
            for t in threads {
                t.join().unwrap();
            }
            assert!(net.leftover_cgroups().is_empty(), "{case}: cgroups left: {:?}", net.leftover_cgroups());
        }
    }
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn the_sessions_bound_counts_a_client_by_its_token_in_every_form() {
    for (form_name, forms) in FORMS {
        let home = Home::new("[process]\nspare = false\n");
        let net = OuterNet::new();
        let server = server(&home, &net, &["--max-sessions", "4", "--max-sessions-per-client", "1"]);
        let port = server.port;
        let first = Caller::new(port, ALICE, forms[0]).call("open_session", json!({}));
        assert!(tool_error(&first).is_none(), "{form_name}: {first}");
        let id = first["result"]["structuredContent"]["session"].as_str().unwrap().to_string();
        // While the first is open, a second of Alice's, in the other form, is refused.
        let second = Caller::new(port, ALICE, forms[1]).call("open_session", json!({}));
        let m = tool_error(&second).unwrap_or_else(|| panic!("{form_name}: a second session opened: {second}"));
        assert!(
            m.contains("this client already has 1 session(s) open") && m.contains("--max-sessions-per-client 1"),
            "{form_name}: {m}"
        );
        // Bob is not held back by Alice's.
        let bob = Caller::new(port, BOB, forms[1]).call("open_session", json!({}));
        assert!(tool_error(&bob).is_none(), "{form_name}: {bob}");
        // A stateless request's session lasts past its request, for that
        // token's stateless requests only.
        if forms[0] == Stateless {
            let alice = Caller::new(port, ALICE, Stateless);
            let listed = alice.call("list_sessions", json!({}));
            assert_eq!(listed["result"]["structuredContent"]["sessions"][0]["id"], id.as_str(), "{listed}");
            let used = alice.call("run_code", json!({"language": "sh", "code": "echo in-session", "session": id}));
            assert_eq!(used["result"]["structuredContent"]["stdout"], "in-session\n", "{used}");
            let theirs = Caller::new(port, BOB, Stateless).call("list_sessions", json!({}));
            assert_eq!(theirs["result"]["structuredContent"]["sessions"].as_array().map(Vec::len), Some(1), "{theirs}");
            let closed = alice.call("close_session", json!({"session": id}));
            assert_eq!(closed["result"]["structuredContent"]["closed"], true, "{closed}");
            let again = Caller::new(port, ALICE, Stateless).call("open_session", json!({}));
            assert!(tool_error(&again).is_none(), "{form_name}: closing gave the share back: {again}");
        }
        server.stop();
        assert!(net.leftover_cgroups().is_empty(), "{form_name}: cgroups left: {:?}", net.leftover_cgroups());
    }
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn one_clients_long_run_holds_up_no_other_clients_requests() {
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let server = server(&home, &net, &[]);
    let port = server.port;
    let host = format!("127.0.0.1:{port}");
    let bob = Caller::new(port, BOB, Session);
    let mut threads = vec![];
    for (i, form) in [Stateless, Session].into_iter().enumerate() {
        // No progress token: a stateless call's answer waits for its run's end.
        let req = Caller::new(port, ALICE, form).tool("run_code", long_run(), false);
        threads.push(std::thread::spawn(move || send(port, req, Duration::from_secs(200))));
        assert!(eventually(90, || bob.load().0 == i as u64 + 1), "{form:?}: Alice's run never started");
        // Another token's handshake and a stateless request answer while it runs.
        let r = post(port, &host, &[&format!("Authorization: Bearer {BOB}")], &initialize());
        assert_eq!(r.status, 200, "{form:?}: Bob's initialize did not answer while Alice's run was in flight: {r:?}");
        assert!(r.header("mcp-session-id").is_some(), "{r:?}");
        let tools = Caller::new(port, BOB, Stateless).rpc("tools/list", json!({}));
        assert!(tools["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{form:?}: {tools}");
        // ... and all that before her run ended.
        assert_eq!(bob.load().0, i as u64 + 1, "{form:?}: Alice's run ended first; the order says nothing");
        assert!(threads.iter().all(|t| !t.is_finished()), "{form:?}: a run of Alice's was answered");
    }
    server.stop();
    for t in threads {
        t.join().unwrap();
    }
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
}
