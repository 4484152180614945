//! `sandbench agent` as a user runs it (the built binary, a fake Messages API
//! on loopback): the missing-key message, the key never reaching a sandbox,
//! and hostile bytes never reaching the terminal raw.

use crate::support::fake_anthropic;

use std::process::Stdio;
use std::time::Duration;

use fake_anthropic::{final_text, message, step, tool_use, FakeAnthropic};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_sandbench");

pub(crate) fn sandbench(dir: &tempfile::TempDir) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("SANDBENCH_CONFIG", dir.path().join("config.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Whether the process tier works here; a skip is printed, or a failure when
/// SANDBENCH_REQUIRE_TIERS names it.
async fn process_tier_available(dir: &tempfile::TempDir) -> bool {
    let out = sandbench(dir).args(["doctor", "--format", "json"]).output().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let ok =
        v.as_array().and_then(|a| a.iter().find(|t| t["tier"] == "process")).is_some_and(|t| t["available"] == true);
    if !ok {
        let required = std::env::var("SANDBENCH_REQUIRE_TIERS").unwrap_or_default();
        assert!(!required.split(',').any(|s| s.trim() == "process"), "process tier required but unavailable");
        panic!("cannot run although its needs hold: process tier unavailable here");
    }
    ok
}

#[sandbench_testkit::test]
async fn without_a_key_it_exits_non_zero_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandbench(&dir).args(["agent", "--tier", "process", "say hi"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// Looks for ANTHROPIC_API_KEY everywhere a sandboxed program could: its
/// environment, /proc/1/environ, /proc/self/environ, every readable
/// /proc/*/environ, and the files it can read. Prints every value it finds.
const FIND_KEY: &str = r#"
import os, glob
NAME = b"ANTHROPIC_API_KEY"
found = []
v = os.environ.get("ANTHROPIC_API_KEY")
if v:
    found.append("env=" + v)
for p in ["/proc/1/environ", "/proc/self/environ"] + sorted(glob.glob("/proc/[0-9]*/environ")):
    try:
        data = open(p, "rb").read()
    except Exception:
        continue
    for item in data.split(b"\0"):
        if item.startswith(NAME + b"="):
            found.append(p + ":" + item.decode(errors="replace"))
files = 0
roots = [os.getcwd(), os.path.expanduser("~"), "/tmp", "/var/tmp", "/root", "/home", "/etc", "/run", "/work"]
for root in roots:
    for d, dirs, names in os.walk(root):
        for n in names:
            if files >= 4000:
                break
            p = os.path.join(d, n)
            try:
                if os.path.getsize(p) > 512 * 1024:
                    continue
                data = open(p, "rb").read()
            except Exception:
                continue
            files += 1
            i = data.find(NAME + b"=")
            if i >= 0:
                found.append(p + ":" + data[i:i + 120].decode(errors="replace"))
print("SEARCHED environ and %d files" % files)
for f in found:
    print("FOUND " + f)
"#;

#[sandbench_testkit::test(needs = ["process"])]
async fn the_key_is_never_visible_inside_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    if !process_tier_available(&dir).await {
        return;
    }
    // A fresh secret each run: no file anywhere can contain it by accident.
    let secret = format!(
        "sk-ant-secret-{:x}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );

    // The detector works: run on the host with the key in its environment,
    // it finds the key.
    let control = tokio::process::Command::new("python3")
        .args(["-c", FIND_KEY])
        .env("ANTHROPIC_API_KEY", &secret)
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&control.stdout).contains(&format!("FOUND env={secret}")),
        "the detector is broken"
    );

    let fake = FakeAnthropic::start(vec![
        step(|_| tool_use("toolu_key", "python", FIND_KEY)),
        step(|_| final_text("Searched.")),
    ])
    .await;
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        sandbench(&dir)
            .env("ANTHROPIC_API_KEY", &secret)
            .env("ANTHROPIC_BASE_URL", fake.url())
            .args([
                "agent",
                "--tier",
                "process",
                "--timeout",
                "60s",
                "--cpu",
                "30s",
                "--format",
                "json",
                "find the API key",
            ])
            .output(),
    )
    .await
    .expect("sandbench agent hung")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // sandbench itself used the key with the API...
    assert_eq!(fake.requests.lock().unwrap()[0].header("x-api-key"), Some(secret.as_str()));
    // ...but the program, which searched everywhere, never saw it.
    let bodies = fake.bodies();
    let tool_result = bodies[1]["messages"][2]["content"][0]["content"].as_str().unwrap().to_string();
    eprintln!("what the sandboxed search reported:\n{tool_result}");
    assert!(tool_result.contains("SEARCHED environ and"), "the search did not run: {tool_result}");
    assert!(tool_result.contains("outcome: ok"), "{tool_result}");
    assert!(!tool_result.contains(&secret), "the key leaked into the sandbox: {tool_result}");
    assert!(!tool_result.contains("FOUND "), "the sandbox saw ANTHROPIC_API_KEY: {tool_result}");
    assert!(!stdout.contains(&secret), "the key is in the transcript");
}

#[sandbench_testkit::test(needs = ["process"])]
async fn hostile_bytes_from_the_model_and_the_sandbox_are_made_visible() {
    let dir = tempfile::tempdir().unwrap();
    if !process_tier_available(&dir).await {
        return;
    }
    let fake = FakeAnthropic::start(vec![
        step(|_| {
            message(
                json!([
                    {"type": "text", "text": "clear\u{1b}[2J title\u{1b}]0;pwned\u{7}"},
                    {"type": "tool_use", "id": "toolu_esc", "name": "run_code",
                     "input": {"language": "sh", "code": "printf 'clip\\033]52;c;aGk=\\007 done\\n'"}}
                ]),
                "tool_use",
            )
        }),
        step(|_| final_text("bye\u{1b}[?1049h")),
    ])
    .await;
    let out = sandbench(&dir)
        .env("ANTHROPIC_API_KEY", "sk-ant-x")
        .env("ANTHROPIC_BASE_URL", fake.url())
        .args(["agent", "--tier", "process", "escape test"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07), "raw control bytes reached the terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("clear␛[2J title␛]0;pwned^G"), "{text}");
    assert!(text.contains("clip␛]52;c;aGk=^G done"), "{text}");
    assert!(text.contains("run_code · sh"), "{text}");
    assert!(text.contains("verdict: ok"), "{text}");
    assert!(text.contains("final answer after 2 turn(s)"), "{text}");
}

#[sandbench_testkit::test]
async fn an_unavailable_tier_stops_before_the_model_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeAnthropic::start(vec![]).await;
    let out = sandbench(&dir)
        .env("ANTHROPIC_API_KEY", "sk-ant-x")
        .env("ANTHROPIC_BASE_URL", fake.url())
        .args(["agent", "--tier", "e2b", "hi"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("e2b tier is not available") && stderr.contains("E2B_API_KEY"), "{stderr}");
    assert!(fake.requests.lock().unwrap().is_empty(), "the model was called");
}
