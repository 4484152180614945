//! Plain types the views, widgets and the app share, at the bottom of the
//! TUI's layers: they import nothing of the TUI, so any module may name them
//! without tying itself to the app.

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
