//! Plain types the views, widgets and the app share, at the bottom of the
//! TUI's layers: they import nothing of the TUI, so any module may name them
//! without tying itself to the app.

use std::time::Instant;

use ratatui::layout::Rect;

use crate::tier::Availability;

/// How loud a status line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// The safety × latency chart's data and where it comes from.
#[derive(Debug, Clone)]
pub struct Frontier {
    pub points: Vec<sandbench_core::frontier::Point>,
    /// Tiers without a point, and why.
    pub missing: Vec<(String, String)>,
    /// Which gauntlet the shares come from, its size and state.
    pub gauntlet: String,
    /// What the compare ran, when points take their latency from it.
    pub compare_program: Option<String>,
}

#[derive(Debug, Clone)]
pub struct TierEntry {
    pub name: String,
    /// `None` while the probe runs.
    pub avail: Option<Availability>,
    /// What it holds warm now ("2 of 2 warm container(s) ready").
    pub warm: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Editor,
    Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Single,
    Compare,
    Gauntlet,
    Agent,
    Runs,
}

#[derive(Debug, Clone)]
pub struct Status {
    pub text: String,
    pub level: Level,
    pub at: Instant,
}

/// Screen areas from the last layout (for paging and scrolling).
#[derive(Debug, Clone, Copy, Default)]
pub struct Areas {
    pub editor: Rect,
    pub output: Rect,
    /// Rows of the gauntlet matrix and of the details pane / the agent transcript.
    pub list_rows: u16,
    pub detail_rows: u16,
}
