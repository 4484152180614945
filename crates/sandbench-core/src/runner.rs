//! Drives one run: starts the tier, stamps and forwards its events, enforces
//! the limits every tier shares (wall time, output), and folds the stream into
//! a `RunReport`.
//!
//! It is also the one place every run's words pass through on their way to
//! any front end, log or reply: with secrets, every form of every value is
//! taken out here (`Redact`) — from the live output (across chunks), every
//! event's text, and the finished report as a whole — and counted in the
//! report (`secrets[].redacted`): the program only ever had placeholders, so
//! a value found here is a leak, and says so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::egress::scrub::{Needles, Scrubber};
use crate::egress::secrets::Secrets;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, RunEvent, Stream, UsageSample, Violation, ViolationKind};
use crate::report::{Outcome, RunReport, SecretUse, SessionRef, Timings, Usage};
use crate::spec::{format_duration, format_size, Limits, RunSpec};
use crate::tier::contract::{BoxFuture, Tier, TierExit};

/// Extra time a tier gets for setup and boot before the runner gives up on it.
const SETUP_GRACE: Duration = Duration::from_secs(300);

/// What a front end receives about a run: the tier's live events (stamped,
/// bounded, with the runner's own violations), then exactly one report.
/// Tiers cannot send `Finished`: only the runner makes reports.
#[derive(Debug, Clone)]
pub enum Update {
    Event(RunEvent),
    Finished(Box<RunReport>),
}

/// A run in progress: its updates and a way to cancel it.
pub struct RunHandle {
    pub events: mpsc::Receiver<Update>,
    cancel: CancellationToken,
    teardowns: Arc<crate::tier::background::Scope>,
}

/// Resolves once a run's sandbox is gone (see [`RunHandle::torn_down`]).
pub struct TornDown(Arc<crate::tier::background::Scope>);

impl TornDown {
    pub async fn wait(self) {
        self.0.wait().await
    }
}

impl RunHandle {
    /// What to wait on, once the report is in, until everything of the run
    /// is gone: the report is final when the program has exited and its
    /// output is drained, while some tiers remove the sandbox itself (the
    /// helper and its cgroup, a container, a guest) in the background.
    pub fn torn_down(&self) -> TornDown {
        TornDown(self.teardowns.clone())
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn canceller(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Wait for the end, dropping the live events.
    pub async fn report(mut self) -> RunReport {
        while let Some(u) = self.events.recv().await {
            if let Update::Finished(r) = u {
                return *r;
            }
        }
        unreachable_report()
    }
}

fn unreachable_report() -> RunReport {
    // The runner always sends Finished; a closed channel without it means the
    // runner task panicked. Say so instead of panicking here too.
    RunReport::failed("?", "?", "-", "the run ended without a report (internal error; see the log)")
}

/// What the runner drives: a tier's fresh sandbox, or one call in a
/// session's kept sandbox (`session.rs`).
pub(crate) trait Target: Send + Sync + 'static {
    fn name(&self) -> String;
    fn check_limits(&self, limits: &Limits) -> Result<(), String>;
    /// Refuse secrets the target cannot keep out of its sandbox.
    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String>;
    fn run(self: Arc<Self>, spec: RunSpec, ctx: RunContext) -> BoxFuture<'static, anyhow::Result<TierExit>>;
    /// The session and call the report belongs to.
    fn session(&self) -> Option<SessionRef> {
        None
    }
}

struct Fresh(Arc<dyn Tier>);

impl Target for Fresh {
    fn name(&self) -> String {
        self.0.name().to_string()
    }
    fn check_limits(&self, limits: &Limits) -> Result<(), String> {
        self.0.check_limits(limits)
    }
    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
        self.0.check_secrets(secrets)
    }
    fn run(self: Arc<Self>, spec: RunSpec, ctx: RunContext) -> BoxFuture<'static, anyhow::Result<TierExit>> {
        Box::pin(async move { self.0.run(spec, ctx).await })
    }
}

/// Start `spec` on `tier`. Events arrive on the handle; the last is `Finished`.
pub fn start(tier: Arc<dyn Tier>, spec: RunSpec) -> RunHandle {
    start_keeping(tier, spec, usize::MAX)
}

/// `start`, with the report keeping at most `keep` bytes of each stream
/// (flagged truncated past that); the live events still carry everything up
/// to the output limit. For front ends that show the output themselves and
/// must stay small whatever the limit (the workbench).
pub fn start_keeping(tier: Arc<dyn Tier>, spec: RunSpec, keep: usize) -> RunHandle {
    start_target(Arc::new(Fresh(tier)), spec, keep)
}

pub(crate) fn start_target(target: Arc<dyn Target>, spec: RunSpec, keep: usize) -> RunHandle {
    let (out_tx, out_rx) = mpsc::channel(128);
    let cancel = CancellationToken::new();
    let teardowns = Arc::new(crate::tier::background::Scope::default());
    tokio::spawn(drive(target, spec, out_tx, cancel.clone(), keep, teardowns.clone()));
    RunHandle { events: out_rx, cancel, teardowns }
}

/// Run to the end and return the report (no live events).
pub async fn run(tier: Arc<dyn Tier>, spec: RunSpec) -> RunReport {
    start(tier, spec).report().await
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum StopReason {
    Cancelled,
    WallTimeout,
    Output,
}

struct Fold {
    spec_limits: crate::spec::Limits,
    /// Bytes of each stream the report keeps.
    keep: usize,
    phases: Vec<(Phase, f64)>,
    first_output: Option<f64>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    captured: u64,
    violations: Vec<Violation>,
    peak: UsageSample,
    last: UsageSample,
    exit: Option<ExitStatus>,
    network: Vec<crate::event::NetRecord>,
    incomplete: Vec<crate::event::Incomplete>,
}

impl Fold {
    /// Keep output up to the limit; returns the part to forward, and whether
    /// the limit was crossed just now.
    fn take_output(&mut self, stream: Stream, mut bytes: Vec<u8>) -> (Vec<u8>, bool) {
        let limit = self.spec_limits.output_bytes;
        let room = limit.saturating_sub(self.captured) as usize;
        let crossed = bytes.len() > room;
        if crossed {
            bytes.truncate(room);
        }
        self.captured += bytes.len() as u64;
        let (buf, flag) = match stream {
            Stream::Stdout => (&mut self.stdout, &mut self.stdout_truncated),
            Stream::Stderr => (&mut self.stderr, &mut self.stderr_truncated),
        };
        let room_kept = self.keep.saturating_sub(buf.len());
        buf.extend_from_slice(&bytes[..bytes.len().min(room_kept)]);
        if crossed || bytes.len() > room_kept {
            *flag = true;
        }
        (bytes, crossed)
    }

    fn usage(&mut self, u: UsageSample) {
        fn max(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        }
        self.peak.memory_bytes = max(self.peak.memory_bytes, u.memory_bytes);
        self.peak.pids = max(self.peak.pids, u.pids);
        if u.cpu_ms.is_some() {
            self.last.cpu_ms = u.cpu_ms;
        }
    }

    fn phase_at(&self, p: Phase) -> Option<f64> {
        self.phases.iter().find(|(q, _)| *q == p).map(|(_, t)| *t)
    }
}

async fn drive(
    tier: Arc<dyn Target>,
    spec: RunSpec,
    out: mpsc::Sender<Update>,
    cancel: CancellationToken,
    keep: usize,
    teardowns: Arc<crate::tier::background::Scope>,
) {
    let started = Instant::now();
    let ms = move || started.elapsed().as_secs_f64() * 1000.0;
    let (tx, mut rx) = mpsc::channel::<RunEvent>(256);
    let stop = CancellationToken::new();
    let ctx = RunContext { started, tx, stop: stop.clone() };
    let tier_name = tier.name();
    let session = tier.session();
    let checked = tier.check_limits(&spec.limits).and_then(|()| {
        if spec.secrets.is_empty() {
            return Ok(());
        }
        tier.check_secrets(&spec.secrets)?;
        spec.secrets.check(&spec.limits.network, &spec.env)
    });
    if let Err(e) = checked {
        // Refused before any sandbox work: the program never ran.
        let mut r = RunReport::failed(&tier_name, spec.language.name(), &spec.label, e);
        r.limits = spec.limits.clone();
        r.session = session;
        let _ = out.send(Update::Finished(Box::new(r))).await;
        return;
    }
    let limits = spec.limits.clone();
    let language = spec.language.name().to_string();
    let label = spec.label.clone();
    let shell = spec.shell().describe();
    let redact = Redact::new(&spec.secrets);
    let mut streams = redact.as_ref().map(|r| [Scrubber::new(&r.needles, r.n()), Scrubber::new(&r.needles, r.n())]);
    let mut redacted = vec![0u64; spec.secrets.iter().count()];
    let secret_list: Vec<(String, Vec<String>, String)> =
        spec.secrets.iter().map(|s| (s.name.clone(), s.hosts(), s.places.to_string())).collect();
    let task = {
        let tier = tier.clone();
        tokio::spawn(crate::tier::background::scoped(teardowns, async move { tier.run(spec, ctx).await }))
    };

    let mut f = Fold {
        spec_limits: limits.clone(),
        keep,
        phases: vec![],
        first_output: None,
        stdout: vec![],
        stderr: vec![],
        stdout_truncated: false,
        stderr_truncated: false,
        captured: 0,
        violations: vec![],
        peak: UsageSample::default(),
        last: UsageSample::default(),
        exit: None,
        network: vec![],
        incomplete: vec![],
    };
    let mut stop_reason: Option<StopReason> = None;
    let mut deadline = tokio::time::Instant::now() + limits.wall_time + SETUP_GRACE;
    let mut in_setup = true;
    // Forwarding failures mean the front end went away; the run still ends
    // properly so that nothing is left behind.
    let forward = |ev: RunEvent| {
        let out = out.clone();
        async move {
            let _ = out.send(Update::Event(ev)).await;
        }
    };

    // With secrets, the tier's events are scrubbed as they arrive and folded
    // from here (the output a value could straddle is held back until the
    // next chunk or the program's exit).
    let mut scrubbed: std::collections::VecDeque<RunEvent> = Default::default();
    loop {
        let ev = if let Some(ev) = scrubbed.pop_front() {
            ev
        } else {
            let raw = tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => ev,
                    None => match (&redact, &mut streams) {
                        (Some(r), Some(st)) if st.iter().any(|s| s.holding()) => {
                            scrubbed.extend(r.flush(st, &mut redacted, ms()));
                            continue;
                        }
                        _ => break,
                    },
                },
                _ = cancel.cancelled(), if stop_reason.is_none() => {
                    stop_reason = Some(StopReason::Cancelled);
                    stop.cancel();
                    forward(RunEvent { at_ms: ms(), kind: EventKind::Note("cancelled by the user".into()) }).await;
                    continue;
                }
                _ = tokio::time::sleep_until(deadline), if stop_reason.is_none() => {
                    stop_reason = Some(StopReason::WallTimeout);
                    stop.cancel();
                    let detail = if in_setup {
                        format!("setup did not finish within {} s", (limits.wall_time + SETUP_GRACE).as_secs())
                    } else {
                        format!("wall time limit {} hit — killed", format_duration(limits.wall_time))
                    };
                    let v = Violation { kind: ViolationKind::WallTimeout, at_ms: ms(), detail };
                    f.violations.push(v.clone());
                    forward(RunEvent { at_ms: v.at_ms, kind: EventKind::Violation(v) }).await;
                    continue;
                }
            };
            match (&redact, &mut streams) {
                (Some(r), Some(st)) => {
                    scrubbed.extend(r.event(raw, st, &mut redacted));
                    continue;
                }
                _ => raw,
            }
        };
        match ev.kind {
            EventKind::Phase(p) => {
                if p == Phase::Running && in_setup {
                    in_setup = false;
                    deadline = tokio::time::Instant::now() + limits.wall_time;
                }
                f.phases.push((p, ev.at_ms));
                forward(ev).await;
            }
            EventKind::Output(stream, bytes) => {
                if f.first_output.is_none() && !bytes.is_empty() {
                    f.first_output = Some(ev.at_ms);
                }
                if stop_reason == Some(StopReason::Output) {
                    continue;
                }
                let (kept, crossed) = f.take_output(stream, bytes);
                if !kept.is_empty() {
                    forward(RunEvent { at_ms: ev.at_ms, kind: EventKind::Output(stream, kept) }).await;
                }
                if crossed {
                    stop_reason.get_or_insert(StopReason::Output);
                    stop.cancel();
                    let v = Violation {
                        kind: ViolationKind::OutputLimit,
                        at_ms: ev.at_ms,
                        detail: format!(
                            "output limit {} reached — stopped reading and killed",
                            format_size(limits.output_bytes)
                        ),
                    };
                    f.violations.push(v.clone());
                    forward(RunEvent { at_ms: v.at_ms, kind: EventKind::Violation(v) }).await;
                }
            }
            EventKind::Usage(u) => {
                f.usage(u);
                forward(ev).await;
            }
            EventKind::Violation(ref v) => {
                // One entry per kind: a tier may notice the same limit twice
                // (e.g. the sampler and the exit status).
                if f.violations.iter().any(|o| o.kind == v.kind) {
                    continue;
                }
                // Kept after a cancel too: the judge words only counters and
                // signals the program caused (a CPU counter past its limit, a
                // capped file), never the kill we sent, and a figure over a
                // limit must come with the violation that says so. The
                // outcome stays `cancelled`.
                f.violations.push(v.clone());
                forward(ev).await;
            }
            EventKind::Exit(x) => {
                f.exit = Some(x);
                forward(ev).await;
            }
            EventKind::Note(_) => forward(ev).await,
            EventKind::Incomplete(ref b) => {
                // Each bound once per place (a judge may look twice). Kept
                // after a cancel or an error too: the report says what went
                // unseen whatever its outcome. Bounded: a handful of judges,
                // each with a handful of bounds.
                if f.incomplete.iter().any(|o| o.bound == b.bound && o.at == b.at) || f.incomplete.len() >= 16 {
                    continue;
                }
                f.incomplete.push(b.clone());
                forward(ev).await;
            }
            EventKind::Network(ref rec) => {
                // One entry per connection: its end replaces its decision.
                match f.network.iter().position(|r| r.id == rec.id) {
                    Some(i) => f.network[i] = rec.clone(),
                    None if f.network.len() < crate::report::MAX_NETWORK_RECORDS => f.network.push(rec.clone()),
                    None => {}
                }
                forward(ev).await
            }
        }
    }

    if let Some(st) = &streams {
        for s in st {
            for (r, n) in redacted.iter_mut().zip(&s.counts) {
                *r += n;
            }
        }
    }
    let result = match task.await {
        Ok(r) => r,
        Err(e) => Err(anyhow::anyhow!("the {tier_name} tier crashed: {e}")),
    };
    let end = ms();
    let (error, mut details, final_usage) = match result {
        Ok(x) => (None, x.details, x.usage),
        // A tier's error may quote what a sandbox or a wrapped tool said: a
        // single-line field, made inert here once like every event's text.
        Err(e) => (Some(crate::sanitize::inert_message(&format!("{e:#}"), 1000)), serde_json::Value::Null, None),
    };
    if let Some(u) = final_usage {
        f.usage(u);
    }
    // Which shell ran a shell program (its #! line may ask for bash).
    if let (Some(shell), Some(d)) = (shell, details.as_object_mut()) {
        d.insert("shell".into(), shell.into());
    }
    let running = f.phase_at(Phase::Running);
    let teardown = f.phase_at(Phase::TearingDown);
    let setup = running.unwrap_or(end);
    let run = match (running, teardown) {
        (Some(r), Some(t)) => t - r,
        (Some(r), None) => end - r,
        _ => 0.0,
    };
    let outcome = if stop_reason == Some(StopReason::Cancelled) {
        Outcome::Cancelled
    } else if error.is_some() {
        Outcome::Error
    } else if !f.violations.is_empty() {
        Outcome::Violation
    } else if !f.incomplete.is_empty() {
        // Nothing over a limit was found, but a judge stopped short: the
        // run was not seen whole, and never reads `ok` (docs/SECURITY.md,
        // "Bounds of the judges").
        Outcome::Incomplete
    } else {
        Outcome::Ok
    };
    f.violations.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    let memory_hit = f.violations.iter().any(|v| v.kind == ViolationKind::Memory);
    let pids_hit = f.violations.iter().any(|v| v.kind == ViolationKind::Pids);
    // Tiers list what they could not enforce in details.degraded.
    let degraded = details
        .get("degraded")
        .and_then(|d| d.as_array())
        .map(|a| a.iter().filter_map(|d| d.as_str()).map(|d| crate::sanitize::inert_line(d, 200)).collect())
        .unwrap_or_default();
    let report = RunReport {
        tier: tier_name,
        language,
        label,
        outcome,
        exit: f.exit.unwrap_or_default(),
        violations: f.violations,
        timings_ms: Timings {
            setup: round(setup),
            first_output: f.first_output.map(round),
            run: round(run),
            teardown: round(teardown.map(|t| end - t).unwrap_or(0.0)),
            total: round(end),
        },
        usage: Usage {
            cpu_ms: f.last.cpu_ms,
            peak_memory_bytes: crate::report::peak_memory(f.peak.memory_bytes, limits.memory_bytes, memory_hit),
            // A pids violation is the cgroup refusing a fork at the limit.
            peak_pids: if pids_hit { Some(f.peak.pids.unwrap_or(0).max(limits.pids)) } else { f.peak.pids },
        },
        stdout: String::from_utf8_lossy(&f.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&f.stderr).into_owned(),
        stdout_truncated: f.stdout_truncated,
        stderr_truncated: f.stderr_truncated,
        error,
        limits,
        details,
        degraded,
        network: f.network,
        session,
        secrets: vec![],
        incomplete: f.incomplete,
    };
    drop(streams);
    let report = match &redact {
        Some(r) => {
            let mut report = r.report(report, &mut redacted);
            report.secrets = secret_uses(&secret_list, &report.details, &redacted);
            report
        }
        None => report,
    };
    let _ = out.send(Update::Finished(Box::new(report))).await;
}

/// A run's secrets as the runner takes them out of everything it passes on.
struct Redact {
    needles: Needles,
    n: usize,
}

impl Redact {
    fn new(secrets: &Secrets) -> Option<Redact> {
        if secrets.is_empty() {
            return None;
        }
        let list: Vec<(&[u8], Vec<u8>)> =
            secrets.iter().map(|s| (s.value(), format!("[secret {} redacted]", s.name).into_bytes())).collect();
        Some(Redact { needles: Needles::values(&list), n: list.len() })
    }

    fn n(&self) -> usize {
        self.n
    }

    fn text(&self, s: &mut String, counts: &mut [u64]) {
        if let Some(r) = self.needles.replace_str(s, counts) {
            *s = r;
        }
    }

    /// One event of the tier's, scrubbed: output through its stream's
    /// scrubber (what it holds back comes out with a later event), every
    /// other text replaced whole; the program's exit lets go of what the
    /// streams held, before it.
    fn event(&self, ev: RunEvent, st: &mut [Scrubber<'_>; 2], counts: &mut [u64]) -> Vec<RunEvent> {
        let at_ms = ev.at_ms;
        let kind = match ev.kind {
            EventKind::Output(stream, bytes) => {
                let i = usize::from(stream == Stream::Stderr);
                let clean = st[i].push(&bytes).unwrap_or_default();
                if clean.is_empty() {
                    return vec![];
                }
                EventKind::Output(stream, clean)
            }
            EventKind::Exit(x) => {
                let mut out = self.flush(st, counts, at_ms);
                out.push(RunEvent { at_ms, kind: EventKind::Exit(x) });
                return out;
            }
            EventKind::Note(mut n) => {
                self.text(&mut n, counts);
                EventKind::Note(n)
            }
            EventKind::Violation(mut v) => {
                self.text(&mut v.detail, counts);
                EventKind::Violation(v)
            }
            EventKind::Incomplete(mut b) => {
                self.text(&mut b.detail, counts);
                self.text(&mut b.at, counts);
                EventKind::Incomplete(b)
            }
            EventKind::Network(mut rec) => {
                for t in [&mut rec.method, &mut rec.host, &mut rec.detail] {
                    self.text(t, counts);
                }
                if let Some(a) = rec.address.as_mut() {
                    self.text(a, counts);
                }
                EventKind::Network(rec)
            }
            k @ (EventKind::Phase(_) | EventKind::Usage(_)) => k,
        };
        vec![RunEvent { at_ms, kind }]
    }

    /// What the streams held back, as output events.
    fn flush(&self, st: &mut [Scrubber<'_>; 2], _counts: &mut [u64], at_ms: f64) -> Vec<RunEvent> {
        let mut out = vec![];
        for (i, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            let rest = st[i].finish().unwrap_or_default();
            if !rest.is_empty() {
                out.push(RunEvent { at_ms, kind: EventKind::Output(stream, rest) });
            }
        }
        out
    }

    /// The finished report, every string in it (keys too) scrubbed. A
    /// report that cannot be rebuilt is replaced by an error report that
    /// carries nothing of the run's (it never leaves unscrubbed).
    fn report(&self, r: RunReport, counts: &mut [u64]) -> RunReport {
        fn walk(v: &mut serde_json::Value, me: &Redact, counts: &mut [u64]) {
            match v {
                serde_json::Value::String(s) => me.text(s, counts),
                serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, me, counts)),
                serde_json::Value::Object(o) => {
                    let old = std::mem::take(o);
                    for (mut k, mut x) in old {
                        me.text(&mut k, counts);
                        walk(&mut x, me, counts);
                        o.insert(k, x);
                    }
                }
                _ => {}
            }
        }
        let (tier, language, label) = (r.tier.clone(), r.language.clone(), r.label.clone());
        let failed = || {
            let mut f = RunReport::failed(
                &tier,
                &language,
                &label,
                "internal error: the report could not be scrubbed of the run's secrets",
            );
            f.label = "-".into();
            f
        };
        let Ok(mut v) = serde_json::to_value(&r) else { return failed() };
        walk(&mut v, self, counts);
        serde_json::from_value(v).unwrap_or_else(|_| failed())
    }
}

/// The report's `secrets`: each secret's hosts and places, what the proxy
/// counted (the tier's `details.network.secrets`), what the runner redacted.
fn secret_uses(
    list: &[(String, Vec<String>, String)],
    details: &serde_json::Value,
    redacted: &[u64],
) -> Vec<SecretUse> {
    let proxy = details["network"]["secrets"].as_array().cloned().unwrap_or_default();
    list.iter()
        .zip(redacted)
        .map(|((name, hosts, places), r)| {
            let p = proxy.iter().find(|p| p["name"] == name.as_str());
            let n = |k: &str| p.and_then(|p| p[k].as_u64()).unwrap_or(0);
            SecretUse {
                name: name.clone(),
                hosts: hosts.clone(),
                places: places.clone(),
                substituted: n("substituted"),
                scrubbed: n("scrubbed"),
                scrubbed_by: p
                    .and_then(|p| p["scrubbed_by"].as_object())
                    .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect())
                    .unwrap_or_default(),
                misdirected: n("misdirected"),
                redacted: *r,
            }
        })
        .collect()
}

fn round(ms: f64) -> f64 {
    (ms * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::contract::{Availability, BoxFuture, TierExit};

    /// Prints `n` chunks of 10 KB and exits 0.
    struct Chatty(usize);

    impl Tier for Chatty {
        fn name(&self) -> &'static str {
            "chatty"
        }
        fn describe(&self) -> &'static str {
            "prints a lot (test)"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "chatty".into(), available: true, summary: "test".into(), checks: vec![] }
            })
        }
        fn run(&self, _spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                for _ in 0..self.0 {
                    ctx.emit(EventKind::Output(Stream::Stdout, vec![b'x'; 10_000])).await;
                }
                ctx.emit(EventKind::Exit(ExitStatus { code: Some(0), signal: None })).await;
                Ok(TierExit::default())
            })
        }
    }

    /// Spins until cancelled, then judges its CPU counter at the end (as a
    /// peer does: 4.86 s used against a 2 s limit before the cancel).
    struct SpinsPastItsCpuLimit;

    impl Tier for SpinsPastItsCpuLimit {
        fn name(&self) -> &'static str {
            "spins"
        }
        fn describe(&self) -> &'static str {
            "judges CPU at the end (test)"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "spins".into(), available: true, summary: "test".into(), checks: vec![] }
            })
        }
        fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                ctx.stop.cancelled().await;
                let mut judge = crate::judge::Judge::new(&spec.limits);
                let facts = crate::judge::ExitFacts {
                    status: ExitStatus { code: None, signal: Some(libc::SIGKILL) },
                    counters: crate::judge::Counters { cpu_ms: Some(4860), ..Default::default() },
                    ..Default::default()
                };
                judge.exit(&ctx, &facts).await;
                ctx.emit(EventKind::Exit(facts.status)).await;
                Ok(TierExit {
                    usage: Some(UsageSample { cpu_ms: Some(4860), ..Default::default() }),
                    ..Default::default()
                })
            })
        }
    }

    /// Prints what it is given, 3 bytes at a time, and says one of them in a note.
    struct Prints(Vec<u8>, String);

    impl Tier for Prints {
        fn name(&self) -> &'static str {
            "prints"
        }
        fn describe(&self) -> &'static str {
            "prints given bytes (test)"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "prints".into(), available: true, summary: "test".into(), checks: vec![] }
            })
        }
        fn check_network(&self, _: &crate::egress::policy::Network) -> Result<(), String> {
            Ok(())
        }
        fn check_secrets(&self, _: &crate::egress::secrets::Secrets) -> Result<(), String> {
            Ok(())
        }
        fn run(&self, _spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                ctx.emit(EventKind::Note(self.1.clone())).await;
                for c in self.0.chunks(3) {
                    ctx.emit(EventKind::Output(Stream::Stdout, c.to_vec())).await;
                }
                ctx.emit(EventKind::Exit(ExitStatus { code: Some(0), signal: None })).await;
                Ok(TierExit::default())
            })
        }
    }

    /// The program's output, a note, the live events and the report are
    /// scrubbed of a secret's value in every spelling of the scrubber's table.
    #[tokio::test]
    async fn every_spelling_of_a_secret_is_taken_out_of_what_a_run_shows() {
        const VALUE: &str = "sk-live Zq8v/3Tz+P0a=W7~nY!4kR";
        let d = crate::egress::secrets::Declared::parse("K=env:K@api.test").unwrap();
        let mut spec = RunSpec::new(crate::spec::Language::Sh, "x");
        spec.limits.network = "allow=api.test".parse().unwrap();
        spec.secrets = crate::egress::secrets::Secrets::new(vec![d.resolve(&|_| Some(VALUE.into())).unwrap()]).unwrap();
        let mut spellings = vec![];
        for row in crate::egress::scrub::TABLE {
            for (_, e) in row.encoders {
                spellings.push(e(VALUE.as_bytes()));
            }
        }
        let printed: Vec<u8> = spellings.iter().flat_map(|s| [s.as_slice(), b"\n"].concat()).collect();
        let note = format!("seen: {}", String::from_utf8_lossy(&spellings[spellings.len() / 2]));
        let mut h = start_keeping(Arc::new(Prints(printed, note)), spec, usize::MAX);
        let mut live = vec![];
        let report = loop {
            match h.events.recv().await.expect("a report") {
                Update::Event(RunEvent { kind: EventKind::Output(_, b), .. }) => live.extend(b),
                Update::Event(RunEvent { kind: EventKind::Note(n), .. }) => live.extend(n.into_bytes()),
                Update::Event(_) => {}
                Update::Finished(r) => break r,
            }
        };
        let all = [live, serde_json::to_vec(&report).unwrap()].concat();
        for s in &spellings {
            assert!(!all.windows(s.len()).any(|w| w == s.as_slice()), "{}", String::from_utf8_lossy(s));
        }
        assert_eq!(report.secrets.len(), 1, "{:?}", report.error);
        assert!(report.secrets[0].redacted > spellings.len() as u64, "{:?}", report.secrets);
    }

    #[tokio::test]
    async fn a_limit_used_up_before_a_cancel_is_still_reported() {
        let mut spec = RunSpec::new(crate::spec::Language::Sh, "x");
        spec.limits.cpu_time = Duration::from_secs(2);
        let h = start(Arc::new(SpinsPastItsCpuLimit), spec);
        let report = {
            let c = h.canceller();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                c.cancel();
            });
            h.report().await
        };
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert_eq!(report.usage.cpu_ms, Some(4860));
        // The figure over the limit comes with the violation that says so.
        assert!(report.has_violation(ViolationKind::CpuTime), "{:?}", report.violations);
    }

    /// Exits 0 after its judge hit a bound (and, when asked, found a file
    /// at the size limit too).
    struct Blinded {
        violation: bool,
    }

    impl Tier for Blinded {
        fn name(&self) -> &'static str {
            "blinded"
        }
        fn describe(&self) -> &'static str {
            "a judge hits a bound (test)"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "blinded".into(), available: true, summary: "test".into(), checks: vec![] }
            })
        }
        fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                let mut judge = crate::judge::Judge::new(&spec.limits);
                let facts = crate::judge::ExitFacts {
                    status: ExitStatus { code: Some(0), signal: None },
                    capped_files: if self.violation { vec!["/work/z/big".into()] } else { vec![] },
                    bounds: vec![crate::judge::BoundHit::new(
                        crate::judge::Bound::ScratchWalkEntries,
                        Some(5000),
                        "the loader's walk of /work",
                    )],
                    ..Default::default()
                };
                judge.exit(&ctx, &facts).await;
                ctx.emit(EventKind::Exit(facts.status)).await;
                Ok(TierExit::default())
            })
        }
    }

    #[tokio::test]
    async fn a_bound_hit_reads_incomplete_and_a_violation_still_wins() {
        let spec = || RunSpec::new(crate::spec::Language::Sh, "x");
        let r = run(Arc::new(Blinded { violation: false }), spec()).await;
        assert_eq!(r.outcome, Outcome::Incomplete, "{r:#?}");
        assert_eq!(r.incomplete.len(), 1);
        assert_eq!((r.incomplete[0].bound.as_str(), r.incomplete[0].limit), ("scratch_walk_entries", Some(5000)));
        assert!(r.summary_line().starts_with("incomplete · "), "{}", r.summary_line());
        assert!(r.summary_line().contains("stopped after 5000 names"), "{}", r.summary_line());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["outcome"], "incomplete");
        assert_eq!(json["incomplete"][0]["where"], "the loader's walk of /work");
        let r = run(Arc::new(Blinded { violation: true }), spec()).await;
        assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
        assert_eq!(r.incomplete.len(), 1, "the bound is still listed");
    }

    #[tokio::test]
    async fn a_front_end_can_keep_only_a_head_of_the_output() {
        let mut h = start_keeping(Arc::new(Chatty(50)), RunSpec::new(crate::spec::Language::Sh, "x"), 25_000);
        let mut live = 0;
        let report = loop {
            match h.events.recv().await.expect("a report") {
                Update::Event(RunEvent { kind: EventKind::Output(_, b), .. }) => live += b.len(),
                Update::Event(_) => {}
                Update::Finished(r) => break r,
            }
        };
        assert_eq!(live, 500_000, "the live events carry everything");
        assert_eq!(report.stdout.len(), 25_000);
        assert!(report.stdout_truncated && report.violations.is_empty(), "{:?}", report.violations);
        // By default the report keeps everything up to the output limit.
        let all = run(Arc::new(Chatty(50)), RunSpec::new(crate::spec::Language::Sh, "x")).await;
        assert_eq!((all.stdout.len(), all.stdout_truncated), (500_000, false));
    }
}
