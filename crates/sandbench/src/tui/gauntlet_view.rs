//! The gauntlet view's state: the matrix filled live from `GauntletEvent`s
//! (rows = samples, columns = tiers), the selected cell, what each finished
//! cell's details show. Untrusted output is kept only as a bounded,
//! sanitized head: a matrix of cells must not hold every run's full output.

use super::keymap::Action;
use super::scroll::Scroll;
use super::view::{Intent, Key, Reply};
use crate::gauntlet::{Cell, GauntletEvent, Latency};
use crate::samples::Sample;
use crate::spec::Limits;

/// Lines of stdout / stderr a cell keeps for its details.
pub const HEAD_LINES: usize = 40;
/// Columns a kept line is cut to.
pub const HEAD_COLS: usize = 240;
/// Bytes of a stream looked at for the head.
const HEAD_BYTES: usize = 16 << 10;

/// One row: a sample and what its header says.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub hostile: bool,
    pub tries: String,
    pub must: String,
}

/// The first lines of a stream, sanitized (no control character left, tabs
/// expanded), each cut to `HEAD_COLS`.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub lines: Vec<String>,
    /// Lines not kept.
    pub more: usize,
    /// Bytes the run produced on this stream (as captured).
    pub bytes: usize,
}

impl Head {
    pub fn of(text: &str) -> Head {
        let bytes = text.len();
        let mut cut = text.len().min(HEAD_BYTES);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let total = text.lines().count();
        let lines: Vec<String> = text[..cut].lines().take(HEAD_LINES).map(clean_line).collect();
        Head { more: total.saturating_sub(lines.len()), lines, bytes }
    }
}

/// One line of untrusted text made safe to draw: controls shown visibly,
/// tabs expanded, at most `HEAD_COLS` characters (the cut is said).
pub fn clean_line(l: &str) -> String {
    let v = crate::sanitize::visible_controls(l.as_bytes());
    let mut out = String::new();
    let mut n = 0usize;
    let mut chars = v.chars();
    let mut rest = 0;
    while let Some(c) = chars.next() {
        if n >= HEAD_COLS {
            rest = 1 + chars.count();
            break;
        }
        if c == '\t' {
            let pad = 4 - n % 4;
            out.extend(std::iter::repeat_n(' ', pad));
            n += pad;
        } else if c != '\n' {
            out.push(c);
            n += 1;
        }
    }
    if rest > 0 {
        out.push_str(&format!(" …+{rest}"));
    }
    out
}

/// A finished cell: the engine's `Cell` with its report's output replaced by
/// bounded heads.
#[derive(Debug, Clone)]
pub struct CellView {
    pub cell: Cell,
    pub stdout: Head,
    pub stderr: Head,
}

impl CellView {
    /// Stopped by the user's cancel, and nothing got out: no verdict about
    /// the tier (not a mismatch, left out of the frontier's share).
    pub fn cancelled(&self) -> bool {
        self.cell.verdict.is_no_verdict()
    }

    pub fn new(mut cell: Cell) -> CellView {
        let stdout = Head::of(&cell.report.stdout);
        let stderr = Head::of(&cell.report.stderr);
        cell.report.stdout = String::new();
        cell.report.stderr = String::new();
        CellView { cell, stdout, stderr }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GState {
    Running,
    Cancelling,
    Finished,
    Cancelled,
    /// The engine failed (the message is in `error`).
    Failed,
}

pub struct GauntletView {
    pub id: u64,
    pub tiers: Vec<String>,
    /// Tiers not in the matrix, and why.
    pub skipped: Vec<(String, String)>,
    pub rows: Vec<Row>,
    /// `[row][tier]`: a finished cell, or nothing yet.
    pub cells: Vec<Vec<Option<Box<CellView>>>>,
    /// The cell being run now.
    pub running: Option<(usize, usize)>,
    /// The tier being measured (no cell runs meanwhile).
    pub calibrating: Option<String>,
    /// Selected (row, tier).
    pub sel: (usize, usize),
    /// The selection follows the cells as they finish (until a key moves it).
    pub follow: bool,
    /// The details fill the view (Enter), scrolled by `scroll`.
    pub zoom: bool,
    pub scroll: Scroll,
    pub state: GState,
    pub error: Option<String>,
    pub limits: Limits,
    pub latency: Vec<Latency>,
    /// The engine's count once finished.
    pub mismatches: Option<usize>,
}

impl GauntletView {
    pub fn new(
        id: u64,
        tiers: Vec<String>,
        skipped: Vec<(String, String)>,
        samples: &[Sample],
        limits: Limits,
    ) -> GauntletView {
        let rows: Vec<Row> = samples
            .iter()
            .map(|s| Row {
                name: s.name.clone(),
                hostile: s.is_hostile(),
                tries: s.tries.clone(),
                must: s.must.clone(),
            })
            .collect();
        let cells = rows.iter().map(|_| tiers.iter().map(|_| None).collect()).collect();
        GauntletView {
            id,
            tiers,
            skipped,
            rows,
            cells,
            running: None,
            calibrating: None,
            sel: (0, 0),
            follow: true,
            zoom: false,
            scroll: Scroll::at_top(),
            state: GState::Running,
            error: None,
            limits,
            latency: vec![],
            mismatches: None,
        }
    }

    /// Still running (or stopping): the gauntlet holds the machine.
    pub fn active(&self) -> bool {
        matches!(self.state, GState::Running | GState::Cancelling)
    }

    fn index(&self, sample: &str, tier: &str) -> Option<(usize, usize)> {
        let r = self.rows.iter().position(|r| r.name == sample)?;
        let c = self.tiers.iter().position(|t| t == tier)?;
        Some((r, c))
    }

    pub fn apply(&mut self, ev: GauntletEvent) {
        match ev {
            GauntletEvent::Calibrating { tier } => self.calibrating = Some(tier),
            GauntletEvent::CellStarted { sample, tier } => {
                self.calibrating = None;
                self.running = self.index(&sample, &tier);
            }
            GauntletEvent::CellDone(cell) => self.apply_cell(Box::new(CellView::new(*cell))),
            GauntletEvent::Finished(m) => {
                self.latency = m.latency;
                self.mismatches = Some(m.mismatches);
                self.running = None;
                self.calibrating = None;
                self.state = if self.state == GState::Cancelling { GState::Cancelled } else { GState::Finished };
            }
        }
    }

    /// A finished cell (its output heads already cut, e.g. off the UI thread).
    pub fn apply_cell(&mut self, cv: Box<CellView>) {
        if let Some((r, c)) = self.index(&cv.cell.sample, &cv.cell.tier) {
            self.cells[r][c] = Some(cv);
            if self.follow && !self.zoom {
                self.sel = (r, c);
            }
            if self.running == Some((r, c)) {
                self.running = None;
            }
        }
    }

    pub fn fail(&mut self, why: String) {
        self.error = Some(why);
        self.running = None;
        self.state = GState::Failed;
    }

    pub fn done(&self) -> usize {
        self.cells.iter().flatten().filter(|c| c.is_some()).count()
    }

    pub fn total(&self) -> usize {
        self.rows.len() * self.tiers.len()
    }

    /// Finished cells that differ from what their sample declares (a
    /// cancelled cell where nothing got out is not one).
    pub fn live_mismatches(&self) -> usize {
        self.cells.iter().flatten().flatten().filter(|c| c.cell.is_mismatch()).count()
    }

    /// Cells the cancel stopped before their end (no verdict).
    pub fn cancelled_cells(&self) -> usize {
        self.cells.iter().flatten().flatten().filter(|c| c.cancelled()).count()
    }

    pub fn selected(&self) -> Option<&CellView> {
        self.cells.get(self.sel.0)?.get(self.sel.1)?.as_deref()
    }

    /// `page`: rows of the matrix on screen.
    pub fn key(&mut self, k: Key, page: usize) -> Reply {
        let page = page.max(1) as isize;
        let Some(a) = k.action else { return Reply::Consumed };
        match a {
            Action::Up | Action::Down | Action::PageUp | Action::PageDown if self.zoom => {
                self.scroll.key(a);
            }
            Action::Up => self.move_sel(-1, 0),
            Action::Down => self.move_sel(1, 0),
            Action::Left => self.move_sel(0, -1),
            Action::Right => self.move_sel(0, 1),
            Action::PageUp => self.move_sel(-page, 0),
            Action::PageDown => self.move_sel(page, 0),
            Action::Accept => {
                self.zoom = !self.zoom;
                self.scroll.reset();
            }
            Action::Close if self.zoom => self.zoom = false,
            Action::Close => return Reply::Do(Intent::Close(None)),
            Action::Rerun => return Reply::Do(Intent::AskGauntlet),
            a => return Reply::Pass(a),
        }
        Reply::Consumed
    }

    pub fn move_sel(&mut self, dr: isize, dc: isize) {
        self.follow = false;
        let rows = self.rows.len().max(1) as isize;
        let cols = self.tiers.len().max(1) as isize;
        let r = (self.sel.0 as isize + dr).clamp(0, rows - 1) as usize;
        let c = (self.sel.1 as isize + dc).clamp(0, cols - 1) as usize;
        if (r, c) != self.sel {
            self.scroll.reset();
        }
        self.sel = (r, c);
    }
}

/// Replace the host's secret in what a cell keeps (the secret-env canary
/// may have caught a sample printing it: the verdict says so, the screen
/// must not show the value).
pub fn redact_secret(ev: &mut GauntletEvent, secret: &str) {
    if secret.is_empty() {
        return;
    }
    let fix = |c: &mut Cell| {
        for s in [&mut c.report.stdout, &mut c.report.stderr] {
            // Every spelling of the scrubber's table, not only the raw value.
            *s = crate::egress::redact(s, secret, "[the host's ANTHROPIC_API_KEY, redacted]");
        }
    };
    match ev {
        GauntletEvent::CellStarted { .. } | GauntletEvent::Calibrating { .. } => {}
        GauntletEvent::CellDone(c) => fix(c),
        GauntletEvent::Finished(m) => m.cells.iter_mut().for_each(fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_measure_shows_until_the_next_cell_starts() {
        let mut g = GauntletView::new(1, vec!["microvm".into()], vec![], &[], crate::gauntlet::default_limits());
        g.apply(GauntletEvent::Calibrating { tier: "microvm".into() });
        assert_eq!(g.calibrating.as_deref(), Some("microvm"));
        g.apply(GauntletEvent::CellStarted { sample: "hello".into(), tier: "microvm".into() });
        assert_eq!(g.calibrating, None);
    }

    #[test]
    fn head_is_bounded_and_clean() {
        let mut text = String::from("a\tb\x1b]52;c;AAAA\x07\rX\r\n");
        text.push_str(&"x".repeat(1000));
        text.push('\n');
        for i in 0..100 {
            text.push_str(&format!("line {i}\n"));
        }
        let h = Head::of(&text);
        assert_eq!(h.lines.len(), HEAD_LINES);
        assert_eq!(h.more, 102 - HEAD_LINES);
        assert_eq!(h.lines[0], "a   b␛]52;c;AAAA^G^MX");
        assert!(h.lines[1].starts_with(&"x".repeat(HEAD_COLS)) && h.lines[1].ends_with(" …+760"), "{}", h.lines[1]);
        for l in &h.lines {
            assert!(!l.chars().any(|c| c.is_control()), "{l:?}");
        }
        // A multi-byte character at the byte bound does not panic.
        let h = Head::of(&"é".repeat(HEAD_BYTES));
        assert_eq!(h.lines.len(), 1);
    }

    #[test]
    fn the_secret_is_redacted() {
        let sample = crate::samples::Sample::parse(
            std::path::Path::new("hostile/x.py"),
            "# name: x\n# tries: t\n# must: m\n# expect: *=ok\n".into(),
        )
        .unwrap();
        // The report `headless::report` makes, built here so the view's tests
        // don't reach up to the app's test driver.
        let mut r = crate::report::RunReport {
            outcome: crate::report::Outcome::Ok,
            error: None,
            ..crate::report::RunReport::failed("process", "python", "-", "")
        };
        r.stdout = "found: sk-secret-1 twice sk-secret-1 c2stc2VjcmV0LTE= &#115;&#107;-secret-1".into();
        let cell = crate::gauntlet::judge(&sample, "process", r, Default::default());
        let mut ev = GauntletEvent::CellDone(Box::new(cell));
        redact_secret(&mut ev, "sk-secret-1");
        let GauntletEvent::CellDone(c) = ev else { unreachable!() };
        assert!(!c.report.stdout.contains("sk-secret-1"), "{}", c.report.stdout);
        assert_eq!(c.report.stdout.matches("redacted").count(), 4, "{}", c.report.stdout);
    }
}
