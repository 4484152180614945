//! A long call's output as it happens, for a client that asked (progress
//! notifications for a `progressToken`, log messages after
//! `logging/setLevel`), bounded and inert; and a call the client gives up on
//! — `notifications/cancelled`, or its HTTP stream dropped — stopped with
//! its sandbox gone soon after, never left to run to its wall limit.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::common::{self, OuterNet};
use crate::support::docker_common::eventually;
use crate::support::mcp::{self, call, sdk_python, Home, HttpServer};

const TICKS: &str = "import time\nfor i in range(8):\n    print('tick', i, '\\x1b]52;c;aGk=\\x07\\u202e', flush=True)\n    time.sleep(0.3)\n";

#[sandbench_testkit::test(needs = ["mcp"])]
fn a_long_call_streams_its_output_to_a_client_that_asked() {
    let py = sdk_python();
    let home = Home::new("");
    let mut with_progress = call("run_code", json!({"language": "python", "code": TICKS}));
    with_progress["progress"] = json!(true);
    let mut bomb = call(
        "run_code",
        json!({"language": "python", "code": "print('start', flush=True)\nx = []\nwhile True:\n    x.append(bytearray(8 << 20))\n", "limits": {"memory": "64M"}}),
    );
    bomb["progress"] = json!(true);
    let out = mcp::drive(
        &home,
        &py,
        json!([
            with_progress,
            bomb,
            {"op": "logs"},
            {"op": "set_level", "level": "info"},
            call("run_code", json!({"language": "sh", "code": "echo one; sleep 0.5; echo two >&2"})),
            {"op": "logs"},
        ]),
        &[],
    );
    // Progress: several notifications, as the program printed, before the
    // result; the result itself is as it always was.
    let r = &out[0];
    assert_eq!(r["structured"]["outcome"], "ok", "{r}");
    assert_eq!(r["structured"]["stdout"].as_str().unwrap().matches("tick").count(), 8);
    let progress = r["progress"].as_array().unwrap();
    assert!(progress.len() >= 3, "{progress:?}");
    let messages: String = progress.iter().map(|p| p["message"].as_str().unwrap_or("")).collect();
    let text: String =
        progress.iter().map(|p| p["message"].as_str().unwrap_or("").trim_start_matches("stdout: ")).collect();
    // The program's writes may arrive split at any byte (its stdout is
    // unbuffered): what matters is the text, in order, as it came.
    assert!(
        messages.starts_with("stdout: tick") && text.starts_with("tick 0") && text.contains("tick 7"),
        "{messages}"
    );
    assert!(!messages.contains('\x1b') && !messages.contains('\u{202e}'), "raw controls streamed: {messages:?}");
    assert!(messages.contains("␛]52") && messages.contains("<U+202E>"), "{messages:?}");
    let first = progress[0]["t"].as_f64().unwrap();
    let done = r["t"].as_f64().unwrap();
    assert!(done - first > 1.0, "the first notification came only {:.2} s before the result", done - first);
    let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[1] > w[0]), "progress must grow: {values:?}");
    // A violation is streamed as it happens.
    let r = &out[1];
    assert_eq!(r["structured"]["outcome"], "violation", "{r}");
    let messages: String =
        r["progress"].as_array().unwrap().iter().map(|p| p["message"].as_str().unwrap_or("")).collect();
    assert!(messages.contains("violation: memory at"), "{messages}");
    assert!(!messages.contains("violation: violation"), "the prefix is said once: {messages}");
    // No level set: no log messages.
    assert_eq!(out[2]["logs"], json!([]), "{}", out[2]);
    // After logging/setLevel info: the output as log messages from the logger "sandbench".
    let logs = out[5]["logs"].as_array().unwrap();
    assert!(logs.iter().all(|l| l["logger"] == "sandbench"), "{logs:?}");
    assert!(logs.iter().any(|l| l["data"]["stream"] == "stdout" && l["data"]["text"] == "one\n"), "{logs:?}");
    assert!(logs.iter().any(|l| l["data"]["stream"] == "stderr" && l["data"]["text"] == "two\n"), "{logs:?}");
}

fn need_root() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to watch the run's cgroup");
    }
}

/// Sandboxes (run cgroups, counted once across hierarchies) in `net`.
fn sandboxes(net: &OuterNet) -> usize {
    let names: std::collections::HashSet<_> =
        net.leftover_cgroups().into_iter().filter_map(|p| p.file_name().map(|n| n.to_owned())).collect();
    names.len()
}

/// How long after the client's cancel its sandbox was gone.
fn cancel_to_gone(net: &OuterNet, mut client: std::process::Child) -> Duration {
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let started = Instant::now();
    let cancelled = loop {
        let l = lines.next().expect("the client's output").unwrap();
        let v: Value = serde_json::from_str(&l).unwrap();
        if v["cancelled"] == true {
            break Instant::now();
        }
        assert!(v.get("is_error").is_none(), "the call ended before it was cancelled: {v}");
        assert!(started.elapsed() < Duration::from_secs(120));
    };
    while sandboxes(net) > 0 && cancelled.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = cancelled.elapsed();
    let _ = client.wait();
    took
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn a_cancelled_call_stops_its_sandbox_promptly_over_stdio_and_http() {
    need_root();
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let mut sleeper = call("run_code", json!({"language": "sh", "code": "sleep 60"}));
    sleeper["cancel_after"] = json!(2.0);
    let steps = json!([sleeper, call("list_tiers", json!({}))]);
    let mut cmd = home.command(&py, &steps, &["--timeout", "90s"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let stdio = cancel_to_gone(&net, net.spawn(&mut cmd));
    let server = HttpServer::start(&home, &net, &["--timeout", "90s"]);
    let mut cmd = server.client(&py, &steps, Some(&server.token));
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let http = cancel_to_gone(&net, net.spawn(&mut cmd));
    eprintln!("cancel to sandbox gone: stdio {stdio:?}, http {http:?}");
    // Generous for a loaded machine; a cancel that is not acted on leaves
    // the sandbox to its 90 s wall limit.
    assert!(stdio < Duration::from_secs(5) && http < Duration::from_secs(5), "stdio {stdio:?}, http {http:?}");
    assert!(home.runs().iter().all(|r| r["report"]["outcome"] == "cancelled"), "{:?}", home.runs());
    server.stop();
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn a_client_that_drops_its_http_stream_mid_call_has_its_run_stopped() {
    need_root();
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &["--timeout", "90s"]);
    let steps = json!([call("run_code", json!({"language": "sh", "code": "sleep 60"}))]);
    let mut cmd = server.client(&py, &steps, Some(&server.token));
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut client = net.spawn(&mut cmd);
    assert!(eventually(60, || sandboxes(&net) > 0), "the run never started");
    // The client dies without a word: its connection, and the call's
    // response stream with it, are gone.
    client.kill().unwrap();
    client.wait().unwrap();
    let t = Instant::now();
    while sandboxes(&net) > 0 && t.elapsed() < Duration::from_secs(80) {
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("client gone to sandbox gone: {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(10), "the run went on for {:?} after its client went away", t.elapsed());
    assert!(eventually(20, || home.runs().iter().any(|r| r["report"]["outcome"] == "cancelled")), "{:?}", home.runs());
    // The server stays, and serves the next client.
    let out = server.drive(&net, &py, json!([call("run_code", json!({"language": "sh", "code": "echo next"}))]));
    assert_eq!(out[0]["structured"]["stdout"], "next\n");
    server.stop();
}
