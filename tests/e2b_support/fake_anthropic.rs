//! A fake Anthropic Messages API: answers `POST /v1/messages` from a script
//! of replies in the published shapes and records every request.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::http::{serve, Reply, Request};

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
                match step {
                    Some(f) => f(&req),
                    None => error(500, "api_error", "the test script is exhausted"),
                }
            }
        })
        .await;
        FakeAnthropic {
            addr,
            requests,
            script,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.json())
            .collect()
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
