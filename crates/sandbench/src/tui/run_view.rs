//! What the workbench knows about one run, folded from its `RunEvent`s:
//! sanitized output in a bounded ring, phases, usage history, violations,
//! the final report.

use std::collections::VecDeque;
use std::time::Instant;

use crate::event::{EventKind, ExitStatus, Phase, RunEvent, Stream, UsageSample, Violation};
use crate::report::{Outcome, RunReport};
use crate::runner::Update;
use crate::sanitize::visible_controls;
use crate::spec::{format_size, Limits};
use crate::tui::sanitize::{LineRing, Sanitizer, StyledLine};
use crate::units::duration_ms;

/// Longest output line kept (columns); the rest is counted.
pub const MAX_LINE_COLS: usize = 1024;
/// Output lines kept per run (older ones are dropped, and counted).
pub const MAX_LINES: usize = 5000;
/// Usage samples kept for the sparklines.
pub const HISTORY: usize = 240;

/// Where an output-pane line came from; decides its style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Stdout,
    Stderr,
    Phase,
    Note,
    Violation,
    Exit,
    Outcome(Outcome),
}

#[derive(Debug, Clone)]
pub struct OutLine {
    pub origin: Origin,
    pub line: StyledLine,
}

pub struct RunView {
    pub id: u64,
    pub tier: String,
    pub label: String,
    pub limits: Limits,
    /// The run's secrets, by name (never a value).
    pub secrets: Vec<String>,
    pub lines: LineRing<OutLine>,
    stdout: Sanitizer,
    stderr: Sanitizer,
    /// The lines being written on stdout / stderr (no newline yet).
    partial: [StyledLine; 2],
    pub phases: Vec<(Phase, f64)>,
    /// Time of the latest event (ms since the run started).
    pub last_ms: f64,
    pub started: Instant,
    pub usage: UsageSample,
    pub peak_memory: u64,
    pub peak_pids: u64,
    /// CPU use in percent of one core per sample interval, and memory in bytes.
    pub cpu_hist: VecDeque<u64>,
    pub mem_hist: VecDeque<u64>,
    /// When the first and the latest usage sample arrived (ms since the
    /// start), and how many came: the sparklines' time axis.
    pub samples_span: Option<(f64, f64)>,
    pub samples: usize,
    prev_cpu: Option<(f64, u64)>,
    pub violations: Vec<Violation>,
    pub exit: Option<ExitStatus>,
    pub report: Option<Box<RunReport>>,
    pub bytes: u64,
    pub cancelling: bool,
    /// Elapsed time follows the wall clock (off: the latest event's time,
    /// which makes headless renders deterministic).
    pub live_clock: bool,
}

impl RunView {
    pub fn new(id: u64, tier: &str, label: &str, limits: Limits) -> RunView {
        RunView {
            id,
            tier: tier.to_string(),
            label: label.to_string(),
            limits,
            secrets: vec![],
            lines: LineRing::new(MAX_LINES),
            stdout: Sanitizer::new(MAX_LINE_COLS),
            stderr: Sanitizer::new(MAX_LINE_COLS),
            partial: Default::default(),
            phases: vec![],
            last_ms: 0.0,
            started: Instant::now(),
            usage: UsageSample::default(),
            peak_memory: 0,
            peak_pids: 0,
            cpu_hist: VecDeque::new(),
            mem_hist: VecDeque::new(),
            samples_span: None,
            samples: 0,
            prev_cpu: None,
            violations: vec![],
            exit: None,
            report: None,
            bytes: 0,
            cancelling: false,
            live_clock: true,
        }
    }

    pub fn finished(&self) -> bool {
        self.report.is_some()
    }

    pub fn phase(&self) -> Option<Phase> {
        self.phases.last().map(|(p, _)| *p)
    }

    pub fn phase_at(&self, p: Phase) -> Option<f64> {
        self.phases.iter().find(|(q, _)| *q == p).map(|(_, t)| *t)
    }

    /// Elapsed ms: the report's total when done, else the wall clock.
    pub fn elapsed_ms(&self) -> f64 {
        match &self.report {
            Some(r) => r.timings_ms.total,
            None if self.live_clock => self.started.elapsed().as_secs_f64() * 1000.0,
            None => self.last_ms,
        }
    }

    /// The lines being written on stdout / stderr (no newline yet).
    pub fn partials(&self) -> impl Iterator<Item = OutLine> + '_ {
        [(Origin::Stdout, &self.partial[0]), (Origin::Stderr, &self.partial[1])]
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(origin, l)| OutLine { origin, line: l.clone() })
    }

    /// Output already sanitized (off the UI thread, see `PreSanitizer`):
    /// complete lines, and the line being written.
    pub fn apply_lines(&mut self, at_ms: f64, stream: Stream, lines: Vec<StyledLine>, partial: StyledLine, bytes: u64) {
        self.last_ms = self.last_ms.max(at_ms);
        self.bytes += bytes;
        let origin = match stream {
            Stream::Stdout => Origin::Stdout,
            Stream::Stderr => Origin::Stderr,
        };
        for line in lines {
            self.lines.push(OutLine { origin, line });
        }
        self.partial[stream_index(stream)] = partial;
    }

    /// How many lines the output pane has (ring + partial lines).
    pub fn line_count(&self) -> usize {
        self.lines.len() + self.partials().count()
    }

    fn meta(&mut self, origin: Origin, text: String) {
        self.flush_partials();
        self.lines.push(OutLine { origin, line: StyledLine::plain(ratatui::style::Style::new(), &text) });
    }

    /// Phase and violation lines interrupt output mid-line: end the partial
    /// lines first so the order on screen is the order of events.
    fn flush_partials(&mut self) {
        self.stdout.finish();
        self.stderr.finish();
        for (i, origin) in [(0, Origin::Stdout), (1, Origin::Stderr)] {
            let l = std::mem::take(&mut self.partial[i]);
            if !l.is_empty() {
                self.lines.push(OutLine { origin, line: l });
            }
        }
    }

    pub fn apply(&mut self, ev: RunEvent) {
        self.last_ms = self.last_ms.max(ev.at_ms);
        let at = duration_ms(ev.at_ms);
        match ev.kind {
            EventKind::Phase(p) => {
                self.phases.push((p, ev.at_ms));
                self.meta(Origin::Phase, format!("── {} at {at}", p.name()));
            }
            EventKind::Output(stream, bytes) => {
                let san = match stream {
                    Stream::Stdout => &mut self.stdout,
                    Stream::Stderr => &mut self.stderr,
                };
                let mut done = vec![];
                san.feed(&bytes, &mut done);
                let partial = san.partial().clone();
                self.apply_lines(ev.at_ms, stream, done, partial, bytes.len() as u64);
            }
            EventKind::Usage(u) => self.usage_sample(ev.at_ms, u),
            // Each refusal has its own network line (below); the violation
            // that stands for them all is kept without a second line.
            EventKind::Violation(v) if v.kind == crate::event::ViolationKind::Network => self.violations.push(v),
            EventKind::Violation(v) => {
                let text = format!("✖ {} at {at}: {}", v.kind.name(), visible_controls(v.detail.as_bytes()));
                self.violations.push(v);
                self.meta(Origin::Violation, text);
            }
            EventKind::Network(rec) => {
                let line = visible_controls(rec.line().as_bytes());
                match (rec.decision, rec.open) {
                    (crate::egress::Decision::Denied, _) => {
                        self.meta(Origin::Violation, format!("✖ network at {at}: {line}"))
                    }
                    (_, true) => self.meta(Origin::Note, format!("⇄ network at {at}: {line}")),
                    (_, false) => self.meta(Origin::Note, format!("· network: {line}")),
                }
            }
            EventKind::Note(n) => self.meta(Origin::Note, format!("· {}", visible_controls(n.as_bytes()))),
            // A judge stopped short: shown like a violation (never quietly),
            // with its own mark.
            EventKind::Incomplete(b) => {
                self.meta(Origin::Violation, format!("◐ incomplete at {at}: {}", visible_controls(b.detail.as_bytes())))
            }
            EventKind::Exit(x) => {
                self.exit = Some(x);
                self.meta(Origin::Exit, format!("── {} at {at}", x.describe()));
            }
        }
    }

    /// The run's report: the last thing a run view learns.
    pub fn finish(&mut self, mut r: Box<RunReport>) {
        self.flush_partials();
        // The pane already has the output (sanitized, bounded); the
        // report's copy can be as large as the output limit.
        r.stdout = String::new();
        r.stderr = String::new();
        if let Some(cpu) = r.usage.cpu_ms {
            self.usage.cpu_ms = Some(cpu);
        }
        self.peak_memory = self.peak_memory.max(r.usage.peak_memory_bytes.unwrap_or(0));
        self.peak_pids = self.peak_pids.max(r.usage.peak_pids.unwrap_or(0));
        // Violations the runner recorded that we did not see live.
        for v in &r.violations {
            if !self.violations.iter().any(|o| o.kind == v.kind) {
                self.violations.push(v.clone());
            }
        }
        let line = match &r.error {
            Some(e) => format!("══ error: {} ({})", visible_controls(e.as_bytes()), duration_ms(r.timings_ms.total)),
            None => {
                format!("══ {} · {} · {} total", r.outcome.name(), r.exit.describe(), duration_ms(r.timings_ms.total))
            }
        };
        let outcome = r.outcome;
        self.report = Some(r);
        self.meta(Origin::Outcome(outcome), line);
    }

    fn usage_sample(&mut self, at_ms: f64, u: UsageSample) {
        if u.memory_bytes.is_some() || u.cpu_ms.is_some() {
            self.samples += 1;
            self.samples_span = Some((self.samples_span.map_or(at_ms, |s| s.0), at_ms));
        }
        if let Some(m) = u.memory_bytes {
            self.peak_memory = self.peak_memory.max(m);
            push_capped(&mut self.mem_hist, m);
        }
        if let Some(p) = u.pids {
            self.peak_pids = self.peak_pids.max(p);
        }
        if let Some(c) = u.cpu_ms {
            if let Some((t0, c0)) = self.prev_cpu {
                let dt = at_ms - t0;
                if dt > 0.0 {
                    // A sandbox cannot use more CPUs than it has: above that is
                    // sampling jitter (the counter and the clock are read apart).
                    let most = (self.limits.cpus.ceil().max(1.0) * 100.0) as u64;
                    let pct = ((c.saturating_sub(c0) as f64 / dt * 100.0).round() as u64).min(most);
                    push_capped(&mut self.cpu_hist, pct);
                }
            }
            self.prev_cpu = Some((at_ms, c));
        }
        self.usage = UsageSample {
            cpu_ms: u.cpu_ms.or(self.usage.cpu_ms),
            memory_bytes: u.memory_bytes.or(self.usage.memory_bytes),
            pids: u.pids.or(self.usage.pids),
        };
    }

    /// Latest CPU use in percent of a core.
    pub fn cpu_pct(&self) -> Option<u64> {
        self.cpu_hist.back().copied()
    }

    /// "running 1.42 s", "violation · 2.1 s", ...
    pub fn state_line(&self) -> String {
        match &self.report {
            Some(r) => format!("{} · {}", r.outcome.name(), duration_ms(r.timings_ms.total)),
            None if self.cancelling => format!("cancelling · {}", duration_ms(self.elapsed_ms())),
            None => {
                format!("{} · {}", self.phase().map(|p| p.name()).unwrap_or("starting"), duration_ms(self.elapsed_ms()))
            }
        }
    }

    pub fn limits_line(&self) -> String {
        let mut s = format!(
            "mem {} · cpu {} · wall {} · pids {}",
            format_size(self.limits.memory_bytes),
            crate::spec::format_duration(self.limits.cpu_time),
            crate::spec::format_duration(self.limits.wall_time),
            self.limits.pids
        );
        if !self.limits.network.is_none() {
            s.push_str(&format!(" · net {}", self.limits.network));
        }
        if !self.secrets.is_empty() {
            s.push_str(&format!(" · secrets {}", self.secrets.join(",")));
        }
        s
    }
}

/// Events that print a line of their own in the output pane, and so end
/// the lines being written (usage samples do not).
pub fn ends_partial_lines(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::Output(..) | EventKind::Usage(_))
}

fn stream_index(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// Sanitizes a run's output before it reaches the UI thread (in the task
/// that forwards the run's events), so that the UI only moves finished
/// lines into its ring, whatever the flood. Its line state ends where the
/// `RunView`'s does: at every non-output event.
pub struct PreSanitizer {
    san: [Sanitizer; 2],
}

impl Default for PreSanitizer {
    fn default() -> Self {
        PreSanitizer { san: [Sanitizer::new(MAX_LINE_COLS), Sanitizer::new(MAX_LINE_COLS)] }
    }
}

impl PreSanitizer {
    pub fn convert(&mut self, id: u64, update: Update) -> crate::tui::msg::Msg {
        use crate::tui::msg::Msg;
        let ev = match update {
            Update::Event(ev) => ev,
            Update::Finished(r) => {
                for s in &mut self.san {
                    s.finish();
                }
                return Msg::Finished(id, r);
            }
        };
        match ev.kind {
            EventKind::Output(stream, bytes) => {
                let s = &mut self.san[stream_index(stream)];
                let mut lines = vec![];
                s.feed(&bytes, &mut lines);
                Msg::Lines {
                    id,
                    at_ms: ev.at_ms,
                    stream,
                    lines,
                    partial: s.partial().clone(),
                    bytes: bytes.len() as u64,
                }
            }
            kind => {
                if ends_partial_lines(&kind) {
                    for s in &mut self.san {
                        s.finish();
                    }
                }
                Msg::Run(id, RunEvent { at_ms: ev.at_ms, kind })
            }
        }
    }
}

fn push_capped(q: &mut VecDeque<u64>, v: u64) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ViolationKind;

    fn ev(at_ms: f64, kind: EventKind) -> RunEvent {
        RunEvent { at_ms, kind }
    }

    /// Output sanitized off the UI thread must give the same pane as raw
    /// events, with usage samples arriving in the middle of a line.
    #[test]
    fn pre_sanitized_output_matches_raw() {
        let events = vec![
            ev(0.0, EventKind::Phase(Phase::Running)),
            ev(1.0, EventKind::Output(Stream::Stdout, b"long ".to_vec())),
            ev(2.0, EventKind::Usage(UsageSample { cpu_ms: Some(1), memory_bytes: Some(1), pids: Some(1) })),
            ev(3.0, EventKind::Output(Stream::Stdout, vec![b'z'; 3000])),
            ev(3.5, EventKind::Output(Stream::Stderr, b"err\nhalf".to_vec())),
            ev(4.0, EventKind::Note("note".into())),
            ev(5.0, EventKind::Output(Stream::Stdout, b"\x1b[31mred\n".to_vec())),
        ];
        let mut raw = RunView::new(1, "t", "l", Limits::default());
        let mut pre_view = RunView::new(1, "t", "l", Limits::default());
        let mut pre = PreSanitizer::default();
        for e in events {
            raw.apply(e.clone());
            match pre.convert(1, Update::Event(e)) {
                crate::tui::msg::Msg::Lines { at_ms, stream, lines, partial, bytes, .. } => {
                    pre_view.apply_lines(at_ms, stream, lines, partial, bytes)
                }
                crate::tui::msg::Msg::Run(_, e) => pre_view.apply(e),
                _ => unreachable!(),
            }
        }
        let dump = |v: &RunView| {
            let partials: Vec<OutLine> = v.partials().collect();
            v.lines.iter().chain(partials.iter()).map(|l| format!("{:?} {:?}", l.origin, l.line)).collect::<Vec<_>>()
        };
        assert_eq!(dump(&raw), dump(&pre_view));
        assert_eq!(raw.lines.iter().nth(2).unwrap().line.cut, 5 + 3000 - MAX_LINE_COLS as u64);
    }

    #[test]
    fn folds_events_in_order() {
        let mut v = RunView::new(1, "process", "x.py", Limits::default());
        v.apply(ev(0.0, EventKind::Phase(Phase::Preparing)));
        v.apply(ev(10.0, EventKind::Phase(Phase::Running)));
        v.apply(ev(11.0, EventKind::Output(Stream::Stdout, b"hel".to_vec())));
        v.apply(ev(12.0, EventKind::Output(Stream::Stderr, b"oops\n".to_vec())));
        v.apply(ev(13.0, EventKind::Output(Stream::Stdout, b"lo\npart".to_vec())));
        assert_eq!(v.partials().count(), 1);
        v.apply(ev(
            100.0,
            EventKind::Usage(UsageSample { cpu_ms: Some(10), memory_bytes: Some(1 << 20), pids: Some(2) }),
        ));
        v.apply(ev(
            200.0,
            EventKind::Usage(UsageSample { cpu_ms: Some(60), memory_bytes: Some(3 << 20), pids: Some(3) }),
        ));
        assert_eq!(v.cpu_pct(), Some(50));
        v.apply(ev(
            1420.0,
            EventKind::Violation(Violation {
                kind: ViolationKind::Memory,
                at_ms: 1420.0,
                detail: "memory limit 256M hit — killed".into(),
            }),
        ));
        let texts: Vec<&str> = v.lines.iter().map(|l| l.line.text()).collect();
        assert_eq!(
            texts,
            [
                "── preparing at 0 ms",
                "── running at 10.0 ms",
                "oops",
                "hello",
                "part",
                "✖ memory at 1.42 s: memory limit 256M hit — killed"
            ]
        );
        assert_eq!(v.peak_memory, 3 << 20);
        assert_eq!(v.peak_pids, 3);
    }
}
