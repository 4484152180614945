//! Runs view state: the run log (`sandbench_core::runlog`) as a table that
//! follows runs made by any sandbench process — a `sandbench mcp` serving an
//! agent in another terminal shows up as it happens. The event loop feeds
//! new entries (`Msg::LogEntries`); everything in them is untrusted (other
//! processes wrote the file, programs chose their output) and is made inert
//! where it is drawn.

use std::collections::VecDeque;

use super::keymap::Action;
use super::scroll::Scroll;
use super::view::{Intent, Key, Reply};
use crate::report::Outcome;
use crate::runlog::Entry;

/// Entries kept in the view (the oldest go first).
pub const MAX_ENTRIES: usize = 2000;

const OUTCOMES: [Outcome; 5] =
    [Outcome::Violation, Outcome::Incomplete, Outcome::Error, Outcome::Ok, Outcome::Cancelled];

#[derive(Debug, Default)]
pub struct RunsView {
    pub entries: VecDeque<Entry>,
    /// Position in `visible()`.
    pub selected: usize,
    /// The selected run's details are shown.
    pub open: bool,
    pub detail: Scroll,
    pub outcome: Option<Outcome>,
    pub tier: Option<String>,
}

impl RunsView {
    /// New entries from the log. A selection on the newest row follows new runs.
    pub fn add(&mut self, new: Vec<Entry>) {
        if new.is_empty() {
            return;
        }
        let following = self.selected + 1 >= self.visible().len();
        self.entries.extend(new);
        let dropped = self.entries.len().saturating_sub(MAX_ENTRIES);
        self.entries.drain(..dropped);
        let n = self.visible().len();
        if following && !self.open {
            self.selected = n.saturating_sub(1);
        } else {
            self.selected = self.selected.min(n.saturating_sub(1));
        }
    }

    fn keeps(&self, e: &Entry) -> bool {
        self.outcome.is_none_or(|o| e.report.outcome == o) && self.tier.as_deref().is_none_or(|t| e.tier == t)
    }

    /// Indices into `entries` that pass the filters, oldest first.
    pub fn visible(&self) -> Vec<usize> {
        self.entries.iter().enumerate().filter(|(_, e)| self.keeps(e)).map(|(i, _)| i).collect()
    }

    pub fn selected_entry(&self) -> Option<&Entry> {
        self.visible().get(self.selected).map(|&i| &self.entries[i])
    }

    pub fn select(&mut self, pos: usize) {
        let n = self.visible().len();
        self.selected = pos.min(n.saturating_sub(1));
        self.detail.reset();
    }

    /// `page`: rows of the table.
    pub fn key(&mut self, k: Key, page: usize) -> Reply {
        let page = page.max(1);
        let Some(a) = k.action else { return Reply::Consumed };
        match a {
            Action::Up => self.select(self.selected.saturating_sub(1)),
            Action::Down => self.select(self.selected + 1),
            Action::PageUp | Action::PageDown if self.open => {
                self.detail.key(a);
            }
            Action::PageUp => self.select(self.selected.saturating_sub(page)),
            Action::PageDown => self.select(self.selected + page),
            Action::Top => self.select(0),
            Action::Bottom => self.select(usize::MAX),
            Action::Accept => {
                self.open = self.selected_entry().is_some() && !self.open;
                self.detail.reset();
            }
            Action::FilterOutcome => self.cycle_outcome(),
            Action::FilterTier => self.cycle_tier(),
            Action::LoadRun => return Reply::Do(Intent::LoadRun),
            Action::Close if self.open => self.open = false,
            Action::Close => return Reply::Do(Intent::Close(None)),
            a => return Reply::Pass(a),
        }
        Reply::Consumed
    }

    /// All → violation → error → ok → cancelled → all.
    pub fn cycle_outcome(&mut self) {
        self.outcome = match self.outcome {
            None => Some(OUTCOMES[0]),
            Some(o) => OUTCOMES.iter().position(|x| *x == o).and_then(|i| OUTCOMES.get(i + 1)).copied(),
        };
        self.select(usize::MAX);
    }

    /// All → each tier seen in the log, in order of first appearance → all.
    pub fn cycle_tier(&mut self) {
        let mut tiers: Vec<&str> = vec![];
        for e in &self.entries {
            if !tiers.contains(&e.tier.as_str()) {
                tiers.push(&e.tier);
            }
        }
        self.tier = match &self.tier {
            None => tiers.first().map(|s| s.to_string()),
            Some(t) => tiers.iter().position(|x| x == t).and_then(|i| tiers.get(i + 1)).map(|s| s.to_string()),
        };
        self.select(usize::MAX);
    }

    pub fn filter_label(&self) -> String {
        format!(
            "outcome {} · tier {}",
            self.outcome.map_or("all", |o| o.name()),
            self.tier.as_deref().map_or("all".to_string(), |t| crate::sanitize::inert_line(t, 20))
        )
    }
}
