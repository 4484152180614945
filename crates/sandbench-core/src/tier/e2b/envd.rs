//! envd: the daemon inside every E2B sandbox (port 49983), reached where
//! [`super::settings::Settings::envd_url`] says — `https://sandbox.{domain}` on E2B's
//! domains, routed by the `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers every
//! call carries, as the official SDK does.
//!
//! Why envd's process API and not the code interpreter's `/execute` (port
//! 49999): `process.Process/Start` is a server-streaming Connect-RPC call whose
//! events are `start{pid}`, `data{stdout|stderr}` chunks as they are written
//! and a final `end{exitCode, exited, status}` — live output *and* the real
//! exit status of a real process, on every template. `/execute` streams a
//! Jupyter cell's outputs (stdout/stderr/result/error, then
//! `end_of_execution`): there is no process and no exit code, only the
//! code-interpreter template has it, and `sh` programs would need a kernel.
//!
//! Wire shapes (e2b-dev/E2B `spec/envd/process/process.proto`, `spec/envd/envd.yaml`,
//! the SDKs' `commands.run`): Connect protocol, JSON codec — request body and
//! each response message are envelopes `[flags u8][len u32 BE][json]`; the last
//! response envelope has flag 0x02 and carries `{"error": {code, message}}` on
//! failure. Headers: `X-Access-Token: <envdAccessToken>`, `Authorization: Basic
//! base64("user:")` (the user the process runs as), `Keepalive-Ping-Interval`,
//! `Connect-Timeout-Ms` (the call's deadline). The StartRequest always says
//! `"stdin": false`.
//! Files go up with `POST /files?path=...&username=user` (multipart `file`).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::api::error_message;
use super::settings::ENVD_PORT;
use crate::http::{message_line, one_line};

pub(crate) const USER: &str = "user";
const KEEPALIVE_S: u64 = 50;
/// A stream silent for longer than this (keepalives included) is dead.
const STREAM_IDLE: Duration = Duration::from_secs(KEEPALIVE_S * 2);

#[derive(Clone)]
pub struct Envd {
    http: reqwest::Client,
    pub url: String,
    sandbox_id: String,
    token: Option<String>,
}

/// One event of a started process, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcEvent {
    Start { pid: u64 },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    End(EndInfo),
    KeepAlive,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct EndInfo {
    #[serde(default, alias = "exit_code", rename = "exitCode")]
    pub exit_code: i32,
    #[serde(default)]
    pub exited: bool,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum EnvdError {
    #[error("the sandbox's envd refused the access token (HTTP {0}); the sandbox may have been replaced")]
    Unauthorized(u16),
    #[error("the sandbox is gone (HTTP {status}: {message}); it may have hit its E2B timeout")]
    Gone { status: u16, message: String },
    #[error("the sandbox's envd answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("envd {code}: {message}")]
    Rpc { code: String, message: String },
    #[error("cannot reach the sandbox at {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("the sandbox's output stream dropped before the program ended ({0})")]
    Dropped(String),
    #[error("envd sent something sandbench cannot read ({0})")]
    Malformed(String),
}

impl Envd {
    pub fn new(http: reqwest::Client, url: String, sandbox_id: String, token: Option<String>) -> Envd {
        Envd { http, url: url.trim_end_matches('/').to_string(), sandbox_id, token }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.url))
            .header("E2b-Sandbox-Id", &self.sandbox_id)
            .header("E2b-Sandbox-Port", ENVD_PORT.to_string());
        if let Some(t) = &self.token {
            r = r.header("X-Access-Token", t);
        }
        r
    }

    fn unreachable(&self, e: &reqwest::Error) -> EnvdError {
        EnvdError::Unreachable { url: self.url.clone(), detail: one_line(e) }
    }

    async fn http_error(resp: reqwest::Response) -> EnvdError {
        let status = resp.status().as_u16();
        let message = error_message(resp).await;
        match status {
            401 | 403 => EnvdError::Unauthorized(status),
            // E2B's edge proxy answers 502 for a sandbox that no longer exists.
            404 | 502 => EnvdError::Gone { status, message },
            _ => EnvdError::Http { status, message },
        }
    }

    /// Upload one file (`POST /files`, multipart field `file`).
    pub async fn upload(&self, path: &str, content: &[u8]) -> Result<(), EnvdError> {
        let boundary = format!("sandbench-{:016x}", rand_u64());
        let mut body = Vec::with_capacity(content.len() + 256);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                path.rsplit('/').next().unwrap_or("file")
            )
            .as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let resp = self
            .req(reqwest::Method::POST, "/files")
            .query(&[("path", path), ("username", USER)])
            .header("Content-Type", format!("multipart/form-data; boundary={boundary}"))
            .timeout(Duration::from_secs(60))
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(Self::http_error(resp).await)
        }
    }

    /// `GET /metrics`: memory of the whole VM (None when envd has no such route).
    pub async fn metrics(&self) -> Option<serde_json::Value> {
        let resp = self.req(reqwest::Method::GET, "/metrics").timeout(Duration::from_secs(5)).send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.json().await.ok()
    }

    /// Start a process and return its event stream. `deadline` goes to envd
    /// as the Connect deadline (`Connect-Timeout-Ms`, as the SDK sends its
    /// command timeout): envd ends the call and kills the process when it
    /// passes, even if sandbench can no longer reach the sandbox.
    pub async fn start(
        &self,
        cmd: &str,
        args: &[String],
        envs: &BTreeMap<String, String>,
        cwd: &str,
        deadline: Option<Duration>,
    ) -> Result<ProcStream, EnvdError> {
        // `stdin: false` always, as the SDK's `commands.run` sends it: envd
        // reads a missing value as true and gives the process a pipe that
        // nobody closes, so a program reading stdin would hang to the wall
        // time here while every other tier hands it an empty stdin.
        let msg = json!({
            "process": { "cmd": cmd, "args": args, "envs": envs, "cwd": cwd },
            "stdin": false,
        });
        let body = envelope(0, &serde_json::to_vec(&msg).expect("json"));
        let mut req = self.req(reqwest::Method::POST, "/process.Process/Start");
        if let Some(d) = deadline {
            // The Connect protocol allows at most 10 digits; at least 1 ms.
            req = req.header("Connect-Timeout-Ms", d.as_millis().clamp(1, 9_999_999_999).to_string());
        }
        let resp = req
            .header("Content-Type", "application/connect+json")
            .header("Connect-Protocol-Version", "1")
            .header("Authorization", format!("Basic {}", b64_encode(format!("{USER}:").as_bytes())))
            .header("Keepalive-Ping-Interval", KEEPALIVE_S.to_string())
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if !resp.status().is_success() {
            return Err(Self::http_error(resp).await);
        }
        let body = resp.bytes_stream().map(|r| r.map(|b| b.to_vec()).map_err(|e| one_line(&e)));
        Ok(ProcStream { body: Box::pin(body), buf: Vec::new(), ended: false })
    }
}

type ByteStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Vec<u8>, String>> + Send>>;

pub struct ProcStream {
    body: ByteStream,
    buf: Vec<u8>,
    ended: bool,
}

impl ProcStream {
    /// The next event; `Ok(None)` after the end-of-stream envelope.
    pub async fn next(&mut self) -> Result<Option<ProcEvent>, EnvdError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            match step(&mut self.buf)? {
                Step::Event(e) => return Ok(Some(e)),
                Step::End => {
                    self.ended = true;
                    return Ok(None);
                }
                Step::Need => {}
            }
            match tokio::time::timeout(STREAM_IDLE, self.body.next()).await {
                Err(_) => {
                    return Err(EnvdError::Dropped(format!(
                        "nothing for {} s, not even a keepalive",
                        STREAM_IDLE.as_secs()
                    )))
                }
                Ok(None) => {
                    return Err(EnvdError::Dropped(if self.buf.is_empty() {
                        "connection closed".into()
                    } else {
                        "connection closed inside a message".into()
                    }))
                }
                Ok(Some(Err(e))) => return Err(EnvdError::Dropped(e)),
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }
}

/// What the bytes received so far hold next.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Not a whole envelope yet.
    Need,
    Event(ProcEvent),
    /// The end-of-stream envelope (without an error).
    End,
}

/// Take the next envelope of a server stream from `buf` (consumed as it is
/// read): the one decoder of envd's untrusted stream, also fuzzed
/// (`fuzz/fuzz_targets/envd_stream.rs`).
pub(crate) fn step(buf: &mut Vec<u8>) -> Result<Step, EnvdError> {
    let Some((flags, payload)) = take_envelope(buf)? else { return Ok(Step::Need) };
    if flags & 0x01 != 0 {
        return Err(EnvdError::Malformed("a compressed message though none was asked for".into()));
    }
    if flags & 0x02 != 0 {
        return end_of_stream(&payload).map(|_| Step::End);
    }
    decode_event(&payload).map(Step::Event)
}

/// Connect envelope: flags, big-endian length, payload.
pub(crate) fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 5);
    v.push(flags);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Largest message accepted from envd (output chunks are far smaller).
const MAX_MESSAGE: usize = 16 << 20;

fn take_envelope(buf: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>, EnvdError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_MESSAGE {
        return Err(EnvdError::Malformed(format!("a {len}-byte message")));
    }
    if buf.len() < 5 + len {
        return Ok(None);
    }
    let flags = buf[0];
    let payload = buf[5..5 + len].to_vec();
    buf.drain(..5 + len);
    Ok(Some((flags, payload)))
}

fn end_of_stream(payload: &[u8]) -> Result<(), EnvdError> {
    if payload.is_empty() {
        return Ok(());
    }
    let v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| EnvdError::Malformed(format!("end of stream: {e}")))?;
    match v.get("error") {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(err) => Err(EnvdError::Rpc {
            code: err.get("code").and_then(|c| c.as_str()).unwrap_or("unknown").to_string(),
            message: message_line(err.get("message").and_then(|m| m.as_str()).unwrap_or(""), 200),
        }),
    }
}

/// `StartResponse { event: ProcessEvent }` in protobuf's JSON mapping.
pub(crate) fn decode_event(payload: &[u8]) -> Result<ProcEvent, EnvdError> {
    let v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| EnvdError::Malformed(format!("event: {e}")))?;
    let ev = v.get("event").ok_or_else(|| EnvdError::Malformed("a message without an event".into()))?;
    if let Some(s) = ev.get("start") {
        return Ok(ProcEvent::Start { pid: s.get("pid").and_then(|p| p.as_u64()).unwrap_or(0) });
    }
    if let Some(d) = ev.get("data") {
        for (name, out) in [("stdout", true), ("stderr", false)] {
            if let Some(s) = d.get(name).and_then(|x| x.as_str()) {
                let bytes = b64_decode(s).ok_or_else(|| EnvdError::Malformed(format!("{name} is not base64")))?;
                return Ok(if out { ProcEvent::Stdout(bytes) } else { ProcEvent::Stderr(bytes) });
            }
        }
        // pty output or an empty chunk: nothing to show.
        return Ok(ProcEvent::KeepAlive);
    }
    if let Some(e) = ev.get("end") {
        let end: EndInfo =
            serde_json::from_value(e.clone()).map_err(|e| EnvdError::Malformed(format!("end event: {e}")))?;
        return Ok(ProcEvent::End(end));
    }
    if ev.get("keepalive").is_some() {
        return Ok(ProcEvent::KeepAlive);
    }
    Err(EnvdError::Malformed("an unknown event".into()))
}

/// Go's `ProcessState.String()` for a signalled process is `signal: <name>`.
pub(crate) fn signal_from_status(status: &str) -> Option<i32> {
    let name = status.strip_prefix("signal: ")?.trim();
    let table: &[(&str, i32)] = &[
        ("hangup", 1),
        ("interrupt", 2),
        ("quit", 3),
        ("illegal instruction", 4),
        ("trace/breakpoint trap", 5),
        ("aborted", 6),
        ("bus error", 7),
        ("floating point exception", 8),
        ("killed", 9),
        ("user defined signal 1", 10),
        ("segmentation fault", 11),
        ("user defined signal 2", 12),
        ("broken pipe", 13),
        ("alarm clock", 14),
        ("terminated", 15),
        ("CPU time limit exceeded", 24),
        ("file size limit exceeded", 25),
        ("bad system call", 31),
    ];
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .or_else(|| name.strip_prefix("signal ").and_then(|n| n.parse().ok()))
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(crate) fn b64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = ((b[0] as u32) << 16) | ((b[1] as u32) << 8) | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard or URL-safe alphabet, padding optional (protobuf JSON accepts both).
pub(crate) fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            b'\r' | b'\n' => continue,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar", b"\x00\xff\x10"] {
            assert_eq!(b64_decode(&b64_encode(s)).unwrap(), s);
        }
        assert_eq!(b64_encode(b"user:"), "dXNlcjo=");
        assert!(b64_decode("a*b").is_none());
    }

    #[test]
    fn envelopes_split_across_chunks() {
        let mut all = envelope(0, br#"{"event":{"start":{"pid":7}}}"#);
        all.extend(envelope(0, br#"{"event":{"data":{"stdout":"aGkK"}}}"#));
        all.extend(envelope(0, br#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3"}}}"#));
        all.extend(envelope(2, b"{}"));
        let mut buf = vec![];
        let mut got = vec![];
        for b in all {
            buf.push(b);
            while let Some((f, p)) = take_envelope(&mut buf).unwrap() {
                got.push((f, p));
            }
        }
        assert_eq!(got.len(), 4);
        assert_eq!(decode_event(&got[0].1).unwrap(), ProcEvent::Start { pid: 7 });
        assert_eq!(decode_event(&got[1].1).unwrap(), ProcEvent::Stdout(b"hi\n".to_vec()));
        match decode_event(&got[2].1).unwrap() {
            ProcEvent::End(e) => assert_eq!((e.exit_code, e.exited), (3, true)),
            other => panic!("{other:?}"),
        }
        assert_eq!(got[3].0, 2);
        assert!(end_of_stream(&got[3].1).is_ok());
        assert!(matches!(
            end_of_stream(br#"{"error":{"code":"unauthenticated","message":"bad token"}}"#),
            Err(EnvdError::Rpc { .. })
        ));
    }

    #[test]
    fn oversized_and_garbage_messages_are_refused() {
        let mut buf = vec![0, 0xff, 0xff, 0xff, 0xff];
        assert!(take_envelope(&mut buf).is_err());
        assert!(decode_event(b"not json").is_err());
        assert!(decode_event(br#"{"event":{"data":{"stdout":"!!"}}}"#).is_err());
        assert!(decode_event(br#"{"nothing":1}"#).is_err());
    }

    #[test]
    fn signals_from_go_status_strings() {
        assert_eq!(signal_from_status("signal: killed"), Some(9));
        assert_eq!(signal_from_status("signal: CPU time limit exceeded"), Some(24));
        assert_eq!(signal_from_status("signal: file size limit exceeded"), Some(25));
        assert_eq!(signal_from_status("exit status 1"), None);
    }
}
