//! What no MCP client can make `sandbench mcp` hold: runs in flight (server
//! wide and per client), a bounded queue with a refusal that names the limit
//! and its flag, a memory budget across everything in flight, session slots
//! held until the sandbox is gone whatever the client does, and a soak with
//! a misbehaving client (floods, cancels, disconnects mid-call, half-open and
//! slow HTTP connections) that ends with nothing left and the server still
//! answering.

use std::io::Write;
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::common::{self, OuterNet};
use crate::support::docker_common::{eventually, session_containers_of, tier_ready};
use crate::support::mcp::{self, call, lines_of, message, sdk_python, server_pid, Home, HttpServer, Sampler};

fn need_root() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to count the runs' cgroups");
    }
}

/// Sandboxes alive under `net` now: their run cgroups (one per sandbox on
/// the process tier, in each hierarchy: counted once by name).
fn sandboxes(net: &OuterNet) -> usize {
    let names: std::collections::HashSet<_> =
        net.leftover_cgroups().into_iter().filter_map(|p| p.file_name().map(|n| n.to_owned())).collect();
    names.len()
}

fn sleeper(secs: f64) -> Value {
    call("run_code", json!({"language": "sh", "code": format!("sleep {secs}; echo done")}))
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn runs_past_the_most_wait_in_a_bounded_queue_and_the_rest_are_refused_naming_the_flag() {
    need_root();
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = std::sync::Arc::new(OuterNet::new());
    let steps = json!([{"op": "concurrent", "calls": (0..7).map(|_| sleeper(1.5)).collect::<Vec<_>>()}]);
    let mut cmd = home.command(
        &py,
        &steps,
        &["--max-runs", "2", "--max-runs-per-client", "2", "--max-queue", "2", "--timeout", "30s"],
    );
    let c = net.clone();
    let sampler = Sampler::start(move || sandboxes(&c));
    let out = net.output(&mut cmd, Duration::from_secs(180));
    let most = sampler.most();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    let results = lines_of(&stdout)[0]["results"].as_array().unwrap().clone();
    let ok = results.iter().filter(|r| r["structured"]["outcome"] == "ok").count();
    let refused: Vec<String> = results.iter().filter(|r| r["is_error"] == true).map(message).collect();
    // Two run, two wait (this client's own most waiting), the rest are refused.
    assert_eq!(ok, 4, "{results:?}");
    assert_eq!(refused.len(), 3, "{results:?}");
    for m in &refused {
        assert!(m.contains("--max-runs-per-client 2") || m.contains("--max-queue 2"), "{m}");
    }
    assert!(most <= 2, "{most} sandboxes at once under --max-runs 2");
    assert!(most >= 1, "the sampler saw no sandbox at all");
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn a_client_cannot_take_the_host_the_memory_budget_admits_only_what_fits() {
    need_root();
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = std::sync::Arc::new(OuterNet::new());
    let c = net.clone();
    let sampler = Sampler::start(move || sandboxes(&c));
    // 256M each by default, 300M of budget: one at a time, the others wait.
    let steps = json!([{"op": "concurrent", "calls": (0..3).map(|_| sleeper(1.0)).collect::<Vec<_>>()}]);
    let out = net.output(
        &mut home.command(&py, &steps, &["--max-runs", "4", "--budget-memory", "300M", "--memory", "256M"]),
        Duration::from_secs(180),
    );
    let most = sampler.most();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    let results = lines_of(&stdout)[0]["results"].as_array().unwrap().clone();
    assert!(results.iter().all(|r| r["structured"]["outcome"] == "ok"), "{results:?}");
    assert_eq!(most, 1, "runs of 256M each under a 300M budget ran {most} at once");
    // A request that could never fit is refused at once, naming the flag.
    let out = mcp::drive(
        &home,
        &py,
        json!([call("run_code", json!({"language": "sh", "code": "true", "limits": {"memory": "512M"}}))]),
        &["--max-memory", "1G", "--budget-memory", "300M", "--memory", "256M"],
    );
    let m = message(&out[0]);
    assert!(m.contains("above this server's memory budget 300M") && m.contains("--budget-memory"), "{m}");
}

/// Open sessions and cancel each open while its sandbox is being built; a
/// sampler counts the sandboxes that exist meanwhile.
fn open_and_cancel_flood(tier: &str, count: impl Fn(&OuterNet, u32) -> usize + Send + Sync + 'static) {
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = std::sync::Arc::new(OuterNet::new());
    let mut steps: Vec<Value> = vec![];
    for i in 0..12 {
        let mut open = call("open_session", json!({"tier": tier}));
        // Cancel at various points of the build (and, for a fast build,
        // after it: then the session is kept and closed with the client).
        open["cancel_after"] = json!(0.05 + 0.07 * (i % 6) as f64);
        steps.push(open);
    }
    // The server still answers, and a session can be opened once the
    // cancelled ones are torn down. A kept one is closed first: one whose
    // open answered (a fast build) or whose cancel came as it was answered
    // (the client never read its id: list_sessions finds it).
    steps.push(json!({"op": "close_listed"}));
    let mut again = call("open_session", json!({"tier": tier}));
    // Tearing the cancelled ones down waits for the engine (or the build
    // that was under way): under a loaded CI machine that took over 60 s.
    again["retry_for"] = json!(180);
    steps.push(again);
    steps.push(call("close_session", json!({"session": "$session"})));
    let mut cmd = home.command(&py, &Value::Array(steps.clone()), &["--tiers", tier, "--max-sessions", "1"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut client = net.spawn(&mut cmd);
    let started = Instant::now();
    let pid = loop {
        if let Some(p) = server_pid(&net) {
            break p;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the server never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let c = net.clone();
    let sampler = Sampler::start(move || count(&c, pid));
    let status = loop {
        if let Some(st) = client.try_wait().unwrap() {
            break st;
        }
        assert!(started.elapsed() < Duration::from_secs(360), "the client did not finish");
        std::thread::sleep(Duration::from_millis(50));
    };
    let most = sampler.most();
    let mut stdout = String::new();
    std::io::Read::read_to_string(client.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{stdout}");
    let lines = lines_of(&stdout);
    let n = lines.len();
    assert_eq!(lines[n - 2]["structured"]["tier"], tier, "after the flood a session opens: {stdout}");
    assert_eq!(lines[n - 1]["structured"]["closed"], true, "{stdout}");
    assert!(most <= 1, "{tier}: {most} session sandboxes existed at once under --max-sessions 1");
    eprintln!("{tier}: at most {most} session sandbox(es) at once during the open-and-cancel flood");
    assert!(eventually(60, || net.remaining().is_empty()), "left running: {:?}", net.remaining());
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn an_open_and_cancel_flood_never_holds_more_process_sandboxes_than_max_sessions() {
    need_root();
    // A process session's sandbox has its run cgroup from the start of its
    // build to the end of its teardown.
    open_and_cancel_flood("process", |net, _| sandboxes(net));
}

#[sandbench_testkit::test(needs = ["docker", "mcp"])]
fn an_open_and_cancel_flood_never_holds_more_containers_than_max_sessions() {
    if !tier_ready("docker") {
        return;
    }
    open_and_cancel_flood("docker", |_, server| session_containers_of(server).len());
}

/// The soak: a misbehaving client over HTTP, then a check that nothing is
/// left and the server still answers a well-behaved one.
#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn a_misbehaving_http_client_leaves_nothing_behind_and_the_server_still_answers() {
    need_root();
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = std::sync::Arc::new(OuterNet::new());
    let server = HttpServer::start(
        &home,
        &net,
        &[
            "--max-runs",
            "3",
            "--max-runs-per-client",
            "3",
            "--max-queue",
            "4",
            "--max-http-sessions",
            "6",
            "--timeout",
            "60s",
        ],
    );
    let c = net.clone();
    let sampler = Sampler::start(move || sandboxes(&c));
    let port = server.port;
    let auth = format!("Authorization: Bearer {}", server.token);

    // 1. A flood of calls, half of them cancelled mid-run.
    let mut calls = vec![];
    for i in 0..10 {
        let mut c = sleeper(20.0);
        if i % 2 == 0 {
            c["cancel_after"] = json!(1.0);
        }
        calls.push(c);
    }
    let mut flood = server.client(&py, &json!([{"op": "concurrent", "calls": calls}]), Some(&server.token));
    flood.stdout(Stdio::null()).stderr(Stdio::null());
    let mut flood = net.spawn(&mut flood);
    eprintln!("soak: flood of 10 calls sent");
    // 2. Then it disconnects mid-call: killed outright.
    std::thread::sleep(Duration::from_secs(3));
    flood.kill().unwrap();
    flood.wait().unwrap();

    eprintln!("soak: the flooding client was killed");
    // 3. MCP sessions opened past the most: refused, naming the flag; most
    //    are ended (DELETE), two are abandoned (they expire on their own).
    let host = format!("127.0.0.1:{port}");
    let mut ids = vec![];
    let mut refused = vec![];
    for _ in 0..8 {
        let r = mcp::post(port, &host, &[&auth], &mcp::initialize());
        match r.header("mcp-session-id") {
            Some(id) if r.status == 200 => ids.push(id),
            _ => refused.push(r),
        }
    }
    // (The killed client's own MCP session may still count until it expires.)
    assert!(ids.len() >= 5 && refused.len() >= 2, "{} opened, refused: {refused:?}", ids.len());
    assert!(refused.iter().all(|r| r.status == 503 && r.body.contains("--max-http-sessions")), "{refused:?}");
    for id in &ids[..ids.len() - 2] {
        let del = format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}\r\nMcp-Session-Id: {id}\r\nConnection: close\r\n\r\n"
        );
        let r = mcp::raw(port, del.as_bytes(), Duration::from_secs(20));
        assert_eq!(r.status, 200, "an ended session is answered 200 (the SDKs log 202 as a failure): {r:?}");
        // Ended already, or never opened: nothing is ended, so not 200.
        let r = mcp::raw(port, del.as_bytes(), Duration::from_secs(20));
        assert_eq!(r.status, 404, "a second DELETE of {id}: {r:?}");
    }
    // 4. Half-open and slow connections: headers never finished, a body
    //    never sent, many idle sockets, past the most connections.
    let mut held = vec![];
    for _ in 0..10 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        held.push(s);
    }
    for _ in 0..5 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = s.write_all(
            format!("POST /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{{").as_bytes(),
        );
        held.push(s);
    }
    for _ in 0..80 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            held.push(s);
        }
    }
    eprintln!("soak: {} connections held", held.len());
    let r = mcp::post(port, &host, &[&auth], &mcp::initialize());
    assert_eq!(r.status, 503, "past the most connections: {r:?}");
    drop(held);
    // (The server frees a connection's slot when it sees it closed.)
    std::thread::sleep(Duration::from_secs(1));
    // 5. A request body over the limit.
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(9 << 20));
    let r = mcp::post(port, &host, &[&auth], &big);
    assert!(matches!(r.status, 413 | 0), "an oversized body got {}", r.status);
    eprintln!("soak: an oversized body got {}", r.status);

    // The server still answers a well-behaved client, promptly.
    let t = Instant::now();
    let out = server.drive(&net, &py, json!([call("run_code", json!({"language": "sh", "code": "echo alive"}))]));
    assert_eq!(out[0]["structured"]["stdout"], "alive\n", "{out:?}");
    eprintln!("after the flood: a call answered in {:?}", t.elapsed());
    // Everything of the flood is gone long before its 20 s programs would have ended.
    assert!(
        eventually(15, || sandboxes(&net) == 0),
        "sandboxes of a client that went away still run: {:?}",
        net.leftover_cgroups()
    );
    let most = sampler.most();
    assert!(most <= 3, "{most} sandboxes at once under --max-runs 3");
    server.stop();
    assert!(eventually(30, || net.remaining().is_empty()), "left running: {:?}", net.remaining());
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
}
