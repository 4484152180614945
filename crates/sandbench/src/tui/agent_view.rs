//! The agent view's state: the task prompt and the transcript, folded from
//! `TranscriptEvent`s into typed lines (the widget styles them by kind).
//! Everything from the model or a sandbox is sanitized here (controls shown
//! visibly, tabs expanded) and bounded (line length and line count).

use std::collections::VecDeque;

use super::keymap::Action;
use super::scroll::Scroll;
use super::types::Level;
use super::view::{Intent, Key, Reply};
use crate::agent::{EndReason, TranscriptEvent};
use crate::event::Stream;

/// Lines the transcript keeps (older ones are dropped, and counted).
pub const MAX_LINES: usize = 5000;
/// Characters a line keeps (the rest is counted).
pub const MAX_COLS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Header,
    Task,
    /// "[turn 2] model:" and the like.
    Turn,
    Model,
    ToolCall,
    Code,
    Stdout,
    Stderr,
    /// A run's verdict; the outcome name decides the colour.
    Verdict(VerdictKind),
    Retry,
    End(EndReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictKind {
    Ok,
    Violation,
    Error,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ALine {
    pub kind: Kind,
    pub text: String,
    /// Characters cut from the end.
    pub cut: usize,
}

#[derive(Default)]
pub struct AgentView {
    /// The task being typed.
    pub input: String,
    /// The session shown (running or last).
    pub id: Option<u64>,
    pub running: bool,
    pub cancelling: bool,
    pub tier: String,
    pub lines: VecDeque<ALine>,
    pub dropped: u64,
    /// The last line is still being written (streamed text or output).
    open: bool,
    streamed_turn: Option<u32>,
    /// Where the transcript is scrolled to, in absolute lines (`dropped`
    /// counts from the first line ever written).
    pub scroll: Scroll,
    pub end: Option<EndReason>,
    pub turns: u32,
    /// The session the task's runs share (None: a fresh sandbox per run).
    pub session: Option<String>,
}

impl AgentView {
    pub fn new() -> AgentView {
        AgentView { scroll: Scroll::following(), ..Default::default() }
    }

    /// The first transcript line shown (absolute) in `rows` rows.
    pub fn fit(&self, rows: usize) -> u64 {
        self.scroll.fit(self.dropped, self.dropped + self.lines.len() as u64, rows as u64)
    }

    /// The task prompt and the transcript's scrolling; `rows` is the
    /// transcript's height.
    pub fn key(&mut self, k: Key, rows: usize) -> Reply {
        self.fit(rows);
        match (k.action, k.typed) {
            (Some(Action::Accept), _) => Reply::Do(Intent::StartAgent),
            (Some(Action::Backspace), _) => {
                self.input.pop();
                Reply::Consumed
            }
            (Some(Action::Close), _) => Reply::Do(Intent::Close(None)),
            (Some(a), _) if self.scroll.key(a) => Reply::Consumed,
            (Some(a), _) => Reply::Pass(a),
            (None, Some(c)) if !self.running => {
                if self.input.chars().count() < 2000 {
                    self.input.push(c);
                }
                Reply::Consumed
            }
            (None, Some(_)) => Reply::Say(Level::Info, "the agent is working: F8 cancels it".into()),
            (None, None) => Reply::Consumed,
        }
    }

    /// A new session starts: the transcript is cleared.
    pub fn begin(&mut self, id: u64, tier: &str) {
        self.id = Some(id);
        self.running = true;
        self.cancelling = false;
        self.tier = tier.to_string();
        self.lines.clear();
        self.dropped = 0;
        self.open = false;
        self.streamed_turn = None;
        self.scroll = Scroll::following();
        self.end = None;
        self.turns = 0;
        self.session = None;
    }

    fn new_line(&mut self, kind: Kind) -> &mut ALine {
        if self.lines.len() >= MAX_LINES {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(ALine { kind, text: String::new(), cut: 0 });
        self.lines.back_mut().expect("just pushed")
    }

    /// Whole lines of `kind` (an empty text is one empty line).
    fn push(&mut self, kind: Kind, text: &str) {
        self.open = false;
        for piece in crate::sanitize::visible_controls(text.as_bytes()).split('\n') {
            append(self.new_line(kind), piece);
        }
    }

    /// Streamed text of `kind`: continues the open line of the same kind,
    /// starts new lines at '\n'; a text not ending in '\n' leaves its last
    /// line open.
    fn write(&mut self, kind: Kind, text: &str) {
        let clean = crate::sanitize::visible_controls(text.as_bytes());
        let parts: Vec<&str> = clean.split('\n').collect();
        let n = parts.len();
        for (i, piece) in parts.iter().enumerate() {
            let last = i == n - 1;
            if last && piece.is_empty() {
                if n > 1 {
                    self.open = false;
                }
                break;
            }
            let cont = i == 0 && self.open && self.lines.back().is_some_and(|l| l.kind == kind);
            let line = if cont { self.lines.back_mut().expect("checked") } else { self.new_line(kind) };
            append(line, piece);
            self.open = last;
        }
    }

    pub fn apply(&mut self, ev: TranscriptEvent) {
        match ev {
            TranscriptEvent::Started { task, model, tier, max_turns } => {
                self.push(Kind::Header, &format!("sandbench agent · {model} · tier {tier} · up to {max_turns} turns"));
                self.push(Kind::Task, &format!("task: {task}"));
            }
            TranscriptEvent::Sandbox { session, note } => {
                self.session = session;
                self.push(Kind::Task, &format!("sandbox: {note}"));
            }
            TranscriptEvent::TextDelta { turn, text } => {
                if self.streamed_turn != Some(turn) {
                    self.push(Kind::Turn, &format!("[turn {turn}] model:"));
                    self.streamed_turn = Some(turn);
                }
                self.write(Kind::Model, &text);
            }
            TranscriptEvent::Text { turn, text } => {
                if self.streamed_turn == Some(turn) {
                    // Already shown delta by delta: just end the line.
                    self.open = false;
                } else {
                    self.push(Kind::Turn, &format!("[turn {turn}] model:"));
                    for l in text.split('\n') {
                        self.push(Kind::Model, l);
                    }
                }
            }
            TranscriptEvent::Turn { turn, .. } => self.turns = turn,
            TranscriptEvent::ToolCall { turn, id, language, code } => {
                self.push(Kind::ToolCall, &format!("[turn {turn}] run_code · {language} · {id}"));
                for l in code.split('\n') {
                    self.push(Kind::Code, &format!("│ {l}"));
                }
            }
            TranscriptEvent::ToolOutput { stream, text, .. } => {
                let kind = if stream == Stream::Stderr { Kind::Stderr } else { Kind::Stdout };
                self.write(kind, &text);
            }
            TranscriptEvent::ToolResult { outcome, summary, .. } => {
                let v = match outcome.as_str() {
                    "ok" => VerdictKind::Ok,
                    "violation" => VerdictKind::Violation,
                    "cancelled" => VerdictKind::Cancelled,
                    _ => VerdictKind::Error,
                };
                self.push(Kind::Verdict(v), &format!("── verdict: {summary}"));
            }
            TranscriptEvent::ToolRejected { id, reason } => {
                self.push(Kind::Verdict(VerdictKind::Error), &format!("── tool call {id} refused: {reason}"));
            }
            TranscriptEvent::Retrying { attempt, wait_ms, reason, .. } => {
                self.push(Kind::Retry, &format!("(retry {attempt} in {:.1} s: {reason})", wait_ms as f64 / 1000.0));
            }
            TranscriptEvent::Finished { reason, turns, answer, error } => {
                self.running = false;
                self.cancelling = false;
                self.end = Some(reason);
                self.turns = turns;
                let line = match reason {
                    EndReason::FinalAnswer => format!("── final answer after {turns} turn(s) ──"),
                    EndReason::TurnLimit => {
                        format!("── stopped: turn limit reached ({turns}) without a final answer ──")
                    }
                    EndReason::Cancelled => format!("── cancelled after {turns} turn(s) ──"),
                    EndReason::Error => {
                        format!("── error after {turns} turn(s): {} ──", error.as_deref().unwrap_or("unknown error"))
                    }
                };
                self.push(Kind::End(reason), &line);
                // The answer was shown as the last turn's text already.
                let _ = answer;
            }
        }
    }

    /// A session that could not start (no key, unknown tier): one line.
    pub fn refuse(&mut self, why: &str) {
        self.running = false;
        self.cancelling = false;
        self.end = Some(EndReason::Error);
        self.push(Kind::End(EndReason::Error), why);
    }
}

fn append(line: &mut ALine, piece: &str) {
    let mut n = line.text.chars().count();
    for c in piece.chars() {
        if n >= MAX_COLS {
            line.cut += 1;
            continue;
        }
        if c == '\t' {
            let pad = 4 - n % 4;
            line.text.extend(std::iter::repeat_n(' ', pad));
            n += pad;
        } else {
            line.text.push(c);
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(v: &AgentView) -> Vec<String> {
        v.lines.iter().map(|l| l.text.clone()).collect()
    }

    #[test]
    fn chunks_join_into_lines_and_streams_split() {
        let mut v = AgentView::new();
        v.begin(1, "process");
        let out = |stream, text: &str| TranscriptEvent::ToolOutput { id: "t".into(), stream, text: text.into() };
        for ev in [
            out(Stream::Stdout, "hel"),
            out(Stream::Stdout, "lo\nwor"),
            out(Stream::Stderr, "oops\n"),
            out(Stream::Stdout, "ld\n"),
            out(Stream::Stdout, "\x1b[2J\tx\n"),
        ] {
            v.apply(ev);
        }
        assert_eq!(texts(&v), ["hello", "wor", "oops", "ld", "␛[2J    x"]);
        assert_eq!(v.lines[2].kind, Kind::Stderr);
    }

    #[test]
    fn streamed_text_is_shown_once_and_lines_are_bounded() {
        let mut v = AgentView::new();
        v.begin(1, "process");
        v.apply(TranscriptEvent::TextDelta { turn: 1, text: "Hel".into() });
        v.apply(TranscriptEvent::TextDelta { turn: 1, text: "lo\nthere".into() });
        v.apply(TranscriptEvent::Text { turn: 1, text: "Hello\nthere".into() });
        v.apply(TranscriptEvent::Text { turn: 2, text: "unstreamed".into() });
        assert_eq!(texts(&v), ["[turn 1] model:", "Hello", "there", "[turn 2] model:", "unstreamed"]);
        v.apply(TranscriptEvent::ToolOutput { id: "t".into(), stream: Stream::Stdout, text: "y".repeat(3000) });
        assert_eq!(v.lines.back().unwrap().text.len(), MAX_COLS);
        assert_eq!(v.lines.back().unwrap().cut, 2000);
        for i in 0..MAX_LINES + 10 {
            v.apply(TranscriptEvent::ToolOutput { id: "t".into(), stream: Stream::Stdout, text: format!("{i}\n") });
        }
        assert_eq!(v.lines.len(), MAX_LINES);
        assert!(v.dropped > 0);
    }
}
