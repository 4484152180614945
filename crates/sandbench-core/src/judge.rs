//! The one judge. Every tier gathers *facts* about a run — counters and
//! states from sources the program cannot write (the host's cgroup files, the
//! guest agent's or the container loader's protected channel, signals
//! sandbench itself sent) — and hands them here; this module alone decides
//! which limits bit and words the violations.
//!
//! Rules it keeps:
//! - Nothing the program prints counts. A `MemoryError` on stderr is not a
//!   memory violation; a refusal the cgroup counted is.
//! - Every limit that bit is reported, even if the program caught the error
//!   or deleted the evidence: tiers report high-water marks (a file that
//!   reached the size limit at any time, a scratch mount that was ever full),
//!   not the final state.
//! - No violation is reported that did not happen: a program that sends
//!   itself SIGXCPU has not used its CPU time unless the CPU counter says so.
//! - One entry per kind; the wording is the same on every tier.
//! - Every bound fails closed: a source that stopped short (a scratch walk
//!   at its entry or depth bound, a directory it could not read, file
//!   events lost) is reported as a [`BoundHit`], and a run with one and no
//!   violation reads `incomplete`, never `ok` (docs/SECURITY.md, "Bounds of
//!   the judges").

pub(crate) use crate::bound::{Bound, BoundHit};
use crate::event::{ExitStatus, RunContext, ViolationKind};
use crate::sanitize::inert_line;
use crate::spec::{format_duration, format_size, Limits};

/// Longest file or mount name quoted in a violation.
const MAX_NAME: usize = 160;
/// Bound hits reported per run (a handful of sources, a few bounds each).
const MAX_BOUNDS: usize = 12;

/// Counters read while the program runs (and once more at the end), each from
/// a source the program cannot write. `None`: the tier cannot know.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// CPU time of the whole sandbox (every process, user + system).
    pub cpu_ms: Option<u64>,
    /// Processes the kernel's OOM killer killed inside the sandbox.
    pub oom_kills: Option<u64>,
    /// Times memory use reached the limit and the kernel had to reclaim or
    /// refuse (cgroup v1 `memory.failcnt`, v2 `memory.events` max).
    pub memory_limit_hits: Option<u64>,
    /// Forks and clones refused at the pids limit (`pids.events` max).
    pub pids_refused: Option<u64>,
}

impl Counters {
    /// Each counter's larger value: kernel counters only grow, and a read
    /// that failed (`None`) does not forget an earlier one.
    pub fn max(self, o: Counters) -> Counters {
        let m = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Counters {
            cpu_ms: m(self.cpu_ms, o.cpu_ms),
            oom_kills: m(self.oom_kills, o.oom_kills),
            memory_limit_hits: m(self.memory_limit_hits, o.memory_limit_hits),
            pids_refused: m(self.pids_refused, o.pids_refused),
        }
    }
}

/// What a tier knows once the program is gone.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExitFacts {
    /// How the program's main process ended, from the tier's own channel.
    pub status: ExitStatus,
    /// Final counters (whole run).
    pub counters: Counters,
    /// SIGXCPU and SIGXFSZ can only have come from the kernel enforcing the
    /// run's rlimits: the tier refuses those signals (and handlers for them)
    /// to the program. When false, such a death needs a counter to back it.
    pub rlimit_signals_trusted: bool,
    /// Files that reached the file-size limit at any time during the run
    /// (a high-water mark: deleted or truncated files still count).
    pub capped_files: Vec<String>,
    /// Writable mounts that were full (space or inodes) at any time.
    pub full_mounts: Vec<String>,
    /// Bounds the sources of these facts hit: with no violation, the run
    /// reads `incomplete`.
    pub bounds: Vec<BoundHit>,
}

/// What the judge has reported so far in one run.
#[derive(Debug, Default)]
struct Seen {
    oom_kills: u64,
    memory: bool,
    pids: bool,
    cpu: bool,
    file_size: bool,
    disk: bool,
    bounds: Vec<(Bound, String)>,
}

/// Judges one run. Create one per run; feed it live counters with
/// [`Judge::sample`] and the end with [`Judge::exit`].
#[derive(Debug)]
pub(crate) struct Judge {
    limits: Limits,
    seen: Seen,
}

/// What the tier must do after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Continue,
    /// The sandbox used its CPU time: kill it now.
    KillForCpu,
}

impl Judge {
    pub(crate) fn new(limits: &Limits) -> Judge {
        Judge { limits: limits.clone(), seen: Seen::default() }
    }

    /// Judge live counters; violations are emitted the moment they are seen.
    pub(crate) async fn sample(&mut self, ctx: &RunContext, c: &Counters) -> Action {
        self.memory(ctx, c).await;
        self.pids(ctx, c).await;
        if !self.seen.cpu && c.cpu_ms.is_some_and(|ms| ms > self.cpu_limit_ms()) {
            self.seen.cpu = true;
            let limit = format_duration(self.limits.cpu_time);
            ctx.violation(ViolationKind::CpuTime, format!("CPU time limit {limit} used by the whole sandbox — killed"))
                .await;
            return Action::KillForCpu;
        }
        Action::Continue
    }

    /// Did a sample already find the CPU time used up (and ask for a kill)?
    pub(crate) fn cpu_exhausted(&self) -> bool {
        self.seen.cpu
    }

    /// Judge the end of the run.
    pub(crate) async fn exit(&mut self, ctx: &RunContext, f: &ExitFacts) {
        let c = &f.counters;
        self.memory(ctx, c).await;
        self.pids(ctx, c).await;
        let signal = f.status.signal;
        let cpu_used = c.cpu_ms.is_some_and(|ms| ms > self.cpu_limit_ms());
        // A SIGXCPU the program may have sent itself counts only when the
        // CPU counter agrees. The kernel checks RLIMIT_CPU against the
        // tick-accounted CPU while cgroup totals come from the scheduler's
        // precise clock (a 2 s rlimit fired at 1998 ms on the host; a 1 s
        // one at 968 ms in a TCG guest), so "agrees" means within that skew.
        let cpu_at_limit = c.cpu_ms.is_some_and(|ms| ms >= self.cpu_limit_ms().saturating_sub(self.cpu_skew_ms()));
        let xcpu = signal == Some(libc::SIGXCPU) && (f.rlimit_signals_trusted || cpu_at_limit);
        if !self.seen.cpu && (cpu_used || xcpu) {
            self.seen.cpu = true;
            let limit = format_duration(self.limits.cpu_time);
            let how = if signal == Some(libc::SIGXCPU) { "killed (SIGXCPU)" } else { "killed" };
            ctx.violation(ViolationKind::CpuTime, format!("CPU time limit {limit} hit — {how}")).await;
        }
        if !self.seen.file_size {
            let limit = format_size(self.limits.file_size_bytes);
            if let Some(first) = f.capped_files.first() {
                self.seen.file_size = true;
                let more = match f.capped_files.len() {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                let name = inert_line(first, MAX_NAME);
                ctx.violation(ViolationKind::FileSize, format!("file size limit {limit} hit: {name} reached it{more}"))
                    .await;
            } else if signal == Some(libc::SIGXFSZ) && f.rlimit_signals_trusted {
                self.seen.file_size = true;
                ctx.violation(ViolationKind::FileSize, format!("file size limit {limit} hit — killed (SIGXFSZ)")).await;
            }
        }
        if !self.seen.disk && !f.full_mounts.is_empty() {
            self.seen.disk = true;
            let names: Vec<String> = f.full_mounts.iter().take(4).map(|m| inert_line(m, MAX_NAME)).collect();
            ctx.violation(
                ViolationKind::Disk,
                format!(
                    "scratch space full ({} per writable mount): {}",
                    format_size(self.limits.disk_bytes),
                    names.join(", ")
                ),
            )
            .await;
        }
        // Listed even beside a violation: the report says what went unseen
        // whatever was found.
        for b in f.bounds.iter().take(MAX_BOUNDS) {
            let at = inert_line(&b.at, MAX_NAME);
            if self.seen.bounds.iter().any(|(k, a)| *k == b.bound && *a == at) {
                continue;
            }
            self.seen.bounds.push((b.bound, at.clone()));
            let detail = b.bound.detail(b.limit, &at);
            ctx.incomplete(crate::event::Incomplete { bound: b.bound.name().into(), limit: b.limit, at, detail }).await;
        }
    }

    fn cpu_limit_ms(&self) -> u64 {
        self.limits.cpu_time.as_millis() as u64
    }

    /// How far a CPU counter may lag the kernel's RLIMIT_CPU check: 1/16 of
    /// the limit (3.2% measured under TCG), at least two 100 Hz ticks.
    /// Nothing is gained by faking the signal that late: the budget was
    /// used anyway.
    fn cpu_skew_ms(&self) -> u64 {
        (self.cpu_limit_ms() / 16).max(20)
    }

    async fn memory(&mut self, ctx: &RunContext, c: &Counters) {
        let limit = format_size(self.limits.memory_bytes);
        let kills = c.oom_kills.unwrap_or(0);
        if kills > self.seen.oom_kills {
            self.seen.oom_kills = kills;
            if !self.seen.memory {
                self.seen.memory = true;
                // The violation carries its own time: the detail says what.
                ctx.violation(ViolationKind::Memory, format!("memory limit {limit} hit — killed (out of memory)"))
                    .await;
            }
        }
        if !self.seen.memory && c.memory_limit_hits.unwrap_or(0) > 0 {
            self.seen.memory = true;
            ctx.violation(
                ViolationKind::Memory,
                format!("memory limit {limit} reached — allocations refused or reclaimed"),
            )
            .await;
        }
    }

    async fn pids(&mut self, ctx: &RunContext, c: &Counters) {
        if !self.seen.pids && c.pids_refused.unwrap_or(0) > 0 {
            self.seen.pids = true;
            ctx.violation(
                ViolationKind::Pids,
                format!("pids limit {} reached — new processes refused", self.limits.pids),
            )
            .await;
        }
    }
}

/// A connection the run's egress proxy refused: the proxy's own record (the
/// program never writes it). The runner keeps the first as the run's
/// `network` violation; every refusal is in the report's `network` list.
pub(crate) async fn network_denied(ctx: &RunContext, rec: &crate::event::NetRecord) {
    let target = if rec.port == 0 { rec.host.clone() } else { format!("{}:{}", rec.host, rec.port) };
    if rec.misdirected.is_some() {
        // The record names the secret and where it was; never its value.
        ctx.violation(ViolationKind::SecretMisdirected, format!("refused: {} {target} — {}", rec.method, rec.detail))
            .await;
        return;
    }
    ctx.violation(ViolationKind::Network, format!("egress refused: {} {target} — {}", rec.method, rec.detail)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, RunEvent, Violation};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    fn ctx() -> (RunContext, mpsc::Receiver<RunEvent>) {
        let (tx, rx) = mpsc::channel(64);
        (RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() }, rx)
    }

    fn violations(rx: &mut mpsc::Receiver<RunEvent>) -> Vec<Violation> {
        let mut out = vec![];
        while let Ok(ev) = rx.try_recv() {
            if let EventKind::Violation(v) = ev.kind {
                out.push(v);
            }
        }
        out
    }

    fn limits() -> Limits {
        Limits { cpu_time: Duration::from_millis(500), ..Limits::default() }
    }

    #[tokio::test]
    async fn a_self_sent_rlimit_signal_is_not_a_violation() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let f = ExitFacts {
            status: ExitStatus { code: None, signal: Some(libc::SIGXCPU) },
            counters: Counters { cpu_ms: Some(20), ..Default::default() },
            ..Default::default()
        };
        j.exit(&c, &f).await;
        let f = ExitFacts { status: ExitStatus { code: None, signal: Some(libc::SIGXFSZ) }, ..Default::default() };
        j.exit(&c, &f).await;
        assert!(violations(&mut rx).is_empty());
    }

    #[tokio::test]
    async fn sigxcpu_with_the_budget_used_is_a_cpu_violation() {
        // Measured: a 2 s RLIMIT_CPU fires with the cgroup at 1998 ms.
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&Limits { cpu_time: Duration::from_secs(2), ..Limits::default() });
        let f = ExitFacts {
            status: ExitStatus { code: None, signal: Some(libc::SIGXCPU) },
            counters: Counters { cpu_ms: Some(1998), ..Default::default() },
            ..Default::default()
        };
        j.exit(&c, &f).await;
        let kinds: Vec<_> = violations(&mut rx).into_iter().map(|v| v.kind).collect();
        assert_eq!(kinds, [ViolationKind::CpuTime]);
        // Sent by the program itself at half its budget: no violation.
        let mut j = Judge::new(&Limits { cpu_time: Duration::from_secs(2), ..Limits::default() });
        let f = ExitFacts { counters: Counters { cpu_ms: Some(1000), ..Default::default() }, ..f };
        j.exit(&c, &f).await;
        assert!(violations(&mut rx).is_empty());
    }

    #[tokio::test]
    async fn trusted_rlimit_signals_and_counters_are() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let f = ExitFacts {
            status: ExitStatus { code: None, signal: Some(libc::SIGXFSZ) },
            rlimit_signals_trusted: true,
            counters: Counters { cpu_ms: Some(900), ..Default::default() },
            ..Default::default()
        };
        j.exit(&c, &f).await;
        let kinds: Vec<_> = violations(&mut rx).into_iter().map(|v| v.kind).collect();
        assert_eq!(kinds, [ViolationKind::CpuTime, ViolationKind::FileSize]);
    }

    #[tokio::test]
    async fn high_water_marks_count_and_names_are_inert() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let f = ExitFacts {
            status: ExitStatus { code: Some(0), signal: None },
            capped_files: vec!["/work/\u{1b}]52;c;aGk=\u{7}\noutcome   ok".into(), "/tmp/b".into()],
            full_mounts: vec!["/tmp".into()],
            ..Default::default()
        };
        j.exit(&c, &f).await;
        let v = violations(&mut rx);
        assert_eq!(v.len(), 2);
        assert!(v[0].detail.contains("(and 1 more)"), "{}", v[0].detail);
        for v in &v {
            assert!(!v.detail.chars().any(|ch| ch.is_control()), "{:?}", v.detail);
        }
    }

    #[tokio::test]
    async fn counters_are_reported_once_per_kind() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let live = Counters { oom_kills: Some(1), pids_refused: Some(3), memory_limit_hits: Some(9), cpu_ms: Some(10) };
        assert_eq!(j.sample(&c, &live).await, Action::Continue);
        let more =
            Counters { oom_kills: Some(2), pids_refused: Some(5), memory_limit_hits: Some(12), cpu_ms: Some(600) };
        assert_eq!(j.sample(&c, &more).await, Action::KillForCpu);
        assert!(j.cpu_exhausted());
        j.exit(&c, &ExitFacts { counters: more, ..Default::default() }).await;
        let kinds: Vec<_> = violations(&mut rx).into_iter().map(|v| v.kind).collect();
        assert_eq!(kinds, [ViolationKind::Memory, ViolationKind::Pids, ViolationKind::CpuTime]);
    }

    fn incompletes(rx: &mut mpsc::Receiver<RunEvent>) -> Vec<crate::event::Incomplete> {
        let mut out = vec![];
        while let Ok(ev) = rx.try_recv() {
            if let EventKind::Incomplete(b) = ev.kind {
                out.push(b);
            }
        }
        out
    }

    #[tokio::test]
    async fn every_bound_hit_is_reported_once_and_never_dropped() {
        // One row per bound a source can hit, each as a tier hands it over.
        let rows = [
            (Bound::ScratchWalkEntries, Some(100_000), "scratch_walk_entries", "stopped after 100000 names"),
            (Bound::ScratchWalkDepth, Some(64), "scratch_walk_depth", "below 64 levels"),
            (Bound::ScratchWalkUnreadable, None, "scratch_walk_unreadable", "could not open a directory"),
            (Bound::FileEventsLost, None, "file_events_lost", "lost file events"),
            (Bound::Unnamed, None, "judge_bound", "stopped short"),
        ];
        for (bound, limit, name, words) in rows {
            let (c, mut rx) = ctx();
            let mut j = Judge::new(&limits());
            let hit = BoundHit::new(bound, limit, "the loader's walk of /work");
            let f = ExitFacts { bounds: vec![hit.clone(), hit], ..Default::default() };
            j.exit(&c, &f).await;
            j.exit(&c, &f).await;
            let got = incompletes(&mut rx);
            assert_eq!(got.len(), 1, "{name}: {got:?}");
            assert_eq!((got[0].bound.as_str(), got[0].limit), (name, limit));
            assert!(got[0].detail.contains(words), "{name}: {}", got[0].detail);
            assert_eq!(got[0].at, "the loader's walk of /work");
        }
    }

    #[tokio::test]
    async fn a_bound_is_listed_beside_a_violation_too() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let f = ExitFacts {
            capped_files: vec!["/work/z/big".into()],
            bounds: vec![BoundHit::new(Bound::ScratchWalkEntries, Some(5), "the exit scan of /work")],
            ..Default::default()
        };
        j.exit(&c, &f).await;
        let (mut v, mut b) = (0, 0);
        while let Ok(ev) = rx.try_recv() {
            match ev.kind {
                EventKind::Violation(_) => v += 1,
                EventKind::Incomplete(_) => b += 1,
                _ => {}
            }
        }
        assert_eq!((v, b), (1, 1));
    }

    #[test]
    fn a_guest_bound_parses_into_a_known_one_or_still_counts() {
        let b = BoundHit::parse("scratch_walk_entries:100000:the loader's walk of /work");
        assert_eq!(b, BoundHit::new(Bound::ScratchWalkEntries, Some(100_000), "the loader's walk of /work"));
        let b = BoundHit::parse("scratch_walk_unreadable::the agent's scan of /tmp");
        assert_eq!((b.bound, b.limit), (Bound::ScratchWalkUnreadable, None));
        // A name this build does not know, garbage, controls: still a bound.
        for text in ["bogus:1:x", "", ":::", "\u{1b}]52;c;aGk=\u{7}:9:\u{1b}[2J/work"] {
            let b = BoundHit::parse(text);
            assert!(!b.at.chars().any(|ch| ch.is_control()), "{text:?} → {b:?}");
            if !text.starts_with("scratch") {
                assert_eq!(b.bound, Bound::Unnamed, "{text:?}");
            }
        }
    }

    #[test]
    fn a_walk_that_stopped_short_is_a_bound_and_one_that_found_its_file_is_not() {
        use crate::fsafe::{Walk, WalkEnd};
        let w = Walk { max_entries: 7, max_depth: 3 };
        let kinds = |e: WalkEnd| BoundHit::of_walk(&e, w, "x").into_iter().map(|b| b.bound).collect::<Vec<_>>();
        assert_eq!(kinds(WalkEnd::default()), []);
        assert_eq!(kinds(WalkEnd { entries: true, ..Default::default() }), [Bound::ScratchWalkEntries]);
        assert_eq!(kinds(WalkEnd { depth: true, ..Default::default() }), [Bound::ScratchWalkDepth]);
        assert_eq!(kinds(WalkEnd { unreadable: 2, ..Default::default() }), [Bound::ScratchWalkUnreadable]);
        assert_eq!(kinds(WalkEnd { stopped: true, depth: true, unreadable: 1, ..Default::default() }), []);
    }

    #[tokio::test]
    async fn nothing_happened_means_no_violation() {
        let (c, mut rx) = ctx();
        let mut j = Judge::new(&limits());
        let f = ExitFacts {
            status: ExitStatus { code: Some(1), signal: None },
            counters: Counters {
                cpu_ms: Some(499),
                oom_kills: Some(0),
                memory_limit_hits: Some(0),
                pids_refused: Some(0),
            },
            rlimit_signals_trusted: true,
            ..Default::default()
        };
        j.exit(&c, &f).await;
        assert!(violations(&mut rx).is_empty());
    }
}
