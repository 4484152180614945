//! `sandbench mcp` driven by a real MCP client: the official Python SDK
//! (`mcp` from PyPI, installed by `.ci/setup-mcp.sh`) runs `mcp_client.py`,
//! which starts the server over stdio and prints one JSON line per step.
//! Skipped with a reason when the SDK is not installed, unless
//! `SANDBENCH_REQUIRE_TIERS` names `mcp`.

use base64::Engine;

use crate::support::common;
use crate::support::docker_common::{eventually, tier_available, tier_ready};
use crate::support::mcp::{call, drive, Home, HttpServer, SECRET};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bin, OuterNet};
use serde_json::{json, Value};

/// The Python that has the `mcp` SDK (the test names `mcp` in its needs).
fn sdk_python() -> Option<std::path::PathBuf> {
    Some(crate::support::mcp::sdk_python())
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_lists_tools_runs_code_keeps_secrets_and_logs_the_client() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    // Its environment, and all of its own memory (a process forked from the
    // process tier's zygote holds what the zygote ever held): the server's
    // secret must be in neither.
    let code = "import os, re\nprint('hello from mcp')\nprint(sorted(os.environ.items()))\n\
                print(open('/proc/self/environ','rb').read())\n\
                pat = re.compile(rb'sk-mcp-test-secre[t]-[0-9a-f]{6}')\nfound = set()\n\
                mem = open('/proc/self/mem', 'rb', 0)\n\
                for line in open('/proc/self/maps').read().splitlines():\n\
                \x20   f = line.split()\n\
                \x20   if 'r' not in f[1] or line.endswith(('[vvar]', '[vsyscall]', '[vvar_vclock]')): continue\n\
                \x20   lo, hi = (int(x, 16) for x in f[0].split('-'))\n\
                \x20   try: mem.seek(lo); found.update(m.group() for m in pat.finditer(mem.read(hi - lo)))\n\
                \x20   except (OSError, ValueError, OverflowError): pass\n\
                print('memory:', sorted(found) or 'nothing')\n";
    let out = drive(
        &home,
        &py,
        json!([
            {"op": "list_tools"},
            call("run_code", json!({"language": "python", "code": code})),
            call("list_tiers", json!({})),
        ]),
        &[],
    );
    let names: Vec<&str> = out[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    for n in [
        "run_code",
        "list_tiers",
        "open_session",
        "close_session",
        "list_sessions",
        "write_file",
        "read_file",
        "list_files",
    ] {
        assert!(names.contains(&n), "{n} missing: {names:?}");
    }
    let schema = &out[0]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "run_code").unwrap()["input_schema"];
    assert_eq!(schema["required"], json!(["language", "code"]), "{schema}");

    let run = &out[1];
    assert_eq!(run["is_error"], false, "{run}");
    let s = &run["structured"];
    assert_eq!(s["outcome"], "ok", "{run}");
    assert_eq!(s["tier"], "process");
    assert_eq!(s["exit"]["code"], 0);
    assert!(s["timings_ms"]["total"].as_f64().unwrap() > 0.0);
    assert!(s["stdout"].as_str().unwrap().starts_with("hello from mcp\n"), "{s}");
    let text = run["text"].as_str().unwrap();
    assert!(text.contains("outcome: ok") && text.contains("hello from mcp"), "{text}");
    assert!(!run.to_string().contains(SECRET), "the secret reached the sandbox: {run}");
    assert!(s["stdout"].as_str().unwrap().contains("memory: nothing"), "{s}");
    if common::is_root() {
        // As root the run's process is the zygote's fork: the scan covered its memory.
        assert_eq!(s["details"]["interpreter"], "zygote fork", "{s}");
    }

    let tiers = &out[2]["structured"];
    assert_eq!(tiers["default"], "process");
    assert_eq!(tiers["tiers"][0]["tier"], "process");
    assert!(tiers["tiers"][0]["available"].is_boolean());
    assert_eq!(tiers["max_limits"]["memory_bytes"], tiers["default_limits"]["memory_bytes"]);

    // The run is in the log, with the client's name from its handshake.
    let log = std::fs::read_to_string(home.state().join("runs.jsonl")).unwrap();
    let entries: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(entries.len(), 1, "{log}");
    assert_eq!(entries[0]["front_end"], "mcp");
    assert_eq!(entries[0]["client"], "sandbench-test-client");
    assert_eq!(entries[0]["code"], code);
    assert_eq!(entries[0]["report"]["outcome"], "ok");
    assert!(!log.contains(SECRET));
}

/// The gauntlet's invisible forgery through `run_code`: the reply's text and
/// its structured output show every invisible, bidi and tag character by
/// name, so neither a person nor a model reads a forged verdict or a hidden
/// instruction in it.
#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_replies_show_invisible_and_bidi_characters_by_name() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    let code = std::fs::read_to_string(common::samples_dir().join("hostile/invisible_forgery.py")).unwrap();
    let out = drive(&home, &py, json!([call("run_code", json!({"language": "python", "code": code}))]), &[]);
    let run = &out[0];
    assert_eq!(run["structured"]["outcome"], "ok", "{run}");
    let text = run["text"].as_str().unwrap();
    assert!(text.starts_with("outcome: ok\n"), "{text}");
    for shown in ["<U+2028>", "<U+2029>", "<U+202E>", "<U+2066>", "<U+200B>", "<U+FEFF>", "<U+E0020>", "<U+E0155>"] {
        assert!(text.contains(shown), "{shown} is not in the reply's text: {text}");
        assert!(run["structured"]["stdout"].as_str().unwrap().contains(shown), "{shown}: {run}");
    }
    assert!(run["structured"]["stderr"].as_str().unwrap().contains("<U+202E>"), "{run}");
    // Nowhere in the whole reply (JSON escapes only C0 controls).
    let all = run.to_string();
    let raw: Vec<String> =
        all.chars().filter(|c| sandbench::sanitize::is_hidden(*c)).map(|c| format!("U+{:04X}", c as u32)).collect();
    assert!(raw.is_empty(), "raw hidden characters in the reply: {raw:?}");
}

/// Hostile text, one row per class: what a program puts in file names, link
/// targets, stdout and stderr.
const HOSTILE: &[(&str, &[u8])] = &[
    ("osc52", b"\x1b]52;c;aGk=\x07"),
    ("csi", b"\x1b[2J\x1b[31m"),
    ("c1-nel", "\u{85}".as_bytes()),
    ("c1-csi", "\u{9b}31m".as_bytes()),
    ("bidi-override", "\u{202a}\u{202e}".as_bytes()),
    ("bidi-isolate", "\u{2066}\u{2069}".as_bytes()),
    ("tags", "\u{e0001}\u{e0041}\u{e007f}".as_bytes()),
    ("zero-width", "\u{200b}\u{200f}\u{feff}".as_bytes()),
    ("line-sep", "\u{2028}".as_bytes()),
    ("para-sep", "\u{2029}".as_bytes()),
    ("newline", b"\r\n\t"),
    ("nul", b"a\x00b"),
    ("lone-surrogate", b"\xed\xa0\x80"),
    ("invalid-utf8", b"\xff\xfe\xc0"),
];

/// Every string in `v` (keys too) holding a hidden character: none may,
/// but newlines and tabs.
fn raw_hidden(v: &Value, at: &str, out: &mut Vec<String>) {
    let bad = |s: &str| s.chars().any(|c| c != '\n' && c != '\t' && sandbench::sanitize::is_hidden(c));
    match v {
        Value::String(s) if bad(s) => out.push(format!("{at}: {s:?}")),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| raw_hidden(v, &format!("{at}[{i}]"), out)),
        Value::Object(o) => {
            for (k, v) in o {
                if bad(k) {
                    out.push(format!("{at}: key {k:?}"));
                }
                raw_hidden(v, &format!("{at}.{k}"), out);
            }
        }
        _ => {}
    }
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn hostile_text_leaves_every_tool_inert_in_text_and_structured_content() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("[process]\nspare = false\n");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let rows: Vec<String> = HOSTILE.iter().map(|(tag, b)| format!("('{tag}', '{}')", hex(b))).collect();
    // Names (no NUL or slash can be in one), a link to each, both streams, an exit code.
    let plant = format!(
        "import os, sys\nrows = [{}]\nfor tag, h in rows:\n    b = bytes.fromhex(h)\n    t = tag.encode()\n    \
         if b'\\0' not in b and b'/' not in b:\n        open(b'n-' + t + b'-' + b + b'-end', 'wb').write(b)\n        \
         os.symlink(b'/t-' + b, b'k-' + t)\n    sys.stdout.buffer.write(b'o-' + t + b'-' + b + b'-end\\n')\n    \
         sys.stderr.buffer.write(b'e-' + t + b'-' + b + b'-end\\n')\nsys.exit(3)\n",
        rows.join(", ")
    );
    let session = |mut a: Value| {
        a["session"] = json!("$session");
        a
    };
    let named: Vec<(&str, String)> = HOSTILE
        .iter()
        .filter(|(_, b)| !b.contains(&0))
        .filter_map(|(tag, b)| Some((*tag, std::str::from_utf8(b).ok()?.to_string())))
        .collect();
    let mut steps = vec![
        call("open_session", json!({"tier": "process"})),
        call("run_code", session(json!({"language": "python", "code": plant}))),
        call("list_files", session(json!({}))),
        call("run_code", json!({"language": "python", "code": plant, "tier": "process"})),
    ];
    for (tag, s) in &named {
        steps.push(call("read_file", session(json!({"path": format!("n-{tag}-{s}-end")}))));
        steps.push(call("write_file", session(json!({"path": format!("w-{tag}-{s}"), "content": s}))));
        steps.push(call("read_file", session(json!({"path": format!("missing-{tag}-{s}")}))));
    }
    steps.extend([
        call("list_sessions", json!({})),
        call("list_tiers", json!({})),
        call("close_session", json!({"session": "$session"})),
    ]);
    let out = drive(&home, &py, Value::Array(steps), &["--tiers", "process"]);
    // Nothing hidden anywhere: no reply's text, structured content or error.
    for (i, o) in out.iter().enumerate() {
        let mut found = vec![];
        raw_hidden(o, &format!("step {i}"), &mut found);
        assert!(found.is_empty(), "raw hidden characters in a reply: {found:#?}");
    }
    // And everything is there, by name: the output of both runs ...
    for run in [&out[1], &out[3]] {
        let s = &run["structured"];
        assert_eq!(s["exit"]["code"], 3, "{run}");
        for (tag, _) in HOSTILE {
            for (stream, p) in [("stdout", "o"), ("stderr", "e")] {
                assert!(s[stream].as_str().unwrap().contains(&format!("{p}-{tag}-")), "{tag}: {run}");
            }
        }
        assert!(s["stdout"].as_str().unwrap().contains("o-osc52-␛]52;c;aGk=^G-end"), "{run}");
        assert!(s["stdout"].as_str().unwrap().contains("o-bidi-override-<U+202A><U+202E>-end"), "{run}");
    }
    // ... the names and link targets, with the exact bytes in hex ...
    let entries = out[2]["structured"]["entries"].as_array().unwrap();
    for (tag, b) in HOSTILE.iter().filter(|(_, b)| !b.contains(&0)) {
        let name = [format!("n-{tag}-").as_bytes(), b, b"-end"].concat();
        let e = entries
            .iter()
            .find(|e| e["path"].as_str().unwrap().starts_with(&format!("n-{tag}-")))
            .unwrap_or_else(|| panic!("{tag}: no entry in {entries:?}"));
        assert_eq!(e["path_hex"], hex(&name), "{tag}: {e}");
        let link = entries.iter().find(|e| e["path"] == format!("k-{tag}")).unwrap();
        assert!(link["link_target"].as_str().unwrap().starts_with("/t-"), "{tag}: {link}");
    }
    // ... and each file's content, exact in base64; names echoed inert.
    for (j, (tag, s)) in named.iter().enumerate() {
        let (read, write, missing) = (&out[4 + 3 * j], &out[5 + 3 * j], &out[6 + 3 * j]);
        let r = &read["structured"];
        assert_eq!(r["encoding"], "base64", "{tag}: {read}");
        assert_eq!(r["content_base64"], base64::engine::general_purpose::STANDARD.encode(s), "{tag}: {read}");
        assert_eq!(write["structured"]["bytes"], s.len(), "{tag}: {write}");
        assert!(crate::support::mcp::message(missing).contains("does not exist"), "{tag}: {missing}");
    }
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_memory_bomb_is_a_violation_with_its_time() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    let bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n";
    let out = drive(
        &home,
        &py,
        json!([call("run_code", json!({"language": "python", "code": bomb, "limits": {"memory": "64M"}}))]),
        &[],
    );
    let s = &out[0]["structured"];
    assert_eq!(s["outcome"], "violation", "{}", out[0]);
    assert_eq!(s["limits"]["memory_bytes"], 64 << 20);
    let v = s["violations"].as_array().unwrap();
    assert!(v.iter().any(|v| v["kind"] == "memory" && v["at_ms"].as_f64().unwrap() > 0.0), "{v:?}");
    assert!(out[0]["text"].as_str().unwrap().contains("violation: memory at"), "{}", out[0]);
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_bad_arguments_say_what_was_wrong_and_the_ceiling_holds() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    let py_args = |extra: Value| {
        let mut a = json!({"language": "python", "code": "print(1)"});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        call("run_code", a)
    };
    let cases: Vec<(Value, &str)> = vec![
        (call("run_code", json!({"language": "ruby", "code": "puts 1"})), "unknown language 'ruby'"),
        (py_args(json!({"code": " \n"})), "code is empty"),
        (py_args(json!({"tier": "e2b"})), "tier 'e2b' is not offered by this server (allowed: process)"),
        (py_args(json!({"limits": {"memory": "2G"}})), "limits.memory 2G is above this server's ceiling 512M"),
        (py_args(json!({"limits": {"wall_time": "1h"}})), "limits.wall_time 3600s is above this server's ceiling"),
        (py_args(json!({"limits": {"memory": "lots"}})), "limits.memory: invalid size 'lots'"),
        (py_args(json!({"limits": {"memroy": "1M"}})), "unknown field `memroy`"),
        (py_args(json!({"shell": true})), "unknown field `shell`"),
        (call("run_code", json!({"code": "print(1)"})), "missing field `language`"),
    ];
    let steps: Vec<Value> = cases.iter().map(|(s, _)| s.clone()).collect();
    // The operator allows up to 512M; the client may not go past it.
    let out = drive(&home, &py, Value::Array(steps), &["--max-memory", "512M"]);
    for ((step, want), got) in cases.iter().zip(&out) {
        // A tool result with isError (the MCP spec's input validation
        // errors: the model reads and corrects them), never a JSON-RPC error.
        assert_eq!(got["mcp_error"], Value::Null, "{step}: {got}");
        assert_eq!(got["is_error"], true, "{step}: {got}");
        let msg = got["text"].as_str().unwrap().to_string();
        assert!(msg.contains(want), "{step}: wanted {want:?} in {msg:?}");
    }
    // Nothing ran: refused calls are not runs.
    assert!(!home.state().join("runs.jsonl").exists());
}

#[sandbench_testkit::test(needs = ["docker", "mcp"])]
fn mcp_runs_on_docker_when_offered() {
    let Some(py) = sdk_python() else { return };
    if !tier_ready("docker") {
        return;
    }
    let home = Home::new("");
    let out = drive(
        &home,
        &py,
        json!([call("run_code", json!({"language": "sh", "code": "echo in-docker; env", "tier": "docker"}))]),
        &["--tiers", "process,docker"],
    );
    let s = &out[0]["structured"];
    assert_eq!(s["outcome"], "ok", "{}", out[0]);
    assert_eq!(s["tier"], "docker");
    assert!(s["stdout"].as_str().unwrap().starts_with("in-docker\n"));
    assert!(!out[0].to_string().contains(SECRET));
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn mcp_client_that_disconnects_mid_run_leaves_nothing_behind() {
    let Some(py) = sdk_python() else { return };
    if !common::is_root() {
        // The run's cgroup is how this test sees the run start and end.
        panic!("cannot run although its needs hold: needs root to watch the run's cgroup");
    }
    // No spare: the only cgroup under the net is the run's own.
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let steps = json!([call("run_code", json!({"language": "python", "code": "import time\ntime.sleep(120)\n"}))]);
    let mut cmd = home.command(&py, &steps, &["--timeout", "120s"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut client = net.spawn(&mut cmd);
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("calling"), "{first}");
    assert!(eventually(60, || !net.leftover_cgroups().is_empty()), "the run never started");
    // The client dies without a goodbye: the server's stdin closes mid-run.
    client.kill().unwrap();
    client.wait().unwrap();
    // The server cancels the run, waits for its clean-up and exits — long
    // before the program's 120 s would have run out.
    assert!(
        eventually(30, || net.remaining().is_empty()),
        "processes still running after the client left: {:?}",
        net.remaining()
    );
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
    // The cancelled run is logged as such.
    let log = std::fs::read_to_string(home.state().join("runs.jsonl")).unwrap_or_default();
    assert!(log.contains("\"outcome\":\"cancelled\""), "{log}");
}

#[sandbench_testkit::test]
fn mcp_http_listens_on_loopback_only() {
    let out = Command::new(bin()).args(["mcp", "--http", "0.0.0.0:8765"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loopback only"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_over_streamable_http_on_loopback() {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let steps = json!([call("run_code", json!({"language": "sh", "code": "echo via-http; env"}))]);
    let out = server.drive(&net, &py, steps);
    let result = out.last().unwrap();
    assert_eq!(result["structured"]["outcome"], "ok", "{result}");
    assert!(result["structured"]["stdout"].as_str().unwrap().starts_with("via-http\n"));
    assert!(!result.to_string().contains(SECRET));
    assert!(!result.to_string().contains(&server.token), "the bearer token reached the sandbox");
    // SIGTERM to the server we started: it ends and leaves no sandbox.
    server.stop();
    assert!(eventually(20, || net.remaining().is_empty()), "left running: {:?}", net.remaining());
    assert!(eventually(5, || net.leftover_cgroups().is_empty()), "cgroups left: {:?}", net.leftover_cgroups());
}

/// open_session → run_code writes a file → run_code reads it back; a fresh
/// run does not see it; close_session; every refusal says why.
fn session_round_trip(tier: &str, server_args: &[&str]) {
    let Some(py) = sdk_python() else { return };
    let home = Home::new("");
    let write = "open('/work/agent-notes.txt', 'w').write('from call one')\nprint('wrote')\n";
    let read = "print(open('/work/agent-notes.txt').read())\n";
    let run = |code: &str, extra: Value| {
        let mut a = json!({"language": "python", "code": code});
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        call("run_code", a)
    };
    let steps = json!([
        call("open_session", json!({"tier": tier, "limits": {"memory": "128M"}, "idle_timeout": "2m"})),
        run(write, json!({"session": "$session"})),
        run(read, json!({"session": "$session", "limits": {"wall_time": "5s"}})),
        run(read, json!({"tier": tier})),
        run(read, json!({"session": "$session", "limits": {"memory": "64M"}})),
        run(read, json!({"session": "$session", "tier": if tier == "process" { "docker" } else { "process" }})),
        call("open_session", json!({"tier": tier})),
        call("close_session", json!({"session": "$session"})),
        run(read, json!({"session": "$session"})),
        call("open_session", json!({"tier": tier, "max_life": "2h"})),
        call("list_sessions", json!({})),
        call("open_session", json!({"tier": tier})),
        call("list_sessions", json!({})),
    ]);
    let out = drive(&home, &py, steps, server_args);
    let opened = &out[0]["structured"];
    assert_eq!(out[0]["is_error"], false, "{}", out[0]);
    let id = opened["session"].as_str().unwrap().to_string();
    assert!(id.starts_with("s-"), "{opened}");
    assert_eq!(opened["tier"], tier);
    assert_eq!(opened["limits"]["memory_bytes"], 128 << 20);
    assert_eq!(opened["idle_timeout_ms"], 120_000);
    assert_eq!(out[1]["structured"]["outcome"], "ok", "{}", out[1]);
    // The second call reads the first call's file.
    let second = &out[2]["structured"];
    assert_eq!(second["outcome"], "ok", "{}", out[2]);
    assert_eq!(second["stdout"], "from call one\n");
    assert_eq!(second["session"], json!({"id": id, "call": 2}));
    assert_eq!(second["limits"]["wall_time"], 5000);
    assert_eq!(second["limits"]["memory_bytes"], 128 << 20, "the session's memory");
    // A fresh sandbox has no such file.
    let fresh = &out[3]["structured"];
    assert!(fresh["stderr"].as_str().unwrap().contains("FileNotFoundError"), "{}", out[3]);
    assert!(fresh.get("session").is_none() || fresh["session"].is_null(), "{fresh}");
    let refused = |i: usize, want: &str| {
        let msg = out[i]["mcp_error"]["message"].as_str().or(out[i]["text"].as_str()).unwrap_or_default().to_string();
        assert!(msg.contains(want), "step {i}: wanted {want:?} in {}", out[i]);
    };
    refused(4, "limits.memory belongs to the whole session");
    refused(5, &format!("keeps a {tier} sandbox"));
    // The server allows one session at a time here.
    refused(6, "already has 1 session(s) open");
    assert_eq!(out[7]["structured"]["closed"], true, "{}", out[7]);
    // Refused calls never started: two calls ran.
    assert_eq!(out[7]["structured"]["calls"], 2, "{}", out[7]);
    refused(8, "unknown session");
    refused(9, "max_life 7200s is above this server's ceiling");
    // list_sessions: none once closed; then the one this client opened.
    assert_eq!(out[10]["structured"]["sessions"], json!([]), "{}", out[10]);
    let listed = out[12]["structured"]["sessions"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{}", out[12]);
    assert_eq!(listed[0]["id"], out[11]["structured"]["session"], "{}", out[12]);
    assert_eq!((listed[0]["tier"].as_str(), listed[0]["calls"].as_u64()), (Some(tier), Some(0)), "{}", out[12]);
    // The log names the session of each call in it.
    let log = std::fs::read_to_string(home.state().join("runs.jsonl")).unwrap();
    let entries: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let in_session: Vec<&Value> = entries.iter().filter(|e| e["session"] == json!(id)).collect();
    assert_eq!(in_session.len(), 2, "{log}");
    assert_eq!(in_session[1]["report"]["session"]["call"], 2);
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_session_keeps_files_between_calls_on_process() {
    session_round_trip("process", &["--tiers", "process,docker", "--max-sessions", "1"]);
}

#[sandbench_testkit::test(needs = ["docker", "mcp"])]
fn mcp_session_keeps_files_between_calls_on_docker() {
    if sdk_python().is_none() || !tier_ready("docker") {
        return;
    }
    session_round_trip("docker", &["--tiers", "docker,process", "--max-sessions", "1"]);
}

/// Containers whose owner is sandbench process `pid` (any state).
fn containers_of(pid: u32) -> Vec<String> {
    crate::support::docker_common::containers_of(pid)
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_client_that_disconnects_mid_session_leaves_nothing_behind() {
    let Some(py) = sdk_python() else { return };
    let mut tiers = vec![];
    if common::is_root() {
        tiers.push("process");
    }
    if tier_available("docker").is_ok() {
        tiers.push("docker");
    }
    for tier in tiers {
        let home = Home::new("[process]\nspare = false\n");
        let net = OuterNet::new();
        let steps = json!([
            call("open_session", json!({"tier": tier})),
            call(
                "run_code",
                json!({"language": "sh", "code": "echo kept > /work/f; sleep 300 & echo started", "session": "$session"})
            ),
            call(
                "run_code",
                json!({"language": "python", "code": "import time\ntime.sleep(120)\n", "session": "$session"})
            ),
        ]);
        let mut cmd = home.command(&py, &steps, &["--tiers", tier, "--timeout", "120s"]);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut client = net.spawn(&mut cmd);
        let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
        // open, first call (its result), then the second call is under way.
        let mut seen = vec![];
        while seen.iter().filter(|l: &&String| l.contains("calling")).count() < 3 {
            seen.push(lines.next().unwrap().unwrap());
        }
        assert!(seen.iter().any(|l| l.contains("\"outcome\": \"ok\"")), "{seen:?}");
        let server_pid = || -> Option<u32> {
            // The server is the client's child: the one sandbench in the net.
            net.remaining().into_iter().map(|p| p as u32).find(|p| {
                std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e.ends_with("sandbench"))
                    && std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.contains("mcp"))
            })
        };
        let pid = server_pid().expect("the server runs");
        if tier == "docker" {
            assert!(eventually(30, || !containers_of(pid).is_empty()), "the session's container never appeared");
        }
        std::thread::sleep(Duration::from_millis(1000));
        // The client dies without a goodbye: the server's stdin closes mid-session.
        client.kill().unwrap();
        client.wait().unwrap();
        assert!(
            eventually(60, || net.remaining().is_empty()),
            "{tier}: processes still running after the client left: {:?}",
            net.remaining()
        );
        assert!(net.leftover_cgroups().is_empty(), "{tier}: cgroups left: {:?}", net.leftover_cgroups());
        if tier == "docker" {
            assert!(eventually(30, || containers_of(pid).is_empty()), "container left: {:?}", containers_of(pid));
        }
        let log = std::fs::read_to_string(home.state().join("runs.jsonl")).unwrap_or_default();
        assert!(log.contains("\"outcome\":\"cancelled\""), "{tier}: {log}");
    }
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn a_server_killed_outright_with_open_sessions_is_cleaned_up_by_the_next_start() {
    let Some(py) = sdk_python() else { return };
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to watch the sessions' cgroups");
    }
    let docker = tier_available("docker").is_ok();
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let mut steps = vec![
        call("open_session", json!({"tier": "process"})),
        call("run_code", json!({"language": "sh", "code": "echo kept > /work/f", "session": "$session"})),
    ];
    if docker {
        steps.push(call("open_session", json!({"tier": "docker"})));
    }
    steps.push(call(
        "run_code",
        json!({"language": "python", "code": "import time\ntime.sleep(120)\n", "session": "$session"}),
    ));
    let n = steps.len();
    let mut cmd = home.command(&py, &Value::Array(steps), &["--tiers", "process,docker", "--timeout", "120s"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut client = net.spawn(&mut cmd);
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut calling = 0;
    while calling < n {
        let l = lines.next().unwrap().unwrap();
        calling += l.contains("calling") as usize;
    }
    std::thread::sleep(Duration::from_millis(1500));
    let server = net
        .remaining()
        .into_iter()
        .find(|p| {
            std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e.ends_with("sandbench"))
                && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"mcp"))
        })
        .expect("the server runs");
    if docker {
        assert!(eventually(30, || !containers_of(server as u32).is_empty()), "no session container");
    }
    assert!(!net.leftover_cgroups().is_empty(), "no session cgroup");
    // SIGKILL: no clean-up code of the server runs.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server), nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = client.kill();
    let _ = client.wait();
    // The process session's sandbox dies with its server (PR_SET_PDEATHSIG
    // and the pid namespace); its cgroup and the container wait for a reaper.
    assert!(eventually(30, || net.remaining().is_empty()), "left running: {:?}", net.remaining());
    let mut doctor = Command::new(common::bin());
    doctor.arg("doctor").env("SANDBENCH_CONFIG", home.dir.path().join("config.toml"));
    let out = net.output(&mut doctor, Duration::from_secs(180));
    assert!(out.status.success() || out.status.code() == Some(1), "{out:?}");
    assert!(eventually(10, || net.leftover_cgroups().is_empty()), "cgroups left: {:?}", net.leftover_cgroups());
    if docker {
        assert!(eventually(30, || containers_of(server as u32).is_empty()), "container left");
    }
}

#[sandbench_testkit::test(needs = ["mcp", "root"])]
fn http_clients_see_only_their_own_sessions_which_close_when_they_go() {
    let Some(py) = sdk_python() else { return };
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to watch the sessions' cgroups");
    }
    let home = Home::new("[process]\nspare = false\n");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let client = |steps: Value| server.client(&py, &steps, Some(&server.token));
    // Client A opens a session and stays connected a while.
    let mut a = client(json!([
        call("open_session", json!({})),
        call("run_code", json!({"language": "sh", "code": "echo mine > /work/f; cat /work/f", "session": "$session"})),
        {"op": "sleep", "seconds": 8},
    ]));
    a.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut a = net.spawn(&mut a);
    let mut a_lines = BufReader::new(a.stdout.take().unwrap()).lines();
    let mut id = None;
    while id.is_none() {
        let l = a_lines.next().unwrap().unwrap();
        if let Ok(v) = serde_json::from_str::<Value>(&l) {
            id = v["structured"]["session"].as_str().map(String::from);
        }
    }
    let id = id.unwrap();
    assert!(eventually(30, || !net.leftover_cgroups().is_empty()), "no session sandbox");
    // Client B knows the id, but the session is not its own: list_sessions
    // does not show it, and a call naming it is refused.
    let out = net.output(
        &mut client(json!([
            call("list_sessions", json!({})),
            call("run_code", json!({"language": "sh", "code": "cat /work/f", "session": id}))
        ])),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["structured"].get("sessions").is_some())
        .collect();
    assert_eq!(listed.len(), 1, "{stdout}");
    assert_eq!(listed[0]["structured"]["sessions"], json!([]), "another client's session was listed: {stdout}");
    let b: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_default();
    // A tool result the model reads (isError), as every bad argument is.
    assert_eq!(b["is_error"], true, "{stdout}");
    assert!(b["text"].as_str().unwrap_or("").contains("unknown session"), "{stdout}");
    // A ends its MCP session: its sandbox goes, the server stays.
    let _ = a.wait();
    assert!(eventually(30, || net.leftover_cgroups().is_empty()), "cgroups left: {:?}", net.leftover_cgroups());
    let mut server = server;
    assert!(server.child.try_wait().unwrap().is_none(), "the server went with the client");
    server.stop();
}

/// The server's stdio is read and written through the runtime's poller
/// when it is a pipe (the Python SDK) or a Unix socket (Node's
/// `child_process`), and through tokio's blocking stdio otherwise (a file):
/// each answers the handshake, a ping and a tool call, and the server
/// exits when its input ends.
#[sandbench_testkit::test]
fn stdio_answers_over_a_pipe_a_socket_and_a_file() {
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let home = Home::new("");
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "stdio-kinds", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_sessions", "arguments": {}}}),
    ];
    let check = |kind: &str, out: &str| {
        let replies: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let ids: Vec<_> = replies.iter().map(|r| r["id"].clone()).collect();
        assert_eq!(ids, [json!(1), json!(2), json!(3)], "{kind}: {out}");
        assert_eq!(replies[0]["result"]["serverInfo"]["name"], "sandbench", "{kind}: {out}");
        assert_eq!(replies[2]["result"]["structuredContent"]["sessions"], json!([]), "{kind}: {out}");
    };
    let wait = |kind: &str, child: &mut std::process::Child| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "{kind}: the server exited with {st}");
                return;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{kind}: the server did not exit when its input ended");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let server = || {
        let mut c = home.server(&["--tiers", "process"]);
        c.stderr(Stdio::null());
        c
    };

    // A pipe each way, written one request at a time.
    let mut child = server().stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut out = String::new();
    for r in &requests {
        writeln!(stdin, "{r}").unwrap();
        if r.get("id").is_some() {
            stdout.read_line(&mut out).unwrap();
        }
    }
    drop(stdin);
    check("pipe", &out);
    wait("pipe", &mut child);

    // One Unix socket for both, as Node's child_process makes.
    let (ours, theirs) = UnixStream::pair().unwrap();
    let theirs = OwnedFd::from(theirs);
    let shared = theirs.try_clone().unwrap();
    let mut child =
        server().stdin(Stdio::from(theirs.try_clone().unwrap())).stdout(Stdio::from(theirs)).spawn().unwrap();
    let mut replies = BufReader::new(ours.try_clone().unwrap());
    let mut out = String::new();
    for r in &requests {
        writeln!(&ours, "{r}").unwrap();
        if r.get("id").is_some() {
            replies.read_line(&mut out).unwrap();
        }
    }
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    check("socket", &out);
    wait("socket", &mut child);
    // The server made the open file non-blocking and gave it back as it was.
    let flags = nix::fcntl::fcntl(&shared, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    assert_eq!(flags & nix::libc::O_NONBLOCK, 0, "the server left its stdin non-blocking");

    // A regular file as stdout: tokio's blocking stdio for both ends.
    let file = home.dir.path().join("replies.jsonl");
    let mut child = server().stdin(Stdio::piped()).stdout(std::fs::File::create(&file).unwrap()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut expect = 0;
    for r in &requests {
        writeln!(stdin, "{r}").unwrap();
        if r.get("id").is_some() {
            expect += 1;
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::fs::read_to_string(&file).unwrap().lines().count() < expect {
                assert!(std::time::Instant::now() < deadline, "file: no reply to {r}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    drop(stdin);
    wait("file", &mut child);
    check("file", &std::fs::read_to_string(&file).unwrap());
}
