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

#[test]
fn the_default_model_is_one_config_value_and_current_in_the_sdk_list() {
    assert_eq!(Config::default().agent.model, anthropic::DEFAULT_MODEL);
    let entry = fake_anthropic::MODELS.iter().find(|m| m.0 == anthropic::DEFAULT_MODEL);
    assert_eq!(entry.map(|m| m.2), Some("active"), "{} is not a current model", anthropic::DEFAULT_MODEL);
}

#[tokio::test]
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

#[tokio::test]
async fn the_models_api_is_read_page_by_page() {
    let fake = FakeAnthropic::start(vec![]).await;
    fake.set_models_page(3);
    let models = agent::list_models(&config_for(&fake), false).await.unwrap();
    let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
    let want: Vec<&str> = fake_anthropic::MODELS.iter().filter(|m| m.2 != "retired").map(|m| m.0).collect();
    assert_eq!(ids, want);
    let reqs = fake.requests.lock().unwrap();
    assert_eq!(reqs.len(), want.len().div_ceil(3));
    assert!(reqs.iter().all(|r| r.method == "GET" && r.path() == "/v1/models"));
    assert!(reqs.iter().all(|r| r.header("x-api-key") == Some(KEY)));
    // With the retired ones when asked.
    drop(reqs);
    let all = agent::list_models(&config_for(&fake), true).await.unwrap();
    assert!(all.iter().any(|m| m.id == "claude-sonnet-4-5" && m.lifecycle.as_deref() == Some("retired")));
}

#[tokio::test]
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
