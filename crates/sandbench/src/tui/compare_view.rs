//! The workbench's compare in progress: the schedule of runs still to start
//! (the engine's interleaved rounds, `sandbench_core::compare::schedule`), the
//! reports of the runs done, and the summary every format is rendered from.
//! The app starts the next run when one finishes, so a compare goes through
//! the same Msg → update → Effect path as any run.

use std::collections::VecDeque;

use sandbench_core::compare::{self, Mode, Summary};

use super::keymap::Action;
use super::view::{Intent, Key, Reply};
use crate::report::RunReport;
use crate::spec::RunSpec;

pub struct CompareRun {
    /// Tiers in column order.
    pub tiers: Vec<String>,
    pub spec: RunSpec,
    pub mode: Mode,
    pub repeat: usize,
    /// (round, tier) still to start.
    pub queue: VecDeque<(usize, String)>,
    /// Reports of the finished runs, their output dropped (the summary needs
    /// timings only; the columns keep the latest run's output).
    pub reports: Vec<RunReport>,
    pub skipped: Vec<(String, String)>,
    /// Cancelled: what is queued will not start.
    pub stopped: bool,
}

impl CompareRun {
    pub fn new(tiers: Vec<String>, spec: RunSpec, mode: Mode, repeat: usize, skipped: Vec<(String, String)>) -> Self {
        let queue = compare::schedule(&tiers, repeat).into();
        CompareRun { tiers, spec, mode, repeat, queue, reports: vec![], skipped, stopped: false }
    }

    /// The runs to start now: the next one, or (concurrent) the next round.
    pub fn next_batch(&mut self) -> Vec<String> {
        let Some((round, _)) = self.queue.front().cloned() else { return vec![] };
        let mut out = vec![];
        while let Some((r, t)) = self.queue.front().cloned() {
            if r != round || (self.mode == Mode::Sequential && !out.is_empty()) {
                break;
            }
            self.queue.pop_front();
            out.push(t);
        }
        out
    }

    pub fn record(&mut self, r: &RunReport) {
        let mut r = r.clone();
        r.stdout = String::new();
        r.stderr = String::new();
        self.reports.push(r);
    }

    pub fn total(&self) -> usize {
        self.tiers.len() * self.repeat
    }

    pub fn summary(&self) -> Summary {
        compare::summarize(&self.tiers, &self.reports, self.mode, self.repeat, &self.spec.label, self.skipped.clone())
    }
}

/// The compare view's own settings and keys: rounds and mode of the next
/// compare, and the first summary column shown after the tier column.
pub struct CompareView {
    pub repeat: usize,
    pub mode: Mode,
    pub hscroll: usize,
}

impl Default for CompareView {
    fn default() -> Self {
        CompareView { repeat: 1, mode: Mode::Sequential, hscroll: 0 }
    }
}

impl CompareView {
    pub fn key(&mut self, k: Key) -> Reply {
        let rounds = |n: usize| Reply::info(format!("next compare: {n} round(s) (r starts it)"));
        let Some(a) = k.action else { return Reply::Consumed };
        match a {
            Action::Close => Reply::Do(Intent::Close(None)),
            Action::Rerun => Reply::Do(Intent::Compare),
            Action::RepeatMore => {
                self.repeat = (self.repeat + 1).min(1000);
                rounds(self.repeat)
            }
            Action::RepeatLess => {
                self.repeat = self.repeat.saturating_sub(1).max(1);
                rounds(self.repeat)
            }
            Action::ToggleConcurrent => {
                self.mode = match self.mode {
                    Mode::Sequential => Mode::Concurrent,
                    Mode::Concurrent => Mode::Sequential,
                };
                Reply::info(match self.mode {
                    Mode::Sequential => "next compare: one tier at a time",
                    Mode::Concurrent => "next compare: every tier of a round at once (the timings skew each other)",
                })
            }
            Action::Left => {
                self.hscroll = self.hscroll.saturating_sub(1);
                Reply::Consumed
            }
            Action::Right => {
                self.hscroll = (self.hscroll + 1).min(compare::COLUMNS.len() - 2);
                Reply::Consumed
            }
            Action::Export(f) => Reply::Do(Intent::ExportCompare(f)),
            a => Reply::Pass(a),
        }
    }
}
