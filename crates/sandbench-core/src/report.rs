//! The verdict record of one run (like isolate's meta file). Field names are a
//! public contract: other tools parse them. Add fields freely, rename none.

use serde::{Deserialize, Serialize};

pub use crate::event::Incomplete;
use crate::event::{ExitStatus, Violation, ViolationKind};
use crate::spec::Limits;

/// The version of the JSON report's shape (`schema_version` in `run
/// --format json`, `compare --format json` and error objects): raised when a
/// field changes meaning or goes; new fields do not raise it. 2: every
/// string is inert (`stdout`, `stderr` and the rest show hidden characters
/// by name), where 1 carried the program's text as it came.
pub const SCHEMA_VERSION: u32 = 2;

/// A report as the headless commands print it: the record with its
/// `schema_version` first.
#[derive(Serialize)]
pub struct Versioned<'a> {
    pub schema_version: u32,
    #[serde(flatten)]
    pub report: &'a RunReport,
}

impl RunReport {
    pub fn versioned(&self) -> Versioned<'_> {
        Versioned { schema_version: SCHEMA_VERSION, report: self }
    }
}

/// Milliseconds as the report writes them: to the microsecond. A sum of
/// clock readings carries binary noise (`62.332232000000005`) that says
/// nothing and changes from run to run.
pub mod ms {
    use serde::Serializer;

    fn round(v: f64) -> f64 {
        (v * 1000.0).round() / 1000.0
    }

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(round(*v))
    }

    pub mod opt {
        use serde::Serializer;

        pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(v) => s.serialize_some(&super::round(*v)),
                None => s.serialize_none(),
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    /// The program ran to its end within every limit (whatever its exit code).
    Ok,
    /// A limit stopped or constrained the program.
    Violation,
    /// sandbench (or the tier) failed; the program's behaviour is unknown.
    Error,
    /// The user cancelled the run.
    Cancelled,
    /// A judge stopped short of what it had to look at (a bound on the
    /// entries it walks, the events it queues, ...): nothing over a limit
    /// was found, but the run was not seen whole, so it is not `ok`.
    /// `RunReport::incomplete` names the bound(s). Precedence: a violation
    /// found still reads `violation` (the bound is listed all the same),
    /// an error `error`, a cancel `cancelled`.
    Incomplete,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// How the sandbox of a run came to be: built for it, taken ready-made
/// (a spare, a pooled container or guest), or restored from a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum StartKind {
    Cold,
    Warm,
    Snapshot,
    /// A call in a session's kept sandbox.
    Session,
}

impl StartKind {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Start of the run until the program was started (sandbox creation, boot).
    #[serde(serialize_with = "ms::serialize")]
    pub setup: f64,
    /// Start of the run until the first byte of output, if any arrived.
    #[serde(serialize_with = "ms::opt::serialize")]
    pub first_output: Option<f64>,
    /// Program start until its exit.
    #[serde(serialize_with = "ms::serialize")]
    pub run: f64,
    /// Program exit until everything of the run was gone.
    #[serde(serialize_with = "ms::serialize")]
    pub teardown: f64,
    #[serde(serialize_with = "ms::serialize")]
    pub total: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time of the whole sandbox; null when the tier cannot measure it.
    pub cpu_ms: Option<u64>,
    /// The sandbox's own accounting: its cgroup's high-water mark (see
    /// [`peak_memory`]); null when the tier cannot measure it.
    pub peak_memory_bytes: Option<u64>,
    pub peak_pids: Option<u64>,
}

/// Its `Serialize` is the one exit for the program's text it carries
/// (output, violation details, notes, file names, the tier's details):
/// every string is written inert ([`crate::sanitize::inert`]), whatever the
/// field, so `run --format json`, the run log, MCP's structured content and
/// the shared report cannot carry it raw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct RunReport {
    pub tier: String,
    pub language: String,
    /// What was run (file name, sample name or "-").
    pub label: String,
    pub outcome: Outcome,
    pub exit: ExitStatus,
    pub violations: Vec<Violation>,
    pub timings_ms: Timings,
    pub usage: Usage,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Why the run failed when `outcome` is `error`.
    pub error: Option<String>,
    /// The limits the run was given.
    pub limits: Limits,
    /// Tier-specific facts: isolation actually applied, warm or cold start,
    /// accelerator, limits the tier could not enforce.
    pub details: serde_json::Value,
    /// Protections the tier promises but could not enforce in this run
    /// (only with an explicit opt-in; otherwise the run is refused). Empty:
    /// the sandbox was complete.
    #[serde(default)]
    pub degraded: Vec<String>,
    /// Every decision of the run's egress proxy (bounded: the first
    /// [`MAX_NETWORK_RECORDS`] connections; `details.network` has the totals).
    #[serde(default)]
    pub network: Vec<crate::event::NetRecord>,
    /// The session and call this run was, when it ran in a session's kept
    /// sandbox; absent for a run in a fresh sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionRef>,
    /// The secrets the run was given (names and hosts, never a value), what
    /// its egress proxy did with each, and how often a form of a value had
    /// to be taken out of what the run produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretUse>,
    /// Bounds the judges hit in this run (each once): with no violation,
    /// the outcome is `incomplete`; empty when every judge saw it all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<Incomplete>,
}

crate::sanitize::inert::inert_serialize!(RunReport);

/// One secret of a run, as its report shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecretUse {
    pub name: String,
    /// The hosts it may go to (`api.example.com`, `http://127.0.0.1:8080`).
    pub hosts: Vec<String>,
    /// Where in a request it may be substituted (`headers,query`).
    #[serde(rename = "in")]
    pub places: String,
    /// Requests that carried its value to one of its hosts.
    pub substituted: u64,
    /// Forms of its value the proxy took out of responses.
    pub scrubbed: u64,
    /// The same by spelling, a row of the scrubber's table (`raw`,
    /// `percent`, `base64`, ...): what the bound hosts sent back.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub scrubbed_by: std::collections::BTreeMap<String, u64>,
    /// Requests refused because its placeholder was where it may not go.
    pub misdirected: u64,
    /// Forms of its value found in what the run produced (the program's
    /// output, notes, the tier's details) and replaced before anything was
    /// shown or written. Anything but 0 means the value reached the
    /// sandbox: the gauntlet calls it an escape.
    pub redacted: u64,
}

/// The peak memory a report shows: the sandbox's own accounting (its
/// cgroup's high-water mark on every tier that has one), with two rules on
/// top. Unknown stays unknown: a zero is a tier that did not measure. And a
/// memory violation is that accounting reaching the limit (the judge words
/// one only from the cgroup's own counters), so the peak is at least the
/// limit even when the last reading came before the spike.
pub fn peak_memory(measured: Option<u64>, limit_bytes: u64, limit_hit: bool) -> Option<u64> {
    let measured = measured.filter(|b| *b > 0);
    if limit_hit {
        Some(measured.unwrap_or(0).max(limit_bytes))
    } else {
        measured
    }
}

/// Connections listed in a report.
pub const MAX_NETWORK_RECORDS: usize = 256;

impl RunReport {
    /// The start kind the tier recorded in `details.start`; `None` for a run
    /// that never got a sandbox (or a tier that does not say).
    pub fn start(&self) -> Option<StartKind> {
        serde_json::from_value(self.details.get("start")?.clone()).ok()
    }

    /// A run that did not happen: sandbench failed before or around it.
    /// Fields are filled in with struct-update syntax where more is known.
    pub fn failed(tier: &str, language: &str, label: &str, error: impl Into<String>) -> RunReport {
        RunReport {
            tier: tier.into(),
            language: language.into(),
            label: label.into(),
            outcome: Outcome::Error,
            exit: ExitStatus::default(),
            violations: vec![],
            timings_ms: Timings::default(),
            usage: Usage::default(),
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            error: Some(error.into()),
            limits: Limits::default(),
            details: serde_json::Value::Null,
            degraded: vec![],
            network: vec![],
            session: None,
            secrets: vec![],
            incomplete: vec![],
        }
    }

    pub fn has_violation(&self, kind: ViolationKind) -> bool {
        self.violations.iter().any(|v| v.kind == kind)
    }

    /// One human line: "ok · exit code 0 · 25.3 ms total".
    pub fn summary_line(&self) -> String {
        let mut s = format!("{} · {}", self.outcome.name(), self.exit.describe());
        if let Some(e) = &self.error {
            s = format!("{} · {}", self.outcome.name(), crate::sanitize::inert_line(e, 400));
        }
        for v in &self.violations {
            s.push_str(&format!(" · {} at {}", v.kind.name(), crate::units::duration_ms(v.at_ms)));
        }
        for b in &self.incomplete {
            s.push_str(&format!(" · incomplete: {}", crate::sanitize::inert_line(&b.detail, 400)));
        }
        s.push_str(&format!(" · {} total", crate::units::duration_ms(self.timings_ms.total)));
        if let Some(k) = self.start() {
            s.push_str(&format!(" · {}", k.name()));
            if let Some(why) = self.start_note() {
                s.push_str(&format!(" ({why})"));
            }
        }
        s
    }

    /// Why the run started as it did, when that is news (a warm member
    /// was gone: `pool member gone: removed outside sandbench`).
    pub fn start_note(&self) -> Option<String> {
        let n = self.details.get("start_note")?.as_str()?;
        Some(crate::sanitize::inert_line(n, 200))
    }
}

/// Which session, and which call of it (1, 2, …), a report belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRef {
    pub id: String,
    pub call: u32,
}

#[cfg(test)]
mod tests {
    use super::peak_memory;

    #[test]
    fn milliseconds_are_written_to_the_microsecond_and_the_shape_is_versioned() {
        let mut r = super::RunReport::failed("process", "python", "-", "x");
        r.timings_ms.total = 62.332232000000005;
        r.timings_ms.first_output = Some(0.1 + 0.2);
        r.violations.push(crate::event::Violation {
            kind: crate::event::ViolationKind::Memory,
            at_ms: 829.9999999999,
            detail: String::new(),
        });
        let text = serde_json::to_string(&r.versioned()).unwrap();
        assert!(text.starts_with(&format!("{{\"schema_version\":{},", super::SCHEMA_VERSION)), "{text}");
        assert!(text.contains("\"total\":62.332}"), "{text}");
        assert!(text.contains("\"first_output\":0.3,"), "{text}");
        assert!(text.contains("\"at_ms\":830.0,"), "{text}");
        // What is written reads back as a report.
        let back: super::RunReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back.timings_ms.total, 62.332);
    }

    #[test]
    fn peak_memory_is_unknown_rather_than_zero_and_at_least_a_limit_that_bit() {
        let limit = 16 << 20;
        assert_eq!(peak_memory(None, limit, false), None);
        assert_eq!(peak_memory(Some(0), limit, false), None, "a zero is a tier that did not measure");
        assert_eq!(peak_memory(Some(5 << 20), limit, false), Some(5 << 20));
        // docker's `memory limit 16M hit` beside `peak mem 2.7M`: the last
        // sample came before the spike; the cgroup reached its limit.
        assert_eq!(peak_memory(Some(2_831_155), limit, true), Some(limit));
        assert_eq!(peak_memory(None, limit, true), Some(limit));
        assert_eq!(peak_memory(Some(limit), limit, true), Some(limit));
    }
}
