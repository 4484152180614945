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
