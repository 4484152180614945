//! The app's inputs (`Msg`) and outputs (`Effect`): the one vocabulary the
//! event loop, the engine, the run views and the app speak. Kept out of
//! `app` so that `run_view` can build `Msg`s without importing the app.

use std::sync::Arc;

use ratatui::crossterm::event::KeyEvent;

use super::highlight::SyntaxAssets;
use crate::event::RunEvent;
use crate::samples::Sample;
use crate::spec::{Limits, RunSpec};
use crate::tier::Availability;

/// Everything that reaches the app.
#[derive(Debug)]
pub enum Msg {
    Key(KeyEvent),
    Paste(String),
    Run(u64, RunEvent),
    /// A run's report: the last message about it.
    Finished(u64, Box<crate::report::RunReport>),
    /// Output of a run, already sanitized off the UI thread.
    Lines {
        id: u64,
        at_ms: f64,
        stream: crate::event::Stream,
        lines: Vec<crate::tui::sanitize::StyledLine>,
        partial: crate::tui::sanitize::StyledLine,
        bytes: u64,
    },
    Probed(Availability),
    Assets(Arc<SyntaxAssets>),
    /// An event of the gauntlet with this id.
    Gauntlet(u64, crate::gauntlet::GauntletEvent),
    /// A finished cell of the gauntlet with this id, its output already cut
    /// to bounded heads off the UI thread (the event loop's form of `CellDone`).
    GauntletCell(u64, Box<super::gauntlet_view::CellView>),
    /// The gauntlet with this id ended without its `Finished` (the engine failed).
    GauntletFailed(u64, String),
    /// An event of the agent session with this id.
    Agent(u64, crate::agent::TranscriptEvent),
    /// The gauntlet kept from an earlier session (the frontier shows it),
    /// and when it was saved (seconds since 1970).
    SavedGauntlet(Box<crate::gauntlet::Matrix>, u64),
    /// What a tier holds warm now (its spare sandbox or pool), when it changed.
    Warm(String, Option<String>),
    /// New entries of the run log (from any sandbench process).
    LogEntries(Vec<crate::runlog::Entry>),
    /// SIGTERM / SIGHUP / SIGINT: quit now (runs are cancelled and cleaned up).
    Terminate,
}

impl std::fmt::Debug for SyntaxAssets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyntaxAssets")
    }
}

/// What the app asks the event loop to do.
#[derive(Debug, Clone)]
pub enum Effect {
    Start {
        id: u64,
        tier: String,
        spec: RunSpec,
    },
    /// Cancel the run, gauntlet or agent session with this id.
    Cancel(u64),
    /// Run the gauntlet: `samples` on `tiers` (ready ones), one cell at a time.
    Gauntlet {
        id: u64,
        tiers: Vec<String>,
        skipped: Vec<(String, String)>,
        samples: Vec<Sample>,
        limits: Limits,
    },
    /// Warm this tier (a spare, a pool, a guest) for the runs to come.
    Prewarm(String),
    /// Probe this tier again now (it was unavailable, or a run on it could
    /// not build its sandbox): what the tier list shows follows.
    Probe(String),
    /// Start an agent session on `tier` with `limits`.
    Agent {
        id: u64,
        tier: String,
        limits: Limits,
        task: String,
    },
}
