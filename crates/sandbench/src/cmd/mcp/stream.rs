//! A run's output as it happens, for the MCP client that asked: stdout and
//! stderr chunks and violations go out as progress notifications when the
//! call carried a `progressToken`, and as log messages (`notifications/
//! message`, logger `sandbench`) when the client set a log level that lets
//! them through (`logging/setLevel`, or a request's own log level). A client
//! that asked for neither gets only the final result, as before.
//!
//! The run never waits for the client: events go into a bounded buffer (the
//! oldest text beyond it is dropped, and the next message says how much),
//! and a sender task takes from it at most every [`EVERY`], each message at
//! most [`MAX_MESSAGE`] bytes of text, at most [`MAX_MESSAGES`] per call.
//! Text is the program's, so it goes out with its controls made visible, as
//! in the final reply. Before the result is sent, what is left is flushed
//! (bounded by [`FLUSH`]): notifications of a call arrive before its result.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use rmcp::RoleServer;
use serde_json::json;
use tokio::sync::Notify;

use crate::event::{EventKind, RunEvent, Stream};
use crate::sanitize;

/// The program's bytes as multi-line text for a reply's text block or a
/// notification: every hidden character (controls, and the ones that reorder
/// or hide text) shown by name, newlines and tabs kept — the one shared
/// inert-text function (here, below the server that uses it too).
pub fn inert_text(bytes: &[u8]) -> String {
    sanitize::visible_controls(bytes)
}

/// Least time between two notifications of one call.
pub const EVERY: Duration = Duration::from_millis(100);
/// Most text in one notification (bytes).
pub const MAX_MESSAGE: usize = 8 << 10;
/// Most notifications one call sends.
pub const MAX_MESSAGES: u32 = 1000;
/// Most text waiting to be sent (bytes); older text beyond it is dropped.
const MAX_PENDING: usize = 64 << 10;
/// Longest the result waits for the last notifications to go out.
const FLUSH: Duration = Duration::from_secs(1);

/// Log levels in the order MCP defines them (debug lowest).
pub fn level_rank(level: &str) -> Option<u8> {
    ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
        .iter()
        .position(|l| *l == level)
        .map(|i| i as u8)
}

const INFO: u8 = 1;
const WARNING: u8 = 3;

#[derive(Default)]
struct Pending {
    /// (stream, text) pieces in order; consecutive pieces of one stream merged.
    pieces: Vec<(&'static str, String)>,
    bytes: usize,
    dropped: usize,
    /// Bytes of output seen: the progress value.
    seen: u64,
    /// Incomplete UTF-8 at the end of the last chunk of each stream.
    carry: [Vec<u8>; 2],
    done: bool,
}

/// Sends one call's live events to its client (see the module's doc).
pub struct Streamer {
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
    sender: tokio::task::JoinHandle<()>,
}

impl Streamer {
    /// A streamer for this call, when its client asked for one: a progress
    /// token in the request, or a log level (the request's own, else the
    /// connection's) of info or lower.
    pub fn for_call(ctx: &RequestContext<RoleServer>, conn_level: Option<u8>) -> Option<Streamer> {
        let token = ctx.meta.get_progress_token();
        #[allow(deprecated)] // logging is deprecated in the newest protocol, still what older clients use
        let request_level = ctx
            .meta
            .log_level()
            .and_then(|l| serde_json::to_value(l).ok().and_then(|v| v.as_str().and_then(level_rank)));
        let level = request_level.or(conn_level);
        if token.is_none() && level.is_none_or(|l| l > WARNING) {
            return None;
        }
        let pending = Arc::new(Mutex::new(Pending::default()));
        let wake = Arc::new(Notify::new());
        let sender = tokio::spawn(send_loop(ctx.peer.clone(), token, level, pending.clone(), wake.clone()));
        Some(Streamer { pending, wake, sender })
    }

    /// Take one event of the run (never waits for the client).
    pub fn push(&self, ev: &RunEvent) {
        let Ok(mut p) = self.pending.lock() else { return };
        match &ev.kind {
            EventKind::Output(stream, bytes) => {
                let (name, i) = match stream {
                    Stream::Stdout => ("stdout", 0),
                    Stream::Stderr => ("stderr", 1),
                };
                p.seen += bytes.len() as u64;
                let mut data = std::mem::take(&mut p.carry[i]);
                data.extend_from_slice(bytes);
                let keep = incomplete_tail(&data);
                p.carry[i] = data.split_off(data.len() - keep);
                add(&mut p, name, inert_text(&data));
            }
            EventKind::Violation(v) => {
                // The stream's name ("violation: ") leads the message: the
                // text does not repeat it.
                let text =
                    format!("{} at {:.0} ms: {}\n", v.kind.name(), v.at_ms, sanitize::inert_line(&v.detail, 300));
                p.seen += 1;
                add(&mut p, "violation", text);
            }
            _ => return,
        }
        drop(p);
        self.wake.notify_one();
    }

    /// The run is over: send what is left, then return (bounded wait).
    pub async fn finish(self) {
        if let Ok(mut p) = self.pending.lock() {
            p.done = true;
        }
        self.wake.notify_one();
        let abort = self.sender.abort_handle();
        if tokio::time::timeout(FLUSH, self.sender).await.is_err() {
            abort.abort();
        }
    }
}

/// How many bytes at the end of `b` are the start of a UTF-8 character
/// still to come (0 when `b` ends on a boundary or in invalid bytes).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        if c & 0xC0 != 0x80 {
            let need = match c {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => return 0,
            };
            return if need > back { back } else { 0 };
        }
    }
    0
}

fn add(p: &mut Pending, name: &'static str, text: String) {
    if text.is_empty() {
        return;
    }
    p.bytes += text.len();
    match p.pieces.last_mut() {
        Some((n, t)) if *n == name => t.push_str(&text),
        _ => p.pieces.push((name, text)),
    }
    // Over the bound: drop the oldest text, keeping violations.
    while p.bytes > MAX_PENDING {
        let Some(i) = p.pieces.iter().position(|(n, _)| *n != "violation") else { break };
        let over = p.bytes - MAX_PENDING;
        let t = &mut p.pieces[i].1;
        if t.len() <= over {
            p.bytes -= t.len();
            p.dropped += t.len();
            p.pieces.remove(i);
        } else {
            let mut cut = over;
            while !t.is_char_boundary(cut) {
                cut += 1;
            }
            t.drain(..cut);
            p.bytes -= cut;
            p.dropped += cut;
        }
    }
}

/// Take the next message: one stream's text up to MAX_MESSAGE.
fn next_message(p: &mut Pending) -> Option<(&'static str, String, usize)> {
    let (name, text) = p.pieces.first_mut()?;
    let name = *name;
    let mut cut = text.len().min(MAX_MESSAGE);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // Whole lines when there are any: the rest goes with the next message.
    if let Some(nl) = text[..cut].rfind('\n') {
        cut = nl + 1;
    }
    let part: String = text.drain(..cut).collect();
    if text.is_empty() {
        p.pieces.remove(0);
    }
    p.bytes -= part.len();
    let dropped = std::mem::take(&mut p.dropped);
    Some((name, part, dropped))
}

async fn send_loop(
    peer: Peer<RoleServer>,
    token: Option<ProgressToken>,
    level: Option<u8>,
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
) {
    let mut sent = 0u32;
    let mut progress = 0f64;
    loop {
        let (msg, seen, done) = {
            let Ok(mut p) = pending.lock() else { return };
            (next_message(&mut p), p.seen, p.done)
        };
        let Some((name, text, dropped)) = msg else {
            if done {
                return;
            }
            wake.notified().await;
            continue;
        };
        if sent >= MAX_MESSAGES {
            continue;
        }
        sent += 1;
        // Progress must grow with every notification.
        progress = (seen as f64).max(progress + 1.0);
        let note = if dropped > 0 { format!("[{dropped} bytes not streamed]\n") } else { String::new() };
        if let Some(t) = &token {
            let p = ProgressNotificationParam::new(t.clone(), progress).with_message(format!("{name}: {note}{text}"));
            let _ = peer.notify_progress(p).await;
        }
        let rank = if name == "violation" { WARNING } else { INFO };
        if level.is_some_and(|l| l <= rank) {
            #[allow(deprecated)]
            {
                use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
                let lvl = if rank == WARNING { LoggingLevel::Warning } else { LoggingLevel::Info };
                let data = json!({ "stream": name, "text": text, "dropped_bytes": dropped });
                let _ = peer
                    .notify_logging_message(LoggingMessageNotificationParam::new(lvl, data).with_logger("sandbench"))
                    .await;
            }
        }
        if !done {
            tokio::time::sleep(EVERY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_chunks_is_carried() {
        assert_eq!(incomplete_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_tail(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_tail(b"abc\xff"), 0);
    }

    #[test]
    fn the_buffer_is_bounded_and_keeps_violations() {
        let mut p = Pending::default();
        add(&mut p, "violation", "memory\n".into());
        for _ in 0..100 {
            add(&mut p, "stdout", "x".repeat(4096));
        }
        assert!(p.bytes <= MAX_PENDING, "{}", p.bytes);
        assert!(p.dropped > 0);
        assert_eq!(p.pieces[0].0, "violation");
        let (name, text, dropped) = next_message(&mut p).unwrap();
        assert_eq!((name, dropped > 0), ("violation", true));
        assert!(text.starts_with("memory"));
        let (_, text, _) = next_message(&mut p).unwrap();
        assert_eq!(text.len(), MAX_MESSAGE);
    }
}
