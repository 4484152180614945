//! One scroll position for every pane that shows more lines than it has
//! rows: the output pane, the agent transcript, help, the gauntlet's and the
//! runs view's details. Like gitui's `VerticalScroll`, the pane records its
//! extent when it is drawn (`fit`), so keys move within what is really there
//! (no position far past the end that takes many presses to come back from),
//! and a pane that follows its end keeps following as lines arrive.

use std::cell::Cell;

use super::keymap::Action;

#[derive(Debug, Clone, Default)]
pub struct Scroll {
    /// The wanted first line (absolute), when not following.
    top: Cell<u64>,
    follow: Cell<bool>,
    /// The extent seen at the last draw: lines before `first` are gone
    /// (a ring that dropped them), `max_top` is the last full page's top.
    first: Cell<u64>,
    max_top: Cell<u64>,
    rows: Cell<u64>,
}

impl Scroll {
    /// At the end, staying there as lines arrive.
    pub fn following() -> Scroll {
        let s = Scroll::default();
        s.follow.set(true);
        s
    }

    /// At the first line.
    pub fn at_top() -> Scroll {
        Scroll::default()
    }

    pub fn follows(&self) -> bool {
        self.follow.get()
    }

    /// The first line to show of lines `first..end` in `rows` rows, recording
    /// that extent for the keys. Called where the pane is drawn (or laid out).
    pub fn fit(&self, first: u64, end: u64, rows: u64) -> u64 {
        let rows = rows.max(1);
        let max_top = end.saturating_sub(rows).max(first);
        self.first.set(first);
        self.max_top.set(max_top);
        self.rows.set(rows);
        self.top_within(first, max_top)
    }

    /// The first line shown, within the extent of the last `fit`.
    pub fn top(&self) -> u64 {
        self.top_within(self.first.get(), self.max_top.get())
    }

    fn top_within(&self, first: u64, max_top: u64) -> u64 {
        if self.follow.get() {
            max_top
        } else {
            self.top.get().clamp(first, max_top)
        }
    }

    /// Show from line `t` (clamped); back at the end, follow again.
    pub fn scroll_to(&self, t: u64) {
        let t = t.clamp(self.first.get(), self.max_top.get());
        self.top.set(t);
        self.follow.set(t >= self.max_top.get());
    }

    /// Follow the end (or stop following, staying where the pane is).
    pub fn set_follow(&self, on: bool) {
        if !on {
            self.top.set(self.top());
        }
        self.follow.set(on);
    }

    /// Back to the first line, not following (a new text to read).
    pub fn reset(&self) {
        self.top.set(0);
        self.follow.set(false);
    }

    /// Apply a movement key; `false` when `a` is not one.
    pub fn key(&self, a: Action) -> bool {
        let (top, rows) = (self.top(), self.rows.get().max(1));
        match a {
            Action::Up => self.scroll_to(top.saturating_sub(1)),
            Action::Down => self.scroll_to(top + 1),
            Action::PageUp => self.scroll_to(top.saturating_sub(rows)),
            Action::PageDown => self.scroll_to(top + rows),
            Action::Top => self.scroll_to(0),
            Action::Bottom => self.follow.set(true),
            _ => return false,
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_within_what_was_drawn() {
        let s = Scroll::at_top();
        assert_eq!(s.fit(0, 100, 10), 0);
        for _ in 0..500 {
            s.key(Action::Down);
        }
        assert_eq!(s.top(), 90, "no position past the last page");
        assert!(s.follows(), "the end reached follows again");
        s.key(Action::PageUp);
        assert_eq!(s.top(), 80, "one page up from the end is one press");
        assert!(!s.follows());
    }

    #[test]
    fn following_keeps_up_with_new_lines_and_dropped_ones() {
        let s = Scroll::following();
        assert_eq!(s.fit(0, 30, 10), 20);
        assert_eq!(s.fit(5, 50, 10), 40);
        s.key(Action::Up);
        assert_eq!(s.fit(5, 60, 10), 39, "scrolled back: new lines do not move it");
        assert_eq!(s.fit(45, 70, 10), 45, "lines dropped from the ring: the first kept one");
        s.key(Action::Bottom);
        assert_eq!(s.fit(45, 70, 10), 60);
    }

    #[test]
    fn short_text_has_one_position() {
        let s = Scroll::at_top();
        assert_eq!(s.fit(0, 3, 10), 0);
        s.key(Action::PageDown);
        assert_eq!(s.top(), 0);
    }
}
