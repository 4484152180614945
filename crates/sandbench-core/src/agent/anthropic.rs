//! A small client for Anthropic's Messages and Models APIs, in the dialect
//! of the official SDK (`anthropic` 2.14 on PyPI, API version 2026-10-21),
//! checked against its sources.
//!
//! `POST {ANTHROPIC_BASE_URL|https://api.anthropic.com}/v1/messages` with
//! headers `x-api-key`, `anthropic-version: 2026-10-21`,
//! `content-type: application/json`; body `{model, max_tokens, system,
//! messages, tools: [{name, description, input_schema}], stream}` — all of
//! them parameters of that version's `MessageCreateParams` (sandbench sends
//! none that it removed, such as `temperature`, `top_p`, `top_k`). A reply is
//! `{id, type: "message", role: "assistant", content: [{type: "text", text} |
//! {type: "tool_use", id, name, input}], stop_reason, usage}`. Errors are
//! `{"type": "error", "error": {"type", "message"}, "request_id"}`, the types
//! being invalid_request_error (400), authentication_error (401),
//! billing_error (402), permission_error (403), not_found_error (404),
//! rate_limit_error (429), api_error (500), timeout_error (504) and
//! overloaded_error (529); 429 and 529 carry `retry-after` when the API knows
//! the wait. Like the SDK, an `x-should-retry: true|false` header decides
//! whether to retry; without it 408, 409, 429, 5xx and connection errors are
//! retried with exponential backoff that honours `retry-after-ms` /
//! `retry-after`.
//!
//! With `stream: true` the reply is server-sent events, read as the SDK reads
//! them: `ping` and blocks without an `event:` name are skipped, an `error`
//! event is an error (its body the error shape above), and every other event
//! is decoded by its data's `type` (`message_start`, `content_block_start`,
//! `content_block_delta` with `text_delta` / `input_json_delta` /
//! `thinking_delta` / `signature_delta`, `content_block_stop`,
//! `message_delta` with the `stop_reason`, `message_stop`; unknown types are
//! ignored). Text deltas are handed out as they arrive and the message is
//! assembled from them. A plain JSON reply is accepted too.
//!
//! `GET /v1/models` (`limit`, `after_id`, `lifecycle[]`) answers `{data:
//! [ModelInfo], has_more, first_id, last_id}`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The version the SDK sends (`ANTHROPIC_API_VERSION` in anthropic 2.14).
pub const API_VERSION: &str = "2026-10-21";
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The model the agent uses unless `[agent] model` or `--model` says
/// otherwise (written once, in the config's defaults, which sit below the
/// agent: `config::DEFAULT_AGENT_MODEL`).
pub const DEFAULT_MODEL: &str = crate::config::DEFAULT_AGENT_MODEL;
/// Models per page of `GET /v1/models` (the API's maximum).
const MODELS_PAGE: u32 = 1000;
/// Pages read at most.
const MODELS_MAX_PAGES: u32 = 10;
/// Attempts per request (the first one included).
pub const MAX_ATTEMPTS: u32 = 5;
/// A `retry-after` longer than this is reported instead of waited for.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize)]
pub struct Request<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [Value],
    pub stream: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    pub role: String,
    /// Content blocks, kept as JSON so that blocks this client does not know
    /// (thinking, ...) go back to the API untouched.
    pub content: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Response {
    #[serde(default)]
    pub id: String,
    pub content: Vec<Value>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<TokenUsage>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq)]
pub struct TokenUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
}

/// One entry of `GET /v1/models` (`ModelInfo`); what sandbench shows of it.
/// Every field is the server's text: bound and clean it before display.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ModelInfo {
    pub id: String,
    #[serde(default)]
    pub display_name: String,
    #[serde(default)]
    pub created_at: Option<String>,
    /// `active`, `deprecated` or `retired`.
    #[serde(default)]
    pub lifecycle: Option<String>,
    #[serde(default)]
    pub retires_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ModelPage {
    data: Vec<ModelInfo>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    last_id: Option<String>,
}

/// A content block this loop acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolUse { id: String, name: String, input: Value },
    Other,
}

pub fn parse_block(v: &Value) -> Result<Block, ApiError> {
    match v.get("type").and_then(|t| t.as_str()) {
        Some("text") => Ok(Block::Text(v.get("text").and_then(|t| t.as_str()).unwrap_or("").to_string())),
        Some("tool_use") => {
            let id = v.get("id").and_then(|t| t.as_str()).filter(|s| !s.is_empty());
            let name = v.get("name").and_then(|t| t.as_str());
            match (id, name) {
                (Some(id), Some(name)) => Ok(Block::ToolUse {
                    id: id.to_string(),
                    name: name.to_string(),
                    input: v.get("input").cloned().unwrap_or(Value::Null),
                }),
                _ => Err(ApiError::Malformed("a tool_use block without id or name".into())),
            }
        }
        Some(_) => Ok(Block::Other),
        None => Err(ApiError::Malformed("a content block without a type".into())),
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ApiError {
    #[error("Anthropic rejected the API key (HTTP {status} {kind}: {message}); check ANTHROPIC_API_KEY")]
    Auth { status: u16, kind: String, message: String },
    #[error("Anthropic rate limit (HTTP 429 {kind}: {message}) after {attempts} attempt(s){after}")]
    RateLimited { kind: String, message: String, attempts: u32, after: String },
    #[error("Anthropic API overloaded (HTTP {status} {kind}: {message}) after {attempts} attempt(s); try again later")]
    Overloaded { status: u16, kind: String, message: String, attempts: u32 },
    #[error("Anthropic refused the request (HTTP {status} {kind}: {message}){hint}")]
    Request { status: u16, kind: String, message: String, hint: String },
    #[error("Anthropic has no model '{model}' for this key (HTTP 404 {kind}: {message}): it is misspelt or retired; see `sandbench agent --list-models`, then pass --model NAME or set `model = \"NAME\"` under [agent] in the config")]
    ModelNotFound { model: String, kind: String, message: String },
    #[error("cannot reach Anthropic at {url} after {attempts} attempt(s): {detail}")]
    Unreachable { url: String, detail: String, attempts: u32 },
    #[error("Anthropic answered something sandbench cannot read ({0})")]
    Malformed(String),
    #[error("cancelled")]
    Cancelled,
}

/// What the client reports while a call is under way.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Model text as it streams in.
    TextDelta(String),
    /// A retry about to be made (after a failure; text already streamed by
    /// the failed attempt will come again).
    Retry(Retry),
}

/// A retry the client is about to make, for the transcript.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Retry {
    pub attempt: u32,
    /// HTTP status, or null for a connection failure.
    pub status: Option<u16>,
    pub wait_ms: u64,
    pub reason: String,
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    key: String,
    /// Base of the exponential backoff (tests shorten it).
    pub backoff: Duration,
}

impl Client {
    pub fn new(base_url: &str, key: &str) -> anyhow::Result<Client> {
        let base = base_url.trim_end_matches('/').to_string();
        let http = crate::http::builder(&[base.as_str()]).timeout(Duration::from_secs(600)).build()?;
        Ok(Client { http, base, key: key.to_string(), backoff: Duration::from_millis(500) })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// One Messages call, retried on transient failures. `on_progress` gets
    /// streamed text and each retry before its wait.
    pub async fn create(
        &self,
        req: &Request<'_>,
        cancel: &CancellationToken,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Response, ApiError> {
        let url = format!("{}/v1/messages", self.base);
        let mut attempt = 1;
        loop {
            // The server's own say on retrying, when it gives one.
            let mut should_retry: Option<bool> = None;
            let sent = self
                .http
                .post(&url)
                .header("x-api-key", &self.key)
                .header("anthropic-version", API_VERSION)
                .header("content-type", "application/json")
                .json(req)
                .send();
            let result = tokio::select! {
                r = sent => r,
                _ = cancel.cancelled() => return Err(ApiError::Cancelled),
            };
            let (status, wait_hint, err) = match result {
                Err(e) => {
                    let detail = crate::http::one_line(&e);
                    (None, None, ApiError::Unreachable { url: self.base.clone(), detail, attempts: attempt })
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let hint = crate::http::retry_after(resp.headers());
                    should_retry = should_retry_header(resp.headers());
                    let sse = resp
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("text/event-stream"));
                    if (200..300).contains(&status) && sse {
                        match read_sse(resp, cancel, attempt, req.model, on_progress).await {
                            Ok(r) => return Ok(r),
                            Err(SseFailure::Fatal(e)) => return Err(e),
                            Err(SseFailure::Retryable(status, e)) => (status, None, e),
                        }
                    } else {
                        let body = tokio::select! {
                            b = resp.text() => b,
                            _ = cancel.cancelled() => return Err(ApiError::Cancelled),
                        };
                        match body {
                            Err(e) => {
                                let detail = format!("the reply broke off: {}", crate::http::one_line(&e));
                                (
                                    Some(status),
                                    hint,
                                    ApiError::Unreachable { url: self.base.clone(), detail, attempts: attempt },
                                )
                            }
                            Ok(text) if (200..300).contains(&status) => {
                                return parse_response(&text);
                            }
                            Ok(text) => (Some(status), hint, classify(status, &text, attempt, hint, Some(req.model))),
                        }
                    }
                }
            };
            let retryable = match (should_retry, status) {
                (Some(said), _) => said,
                (None, None) => true,
                (None, Some(s)) => matches!(s, 408 | 409 | 429 | 500..=599),
            };
            if !retryable || attempt >= MAX_ATTEMPTS {
                return Err(err);
            }
            let wait = match wait_hint {
                Some(w) if w > MAX_WAIT => return Err(err),
                Some(w) => w,
                None => self.backoff_for(attempt),
            };
            on_progress(Progress::Retry(Retry {
                attempt: attempt + 1,
                status,
                wait_ms: wait.as_millis() as u64,
                reason: err.to_string(),
            }));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = cancel.cancelled() => return Err(ApiError::Cancelled),
            }
            attempt += 1;
        }
    }

    /// `GET /v1/models`: the models this key can use, newest first (the
    /// API's order), every page. Active and deprecated ones unless
    /// `with_retired`.
    pub async fn list_models(&self, with_retired: bool) -> Result<Vec<ModelInfo>, ApiError> {
        let url = format!("{}/v1/models", self.base);
        let mut all = vec![];
        let mut after: Option<String> = None;
        for _ in 0..MODELS_MAX_PAGES {
            let limit = MODELS_PAGE.to_string();
            let mut q: Vec<(&str, &str)> = vec![("limit", &limit)];
            if with_retired {
                // The SDK's array format is `brackets`.
                for l in ["active", "deprecated", "retired"] {
                    q.push(("lifecycle[]", l));
                }
            }
            if let Some(a) = &after {
                q.push(("after_id", a));
            }
            let resp = self
                .http
                .get(&url)
                .query(&q)
                .header("x-api-key", &self.key)
                .header("anthropic-version", API_VERSION)
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .map_err(|e| ApiError::Unreachable {
                    url: self.base.clone(),
                    detail: crate::http::one_line(&e),
                    attempts: 1,
                })?;
            let status = resp.status().as_u16();
            let hint = crate::http::retry_after(resp.headers());
            let text = resp.text().await.map_err(|e| ApiError::Unreachable {
                url: self.base.clone(),
                detail: format!("the reply broke off: {}", crate::http::one_line(&e)),
                attempts: 1,
            })?;
            if !(200..300).contains(&status) {
                return Err(classify(status, &text, 1, hint, None));
            }
            let page: ModelPage =
                serde_json::from_str(&text).map_err(|e| ApiError::Malformed(format!("not a model list: {e}")))?;
            all.extend(page.data);
            match (page.has_more, page.last_id) {
                (true, Some(last)) if !last.is_empty() => after = Some(last),
                _ => return Ok(all),
            }
        }
        Err(ApiError::Malformed(format!("the model list goes on past {MODELS_MAX_PAGES} pages")))
    }

    fn backoff_for(&self, attempt: u32) -> Duration {
        let base = self.backoff.as_secs_f64() * 2f64.powi(attempt as i32 - 1);
        // Up to 25 % jitter so that many clients do not retry in step.
        let jitter =
            (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
                % 1000) as f64
                / 4000.0;
        Duration::from_secs_f64((base * (1.0 - jitter)).min(8.0))
    }
}

enum SseFailure {
    /// Not worth retrying (a malformed stream, cancel).
    Fatal(ApiError),
    /// A broken-off stream or an `error` event of a transient kind; the
    /// status is the one the error type stands for.
    Retryable(Option<u16>, ApiError),
}

/// Read a streamed reply to its `message_stop`, handing out text deltas.
async fn read_sse(
    resp: reqwest::Response,
    cancel: &CancellationToken,
    attempt: u32,
    model: &str,
    on_progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Response, SseFailure> {
    use futures_util::StreamExt;
    let url = resp.url().origin().ascii_serialization();
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut asm = Assembler::default();
    loop {
        // Every complete event in the buffer first.
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..end + 2).collect();
            let (name, data) = sse_fields(&block);
            // As the SDK: unnamed blocks and pings carry nothing to act on.
            let Some(name) = name.filter(|n| n != "ping") else { continue };
            if data.is_empty() {
                if name == "error" {
                    return Err(SseFailure::Fatal(ApiError::Malformed("an error event without a body".into())));
                }
                continue;
            }
            let v: Value = serde_json::from_str(&data)
                .map_err(|e| SseFailure::Fatal(ApiError::Malformed(format!("a {name} event that is not JSON: {e}"))))?;
            if name == "error" && v.get("type").and_then(|t| t.as_str()) != Some("error") {
                return Err(SseFailure::Fatal(ApiError::Malformed(format!(
                    "an error event that is not an error: {}",
                    crate::http::message_line(&data, 200)
                ))));
            }
            asm.event(&v, attempt, model, on_progress)?;
            if asm.done {
                return asm.finish().map_err(SseFailure::Fatal);
            }
        }
        let chunk = tokio::select! {
            c = body.next() => c,
            _ = cancel.cancelled() => return Err(SseFailure::Fatal(ApiError::Cancelled)),
        };
        let broke = |detail: String| {
            SseFailure::Retryable(None, ApiError::Unreachable { url: url.clone(), detail, attempts: attempt })
        };
        match chunk {
            None => return Err(broke("the reply stream broke off before message_stop".into())),
            Some(Err(e)) => return Err(broke(format!("the reply stream broke off: {}", crate::http::one_line(&e)))),
            // SSE allows CRLF line ends; JSON data never holds a raw CR.
            Some(Ok(b)) => buf.extend(b.iter().filter(|c| **c != b'\r')),
        }
        if buf.len() > 64 << 20 {
            return Err(SseFailure::Fatal(ApiError::Malformed("an event larger than 64 MiB".into())));
        }
    }
}

/// `event:` (if any) and the joined `data:` lines of one SSE block.
fn sse_fields(block: &[u8]) -> (Option<String>, String) {
    let text = String::from_utf8_lossy(block);
    let mut name = None;
    let mut data: Vec<&str> = vec![];
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (name, data.join("\n"))
}

/// Builds the message from its stream of events.
#[derive(Default)]
struct Assembler {
    id: String,
    blocks: Vec<Value>,
    partial_json: Vec<String>,
    stop_reason: Option<String>,
    usage: TokenUsage,
    done: bool,
}

impl Assembler {
    fn block(&mut self, v: &Value) -> Result<usize, SseFailure> {
        let i = v.get("index").and_then(|i| i.as_u64()).unwrap_or(u64::MAX) as usize;
        if i >= self.blocks.len() {
            return Err(SseFailure::Fatal(ApiError::Malformed(format!(
                "an event for content block {i}, which never started"
            ))));
        }
        Ok(i)
    }

    fn event(
        &mut self,
        v: &Value,
        attempt: u32,
        model: &str,
        on_progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<(), SseFailure> {
        match v.get("type").and_then(|t| t.as_str()).unwrap_or("") {
            "message_start" => {
                let m = &v["message"];
                self.id = m["id"].as_str().unwrap_or("").to_string();
                self.usage.input_tokens = m["usage"]["input_tokens"].as_u64().unwrap_or(0);
                self.usage.output_tokens = m["usage"]["output_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => {
                let i = v.get("index").and_then(|i| i.as_u64()).unwrap_or(u64::MAX) as usize;
                if i != self.blocks.len() {
                    return Err(SseFailure::Fatal(ApiError::Malformed(format!(
                        "content block {i} started out of order"
                    ))));
                }
                self.blocks.push(v.get("content_block").cloned().unwrap_or(Value::Null));
                self.partial_json.push(String::new());
            }
            "content_block_delta" => {
                let i = self.block(v)?;
                let d = &v["delta"];
                match d["type"].as_str().unwrap_or("") {
                    "text_delta" => {
                        let t = d["text"].as_str().unwrap_or("");
                        let cur = self.blocks[i]["text"].as_str().unwrap_or("").to_string();
                        self.blocks[i]["text"] = Value::String(cur + t);
                        if !t.is_empty() {
                            on_progress(Progress::TextDelta(t.to_string()));
                        }
                    }
                    "input_json_delta" => self.partial_json[i].push_str(d["partial_json"].as_str().unwrap_or("")),
                    "thinking_delta" => {
                        let cur = self.blocks[i]["thinking"].as_str().unwrap_or("").to_string();
                        self.blocks[i]["thinking"] = Value::String(cur + d["thinking"].as_str().unwrap_or(""));
                    }
                    "signature_delta" => self.blocks[i]["signature"] = d["signature"].clone(),
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = self.block(v)?;
                if self.blocks[i]["type"] == "tool_use" {
                    let raw = self.partial_json[i].trim();
                    let input = if raw.is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(raw).map_err(|e| {
                            SseFailure::Fatal(ApiError::Malformed(format!("tool input that is not JSON: {e}")))
                        })?
                    };
                    self.blocks[i]["input"] = input;
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                if let Some(o) = v["usage"]["output_tokens"].as_u64() {
                    self.usage.output_tokens = o;
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let (kind, message) = error_parts(v);
                let status = match kind.as_str() {
                    "overloaded_error" => 529,
                    "rate_limit_error" => 429,
                    "api_error" => 500,
                    "timeout_error" => 504,
                    "billing_error" => 402,
                    "request_too_large" => 413,
                    "not_found_error" => 404,
                    "permission_error" => 403,
                    "authentication_error" => 401,
                    _ => 400,
                };
                let body = json!({"type": "error", "error": {"type": kind, "message": message}}).to_string();
                let e = classify(status, &body, attempt, None, Some(model));
                return Err(if matches!(status, 429 | 500 | 504 | 529) {
                    SseFailure::Retryable(Some(status), e)
                } else {
                    SseFailure::Fatal(e)
                });
            }
            // ping, and event types added after this was written.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Response, ApiError> {
        let r = Response { id: self.id, content: self.blocks, stop_reason: self.stop_reason, usage: Some(self.usage) };
        for b in &r.content {
            parse_block(b)?;
        }
        Ok(r)
    }
}

fn parse_response(text: &str) -> Result<Response, ApiError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ApiError::Malformed(format!("not JSON: {e}")))?;
    if v.get("type").and_then(|t| t.as_str()) == Some("error") {
        return Err(ApiError::Malformed(format!("an error inside a success reply: {}", error_parts(&v).1)));
    }
    let r: Response = serde_json::from_value(v).map_err(|e| ApiError::Malformed(format!("not a message: {e}")))?;
    for b in &r.content {
        parse_block(b)?;
    }
    Ok(r)
}

/// Type and message of an error body; the message carries the `request_id`
/// (what Anthropic's support asks for) when there is one.
fn error_parts(v: &Value) -> (String, String) {
    let e = v.get("error");
    let kind = e.and_then(|e| e.get("type")).and_then(|t| t.as_str()).unwrap_or("error");
    let msg = e.and_then(|e| e.get("message")).and_then(|t| t.as_str()).unwrap_or("no message");
    let mut message = crate::http::message_line(msg, 300);
    if let Some(id) = v.get("request_id").and_then(|r| r.as_str()).filter(|r| !r.is_empty()) {
        message.push_str(&format!("; request {}", crate::http::message_line(id, 80)));
    }
    (crate::http::message_line(kind, 60), message)
}

/// `model`: the model a Messages call named (a 404 there is about it).
fn classify(status: u16, body: &str, attempts: u32, retry: Option<Duration>, model: Option<&str>) -> ApiError {
    let (kind, message) = match serde_json::from_str::<Value>(body) {
        Ok(v) => error_parts(&v),
        Err(_) => ("error".into(), crate::http::message_line(body.lines().next().unwrap_or(""), 200)),
    };
    if let (404, Some(model)) = (status, model) {
        return ApiError::ModelNotFound { model: crate::http::message_line(model, 100), kind, message };
    }
    match status {
        401 | 403 => ApiError::Auth { status, kind, message },
        429 => ApiError::RateLimited {
            kind,
            message,
            attempts,
            after: retry.map(|w| format!("; the API asks to wait {:.0} s", w.as_secs_f64().ceil())).unwrap_or_default(),
        },
        500..=599 => ApiError::Overloaded { status, kind, message, attempts },
        _ => ApiError::Request {
            status,
            kind,
            message,
            hint: if status == 402 {
                "; the account has no credit left: see its billing in the Anthropic console".into()
            } else {
                String::new()
            },
        },
    }
}

/// `x-should-retry: true|false` (anything else: no opinion).
fn should_retry_header(h: &reqwest::header::HeaderMap) -> Option<bool> {
    match h.get("x-should-retry").and_then(|v| v.to_str().ok()).map(str::trim) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_parse() {
        assert_eq!(parse_block(&json!({"type":"text","text":"hi"})).unwrap(), Block::Text("hi".into()));
        assert!(matches!(
            parse_block(
                &json!({"type":"tool_use","id":"t1","name":"run_code","input":{"language":"sh","code":"echo"}})
            )
            .unwrap(),
            Block::ToolUse { .. }
        ));
        assert_eq!(parse_block(&json!({"type":"thinking","thinking":"..."})).unwrap(), Block::Other);
        assert!(parse_block(&json!({"type":"tool_use","name":"x"})).is_err());
        assert!(parse_block(&json!({"text":"x"})).is_err());
    }

    #[test]
    fn errors_are_classified() {
        let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        let e = classify(401, body, 1, None, Some("m"));
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
        let e = classify(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            5,
            None,
            None,
        );
        assert!(matches!(e, ApiError::Overloaded { status: 529, .. }));
        let e = classify(404, "<html>", 1, None, Some("claude-gone"));
        let e = e.to_string();
        assert!(e.contains("'claude-gone'") && e.contains("--model") && e.contains("[agent]"), "{e}");
        assert!(parse_response("{}").is_err());
        assert!(parse_response("nope").is_err());
        assert!(parse_response(r#"{"content":[{"type":"text","text":"x"}],"stop_reason":"end_turn"}"#).is_ok());
    }
}
