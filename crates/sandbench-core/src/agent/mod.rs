//! The agent loop: a model gets one tool, `run_code {language, code}`, that
//! runs on a sandbench tier under the current limits; the loop goes on until
//! the model answers without calling the tool or the turn limit is reached.
//!
//! It is a library API for every front end: [`start`] returns an
//! [`AgentHandle`] whose `events` channel carries [`TranscriptEvent`]s live
//! (model text, each tool call with its code, the run's output chunks, its
//! verdict, retries, the end); [`AgentHandle::finish`] gives the whole
//! [`Transcript`] (also on errors: what happened so far is kept). The CLI
//! (`sandbench agent`) renders the events as text or prints the transcript as
//! JSON; the workbench can show the same events in an agent view.
//!
//! The model's key stays in sandbench: programs get the runner's scrubbed
//! environment (nothing of the host's), so ANTHROPIC_API_KEY never reaches
//! any sandbox.
//!
//! A task keeps one sandbox for all its tool calls (a session,
//! `crate::session`) on tiers that can keep one, so a file the model writes
//! in one call is there for the next; the session closes when the task ends,
//! however it ends. On other tiers every call gets a fresh sandbox, and the
//! tool's description and the system prompt say which.

pub mod anthropic;
pub(crate) mod tool;

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::event::{EventKind, RunEvent, Stream};
use crate::runner::{self, Update};
use crate::spec::{Limits, RunSpec};
use crate::tier::contract::Tier;
use anthropic::{Block, Message};

/// Everything one agent session needs.
#[derive(Clone)]
pub struct AgentOptions {
    pub tier: Arc<dyn Tier>,
    pub limits: Limits,
    pub model: String,
    pub max_turns: u32,
    pub max_tokens: u32,
    /// `ANTHROPIC_BASE_URL` or the public API.
    pub base_url: String,
    pub api_key: String,
    /// Backoff base between retries (tests shorten it).
    pub retry_backoff: std::time::Duration,
    /// Secrets every run of the task gets (placeholders in the sandbox, the
    /// values put in at the egress proxy): each run then has a fresh
    /// sandbox, since a session is offline.
    pub secrets: crate::egress::secrets::Secrets,
}

impl AgentOptions {
    /// Model, turns and tokens from `[agent]`; key and base URL from the
    /// environment the config read (the official SDKs' names).
    pub fn from_config(
        tier: Arc<dyn Tier>,
        limits: Limits,
        config: &crate::config::Config,
    ) -> anyhow::Result<AgentOptions> {
        let (key, base_url) = credentials(config)?;
        let a = &config.agent;
        Ok(AgentOptions {
            tier,
            limits,
            model: a.model.clone(),
            max_turns: a.max_turns,
            max_tokens: a.max_tokens,
            base_url,
            api_key: key,
            retry_backoff: std::time::Duration::from_millis(500),
            secrets: Default::default(),
        })
    }
}

/// The API key (required) and base URL the config read from the environment.
pub fn credentials(config: &crate::config::Config) -> anyhow::Result<(String, String)> {
    let key = config.env.anthropic_api_key.clone().ok_or_else(|| {
        anyhow::anyhow!("ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=sk-ant-... to use sandbench agent")
    })?;
    let base_url = config.env.anthropic_base_url.clone().unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.into());
    Ok((key, base_url))
}

/// The models the configured key can use (`GET /v1/models`).
pub async fn list_models(
    config: &crate::config::Config,
    with_retired: bool,
) -> anyhow::Result<Vec<anthropic::ModelInfo>> {
    let (key, base_url) = credentials(config)?;
    let client = anthropic::Client::new(&base_url, &key)?;
    Ok(client.list_models(with_retired).await?)
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The model answered without calling the tool.
    FinalAnswer,
    TurnLimit,
    Error,
    Cancelled,
}

/// One thing that happened, in order. Serialized with a `type` tag.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptEvent {
    Started {
        task: String,
        model: String,
        tier: String,
        max_turns: u32,
    },
    /// Where the task's programs run: one session's sandbox (`session`), or
    /// a fresh sandbox per call (`session: None`, `note` says why).
    Sandbox {
        session: Option<String>,
        note: String,
    },
    /// Model text as it streams in (live only: the turn's whole text follows
    /// in `Text`, which the transcript keeps).
    TextDelta {
        turn: u32,
        text: String,
    },
    /// The model's text of one turn.
    Text {
        turn: u32,
        text: String,
    },
    /// One model reply arrived.
    Turn {
        turn: u32,
        stop_reason: Option<String>,
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    },
    ToolCall {
        turn: u32,
        id: String,
        language: String,
        code: String,
    },
    /// Live output of the running program (not kept in the transcript: the
    /// result below has it, bounded).
    ToolOutput {
        id: String,
        stream: Stream,
        text: String,
    },
    ToolResult {
        id: String,
        outcome: String,
        summary: String,
        /// What the model sees.
        content: String,
        is_error: bool,
        report: Option<Box<crate::report::RunReport>>,
    },
    /// A tool call the loop refused (unknown tool, bad input).
    ToolRejected {
        id: String,
        reason: String,
    },
    Retrying {
        turn: u32,
        attempt: u32,
        status: Option<u16>,
        wait_ms: u64,
        reason: String,
    },
    Finished {
        reason: EndReason,
        turns: u32,
        answer: Option<String>,
        error: Option<String>,
    },
}

/// The whole session.
#[derive(Debug, Clone, Serialize)]
pub struct Transcript {
    pub task: String,
    pub model: String,
    pub tier: String,
    pub reason: EndReason,
    pub turns: u32,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub events: Vec<TranscriptEvent>,
}

pub struct AgentHandle {
    pub events: mpsc::Receiver<TranscriptEvent>,
    cancel: CancellationToken,
    task: JoinHandle<Transcript>,
}

impl AgentHandle {
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn canceller(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Drain the remaining events and return the transcript.
    pub async fn finish(mut self) -> Transcript {
        while self.events.recv().await.is_some() {}
        match self.task.await {
            Ok(t) => t,
            Err(e) => Transcript {
                task: String::new(),
                model: String::new(),
                tier: String::new(),
                reason: EndReason::Error,
                turns: 0,
                answer: None,
                error: Some(format!("the agent loop crashed: {e}")),
                events: vec![],
            },
        }
    }
}

/// Start a session; events arrive on the handle, the last is `Finished`.
pub fn start(opts: AgentOptions, task: String) -> AgentHandle {
    let (tx, rx) = mpsc::channel(1024);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let task = tokio::spawn(async move { Session::new(opts, task, tx, c).run().await });
    AgentHandle { events: rx, cancel, task }
}

struct Session {
    opts: AgentOptions,
    task: String,
    tx: mpsc::Sender<TranscriptEvent>,
    cancel: CancellationToken,
    kept: Vec<TranscriptEvent>,
    /// The task's sandbox, when its tier keeps sessions.
    sandbox: Option<crate::session::Session>,
}

impl Session {
    fn new(opts: AgentOptions, task: String, tx: mpsc::Sender<TranscriptEvent>, cancel: CancellationToken) -> Session {
        Session { opts, task, tx, cancel, kept: vec![], sandbox: None }
    }

    /// Open the task's session on a tier that keeps them; otherwise (or if
    /// it cannot be opened) every call runs in a fresh sandbox, said so.
    async fn open_sandbox(&mut self) {
        let tier = self.opts.tier.clone();
        let note = match tier.sessions() {
            Err(why) => why,
            Ok(()) if !self.opts.secrets.is_empty() => {
                "the task has secrets, which need the egress proxy a session does not have".to_string()
            }
            Ok(()) => {
                let spec = crate::session::SessionSpec::new(self.opts.limits.clone());
                let opened = tokio::select! {
                    r = crate::session::Session::open(tier, spec) => r,
                    _ = self.cancel.cancelled() => return,
                };
                match opened {
                    Ok(s) => {
                        let note =
                            format!("session {} on {}: files in /work stay between this task's runs", s.id(), s.tier());
                        let id = s.id().to_string();
                        self.sandbox = Some(s);
                        self.emit(TranscriptEvent::Sandbox { session: Some(id), note }).await;
                        return;
                    }
                    Err(e) => format!("could not open a session ({e:#})"),
                }
            }
        };
        let note = format!("{}; every run gets a fresh sandbox", crate::sanitize::inert_line(&note, 300));
        self.emit(TranscriptEvent::Sandbox { session: None, note }).await;
    }

    async fn emit(&mut self, ev: TranscriptEvent) {
        if !matches!(ev, TranscriptEvent::ToolOutput { .. } | TranscriptEvent::TextDelta { .. }) {
            self.kept.push(ev.clone());
        }
        // A closed channel means the front end went away; the session still
        // finishes its current run cleanly.
        let _ = self.tx.send(ev).await;
    }

    async fn end(mut self, reason: EndReason, turns: u32, answer: Option<String>, error: Option<String>) -> Transcript {
        // The task's sandbox goes with the task, however it ended.
        if let Some(s) = self.sandbox.take() {
            s.close().await;
        }
        self.emit(TranscriptEvent::Finished { reason, turns, answer: answer.clone(), error: error.clone() }).await;
        Transcript {
            task: self.task,
            model: self.opts.model,
            tier: self.opts.tier.name().to_string(),
            reason,
            turns,
            answer,
            error,
            events: self.kept,
        }
    }

    async fn run(mut self) -> Transcript {
        let o = self.opts.clone();
        self.emit(TranscriptEvent::Started {
            task: self.task.clone(),
            model: o.model.clone(),
            tier: o.tier.name().into(),
            max_turns: o.max_turns,
        })
        .await;
        let mut client = match anthropic::Client::new(&o.base_url, &o.api_key) {
            Ok(c) => c,
            Err(e) => {
                return self.end(EndReason::Error, 0, None, Some(format!("cannot build the HTTP client: {e}"))).await
            }
        };
        client.backoff = o.retry_backoff;
        self.open_sandbox().await;
        if self.cancel.is_cancelled() {
            return self.end(EndReason::Cancelled, 0, None, None).await;
        }
        let persistent = self.sandbox.is_some();
        let system = tool::system_prompt(o.tier.name(), &o.limits, persistent);
        let tools = [tool::definition(persistent)];
        let mut messages =
            vec![Message { role: "user".into(), content: vec![json!({"type": "text", "text": self.task})] }];
        for turn in 1..=o.max_turns {
            let req = anthropic::Request {
                model: &o.model,
                max_tokens: o.max_tokens,
                system: &system,
                messages: &messages,
                tools: &tools,
                stream: true,
            };
            // Streamed text and retries are told live (try_send: the
            // callback cannot await; text deltas are for display only, the
            // full text follows in a Text event).
            let tx = self.tx.clone();
            let kept = &mut self.kept;
            let mut on_progress = |p: anthropic::Progress| match p {
                anthropic::Progress::TextDelta(text) => {
                    let _ = tx.try_send(TranscriptEvent::TextDelta { turn, text });
                }
                anthropic::Progress::Retry(r) => {
                    let ev = TranscriptEvent::Retrying {
                        turn,
                        attempt: r.attempt,
                        status: r.status,
                        wait_ms: r.wait_ms,
                        reason: r.reason,
                    };
                    kept.push(ev.clone());
                    let _ = tx.try_send(ev);
                }
            };
            let result = client.create(&req, &self.cancel, &mut on_progress).await;
            let resp = match result {
                Ok(r) => r,
                Err(anthropic::ApiError::Cancelled) => {
                    return self.end(EndReason::Cancelled, turn - 1, None, None).await
                }
                Err(e) => return self.end(EndReason::Error, turn - 1, None, Some(e.to_string())).await,
            };
            self.emit(TranscriptEvent::Turn {
                turn,
                stop_reason: resp.stop_reason.clone(),
                input_tokens: resp.usage.map(|u| u.input_tokens),
                output_tokens: resp.usage.map(|u| u.output_tokens),
            })
            .await;
            let mut text = String::new();
            let mut calls = vec![];
            for b in &resp.content {
                match anthropic::parse_block(b) {
                    Ok(Block::Text(t)) => {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&t);
                    }
                    Ok(Block::ToolUse { id, name, input }) => calls.push((id, name, input)),
                    Ok(Block::Other) => {}
                    Err(e) => return self.end(EndReason::Error, turn, None, Some(e.to_string())).await,
                }
            }
            if !text.is_empty() {
                self.emit(TranscriptEvent::Text { turn, text: text.clone() }).await;
            }
            messages.push(Message { role: "assistant".into(), content: resp.content.clone() });
            if calls.is_empty() {
                if resp.stop_reason.as_deref() == Some("tool_use") {
                    return self
                        .end(
                            EndReason::Error,
                            turn,
                            None,
                            Some(
                                anthropic::ApiError::Malformed("stop_reason tool_use without a tool_use block".into())
                                    .to_string(),
                            ),
                        )
                        .await;
                }
                return self.end(EndReason::FinalAnswer, turn, Some(text), None).await;
            }
            let mut results = vec![];
            for (id, name, input) in calls {
                let r = self.call_tool(turn, &id, &name, &input).await;
                if self.cancel.is_cancelled() {
                    return self.end(EndReason::Cancelled, turn, None, None).await;
                }
                results.push(r);
            }
            messages.push(Message { role: "user".into(), content: results });
        }
        let turns = o.max_turns;
        self.end(EndReason::TurnLimit, turns, None, Some(format!("no final answer within {turns} turn(s)"))).await
    }

    /// Run one tool call; returns the `tool_result` block for the model.
    async fn call_tool(&mut self, turn: u32, id: &str, name: &str, input: &Value) -> Value {
        let reject =
            |reason: String| json!({"type": "tool_result", "tool_use_id": id, "content": reason, "is_error": true});
        if name != tool::NAME {
            let reason = format!("unknown tool '{name}': the only tool is {}", tool::NAME);
            self.emit(TranscriptEvent::ToolRejected { id: id.into(), reason: reason.clone() }).await;
            return reject(reason);
        }
        let (language, code) = match tool::parse_input(input) {
            Ok(x) => x,
            Err(e) => {
                let reason = format!("invalid input: {e}");
                self.emit(TranscriptEvent::ToolRejected { id: id.into(), reason: reason.clone() }).await;
                return reject(reason);
            }
        };
        self.emit(TranscriptEvent::ToolCall {
            turn,
            id: id.into(),
            language: language.name().into(),
            code: code.clone(),
        })
        .await;
        let mut spec = RunSpec::new(language, code);
        spec.limits = self.opts.limits.clone();
        spec.label = format!("agent turn {turn}");
        spec.secrets = self.opts.secrets.clone();
        // spec.env stays empty: the sandbox sees only the scrubbed base env.
        let logged = spec.clone();
        let mut lost = None;
        let started = match &self.sandbox {
            Some(s) => s.start(spec.clone()).map_err(|e| e.to_string()),
            None => Ok(runner::start(self.opts.tier.clone(), spec.clone())),
        };
        let mut handle = match started {
            Ok(h) => h,
            Err(why) => {
                // The session is gone (it idled out while the model thought,
                // or its sandbox died): go on in a fresh sandbox, and say so.
                self.sandbox = None;
                let note =
                    format!("{}; this and later runs get a fresh sandbox", crate::sanitize::inert_line(&why, 300));
                self.emit(TranscriptEvent::Sandbox { session: None, note: note.clone() }).await;
                lost = Some(note);
                runner::start(self.opts.tier.clone(), spec)
            }
        };
        let canceller = handle.canceller();
        let mut report = None;
        loop {
            let ev = tokio::select! {
                ev = handle.events.recv() => ev,
                _ = self.cancel.cancelled(), if !canceller.is_cancelled() => { canceller.cancel(); continue; }
            };
            let Some(ev) = ev else { break };
            match ev {
                Update::Event(RunEvent { kind: EventKind::Output(stream, bytes), .. }) => {
                    let text = String::from_utf8_lossy(&bytes).into_owned();
                    self.emit(TranscriptEvent::ToolOutput { id: id.into(), stream, text }).await;
                }
                Update::Finished(r) => report = Some(r),
                Update::Event(_) => {}
            }
        }
        let Some(report) = report else {
            let reason = "the run ended without a report".to_string();
            self.emit(TranscriptEvent::ToolRejected { id: id.into(), reason: reason.clone() }).await;
            return reject(reason);
        };
        crate::runlog::record(&logged, &report, None);
        let mut content = tool::compact_report(&report);
        if let Some(note) = lost {
            content = format!("note: {note} (files of earlier runs are gone)\n{content}");
        }
        let is_error = tool::is_error(&report);
        self.emit(TranscriptEvent::ToolResult {
            id: id.into(),
            outcome: report.outcome.name().into(),
            summary: report.summary_line(),
            content: content.clone(),
            is_error,
            report: Some(report),
        })
        .await;
        json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": is_error})
    }
}
