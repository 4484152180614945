//! What one frame shows, lent to the widgets by the app: in a file of its
//! own, so the widgets that read it do not import the module that calls
//! them.

use std::collections::BTreeMap;

use crate::spec::{Language, Limits};
use crate::tui::agent_view::AgentView;
use crate::tui::compare_view::{CompareRun, CompareView};
use crate::tui::editor::Editor;
use crate::tui::gauntlet_view::GauntletView;
use crate::tui::highlight::Highlighter;
use crate::tui::keymap::Ctx;
use crate::tui::output_pane::OutputPane;
use crate::tui::overlays::Overlay;
use crate::tui::run_view::RunView;
use crate::tui::runs_view::RunsView;
use crate::tui::theme::Theme;
use crate::tui::types::{Focus, Frontier, Status, TierEntry, View};

/// What one frame shows, read-only: the views and the facts the app
/// derives for them (the key bar's contexts, the output's first line, the
/// frontier). The app lends it (`App::scene`); nothing here can change it.
pub struct Scene<'a> {
    pub theme: &'a Theme,
    pub view: View,
    pub focus: Focus,
    pub overlay: Option<&'a Overlay>,
    pub status: Option<&'a Status>,
    pub editor: &'a Editor,
    pub highlighter: Option<&'a Highlighter>,
    pub label: &'a str,
    pub language: Language,
    pub tiers: &'a [TierEntry],
    /// The selected tier's index in `tiers`.
    pub tier: usize,
    pub limits: &'a Limits,
    pub secrets: &'a [String],
    pub runs: &'a BTreeMap<u64, RunView>,
    /// The run the output and resources panes show.
    pub current: Option<u64>,
    pub output: &'a OutputPane,
    /// Absolute index of the first line the output pane shows.
    pub output_top: u64,
    /// The runs the compare columns show.
    pub compare: &'a [u64],
    pub compare_run: Option<&'a CompareRun>,
    pub compare_view: &'a CompareView,
    pub gauntlet: Option<&'a GauntletView>,
    /// The safety × latency chart, on the views that draw it.
    pub frontier: Option<Frontier>,
    pub agent: &'a AgentView,
    pub api_key_set: bool,
    pub runs_log: &'a RunsView,
    /// A run, a gauntlet or an agent session is going.
    pub busy: bool,
    /// Active keymap contexts, innermost first.
    pub contexts: Vec<Ctx>,
}

impl Scene<'_> {
    pub fn selected_tier(&self) -> &TierEntry {
        &self.tiers[self.tier]
    }

    pub fn current_run(&self) -> Option<&RunView> {
        self.current.and_then(|id| self.runs.get(&id))
    }
}
