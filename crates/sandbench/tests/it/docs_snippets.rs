//! What the README and docs tell a new user to paste works as written
//! (issue 46): the install command puts `sandbench` where every MCP config
//! snippet points, and each snippet's arguments start a server that
//! answers an MCP client (initialize, then the tools).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::common::bin;

/// The install line of the README, and where it puts the binary.
const INSTALL: &str = "cargo install --locked --path crates/sandbench --root /usr/local";
const INSTALLED: &str = "/usr/local/bin/sandbench";

fn repo_file(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every fenced ```json block of `text` that configures MCP servers.
fn mcp_configs(text: &str) -> Vec<Value> {
    let mut out = vec![];
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.trim() != "```json" {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let block = block.join("\n");
        if block.contains("mcpServers") {
            out.push(
                serde_json::from_str(&block)
                    .unwrap_or_else(|e| panic!("a config snippet that is not JSON: {e}\n{block}")),
            );
        }
    }
    out
}

/// Start `sandbench` with `args` on stdio, as an MCP client would, and
/// return the tools it lists.
fn tools_of(args: &[String]) -> Vec<String> {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .args(args)
        .env("HOME", home.path())
        .env("SANDBENCH_STATE_DIR", home.path().join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The outer bound: a server that never answers is ended by its pid.
    let guard = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
    });
    let mut stdin = child.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "docs-snippet", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let mut tools = vec![];
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["id"] == 2 {
            tools = v["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect();
            break;
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    drop(guard);
    assert!(!tools.is_empty(), "sandbench {args:?} listed no tools (exit {status:?})");
    tools
}

#[sandbench_testkit::test(needs = ["process"])]
fn every_mcp_snippet_points_where_the_install_puts_sandbench_and_starts() {
    let readme = repo_file("README.md");
    assert!(readme.contains(INSTALL), "the README gives the install command `{INSTALL}`");
    let mut seen = 0;
    for doc in ["README.md", "docs/agents.md"] {
        for config in mcp_configs(&repo_file(doc)) {
            for (name, server) in config["mcpServers"].as_object().unwrap() {
                if let Some(url) = server["url"].as_str() {
                    // An HTTP client's: the address the docs start the server at.
                    let at = url.trim_start_matches("http://").trim_end_matches("/mcp");
                    assert!(
                        url.ends_with("/mcp") && repo_file(doc).contains(&format!("sandbench mcp --http {at}")),
                        "{doc}: {name}: {url} is not where the docs start the server"
                    );
                    continue;
                }
                assert_eq!(server["command"], INSTALLED, "{doc}: server {name} is not where the install puts it");
                let args: Vec<String> =
                    server["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
                let tools = tools_of(&args);
                assert!(tools.iter().any(|t| t == "run_code"), "{doc}: {name}: {tools:?}");
                seen += 1;
            }
        }
    }
    assert!(seen >= 1, "no MCP config snippet found in the docs");
    // `claude mcp add NAME -- COMMAND ARGS...`: the command line after `--`.
    for doc in ["README.md", "docs/agents.md"] {
        for line in repo_file(doc).lines().filter(|l| l.contains("claude mcp add") && l.contains(" -- ")) {
            let after = line.split(" -- ").nth(1).unwrap_or_else(|| panic!("{doc}: {line}"));
            let words: Vec<String> = after.split('`').next().unwrap().split_whitespace().map(str::to_string).collect();
            assert_eq!(words[0], "sandbench", "{doc}: {line}");
            let tools = tools_of(&words[1..]);
            assert!(tools.iter().any(|t| t == "run_code"), "{doc}: {line}: {tools:?}");
        }
    }
}
