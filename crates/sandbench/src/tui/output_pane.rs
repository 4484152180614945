//! The output pane's own state and keys: where it is scrolled to (following
//! the end while a run writes), how far right, and the search through the
//! run's lines. The lines themselves belong to the run (`RunView`).

use super::keymap::Action;
use super::run_view::RunView;
use super::scroll::Scroll;
use super::types::Level;
use super::view::{Intent, Key, Reply};

pub struct OutputPane {
    pub scroll: Scroll,
    /// Display columns skipped at the left.
    pub hscroll: usize,
    /// The last search, and the absolute line of the current match.
    pub search: Option<String>,
    pub found: Option<u64>,
}

impl Default for OutputPane {
    fn default() -> Self {
        OutputPane { scroll: Scroll::following(), hscroll: 0, search: None, found: None }
    }
}

impl OutputPane {
    /// Absolute index of the first line shown for `run` in `rows` rows.
    pub fn fit(&self, run: Option<&RunView>, rows: usize) -> u64 {
        match run {
            Some(r) => self.scroll.fit(r.lines.dropped, r.lines.dropped + r.line_count() as u64, rows as u64),
            None => 0,
        }
    }

    /// A new run is shown: follow its end from the first column.
    pub fn show_new_run(&mut self) {
        self.scroll.set_follow(true);
        self.hscroll = 0;
    }

    pub fn key(&mut self, k: Key, run: Option<&RunView>, rows: usize) -> Reply {
        self.fit(run, rows);
        let Some(a) = k.action else { return Reply::Consumed };
        if self.scroll.key(a) {
            return Reply::Consumed;
        }
        match a {
            Action::Left => self.hscroll = self.hscroll.saturating_sub(8),
            Action::Right => self.hscroll += 8,
            Action::Follow => {
                self.scroll.set_follow(!self.scroll.follows());
                return Reply::info(if self.scroll.follows() { "following the output" } else { "follow off" });
            }
            Action::Search => return Reply::Do(Intent::OpenSearch),
            Action::SearchNext => return self.find(run, rows, true),
            Action::SearchPrev => return self.find(run, rows, false),
            Action::Clear => return Reply::Do(Intent::ClearRun),
            a => return Reply::Pass(a),
        }
        Reply::Consumed
    }

    /// A new search: from the newest line back.
    pub fn search(&mut self, q: String, run: Option<&RunView>, rows: usize) -> Reply {
        self.search = Some(q);
        self.found = None;
        self.find(run, rows, false)
    }

    /// Move to the next match of the search: newer (`forward`) or older
    /// than the current one (from the end when there is none).
    pub fn find(&mut self, run: Option<&RunView>, rows: usize, forward: bool) -> Reply {
        let Some(q) = self.search.as_ref().map(|q| q.to_lowercase()) else {
            return Reply::info("no search yet: / searches the output");
        };
        let Some(r) = run else { return Reply::Consumed };
        let partials: Vec<_> = r.partials().collect();
        let lines: Vec<&crate::tui::sanitize::StyledLine> =
            r.lines.iter().map(|l| &l.line).chain(partials.iter().map(|l| &l.line)).collect();
        let base = r.lines.dropped;
        let n = lines.len() as u64;
        let cur = self.found.filter(|f| *f >= base && *f < base + n).map(|f| f - base);
        let hit = |i: &u64| lines[*i as usize].text().to_lowercase().contains(&q);
        let found =
            if forward { (cur.map_or(0, |c| c + 1)..n).find(hit) } else { (0..cur.unwrap_or(n)).rev().find(hit) };
        match found {
            Some(i) => {
                self.found = Some(base + i);
                self.fit(Some(r), rows);
                self.scroll.scroll_to((base + i).saturating_sub(rows as u64 / 3));
                self.scroll.set_follow(false);
                Reply::info(format!("match at line {} of {}", i + 1, n))
            }
            None => Reply::Say(Level::Warn, format!("no {} match for '{q}'", if forward { "newer" } else { "older" })),
        }
    }
}
