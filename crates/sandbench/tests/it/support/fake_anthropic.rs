//! A fake Anthropic API: answers `POST /v1/messages` from a script of replies
//! in the published shapes, lists its model catalogue at `GET /v1/models`,
//! and records every request. Strict where the API is: a Messages call for a
//! model that is not in the catalogue, or is retired, gets the API's 404
//! `not_found_error` (`model: <name>`), and a body field that is not a
//! parameter of API version 2026-10-21 the API's 400 (`<field>: Extra inputs
//! are not permitted`), before any script step is used. It speaks that
//! version only: any other `anthropic-version` is a 400.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::support::http::{serve, Reply, Request};

pub type Step = Box<dyn Fn(&Request) -> Reply + Send + Sync>;

#[derive(Clone)]
pub struct FakeAnthropic {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Request>>>,
    script: Arc<Mutex<VecDeque<Step>>>,
    /// Most models per list page, whatever `limit` asks.
    models_page: Arc<Mutex<usize>>,
}

/// The API version whose shapes this fake follows (the SDK's `ANTHROPIC_API_VERSION`).
pub const API_VERSION: &str = "2026-10-21";

/// `MessageCreateParams` of that version (anthropic 2.14,
/// `types/message_create_params.py`): `temperature`, `top_p` and `top_k`
/// are not among them.
const MESSAGE_PARAMS: &[&str] = &[
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "max_tokens",
    "messages",
    "metadata",
    "model",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "thinking",
    "tool_choice",
    "tools",
    "user_profile_id",
];
/// `ToolParam` of that version (`types/tool_param.py`).
const TOOL_PARAMS: &[&str] = &[
    "name",
    "description",
    "input_schema",
    "type",
    "allowed_callers",
    "cache_control",
    "defer_loading",
    "eager_input_streaming",
    "input_examples",
    "strict",
];

/// What the API answers a Messages body it cannot take (None: fine).
fn check_body(body: &Value) -> Option<Reply> {
    let Some(obj) = body.as_object() else {
        return Some(error(400, "invalid_request_error", "the body must be a JSON object"));
    };
    let extra = |k: &str| error(400, "invalid_request_error", &format!("{k}: Extra inputs are not permitted"));
    if let Some(k) = obj.keys().find(|k| !MESSAGE_PARAMS.contains(&k.as_str())) {
        return Some(extra(k));
    }
    for (i, t) in body["tools"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        if let Some(k) = t.as_object().and_then(|o| o.keys().find(|k| !TOOL_PARAMS.contains(&k.as_str())).cloned()) {
            return Some(extra(&format!("tools.{i}.{k}")));
        }
    }
    for (i, m) in body["messages"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        if !matches!(m["role"].as_str(), Some("user" | "assistant")) {
            return Some(error(400, "invalid_request_error", &format!("messages.{i}.role: must be user or assistant")));
        }
    }
    None
}

/// The catalogue: the official SDK's model list (`anthropic` 2.14,
/// `types/model.py`), newest first, with the lifecycle its deprecation table
/// gives on 2026-12-01 (claude-sonnet-4-5 reached end of life on 2026-11-30).
pub const MODELS: &[(&str, &str, &str, Option<&str>)] = &[
    ("claude-fable-5-2", "Claude Fable 5.2", "active", None),
    ("claude-haiku-5-5", "Claude Haiku 5.5", "active", None),
    ("claude-sonnet-5-5", "Claude Sonnet 5.5", "active", None),
    ("claude-opus-5-5", "Claude Opus 5.5", "active", None),
    ("claude-sonnet-5", "Claude Sonnet 5", "active", None),
    ("claude-opus-4-8", "Claude Opus 4.8", "active", None),
    ("claude-sonnet-4-6", "Claude Sonnet 4.6", "active", None),
    ("claude-haiku-4-5", "Claude Haiku 4.5", "active", None),
    ("claude-opus-4-5", "Claude Opus 4.5", "deprecated", Some("2027-01-22T00:00:00Z")),
    ("claude-sonnet-4-5", "Claude Sonnet 4.5", "retired", Some("2026-11-30T00:00:00Z")),
    ("claude-mythos-preview", "Claude Mythos Preview", "retired", Some("2026-06-30T00:00:00Z")),
];

fn model_info(i: usize) -> Value {
    let (id, name, lifecycle, retires) = MODELS[i];
    json!({"type": "model", "id": id, "display_name": name, "lifecycle": lifecycle, "retires_at": retires,
           "created_at": format!("2026-{:02}-01T00:00:00Z", 12 - i.min(11)),
           "deprecated_at": if lifecycle == "active" { Value::Null } else { json!("2026-01-01T00:00:00Z") }})
}

/// `GET /v1/models`: `limit` (1..=1000, default 20), `after_id`, and
/// `lifecycle[]` (active and deprecated unless given).
fn list_models(req: &Request, max_page: usize) -> Reply {
    let q = req.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    let mut lifecycles: Vec<String> = vec![];
    for kv in q.split('&') {
        if let Some((k, v)) = kv.split_once('=') {
            if k == "lifecycle[]" || k.eq_ignore_ascii_case("lifecycle%5B%5D") {
                lifecycles.push(v.to_string());
            }
        }
    }
    if lifecycles.is_empty() {
        lifecycles = vec!["active".into(), "deprecated".into()];
    }
    let limit = match req.query("limit").map(|l| l.parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if (1..=1000).contains(&n) => n,
        Some(_) => return error(400, "invalid_request_error", "limit: must be between 1 and 1000"),
    };
    let listed: Vec<usize> = (0..MODELS.len()).filter(|i| lifecycles.iter().any(|l| l == MODELS[*i].2)).collect();
    let start = match req.query("after_id") {
        None => 0,
        Some(a) => match listed.iter().position(|i| MODELS[*i].0 == a) {
            Some(p) => p + 1,
            None => return error(400, "invalid_request_error", "after_id: unknown model"),
        },
    };
    let page: Vec<usize> = listed.iter().skip(start).take(limit.min(max_page)).copied().collect();
    let data: Vec<Value> = page.iter().map(|i| model_info(*i)).collect();
    Reply::json(
        200,
        json!({"data": data, "has_more": start + page.len() < listed.len(),
               "first_id": page.first().map(|i| MODELS[*i].0), "last_id": page.last().map(|i| MODELS[*i].0)}),
    )
}

impl FakeAnthropic {
    pub async fn start(steps: Vec<Step>) -> FakeAnthropic {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(steps)));
        let models_page = Arc::new(Mutex::new(1000));
        let (r, s, mp) = (requests.clone(), script.clone(), models_page.clone());
        let addr = serve(move |req: Request| {
            let (r, s, mp) = (r.clone(), s.clone(), mp.clone());
            async move {
                r.lock().unwrap().push(req.clone());
                if req.header("anthropic-version") != Some(API_VERSION) {
                    return error(
                        400,
                        "invalid_request_error",
                        &format!("anthropic-version: this server speaks {API_VERSION} only"),
                    );
                }
                if req.method == "GET" && req.path() == "/v1/models" {
                    let max = *mp.lock().unwrap();
                    return list_models(&req, max);
                }
                if req.method != "POST" || req.path() != "/v1/messages" {
                    return error(404, "not_found_error", "no such route");
                }
                if let Some(refused) = check_body(&req.json()) {
                    return refused;
                }
                let model = req.json()["model"].as_str().unwrap_or("").to_string();
                if !MODELS.iter().any(|(id, _, lifecycle, _)| *id == model && *lifecycle != "retired") {
                    return error(404, "not_found_error", &format!("model: {model}"));
                }
                let step = s.lock().unwrap().pop_front();
                let reply = match step {
                    Some(f) => f(&req),
                    None => error(500, "api_error", "the test script is exhausted"),
                };
                // A whole message, asked for as a stream: send it as the
                // API's server-sent events.
                match reply {
                    Reply::Full { status: 200, ref headers, ref body }
                        if req.json()["stream"] == true
                            && headers.iter().any(|(k, v)| k == "content-type" && v == "application/json") =>
                    {
                        let msg: Value = serde_json::from_slice(body).unwrap();
                        sse(&to_events(&msg))
                    }
                    other => other,
                }
            }
        })
        .await;
        FakeAnthropic { addr, requests, script, models_page }
    }

    pub fn set_models_page(&self, n: usize) {
        *self.models_page.lock().unwrap() = n;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.requests.lock().unwrap().iter().map(|r| r.json()).collect()
    }
}

pub fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(
        status,
        json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CTest"}),
    )
}

pub fn message(content: Value, stop_reason: &str) -> Reply {
    Reply::json(
        200,
        json!({
            "id": "msg_01Test", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 34}
        }),
    )
}

pub fn tool_use(id: &str, language: &str, code: &str) -> Reply {
    message(
        json!([
            {"type": "text", "text": "I will run some code."},
            {"type": "tool_use", "id": id, "name": "run_code", "input": {"language": language, "code": code}}
        ]),
        "tool_use",
    )
}

pub fn final_text(text: &str) -> Reply {
    message(json!([{"type": "text", "text": text}]), "end_turn")
}

/// A step that always gives the same reply.
pub fn step(f: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Step {
    Box::new(f)
}

/// The SSE events the API sends for a whole message: message_start, per block
/// content_block_start / two deltas / content_block_stop, message_delta,
/// message_stop (with a ping, as the API sends).
pub fn to_events(msg: &Value) -> Vec<Value> {
    let mut ev = vec![json!({"type": "message_start", "message": {
        "id": msg["id"], "type": "message", "role": "assistant", "model": msg["model"], "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": msg["usage"]["input_tokens"], "output_tokens": 1}}})];
    ev.push(json!({"type": "ping"}));
    for (i, b) in msg["content"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        let split = |s: &str| {
            let mut at = s.len() / 2;
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            (s[..at].to_string(), s[at..].to_string())
        };
        match b["type"].as_str() {
            Some("text") => {
                ev.push(
                    json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                );
                let (a, c) = split(b["text"].as_str().unwrap_or(""));
                for part in [a, c] {
                    ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": part}}));
                }
            }
            Some("tool_use") => {
                ev.push(json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}));
                let (a, c) = split(&b["input"].to_string());
                for part in [a, c] {
                    ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}));
                }
            }
            _ => ev.push(json!({"type": "content_block_start", "index": i, "content_block": b})),
        }
        ev.push(json!({"type": "content_block_stop", "index": i}));
    }
    ev.push(json!({"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": null},
        "usage": {"output_tokens": msg["usage"]["output_tokens"]}}));
    ev.push(json!({"type": "message_stop"}));
    ev
}

/// One SSE block (`event:` + `data:`), with CRLF line ends as servers may use.
pub fn sse_block(v: &Value) -> Vec<u8> {
    format!("event: {}\r\ndata: {}\r\n\r\n", v["type"].as_str().unwrap_or("message"), v).into_bytes()
}

pub fn sse(events: &[Value]) -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "text/event-stream; charset=utf-8".into())],
        body: events.iter().flat_map(sse_block).collect(),
    }
}
