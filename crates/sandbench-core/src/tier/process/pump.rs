//! The pump of the process tier: one sandbox's program followed to its exit,
//! for a one-shot run and a session call alike. It reads init's status
//! lines (set-up marks, isolation, warnings, errors, the exit), samples the
//! run cgroup (or, without one, the helper's process tree), hands the judge
//! its facts as they come, stops the program at its CPU limit or when the run
//! is stopped, and ends once init has reported the exit and the program's
//! output is in. What differs between a run and a call — where the output
//! comes from, how a stop is asked for — is the caller's [`Side`]; what the
//! counters are measured from is the [`Scope`].

use serde_json::json;
use tokio::process::Child;

use super::cgroup::{RunCgroup, Stats};
use super::launch::{read_line_bounded, Launched};
use super::sandbox::{self, Status};
use super::{MARKS, SAMPLE_EVERY};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::judge::{self, ExitFacts, Judge};
use crate::session::counters_since;
use crate::spec::Limits;

/// Sampling is ten times denser for a run's first half second, so that a
/// 50 ms program still shows a curve (reading the cgroup files takes
/// microseconds).
const SAMPLE_EARLY: std::time::Duration = std::time::Duration::from_millis(10);
const EARLY_FOR: std::time::Duration = std::time::Duration::from_millis(500);

/// Whose the sandbox is while the pump follows it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope {
    /// A one-shot run's, whole. A pre-started interpreter is the program's
    /// own (node starting its threads under a tight pids limit can hang
    /// there): its start counts against the wall time, which the runner only
    /// starts at Running, so the program must have started by `start_by`.
    Run { start_by: tokio::time::Instant },
    /// A session call's: the cgroup's counters run for the whole session, so
    /// the call is judged on what they gained since `base`; the sandbox is
    /// meant to outlive the call, so its end during one is an error.
    Call { base: judge::Counters },
}

/// What a one-shot run and a session call each do around the pump.
pub(super) trait Side {
    /// Wait until some of the program's output can be taken; pending for
    /// ever once there is none to wait for. Must be cancel-safe.
    async fn output_ready(&mut self) -> Stream;
    /// Take what `output_ready` said is there.
    async fn take(&mut self, stream: Stream, ctx: &RunContext);
    /// Whether all of the program's output is in (checked once init has
    /// reported the exit, or is gone).
    fn drained(&self) -> bool;
    /// Stop the program (cancel, CPU limit, wall time before it started).
    async fn kill(&mut self, child: &mut Child, cg: Option<&RunCgroup>);
    /// The run's "running" is out, or the program will never start: output
    /// read on its own (not through `take`) may be sent from now on.
    fn release_output(&mut self) {}
}

/// What init reported of the program's exit.
pub(super) struct Exited {
    pub(super) status: ExitStatus,
    pub(super) cpu_ms: u64,
    pub(super) max_rss_kb: u64,
    fsize_hit: Option<String>,
    full_mounts: Vec<String>,
    guarded: Option<u64>,
    files_watched: bool,
    /// Other processes init still saw in its namespace after reaping (0:
    /// none; None: it could not look).
    pub(super) left: Option<u32>,
    bounds: Vec<judge::BoundHit>,
}

/// The state of one run or call, and what the pump found.
pub(super) struct Pump<'a> {
    ctx: &'a RunContext,
    scope: Scope,
    wall_time: std::time::Duration,
    pub(super) judge: Judge,
    pub(super) isolation: serde_json::Value,
    exit: Option<Status>,
    pub(super) error: Option<String>,
    pub(super) killed: bool,
    pub(super) helper_done: bool,
    pub(super) status_eof: bool,
    started: bool,
    /// Where the run's time goes (ms from its start), for the report.
    pub(super) timeline: Vec<(&'static str, f64)>,
    /// The highest memory sampled (a call's: the cgroup's own high-water
    /// mark spans the session).
    pub(super) peak_mem: Option<u64>,
}

impl<'a> Pump<'a> {
    pub(super) fn new(ctx: &'a RunContext, limits: &Limits, scope: Scope) -> Pump<'a> {
        Pump {
            ctx,
            scope,
            wall_time: limits.wall_time,
            judge: Judge::new(limits),
            isolation: json!({}),
            exit: None,
            error: None,
            killed: false,
            helper_done: false,
            status_eof: false,
            started: false,
            timeline: vec![],
            peak_mem: None,
        }
    }

    fn base(&self) -> judge::Counters {
        match self.scope {
            Scope::Run { .. } => judge::Counters::default(),
            Scope::Call { base } => base,
        }
    }

    /// Follow the sandbox until init has reported the program's exit (or is
    /// gone without saying so) and the side has all of its output.
    pub(super) async fn drive<S: Side>(&mut self, launched: &mut Launched, side: &mut S) -> anyhow::Result<()> {
        let ctx = self.ctx;
        let cg = launched.cg.as_ref();
        let child = &mut launched.child;
        let helper_pid = child.id().unwrap_or(0) as i32;
        let status = launched.status.as_mut().ok_or_else(|| anyhow::anyhow!("helper has no status pipe"))?;
        let mut early = std::mem::take(&mut launched.early).into_iter();
        self.timeline = std::mem::take(&mut launched.timeline);
        // The sandbox stamps its steps on CLOCK_MONOTONIC: this run's start on it.
        let start_ns = sandbox::mono_ns().saturating_sub((ctx.ms() * 1e6) as u64);
        let start_by = match self.scope {
            Scope::Run { start_by } => Some(start_by),
            Scope::Call { .. } => None,
        };
        let sampling_from = tokio::time::Instant::now();
        let mut next_sample = sampling_from;
        let mut line = Vec::new();
        while !((self.exit.is_some() || self.status_eof) && side.drained()) {
            if self.started || self.killed || self.exit.is_some() || self.status_eof {
                side.release_output();
            }
            let mut from_early = false;
            let next = if let Some(s) = early.next() {
                // Read before this run (a spare's set-up, a call's process
                // made ahead): not its time.
                from_early = true;
                Some(s)
            } else {
                tokio::select! {
                    // In this order: init's statuses come before the output they
                    // precede (it says Started, then lets the program go), so a
                    // run's "running" never shows after its first line; every
                    // branch before the output is bounded (a few statuses, one
                    // exit, one stop, timers), so a flood cannot starve them.
                    biased;
                    _ = ctx.stop.cancelled(), if !self.killed => {
                        self.killed = true;
                        side.kill(child, cg).await;
                        None
                    }
                    r = read_line_bounded(status, &mut line), if !self.status_eof && self.exit.is_none() => {
                        match r {
                            Ok(0) | Err(_) => { self.status_eof = true; None }
                            Ok(_) => Some(sandbox::parse_status(&line)),
                        }
                    }
                    st = child.wait(), if !self.helper_done => {
                        self.helper_done = true;
                        match (self.scope, st) {
                            (Scope::Run { .. }, Err(e)) => {
                                self.error.get_or_insert(format!("lost the sandbox helper: {e}"));
                            }
                            (Scope::Run { .. }, Ok(_)) => {}
                            (Scope::Call { .. }, _) => {
                                self.error.get_or_insert("the session's sandbox ended during the call".into());
                            }
                        }
                        // Stragglers (a daemon the program left) die with their
                        // namespace; the cgroup kill makes sure of it.
                        if let Some(c) = cg { c.kill_all(); }
                        None
                    }
                    _ = tokio::time::sleep_until(start_by.unwrap_or(sampling_from)), if start_by.is_some() && !self.started && !self.killed => {
                        self.killed = true;
                        side.kill(child, cg).await;
                        let detail = format!(
                            "wall time limit {} hit before the program started — its interpreter never got ready; killed",
                            crate::spec::format_duration(self.wall_time)
                        );
                        let v = crate::event::Violation { kind: crate::event::ViolationKind::WallTimeout, at_ms: ctx.ms(), detail };
                        ctx.emit(EventKind::Violation(v)).await;
                        None
                    }
                    _ = tokio::time::sleep_until(next_sample), if self.exit.is_none() && !self.status_eof => {
                        let every = match self.scope {
                            Scope::Run { .. } if sampling_from.elapsed() < EARLY_FOR => SAMPLE_EARLY,
                            _ => SAMPLE_EVERY,
                        };
                        next_sample = tokio::time::Instant::now() + every;
                        if let Some((usage, counters)) = self.sample(cg, helper_pid) {
                            ctx.usage(usage).await;
                            if self.judge.sample(ctx, &counters).await == judge::Action::KillForCpu && !self.killed {
                                self.killed = true;
                                side.kill(child, cg).await;
                            }
                        }
                        None
                    }
                    stream = side.output_ready() => {
                        side.take(stream, ctx).await;
                        None
                    }
                }
            };
            if let Some(s) = next.as_ref().filter(|_| !from_early) {
                self.mark(s, start_ns);
            }
            match next {
                None | Some(Status::Ready | Status::Joined | Status::Mark { .. }) => {}
                Some(Status::Privileges { who, held }) => {
                    launched.privileges.insert(who, json!(held));
                }
                Some(Status::Started) => {
                    self.started = true;
                    ctx.emit(EventKind::Phase(Phase::Running)).await;
                    // The program exists from now on: count it even if it
                    // exits before the first tick.
                    ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
                }
                Some(Status::Isolation { landlock, seccomp, uid, user_ns, degraded }) => {
                    for d in &degraded {
                        ctx.note(format!("degraded: {d}")).await;
                    }
                    self.isolation = json!({
                        "landlock": landlock, "seccomp": seccomp, "uid": uid, "user_ns": user_ns,
                        "degraded": degraded,
                    });
                }
                Some(Status::Warning { msg }) => ctx.note(msg).await,
                // After sandbench's own kill (a wall limit before the start,
                // a stop, the CPU limit), init may still say that the
                // interpreter it waited for died: that is the kill, not a
                // sandbox that failed to build (an error said before the
                // kill is kept).
                Some(Status::Error { .. }) if self.killed => {}
                Some(Status::Error { msg }) => {
                    self.error.get_or_insert(msg);
                }
                Some(s @ Status::Exit { .. }) => self.exit = Some(s),
            }
        }
        Ok(())
    }

    /// A status's place in the timeline, if it has one.
    fn mark(&mut self, s: &Status, start_ns: u64) {
        let what = match s {
            Status::Joined => Some("cgroup_joined"),
            Status::Ready => Some("interpreter_ready"),
            Status::Started => Some("program_started"),
            Status::Exit { .. } => Some("program_exited"),
            _ => None,
        };
        if let Some(w) = what {
            self.timeline.push((w, self.ctx.ms()));
        }
        if let Status::Mark { what, mono_ns } = s {
            let at = mono_ns.saturating_sub(start_ns) as f64 / 1e6;
            if let Some(k) = MARKS.iter().find(|m| **m == what.as_str()) {
                self.timeline.push((k, at));
            }
        }
    }

    /// Usage and the judge's counters now: the cgroup's (a call's share);
    /// a run without a cgroup knows only the CPU of the helper's tree, a
    /// call without one samples nothing.
    fn sample(&mut self, cg: Option<&RunCgroup>, helper_pid: i32) -> Option<(UsageSample, judge::Counters)> {
        match (cg, self.scope) {
            (Some(c), _) => {
                let s = c.stats();
                let mine = counters_since(s.counters(), self.base());
                if let Some(m) = s.memory {
                    self.peak_mem = Some(self.peak_mem.map_or(m, |p| p.max(m)));
                }
                Some((UsageSample { cpu_ms: mine.cpu_ms, memory_bytes: s.memory, pids: s.pids }, mine))
            }
            (None, Scope::Run { .. }) => {
                let u = proc_tree_sample(helper_pid);
                Some((u, judge::Counters { cpu_ms: u.cpu_ms, ..Default::default() }))
            }
            (None, Scope::Call { .. }) => None,
        }
    }

    /// The cgroup's counters at the end (this call's share), judged once more.
    pub(super) async fn final_sample(&mut self, stats: Option<Stats>) -> Option<judge::Counters> {
        let counters = stats.map(|s| counters_since(s.counters(), self.base()));
        if let Some(c) = &counters {
            self.judge.sample(self.ctx, c).await;
        }
        counters
    }

    /// Whether init reported the program's exit.
    pub(super) fn has_exit(&self) -> bool {
        self.exit.is_some()
    }

    /// Init's report of the program's exit, if it made one.
    pub(super) fn exited(&mut self) -> Option<Exited> {
        let Some(Status::Exit {
            code,
            signal,
            cpu_ms,
            max_rss_kb,
            fsize_hit,
            full_mounts,
            guarded,
            files_watched,
            left,
            bounds,
        }) = self.exit.take()
        else {
            return None;
        };
        let status = ExitStatus { code, signal };
        Some(Exited { status, cpu_ms, max_rss_kb, fsize_hit, full_mounts, guarded, files_watched, left, bounds })
    }

    /// Judge and emit the exit `shown` (init's, unless the caller knows
    /// better); the details every run and call reports, and the counters the
    /// exit was judged on.
    pub(super) async fn conclude(
        &mut self,
        e: Exited,
        shown: ExitStatus,
        final_counters: Option<judge::Counters>,
        cg: Option<&RunCgroup>,
        launched: &Launched,
        with_timeline: bool,
    ) -> (serde_json::Value, judge::Counters) {
        // Whole-sandbox CPU from the cgroup; without one, init's rusage of
        // the program (kernel-kept, after its exit).
        let mut counters = final_counters.unwrap_or_default();
        counters.cpu_ms = counters.cpu_ms.or(Some(e.cpu_ms));
        let facts = ExitFacts {
            status: shown,
            counters,
            rlimit_signals_trusted: false,
            capped_files: e.fsize_hit.into_iter().collect(),
            full_mounts: e.full_mounts,
            bounds: e.bounds,
        };
        self.judge.exit(self.ctx, &facts).await;
        self.ctx.emit(EventKind::Exit(shown)).await;
        let timeline: &[(&'static str, f64)] = if with_timeline { &self.timeline } else { &[] };
        let mut details = isolation_details(std::mem::take(&mut self.isolation), cg, timeline);
        details["privileges"] = json!(launched.privileges);
        details["exit_rusage"] = json!({ "cpu_ms": e.cpu_ms, "max_rss_bytes": e.max_rss_kb * 1024 });
        details["scratch_watch"] = json!({ "file_events": e.files_watched, "guarded_calls": e.guarded });
        (details, counters)
    }
}

/// How long a verdict waits for the run's cgroup to count no process.
const RELEASED_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether every process of the run ended and was reaped before its verdict,
/// from kernel facts, not assumed: `left`, what init saw of its own pid
/// namespace once it had killed and reaped (`steps::wait_alone`; None: it
/// could not look) when it reported the exit (`exited`), and, with `cg`, the
/// run cgroup's count (a zombie stays in it until its parent reaps it,
/// wherever that parent is), waited for up to [`RELEASED_WITHIN`]. A run
/// stopped from here has no exit report: the cgroup's count alone speaks
/// for it. The details say what was seen; anything short of a confirmation
/// is a bound of the judge (`processes_after`): the verdict is then
/// `incomplete`, never `ok` (docs/SECURITY.md, "Bounds of the judges"). A session's call passes no cgroup: the next call's process joins it
/// right after the exit.
pub(super) async fn processes_after(exited: bool, left: Option<u32>, cg: Option<&RunCgroup>) -> After {
    let mut counted = None;
    if let Some(c) = cg {
        let since = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(500);
        loop {
            counted = c.pids_now();
            if counted.is_none_or(|n| n == 0) || since.elapsed() >= RELEASED_WITHIN {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
    }
    let mut gaps = vec![];
    if exited && left != Some(0) {
        gaps.push(match left {
            Some(n) => format!("{n} other process(es) still in the sandbox's pid namespace after its init reaped"),
            None => "the sandbox's init could not look at its pid namespace".into(),
        });
    }
    match (cg, counted) {
        (Some(_), Some(0)) => {}
        (Some(_), Some(n)) => {
            gaps.push(format!("the run's cgroup still counted {n} process(es) (a zombie counts until it is reaped)"))
        }
        (Some(_), None) => gaps.push("the run's cgroup has no process count to read".into()),
        (None, _) if !exited => gaps.push("the sandbox was stopped and no cgroup counts its processes".into()),
        (None, _) => {}
    }
    After {
        seen: json!({
            "confirmed": gaps.is_empty(),
            "namespace_others": if exited { json!(left) } else { json!(null) },
            "cgroup_pids": counted,
        }),
        gap: (!gaps.is_empty()).then(|| {
            format!(
                "every process of the run ended and was reaped: not confirmed within {} s ({})",
                RELEASED_WITHIN.as_secs(),
                gaps.join("; ")
            )
        }),
    }
}

/// What [`processes_after`] found: the report's `processes_after`, and
/// what it could not confirm, if anything.
pub(super) struct After {
    seen: serde_json::Value,
    gap: Option<String>,
}

impl After {
    /// Into a run's or call's details; a gap is a bound hit, said on `ctx`
    /// before the exit's verdict is made.
    pub(super) async fn record(self, details: &mut serde_json::Value, ctx: &RunContext) {
        details["processes_after"] = self.seen;
        if let Some(detail) = self.gap {
            ctx.incomplete(crate::event::Incomplete {
                bound: "processes_after".into(),
                limit: Some(RELEASED_WITHIN.as_millis() as u64),
                at: "the run's end: its pid namespace and cgroup".into(),
                detail,
            })
            .await;
        }
    }
}

pub(super) fn isolation_details(
    mut iso: serde_json::Value,
    cg: Option<&RunCgroup>,
    timeline: &[(&'static str, f64)],
) -> serde_json::Value {
    let mut t = serde_json::Map::new();
    for (k, v) in timeline {
        t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
    }
    iso["timeline_ms"] = serde_json::Value::Object(t);
    iso["cgroup"] = match cg {
        Some(c) => json!(c.version()),
        None => serde_json::Value::Null,
    };
    iso["namespaces"] = json!(["pid", "net", "mount", "ipc", "uts", "cgroup"]);
    if iso["user_ns"].as_bool() == Some(true) {
        if let Some(a) = iso["namespaces"].as_array_mut() {
            a.push(json!("user"));
        }
    }
    iso["start"] = json!("cold");
    iso
}

/// Usage without a cgroup: walk /proc for the helper's descendants.
pub(super) fn proc_tree_sample(root: i32) -> UsageSample {
    use nix::unistd::{sysconf, SysconfVar};
    let tick = crate::host::clock_ticks();
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(4096).max(1) as u64;
    let mut procs: Vec<(i32, i32, u64, u64)> = vec![];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Some(st) = crate::host::ProcStat::of(pid) else { continue };
            procs.push((pid, st.ppid, st.cpu_ticks, st.rss_pages));
        }
    }
    let mut set = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for p in &procs {
            if !set.contains(&p.0) && set.contains(&p.1) {
                set.push(p.0);
                grew = true;
            }
        }
    }
    let ours: Vec<_> = procs.iter().filter(|p| set.contains(&p.0) && p.0 != root).collect();
    UsageSample {
        cpu_ms: Some(ours.iter().map(|p| p.2).sum::<u64>() * 1000 / tick),
        memory_bytes: Some(ours.iter().map(|p| p.3).sum::<u64>() * page),
        pids: Some(ours.len() as u64),
    }
}

#[cfg(test)]
mod tests {
    use crate::event::{EventKind, RunContext};
    use tokio_util::sync::CancellationToken;

    /// A run's end that is not confirmed whole is a bound hit (the verdict
    /// reads `incomplete`), never only a note beside an `ok`; a confirmed one
    /// says nothing. Rows: (exited, init's count of others left, the words).
    #[tokio::test]
    async fn an_end_not_confirmed_whole_is_a_bound_hit() {
        let rows = [
            (true, Some(0), None),
            (true, Some(2), Some("2 other process(es) still in the sandbox's pid namespace")),
            (true, None, Some("could not look at its pid namespace")),
            (false, None, Some("no cgroup counts its processes")),
        ];
        for (exited, left, words) in rows {
            let (tx, mut rx) = tokio::sync::mpsc::channel(8);
            let ctx = RunContext { started: std::time::Instant::now(), tx, stop: CancellationToken::new() };
            let mut details = serde_json::json!({});
            super::processes_after(exited, left, None).await.record(&mut details, &ctx).await;
            drop(ctx);
            let mut hits = vec![];
            while let Some(ev) = rx.recv().await {
                if let EventKind::Incomplete(b) = ev.kind {
                    hits.push(b);
                }
            }
            assert_eq!(details["processes_after"]["confirmed"], words.is_none(), "{left:?}");
            match words {
                None => assert!(hits.is_empty(), "{left:?}: {hits:?}"),
                Some(w) => {
                    assert_eq!(hits.len(), 1, "{left:?}: {hits:?}");
                    assert_eq!(hits[0].bound, "processes_after");
                    assert!(hits[0].detail.contains(w), "{left:?}: {}", hits[0].detail);
                }
            }
            assert!(details.get("degraded").is_none(), "a gap is not a missing protection: {details}");
        }
    }
}
