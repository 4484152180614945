//! How the workbench's views and overlays answer keys (gitui's component
//! pattern). Each view owns its state and handles the keys of its keymap
//! context, answering with a [`Reply`]: handled; not mine (the global keys
//! get it); a status line; or something only the coordinator can do, an
//! [`Intent`] (start a run, load a sample, apply limits…). `App` routes each
//! key to the innermost context and carries out intents: it never reaches
//! into a view's key handling, and a view never starts work itself.

use std::path::PathBuf;

use super::keymap::{Action, ExportFormat};
use super::types::Level;
use crate::samples::Sample;
use crate::spec::Limits;

/// One key as the views see it: the keymap's action for the active
/// contexts, and the character typed (for text fields), if any.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub action: Option<Action>,
    pub typed: Option<char>,
}

#[derive(Debug)]
pub enum Reply {
    /// The view handled it.
    Consumed,
    /// Not this view's key: the global bindings get it.
    Pass(Action),
    /// Handled; show this in the status line.
    Say(Level, String),
    /// Ask the coordinator.
    Do(Intent),
}

impl Reply {
    /// Pass an unhandled action on; no action (an unbound key) is consumed.
    pub fn pass(action: Option<Action>) -> Reply {
        action.map_or(Reply::Consumed, Reply::Pass)
    }

    pub fn info(text: impl Into<String>) -> Reply {
        Reply::Say(Level::Info, text.into())
    }
}

/// What a view asks of the coordinator.
#[derive(Debug)]
pub enum Intent {
    /// Close the overlay, or go back from a view to the editor; with a
    /// status line to show.
    Close(Option<String>),
    /// The limits form's values, already checked against the tier.
    /// The limits and the secrets (names) of the next run.
    ApplyLimits(Limits, Vec<String>),
    /// Put the sample in the editor (the picker has asked about unsaved edits).
    LoadSample(Box<Sample>),
    SaveTo(PathBuf),
    /// Search the output for this text (from the newest line back).
    Search(String),
    /// Open the search prompt over the output pane.
    OpenSearch,
    /// Stop showing the finished run in the output pane.
    ClearRun,
    /// Run the compare again.
    Compare,
    ExportCompare(ExportFormat),
    /// `d` in the compare view: the histograms or the live columns.
    ToggleDist,
    /// `r` in the gauntlet view: choose its tiers and samples first.
    AskGauntlet,
    /// The gauntlet's set-up accepted: these samples on these tiers.
    StartGauntlet {
        tiers: Vec<String>,
        samples: Vec<Sample>,
    },
    /// Enter in the agent view: start a session with the typed task.
    StartAgent,
    /// Put the selected logged run's code in the editor.
    LoadRun,
}
