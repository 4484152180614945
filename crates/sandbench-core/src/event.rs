//! The stream a tier emits while a run goes on. Front ends receive these
//! same events through the runner (`runner::Update`), followed by the report
//! that only the runner makes.
//!
//! The bottom layer of the engine: besides the events, the sink a run
//! emits them through ([`RunContext`]) and the egress proxy's records
//! ([`NetRecord`]) live here, so that the judge, the proxy and every tier
//! can speak of them without knowing of each other (docs/architecture.md).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "lowercase")]
pub enum Phase {
    Preparing,
    Booting,
    Running,
    #[strum(serialize = "tearing down")]
    TearingDown,
}

impl Phase {
    /// As people read it ("tearing down").
    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ViolationKind {
    CpuTime,
    Memory,
    WallTimeout,
    Pids,
    FileSize,
    OutputLimit,
    /// The writable scratch space filled up.
    Disk,
    /// The egress proxy refused a connection (not in the allow list, a
    /// mismatched Host or SNI, a private address, ...).
    Network,
    /// The egress proxy refused a request that carried a secret's
    /// placeholder where it may not go: to a host the secret is not bound
    /// to, or in a part of the request it may not be put in.
    SecretMisdirected,
}

impl ViolationKind {
    /// The name in reports and sample headers (as serde writes it).
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<ViolationKind> {
        s.parse().ok()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    pub kind: ViolationKind,
    /// Milliseconds since the run started.
    #[serde(serialize_with = "crate::report::ms::serialize")]
    pub at_ms: f64,
    pub detail: String,
}

/// A bound a judge hit: what it did not look at, so the verdict cannot be
/// `ok` (`report::Outcome::Incomplete`). Words from sandbench's own judges,
/// never the program's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incomplete {
    /// Which bound (stable names, listed in docs/SECURITY.md, "Bounds of
    /// the judges"): `scratch_walk_entries`, `scratch_walk_depth`,
    /// `scratch_walk_unreadable`, `file_events_lost`.
    pub bound: String,
    /// The bound's value (entries, levels); null when it has none.
    pub limit: Option<u64>,
    /// Which judge hit it, and where (`loader walk of /work`).
    #[serde(rename = "where")]
    pub at: String,
    /// One human line: what went unseen.
    pub detail: String,
}

/// One resource sample of the sandbox as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageSample {
    pub cpu_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (_, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
            (Some(c), None) => format!("exit code {c}"),
            (None, None) => "no exit status".into(),
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => "signal",
    }
}

#[derive(Debug, Clone)]
pub enum EventKind {
    Phase(Phase),
    Output(Stream, Vec<u8>),
    Usage(UsageSample),
    Violation(Violation),
    /// Free-form status line from the tier ("warm container", "accel=tcg").
    Note(String),
    Exit(ExitStatus),
    /// A decision of the run's egress proxy (and, later, the same
    /// connection's end with its bytes).
    Network(NetRecord),
    /// A judge hit one of its bounds: the run cannot read `ok`.
    Incomplete(Incomplete),
}

#[derive(Debug, Clone)]
pub struct RunEvent {
    /// Milliseconds since the run started.
    pub at_ms: f64,
    pub kind: EventKind,
}

/// Longest violation detail or note (characters).
pub const MAX_DETAIL: usize = 400;

/// What a run needs from the runner: a clock, a place to send events and a
/// token that says "stop now" (cancel, wall timeout, output limit).
#[derive(Clone)]
pub struct RunContext {
    pub started: Instant,
    pub tx: mpsc::Sender<RunEvent>,
    pub stop: CancellationToken,
}

impl RunContext {
    pub fn ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    pub async fn emit(&self, kind: EventKind) {
        // The runner outlives every tier future; a send error means it was
        // torn down, and the tier's own cleanup still runs.
        let _ = self.tx.send(RunEvent { at_ms: self.ms(), kind }).await;
    }

    /// Report a violation. The detail may quote what the program chose (a
    /// file name): it is made inert here, once, for every front end.
    pub async fn violation(&self, kind: ViolationKind, detail: impl Into<String>) {
        let detail = crate::sanitize::inert_line(&detail.into(), MAX_DETAIL);
        let v = Violation { kind, at_ms: self.ms(), detail };
        self.emit(EventKind::Violation(v)).await;
    }

    /// A bound a judge hit (its detail made inert like a violation's).
    pub async fn incomplete(&self, mut b: Incomplete) {
        b.at = crate::sanitize::inert_line(&b.at, 200);
        b.detail = crate::sanitize::inert_line(&b.detail, MAX_DETAIL);
        b.bound = crate::sanitize::inert_line(&b.bound, 60);
        self.emit(EventKind::Incomplete(b)).await;
    }

    /// A status line for the run's notes, made inert like a violation's detail.
    pub async fn note(&self, text: impl Into<String>) {
        self.emit(EventKind::Note(crate::sanitize::inert_line(&text.into(), MAX_DETAIL))).await;
    }

    pub async fn usage(&self, u: UsageSample) {
        self.emit(EventKind::Usage(u)).await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allowed,
    Denied,
}

impl Decision {
    pub fn name(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
        }
    }
}

/// One connection the proxy decided on. Sent when decided (`open` while an
/// allowed connection goes on) and again when it ends, with its bytes.
/// Everything in it the program chose (host, method) is already inert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetRecord {
    /// The connection's number in its run.
    pub id: u64,
    /// When it was decided, ms since the run started.
    #[serde(serialize_with = "crate::report::ms::serialize")]
    pub at_ms: f64,
    pub decision: Decision,
    /// CONNECT, GET, ... ("?" when the request was unreadable).
    pub method: String,
    pub host: String,
    pub port: u16,
    /// The address the proxy connected to.
    pub address: Option<String>,
    /// Why denied, or where it went.
    pub detail: String,
    /// Bytes from the program, and to it.
    pub bytes_up: u64,
    pub bytes_down: u64,
    #[serde(serialize_with = "crate::report::ms::serialize")]
    pub duration_ms: f64,
    /// Still going (allowed, not yet closed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open: bool,
    /// The run's secrets bound to this host (its TLS intercepted, their
    /// placeholders substituted, the response scrubbed). Names only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Refused because this secret's placeholder was where it may not go
    /// (another host, or a part of the request it may not be put in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misdirected: Option<String>,
}

impl NetRecord {
    /// "denied CONNECT evil.test:443 — not in the allow list".
    pub fn line(&self) -> String {
        let what = format!("{} {} {}:{}", self.decision.name(), self.method, self.host, self.port);
        match (self.decision, self.open) {
            (Decision::Allowed, true) => format!("{what} — {}", self.detail),
            (Decision::Allowed, false) => format!(
                "closed {} {}:{} — {} up, {} down, {}",
                self.method,
                self.host,
                self.port,
                crate::units::size(self.bytes_up),
                crate::units::size(self.bytes_down),
                crate::units::duration_ms(self.duration_ms)
            ),
            (Decision::Denied, _) => format!("{what} — {}", self.detail),
        }
    }
}
