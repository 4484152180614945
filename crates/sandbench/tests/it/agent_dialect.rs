//! The agent's Anthropic client against what the official SDK (`anthropic`
//! 2.14 on PyPI) sends and the API answers, on a local fake that is strict
//! where the API is: the default model, the Models API behind
//! `sandbench agent --list-models`, and the 404 for a retired model.

use crate::agent_cli::sandbench;
use crate::agent_loop::{opts, process_tier};
use crate::support::fake_anthropic::{self, final_text, step, FakeAnthropic};

use sandbench::agent::{self, anthropic, EndReason};
use sandbench::config::{Config, RemoteEnv};

const KEY: &str = "sk-ant-dialect-0123456789";

fn config_for(fake: &FakeAnthropic) -> Config {
    let env =
        RemoteEnv { anthropic_api_key: Some(KEY.into()), anthropic_base_url: Some(fake.url()), ..Default::default() };
    Config { env, ..Config::default() }
}

#[sandbench_testkit::test]
fn the_default_model_is_one_config_value_and_current_in_the_sdk_list() {
    assert_eq!(Config::default().agent.model, anthropic::DEFAULT_MODEL);
    let entry = fake_anthropic::MODELS.iter().find(|m| m.0 == anthropic::DEFAULT_MODEL);
    assert_eq!(entry.map(|m| m.2), Some("active"), "{} is not a current model", anthropic::DEFAULT_MODEL);
}

#[sandbench_testkit::test]
async fn a_retired_model_is_a_404_that_names_it_and_how_to_change_it() {
    // claude-sonnet-4-5, the old default, reached end of life on 2026-11-30.
    let fake = FakeAnthropic::start(vec![step(|_| final_text("never reached"))]).await;
    let mut o = opts(&fake, process_tier());
    o.model = "claude-sonnet-4-5".into();
    let t = agent::start(o, "say hi".into()).finish().await;
    assert_eq!(t.reason, EndReason::Error);
    let e = t.error.unwrap();
    for part in ["'claude-sonnet-4-5'", "404", "not_found_error", "--list-models", "--model", "[agent]"] {
        assert!(e.contains(part), "{part} missing from: {e}");
    }
    // Not retried: a 404 does not get better.
    assert_eq!(fake.requests.lock().unwrap().len(), 1);
}

#[sandbench_testkit::test]
async fn the_models_api_is_read_page_by_page() {
    let fake = FakeAnthropic::start(vec![]).await;
    fake.set_models_page(3);
    let models = agent::list_models(&config_for(&fake), false).await.unwrap();
    let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    let want: Vec<&str> = fake_anthropic::MODELS.iter().filter(|m| m.2 != "retired").map(|m| m.0).collect();
    assert_eq!(ids, want);
    let reqs = fake.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), want.len().div_ceil(3));
    assert!(reqs.iter().all(|r| r.method == "GET" && r.path() == "/v1/models"));
    assert!(reqs.iter().all(|r| r.header("x-api-key") == Some(KEY)));
    // With the retired ones when asked.
    let all = agent::list_models(&config_for(&fake), true).await.unwrap();
    assert!(all.iter().any(|m| m.id == "claude-sonnet-4-5" && m.lifecycle.as_deref() == Some("retired")));
}

#[sandbench_testkit::test]
async fn list_models_on_the_command_line_marks_the_configured_one() {
    let fake = FakeAnthropic::start(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let out = sandbench(&dir)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", fake.url())
        .args(["agent", "--list-models"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let marked: Vec<&str> = stdout.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(marked.len(), 1, "{stdout}");
    assert!(marked[0].contains(anthropic::DEFAULT_MODEL) && marked[0].contains("active"), "{stdout}");
    assert!(stdout.contains("claude-opus-4-5") && stdout.contains("deprecated, retires 2027-01-22"), "{stdout}");
    assert!(!stdout.contains("claude-sonnet-4-5"), "retired models are not offered: {stdout}");

    // A configured model the key is not offered is said, with the fix.
    let out = sandbench(&dir)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", fake.url())
        .args(["agent", "--list-models", "--model", "claude-sonnet-4-5", "--format", "json"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["configured"], "claude-sonnet-4-5");
    assert_eq!(v["configured_offered"], false);
    assert_eq!(v["models"][0]["id"], fake_anthropic::MODELS[0].0);

    // Without a key: one line naming the variable.
    let out = sandbench(&dir).args(["agent", "--list-models"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTHROPIC_API_KEY") && stderr.lines().count() == 1, "{stderr}");
}

#[sandbench_testkit::test]
async fn requests_speak_the_current_api_version_with_current_parameters_only() {
    // The fake speaks 2026-10-21 only and refuses a body field that version
    // does not have, as the API refuses one ("Extra inputs are not permitted").
    assert_eq!(anthropic::API_VERSION, fake_anthropic::API_VERSION);
    let fake = FakeAnthropic::start(vec![step(|_| final_text("hi"))]).await;
    let t = agent::start(opts(&fake, process_tier()), "say hi".into()).finish().await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{:?}", t.error);
    let reqs = fake.requests.lock().unwrap();
    assert_eq!(reqs[0].header("anthropic-version"), Some("2026-10-21"));
    let body = reqs[0].json();
    let mut keys: Vec<&str> = body.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["max_tokens", "messages", "model", "stream", "system", "tools"]);
}

#[sandbench_testkit::test]
async fn the_fake_refuses_what_the_api_refuses() {
    let fake = FakeAnthropic::start(vec![]).await;
    let http = sandbench::http::client(&[fake.url().as_str()]).unwrap();
    let post = |version: &'static str, body: serde_json::Value| {
        http.post(format!("{}/v1/messages", fake.url()))
            .header("x-api-key", KEY)
            .header("anthropic-version", version)
            .json(&body)
            .send()
    };
    let ok_body = serde_json::json!({"model": anthropic::DEFAULT_MODEL, "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let old = post("2023-06-01", ok_body.clone()).await.unwrap();
    assert_eq!(old.status().as_u16(), 400);
    let mut with_temperature = ok_body.clone();
    with_temperature["temperature"] = serde_json::json!(0.5);
    let r = post("2026-10-21", with_temperature).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["message"], "temperature: Extra inputs are not permitted");
    let mut retired = ok_body;
    retired["model"] = serde_json::json!("claude-sonnet-4-5");
    let r = post("2026-10-21", retired).await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "not_found_error");
    assert_eq!(v["error"]["message"], "model: claude-sonnet-4-5");
    assert!(v["request_id"].as_str().is_some_and(|r| r.starts_with("req_")));
}

#[sandbench_testkit::test]
async fn x_should_retry_decides_as_in_the_sdk() {
    use crate::support::fake_anthropic::error;
    // false: a 529 is not retried.
    let fake = FakeAnthropic::start(vec![step(|_| {
        error(529, "overloaded_error", "Overloaded").with_header("x-should-retry", "false")
    })])
    .await;
    let t = agent::start(opts(&fake, process_tier()), "say hi".into()).finish().await;
    assert_eq!(t.reason, EndReason::Error);
    assert_eq!(fake.requests.lock().unwrap().len(), 1);
    // The request id of an error reaches the message (support asks for it).
    assert!(t.error.unwrap().contains("req_011CTest"));
    // true: even a 400 is tried again.
    let fake = FakeAnthropic::start(vec![
        step(|_| error(400, "invalid_request_error", "try again").with_header("x-should-retry", "true")),
        step(|_| final_text("done")),
    ])
    .await;
    let t = agent::start(opts(&fake, process_tier()), "say hi".into()).finish().await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{:?}", t.error);
    assert_eq!(fake.requests.lock().unwrap().len(), 2);
}

#[sandbench_testkit::test]
async fn stream_events_are_read_as_the_sdk_reads_them() {
    use crate::support::fake_anthropic::{message, sse, to_events};
    use crate::support::http::Reply;
    // An unnamed block (no `event:` line) is skipped, as the SDK skips it,
    // even when its data looks like an event; a mid-stream timeout_error is
    // a 504 and retried.
    let events = || {
        let Reply::Full { body, .. } = message(serde_json::json!([{"type": "text", "text": "fine"}]), "end_turn")
        else {
            unreachable!()
        };
        to_events(&serde_json::from_slice(&body).unwrap())
    };
    let first = move |_: &crate::support::http::Request| {
        let mut ev = events();
        ev.truncate(2);
        ev.push(
            serde_json::json!({"type": "error", "error": {"type": "timeout_error", "message": "Request timed out"}}),
        );
        sse(&ev)
    };
    let second = move |_: &crate::support::http::Request| {
        let Reply::Full { status, headers, mut body } = sse(&events()) else { unreachable!() };
        let stray = b"data: {\"type\":\"message_stop\"}\r\n\r\n".to_vec();
        let at = body.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        body.splice(at..at, stray);
        Reply::Full { status, headers, body }
    };
    let fake = FakeAnthropic::start(vec![step(first), step(second)]).await;
    let t = agent::start(opts(&fake, process_tier()), "say hi".into()).finish().await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{:?}", t.error);
    assert_eq!(t.answer.as_deref(), Some("fine"));
    assert!(t.events.iter().any(|e| matches!(e, agent::TranscriptEvent::Retrying { status: Some(504), .. })));
}
