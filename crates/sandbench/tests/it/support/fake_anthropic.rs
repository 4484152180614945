//! A fake Anthropic Messages API: answers `POST /v1/messages` from a script
//! of replies in the published shapes and records every request.
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
}

impl FakeAnthropic {
    pub async fn start(steps: Vec<Step>) -> FakeAnthropic {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(steps)));
        let (r, s) = (requests.clone(), script.clone());
        let addr = serve(move |req: Request| {
            let (r, s) = (r.clone(), s.clone());
            async move {
                r.lock().unwrap().push(req.clone());
                if req.method != "POST" || req.path() != "/v1/messages" {
                    return error(404, "not_found_error", "no such route");
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
        FakeAnthropic { addr, requests, script }
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
