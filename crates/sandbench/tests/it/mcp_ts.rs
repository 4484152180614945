//! `sandbench mcp` driven by the official TypeScript SDK client
//! (`@modelcontextprotocol/sdk` from npm, put in place by `.ci/setup-mcp.sh`;
//! `tests/it/mcp_client.mjs`), over stdio and HTTP: sessions, files,
//! streaming, cancellation and the auth failures — and by the MCP
//! Inspector's CLI, headless.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::common::{self, bin, OuterNet};
use crate::support::mcp::{call, lines_of, Home, HttpServer, SECRET};

fn node_dir() -> PathBuf {
    common::mcp_node().expect("cannot run although its needs hold: no TypeScript MCP SDK")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.mjs")
}

fn node(steps: &Value, target: &[String]) -> Command {
    let mut c = Command::new("node");
    c.arg(script()).arg(steps.to_string()).args(target).env("SANDBENCH_MCP_NODE", node_dir());
    c
}

/// The steps every transport is tried with, and their checks.
fn steps() -> Value {
    let mut ticks = call(
        "run_code",
        json!({"language": "python", "code": "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"}),
    );
    ticks["progress"] = json!(true);
    let mut slow = call("run_code", json!({"language": "sh", "code": "sleep 60"}));
    slow["cancel_after"] = json!(1.5);
    json!([
        {"op": "list_tools"},
        call("run_code", json!({"language": "python", "code": "import os\nprint('from ts', sorted(os.environ))"})),
        call("open_session", json!({})),
        call("write_file", json!({"session": "$session", "path": "data/in.txt", "content": "from the ts client\n"})),
        call("run_code", json!({"session": "$session", "language": "sh", "code": "tr a-z A-Z < data/in.txt > data/out.txt"})),
        call("read_file", json!({"session": "$session", "path": "data/out.txt"})),
        call("list_files", json!({"session": "$session", "depth": 2})),
        ticks,
        slow,
        {"op": "set_level", "level": "info"},
        call("run_code", json!({"session": "$session", "language": "sh", "code": "echo logged"})),
        {"op": "logs"},
        call("close_session", json!({"session": "$session"})),
    ])
}

fn check(o: &[Value]) {
    assert_eq!(o.len(), 13, "{o:?}");
    let names: Vec<&str> = o[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for n in ["run_code", "open_session", "write_file", "read_file", "list_files"] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert_eq!(o[1]["structured"]["outcome"], "ok", "{}", o[1]);
    assert!(o[1]["structured"]["stdout"].as_str().unwrap().starts_with("from ts"));
    assert!(!o[1].to_string().contains(SECRET));
    assert_eq!(o[3]["structured"]["bytes"], 19);
    assert_eq!(o[5]["structured"]["content"], "FROM THE TS CLIENT\n", "{}", o[5]);
    let entries = o[6]["structured"]["entries"].as_array().unwrap();
    assert!(entries.iter().any(|e| e["path"] == "data/out.txt" && e["type"] == "file"), "{entries:?}");
    let progress = o[7]["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "{}", o[7]);
    assert!(progress[0]["message"].as_str().unwrap().starts_with("stdout: tick"), "{progress:?}");
    assert_eq!(o[8]["cancelled"], true, "{}", o[8]);
    let logs = o[11]["logs"].as_array().unwrap();
    assert!(logs.iter().any(|l| l["logger"] == "sandbench" && l["data"]["text"] == "logged\n"), "{logs:?}");
    assert_eq!(o[12]["structured"]["closed"], true);
}

#[sandbench_testkit::test(needs = ["mcp-ts"])]
fn the_typescript_sdk_drives_sessions_files_streaming_and_cancels_over_stdio() {
    let home = Home::new("");
    let net = OuterNet::new();
    let target = vec![bin().display().to_string(), "mcp".into()];
    let mut cmd = node(&steps(), &target);
    cmd.env("SANDBENCH_CONFIG", home.config())
        .env("SANDBENCH_STATE_DIR", home.state())
        .env("SANDBENCH_TEST_SECRET", SECRET);
    let out = net.output(&mut cmd, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    check(&lines_of(&stdout));
    assert!(home.runs().iter().any(|r| r["client"] == "sandbench-ts-client"));
    // The cancelled call was stopped, not left to its wall limit.
    assert!(home.runs().iter().any(|r| r["report"]["outcome"] == "cancelled"), "{:?}", home.runs());
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["mcp-ts"])]
fn the_typescript_sdk_over_http_needs_the_token_and_a_right_origin() {
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let target = vec![server.url.clone()];
    let with = |token: Option<&str>, headers: Value, steps: &Value| {
        let mut c = node(steps, &target);
        c.env("NO_PROXY", "127.0.0.1").env("no_proxy", "127.0.0.1").env("SANDBENCH_MCP_HEADERS", headers.to_string());
        match token {
            Some(t) => c.env("SANDBENCH_MCP_TOKEN", t),
            None => c.env_remove("SANDBENCH_MCP_TOKEN"),
        };
        net.output(&mut c, Duration::from_secs(300))
    };
    let out = with(Some(&server.token), json!({}), &steps());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    check(&lines_of(&stdout));
    // The auth failures, as the SDK reports them.
    let list = json!([{"op": "list_tools"}]);
    for (token, headers, want) in [
        (None, json!({}), "401"),
        (Some("wrong-token-0123456789"), json!({}), "401"),
        (Some(server.token.as_str()), json!({"Origin": "http://evil.test"}), "403"),
    ] {
        let out = with(token, headers.clone(), &list);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(3), "{headers} got through: {stdout}");
        let line: Value = serde_json::from_str(stdout.lines().next().unwrap_or("{}")).unwrap();
        let said = line["connect_error"].to_string();
        assert!(said.contains(want), "{headers}: wanted {want} in {said}");
    }
    server.stop();
}

#[sandbench_testkit::test(needs = ["mcp-ts"])]
fn the_mcp_inspector_cli_lists_and_calls_headless() {
    let home = Home::new("");
    let net = OuterNet::new();
    let cli = node_dir().join("node_modules/@modelcontextprotocol/inspector-cli/build/cli.js");
    if !cli.is_file() {
        panic!("cannot run although its needs hold: the MCP Inspector is not installed in {}", node_dir().display());
    }
    let inspector = |args: &[&str]| {
        let mut c = Command::new("node");
        c.arg(&cli)
            .arg("--cli")
            .arg(bin())
            .arg("mcp")
            .args(args)
            .env("SANDBENCH_CONFIG", home.config())
            .env("SANDBENCH_STATE_DIR", home.state());
        let out = net.output(&mut c, Duration::from_secs(180));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str::<Value>(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let tools = inspector(&["--method", "tools/list"]);
    assert_eq!(tools["tools"].as_array().unwrap().len(), 8, "{tools}");
    let r = inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "run_code",
        "--tool-arg",
        "language=sh",
        "code=echo from-inspector",
    ]);
    assert_eq!(r["structuredContent"]["stdout"], "from-inspector\n", "{r}");
    assert!(home.runs().iter().any(|e| e["report"]["stdout"] == "from-inspector\n"));
}
