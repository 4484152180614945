//! The agent loop against a local fake that speaks the Messages API's shapes
//! (tool_use → tool_result → final text, error bodies, retry-after), with the
//! model's code run for real on the process tier (and on the e2b tier against
//! the fake E2B). Loopback only.

use crate::support::fake_anthropic;
use crate::support::fake_e2b;
use crate::support::http;

use std::sync::Arc;
use std::time::Duration;

use fake_anthropic::{error, final_text, message, step, tool_use, FakeAnthropic};
use sandbench::agent::{self, AgentOptions, EndReason, Transcript, TranscriptEvent};
use sandbench::internals::process::ProcessTier;
use sandbench::tier::Tier;
use serde_json::json;

const KEY: &str = "sk-ant-test-key-0123456789";

pub(crate) fn opts(fake: &FakeAnthropic, tier: Arc<dyn Tier>) -> AgentOptions {
    AgentOptions {
        tier,
        limits: Default::default(),
        model: sandbench::agent::anthropic::DEFAULT_MODEL.into(),
        max_turns: 5,
        max_tokens: 1024,
        base_url: fake.url(),
        api_key: KEY.into(),
        retry_backoff: Duration::from_millis(5),
        secrets: Default::default(),
    }
}

pub(crate) fn process_tier() -> Arc<dyn Tier> {
    Arc::new(ProcessTier::new(&crate::support::common::config()))
}

/// The process tier, or None (with the reason printed) when it cannot run
/// here — unless SANDBENCH_REQUIRE_TIERS names it, then that is a failure.
async fn process_tier_or_skip() -> Option<Arc<dyn Tier>> {
    let t = process_tier();
    let a = t.probe().await;
    if a.available {
        return Some(t);
    }
    let required = std::env::var("SANDBENCH_REQUIRE_TIERS").unwrap_or_default();
    if required.split(',').any(|s| s.trim() == "process") {
        panic!("process tier required but unavailable: {}", a.summary);
    }
    panic!("cannot run although its needs hold: process tier unavailable here: {}", a.summary);
}

async fn session(o: AgentOptions, task: &str) -> (Vec<TranscriptEvent>, Transcript) {
    tokio::time::timeout(Duration::from_secs(120), async {
        let mut h = agent::start(o, task.into());
        let mut live = vec![];
        while let Some(ev) = h.events.recv().await {
            live.push(ev);
        }
        (live, h.finish().await)
    })
    .await
    .expect("the session did not end within 120 s")
}

#[sandbench_testkit::test(needs = ["process"])]
async fn tool_use_round_trip_runs_real_code_on_the_process_tier() {
    let Some(tier) = process_tier_or_skip().await else {
        return;
    };
    let fake = FakeAnthropic::start(vec![
        step(|_| tool_use("toolu_01", "python", "print(6 * 7)")),
        step(|_| final_text("The answer is 42.")),
    ])
    .await;
    let (live, t) = session(opts(&fake, tier), "What is 6 times 7? Compute it.").await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{t:#?}");
    assert_eq!(t.answer.as_deref(), Some("The answer is 42."));
    assert_eq!(t.turns, 2);

    // Live stream: the call with its code, the program's output, the verdict.
    assert!(live.iter().any(|e| matches!(e, TranscriptEvent::ToolCall { code, language, .. } if code == "print(6 * 7)" && language == "python")));
    assert!(live.iter().any(|e| matches!(e, TranscriptEvent::ToolOutput { text, .. } if text.contains("42"))));
    let result = live.iter().find_map(|e| match e {
        TranscriptEvent::ToolResult { outcome, content, is_error, .. } => {
            Some((outcome.clone(), content.clone(), *is_error))
        }
        _ => None,
    });
    let (outcome, content, is_error) = result.expect("a tool result");
    assert_eq!(outcome, "ok");
    assert!(!is_error);
    assert!(content.contains("outcome: ok") && content.contains("42"), "{content}");
    assert!(matches!(live.last(), Some(TranscriptEvent::Finished { reason: EndReason::FinalAnswer, .. })));

    // Request shapes: headers, the tool's schema, and the tool_result turn.
    let reqs = fake.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2026-10-21"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let first = reqs[0].json();
    assert_eq!(first["model"], sandbench::agent::anthropic::DEFAULT_MODEL);
    assert_eq!(first["max_tokens"], 1024);
    assert_eq!(first["stream"], true);
    assert_eq!(first["tools"][0]["name"], "run_code");
    assert_eq!(first["tools"][0]["input_schema"]["required"], json!(["language", "code"]));
    assert_eq!(first["messages"][0]["role"], "user");
    let second = reqs[1].json();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
    assert_eq!(msgs[2]["role"], "user");
    let tr = &msgs[2]["content"][0];
    assert_eq!(tr["type"], "tool_result");
    assert_eq!(tr["tool_use_id"], "toolu_01");
    assert_eq!(tr["is_error"], false);
    assert!(tr["content"].as_str().unwrap().contains("42"));

    // The saved transcript keeps everything but the live output chunks.
    assert!(t.events.iter().all(|e| !matches!(e, TranscriptEvent::ToolOutput { .. })));
    let j = serde_json::to_value(&t).unwrap();
    assert_eq!(j["reason"], "final_answer");
    assert!(j["events"].as_array().unwrap().iter().any(|e| e["type"] == "tool_call"));
}

#[sandbench_testkit::test]
async fn a_rejected_key_is_a_clear_error() {
    let fake = FakeAnthropic::start(vec![step(|_| error(401, "authentication_error", "invalid x-api-key"))]).await;
    let (_, t) = session(opts(&fake, process_tier()), "hi").await;
    assert_eq!(t.reason, EndReason::Error);
    let e = t.error.unwrap();
    assert!(e.contains("ANTHROPIC_API_KEY") && e.contains("401") && e.contains("invalid x-api-key"), "{e}");
    assert_eq!(fake.requests.lock().unwrap().len(), 1, "a 401 is not retried");
    assert!(matches!(t.events[0], TranscriptEvent::Started { .. }));
}

#[sandbench_testkit::test]
async fn rate_limit_waits_as_long_as_retry_after_says() {
    let fake = FakeAnthropic::start(vec![
        step(|_| {
            error(429, "rate_limit_error", "Number of requests has exceeded your rate limit")
                .with_header("retry-after", "1")
        }),
        step(|_| final_text("done")),
    ])
    .await;
    let started = std::time::Instant::now();
    let (live, t) = session(opts(&fake, process_tier()), "hi").await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{t:#?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "retry-after ignored");
    assert!(live.iter().any(|e| matches!(e, TranscriptEvent::Retrying { status: Some(429), wait_ms: 1000, .. })));
}

#[sandbench_testkit::test]
async fn overload_is_retried_with_backoff_then_reported() {
    let steps = (0..5).map(|_| step(|_| error(529, "overloaded_error", "Overloaded"))).collect();
    let fake = FakeAnthropic::start(steps).await;
    let (live, t) = session(opts(&fake, process_tier()), "hi").await;
    assert_eq!(t.reason, EndReason::Error);
    let e = t.error.unwrap();
    assert!(e.contains("overloaded") && e.contains("529") && e.contains("5 attempt"), "{e}");
    assert_eq!(fake.requests.lock().unwrap().len(), 5);
    assert_eq!(live.iter().filter(|e| matches!(e, TranscriptEvent::Retrying { .. })).count(), 4);
}

#[sandbench_testkit::test]
async fn a_network_that_is_down_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let fake = FakeAnthropic::start(vec![]).await;
    let mut o = opts(&fake, process_tier());
    o.base_url = format!("http://127.0.0.1:{port}");
    let (live, t) = session(o, "hi").await;
    assert_eq!(t.reason, EndReason::Error);
    assert!(t.error.unwrap().contains("cannot reach Anthropic"));
    assert_eq!(live.iter().filter(|e| matches!(e, TranscriptEvent::Retrying { status: None, .. })).count(), 4);
}

#[sandbench_testkit::test]
async fn malformed_replies_are_errors_not_panics() {
    let raw_json = |v: serde_json::Value| http::Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "application/json; charset=utf-8".into())],
        body: serde_json::to_vec(&v).unwrap(),
    };
    let start = json!({"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}});
    let bad_sse: Vec<Vec<serde_json::Value>> = vec![
        // A delta for a block that never started.
        vec![
            start.clone(),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "x"}}),
        ],
        // Tool input that does not add up to JSON.
        vec![
            start.clone(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "run_code", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"lang"}}),
            json!({"type": "content_block_stop", "index": 0}),
        ],
    ];
    let mut cases: Vec<fake_anthropic::Step> = vec![
        // Not JSON at all.
        step(|_| http::Reply::Full { status: 200, headers: vec![], body: b"<html>not json".to_vec() }),
        // JSON, but not a message (sent as plain JSON, not streamed).
        step(move |_| raw_json(json!({"type": "message"}))),
        // A tool_use block without an id.
        step(|_| message(json!([{"type": "tool_use", "input": {}}]), "tool_use")),
        // stop_reason tool_use without a tool_use block.
        step(|_| message(json!([{"type": "text", "text": "x"}]), "tool_use")),
        // An SSE event whose data is not JSON.
        step(|_| http::Reply::Full {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: b"event: message_start\ndata: {oops\n\n".to_vec(),
        }),
    ];
    for evs in bad_sse {
        cases.push(step(move |_| fake_anthropic::sse(&evs)));
    }
    for bad in cases {
        let fake = FakeAnthropic::start(vec![bad]).await;
        let (_, t) = session(opts(&fake, process_tier()), "hi").await;
        assert_eq!(t.reason, EndReason::Error, "{t:#?}");
        let e = t.error.unwrap();
        assert!(e.contains("cannot read"), "{e}");
        assert_eq!(fake.requests.lock().unwrap().len(), 1, "a malformed reply is not retried");
    }
}

#[sandbench_testkit::test]
async fn text_streams_live_before_the_reply_is_complete() {
    use http::{Chunk, Reply};
    let fake = FakeAnthropic::start(vec![step(|_| {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let msg = json!({"id": "m1", "model": "claude-test", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Hello, streaming world"}],
            "usage": {"input_tokens": 3, "output_tokens": 5}});
        let events = fake_anthropic::to_events(&msg);
        tokio::spawn(async move {
            for (i, e) in events.iter().enumerate() {
                // A pause after the first text delta.
                if i > 0 && events[i - 1]["type"] == "content_block_delta" && e["type"] == "content_block_delta" {
                    tokio::time::sleep(Duration::from_millis(800)).await;
                }
                let _ = tx.send(Chunk::Data(fake_anthropic::sse_block(e))).await;
            }
        });
        Reply::Stream { status: 200, headers: vec![("content-type".into(), "text/event-stream".into())], chunks: rx }
    })])
    .await;
    let mut h = agent::start(opts(&fake, process_tier()), "hi".into());
    let t0 = std::time::Instant::now();
    let mut first_delta = None;
    let mut text_at = None;
    let mut deltas = String::new();
    while let Some(ev) = h.events.recv().await {
        match ev {
            TranscriptEvent::TextDelta { text, .. } => {
                first_delta.get_or_insert(t0.elapsed());
                deltas.push_str(&text);
            }
            TranscriptEvent::Text { .. } => text_at = Some(t0.elapsed()),
            _ => {}
        }
    }
    let t = h.finish().await;
    assert_eq!(t.answer.as_deref(), Some("Hello, streaming world"));
    assert_eq!(deltas, "Hello, streaming world");
    let (d, full) = (first_delta.unwrap(), text_at.unwrap());
    assert!(full - d >= Duration::from_millis(500), "the first delta came {d:?}, the whole text {full:?}");
    // Deltas are live only; the kept transcript has the whole text once.
    assert!(t.events.iter().all(|e| !matches!(e, TranscriptEvent::TextDelta { .. })));
}

#[sandbench_testkit::test]
async fn an_overload_mid_stream_and_a_broken_stream_are_retried() {
    use http::{Chunk, Reply};
    let fake = FakeAnthropic::start(vec![
        // Overloaded after the stream began.
        step(|_| {
            fake_anthropic::sse(&[
                json!({"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}}),
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ])
        }),
        // The connection drops in the middle of the reply.
        step(|_| {
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                let _ = tx
                    .send(Chunk::Data(fake_anthropic::sse_block(&json!({"type": "message_start",
                        "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}}))))
                    .await;
                let _ = tx.send(Chunk::Abort).await;
            });
            Reply::Stream {
                status: 200,
                headers: vec![("content-type".into(), "text/event-stream".into())],
                chunks: rx,
            }
        }),
        step(|_| final_text("third time lucky")),
    ])
    .await;
    let (live, t) = session(opts(&fake, process_tier()), "hi").await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{t:#?}");
    assert_eq!(t.answer.as_deref(), Some("third time lucky"));
    let retries: Vec<_> = live
        .iter()
        .filter_map(|e| match e {
            TranscriptEvent::Retrying { status, reason, .. } => Some((*status, reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0].0, Some(529));
    assert!(retries[1].1.contains("broke off"), "{:?}", retries[1]);
}

#[sandbench_testkit::test(needs = ["process"])]
async fn the_transcript_so_far_survives_a_later_api_error() {
    let Some(tier) = process_tier_or_skip().await else {
        return;
    };
    let mut steps = vec![step(|_| tool_use("toolu_a", "sh", "echo step-one"))];
    steps.extend((0..5).map(|_| step(|_| error(500, "api_error", "Internal server error"))));
    let fake = FakeAnthropic::start(steps).await;
    let (_, t) = session(opts(&fake, tier), "do it").await;
    assert_eq!(t.reason, EndReason::Error);
    assert!(t.events.iter().any(|e| matches!(e, TranscriptEvent::ToolCall { code, .. } if code == "echo step-one")));
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, TranscriptEvent::ToolResult { content, .. } if content.contains("step-one"))));
    assert!(matches!(t.events.last(), Some(TranscriptEvent::Finished { reason: EndReason::Error, .. })));
}

#[sandbench_testkit::test]
async fn bad_tool_calls_are_answered_with_errors_not_run() {
    let fake = FakeAnthropic::start(vec![
        step(|_| {
            message(
                json!([
                    {"type": "tool_use", "id": "t_1", "name": "shell", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "t_2", "name": "run_code", "input": {"language": "ruby", "code": "p 1"}}
                ]),
                "tool_use",
            )
        }),
        step(|_| final_text("ok, giving up")),
    ])
    .await;
    let (_, t) = session(opts(&fake, process_tier()), "hi").await;
    assert_eq!(t.reason, EndReason::FinalAnswer);
    assert_eq!(t.events.iter().filter(|e| matches!(e, TranscriptEvent::ToolRejected { .. })).count(), 2);
    assert!(!t.events.iter().any(|e| matches!(e, TranscriptEvent::ToolCall { .. })));
    let second = &fake.bodies()[1];
    let results = second["messages"][2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["is_error"] == true));
    assert!(results[0]["content"].as_str().unwrap().contains("unknown tool"));
    assert!(results[1]["content"].as_str().unwrap().contains("unknown language"));
}

#[sandbench_testkit::test]
async fn the_turn_limit_ends_the_loop_on_the_e2b_tier() {
    // The model never stops calling the tool; its code runs on the e2b tier
    // (against the fake E2B), all calls in the task's one session, whose
    // sandbox keeps the first call's file and is killed at the end.
    let e2b = fake_e2b::FakeE2b::start("e2b_00ff").await;
    let tier: Arc<dyn Tier> = Arc::new(sandbench::internals::e2b::E2bTier::with_settings(e2b.settings("e2b_00ff")));
    let steps = (0..3)
        .map(|i| step(move |_| tool_use(&format!("toolu_{i}"), "sh", "echo again >> count.txt; wc -l < count.txt")))
        .collect();
    let fake = FakeAnthropic::start(steps).await;
    let mut o = opts(&fake, tier);
    o.max_turns = 3;
    let (_, t) = session(o, "loop forever").await;
    assert_eq!(t.reason, EndReason::TurnLimit, "{t:#?}");
    assert_eq!(t.turns, 3);
    assert_eq!(
        t.events.iter().filter(|e| matches!(e, TranscriptEvent::ToolResult { outcome, .. } if outcome == "ok")).count(),
        3
    );
    let sandbox: Vec<_> = t.events.iter().filter(|e| matches!(e, TranscriptEvent::Sandbox { .. })).collect();
    assert!(matches!(sandbox[..], [TranscriptEvent::Sandbox { session: Some(_), .. }]), "{sandbox:?}");
    let last = t.events.iter().rev().find_map(|e| match e {
        TranscriptEvent::ToolResult { report: Some(r), .. } => Some(r.clone()),
        _ => None,
    });
    let last = last.unwrap();
    assert_eq!(last.stdout.trim(), "3", "the third call sees the lines the first two wrote: {last:#?}");
    assert_eq!(last.session.as_ref().unwrap().call, 3);
    assert_eq!(e2b.created().len(), 1, "one sandbox for the whole task");
    assert_eq!(e2b.state.lock().unwrap().cleanups.len(), 3, "each call's processes ended");
    assert_eq!(e2b.live_count(), 0, "a sandbox was left running");
    // The model was told its files persist.
    let body = &fake.bodies()[0];
    assert!(body["system"].as_str().unwrap().contains("files you write in /work stay"), "{body}");
    assert!(body["tools"][0]["description"].as_str().unwrap().contains("share one sandbox"), "{body}");
}

#[sandbench_testkit::test]
async fn cancel_stops_a_running_tool_call() {
    let e2b = fake_e2b::FakeE2b::start("e2b_00ff").await;
    let tier: Arc<dyn Tier> = Arc::new(sandbench::internals::e2b::E2bTier::with_settings(e2b.settings("e2b_00ff")));
    let fake = FakeAnthropic::start(vec![step(|_| tool_use("toolu_x", "sh", "echo started; sleep 60"))]).await;
    let mut h = agent::start(opts(&fake, tier), "wait".into());
    let t = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = h.events.recv().await {
            if matches!(ev, TranscriptEvent::ToolOutput { .. }) {
                h.cancel();
            }
        }
        h.finish().await
    })
    .await
    .unwrap();
    assert_eq!(t.reason, EndReason::Cancelled, "{t:#?}");
    assert_eq!(e2b.live_count(), 0, "cancel left the sandbox running");
    assert!(e2b.wait_programs_gone(Duration::from_secs(5)).await);
}

/// The loop can be given a secret: each run gets its placeholder (a fresh
/// sandbox: a session is offline), and neither the tool result the model
/// gets nor anything the loop shows holds the value.
#[sandbench_testkit::test(needs = ["process"])]
async fn a_secret_given_to_the_loop_reaches_its_runs_as_a_placeholder() {
    let Some(tier) = process_tier_or_skip().await else {
        return;
    };
    let fake = FakeAnthropic::start(vec![
        step(|_| tool_use("toolu_01", "python", "import os\nprint('K=' + os.environ['API_KEY'])")),
        step(|_| final_text("done")),
    ])
    .await;
    let mut o = opts(&fake, tier);
    o.limits.network = "allow=api.test".parse().unwrap();
    let value = "sk-agent-secret-0123456789";
    let decl = sandbench::egress::secrets::Declared::parse("API_KEY=env:V@api.test").unwrap();
    o.secrets = sandbench::egress::secrets::resolve_all(&[decl], &|_| Some(value.into())).unwrap();
    let (live, t) = session(o, "use the key").await;
    assert_eq!(t.reason, EndReason::FinalAnswer, "{t:#?}");
    let result = live
        .iter()
        .find_map(|e| match e {
            TranscriptEvent::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .expect("a tool result");
    assert!(result.contains("K=sbx-secret-API_KEY-"), "{result}");
    let sent: Vec<String> = fake.requests.lock().unwrap().iter().map(|r| r.json().to_string()).collect();
    let all = format!("{live:?} {sent:?}");
    assert!(!all.contains(value), "the value reached the loop: {all}");
    assert!(
        live.iter().any(|e| matches!(e, TranscriptEvent::Sandbox { session: None, note } if note.contains("secrets"))),
        "{live:?}"
    );
}
