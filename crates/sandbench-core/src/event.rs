//! The stream a tier emits while a run goes on. Front ends receive these
//! same events through the runner (`runner::Update`), followed by the report
//! that only the runner makes.

use serde::{Deserialize, Serialize};

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
    pub at_ms: f64,
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
    Network(crate::egress::NetRecord),
}

#[derive(Debug, Clone)]
pub struct RunEvent {
    /// Milliseconds since the run started.
    pub at_ms: f64,
    pub kind: EventKind,
}
