//! The one keymap: input handling looks keys up here, and the help overlay
//! and the key bar are generated from the same table, so they never drift.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::editor::Move;

/// Where a binding applies. Lookups try the innermost context first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctx {
    Global,
    Editor,
    Output,
    Compare,
    Help,
    Samples,
    Limits,
    Prompt,
    Gauntlet,
    Agent,
    Runs,
    GauntletSetup,
}

impl Ctx {
    pub fn title(self) -> &'static str {
        match self {
            Ctx::Global => "Everywhere",
            Ctx::Editor => "Editor",
            Ctx::Output => "Output pane",
            Ctx::Compare => "Compare view",
            Ctx::Help => "Help",
            Ctx::Samples => "Samples picker",
            Ctx::Limits => "Limits form",
            Ctx::Prompt => "Save-as and search prompts",
            Ctx::Gauntlet => "Gauntlet view",
            Ctx::Agent => "Agent view",
            Ctx::Runs => "Runs view",
            Ctx::GauntletSetup => "Gauntlet set-up (r in the gauntlet view)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Help,
    Run,
    Compare,
    Cancel,
    ToggleView,
    Samples,
    Limits,
    NextTier,
    PrevTier,
    Save,
    FocusNext,
    /// Cycle the code's language (what the next run starts it with).
    NextLanguage,
    ThemeNext,
    Gauntlet,
    Agent,
    Runs,
    Rerun,
    /// Compare view: one round more / less, concurrent on or off.
    RepeatMore,
    RepeatLess,
    ToggleConcurrent,
    /// Compare view: latency histograms or the live columns.
    ToggleDist,
    /// Write the compare summary to a file in the current directory.
    Export(ExportFormat),
    /// Save the screen as an SVG picture in the current directory.
    SaveScreen,
    FilterOutcome,
    FilterTier,
    LoadRun,
    /// Gauntlet set-up: choose the item under the cursor, all of a list, the other list.
    Toggle,
    ToggleAll,
    NextList,
    // editor
    Move(Move),
    Select(Move),
    Undo,
    Redo,
    Copy,
    Cut,
    Paste,
    SelectAll,
    Backspace,
    Delete,
    Newline,
    Indent,
    Dedent,
    // output / lists / overlays
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    Left,
    Right,
    Follow,
    Accept,
    Close,
    Clear,
    Search,
    SearchNext,
    SearchPrev,
}

/// The formats the compare summary exports to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Markdown,
    Json,
    Csv,
}

impl ExportFormat {
    pub fn ext(self) -> &'static str {
        match self {
            ExportFormat::Markdown => "md",
            ExportFormat::Json => "json",
            ExportFormat::Csv => "csv",
        }
    }
}

pub struct Binding {
    pub ctx: Ctx,
    pub code: KeyCode,
    pub mods: KeyModifiers,
    pub action: Action,
    /// How the key is written in help and the key bar.
    pub key: &'static str,
    pub help: &'static str,
    /// Shown in the key bar (short label) when the context is active.
    pub bar: Option<&'static str>,
}

const NONE: KeyModifiers = KeyModifiers::NONE;
const CTRL: KeyModifiers = KeyModifiers::CONTROL;
const SHIFT: KeyModifiers = KeyModifiers::SHIFT;
const CTRL_SHIFT: KeyModifiers = KeyModifiers::CONTROL.union(KeyModifiers::SHIFT);
const ALT: KeyModifiers = KeyModifiers::ALT;

macro_rules! b {
    ($ctx:ident, $code:expr, $mods:expr, $action:expr, $key:literal, $help:literal) => {
        Binding { ctx: Ctx::$ctx, code: $code, mods: $mods, action: $action, key: $key, help: $help, bar: None }
    };
    ($ctx:ident, $code:expr, $mods:expr, $action:expr, $key:literal, $help:literal, $bar:literal) => {
        Binding { ctx: Ctx::$ctx, code: $code, mods: $mods, action: $action, key: $key, help: $help, bar: Some($bar) }
    };
}

use Action as A;
use KeyCode as K;

#[rustfmt::skip]
pub static BINDINGS: &[Binding] = &[
    b!(Global, K::F(1), NONE, A::Help, "F1", "show this help", "help"),
    b!(Global, K::F(2), NONE, A::Samples, "F2", "browse and load samples", "samples"),
    b!(Global, K::F(3), NONE, A::Limits, "F3", "edit the limits of the next run", "limits"),
    b!(Global, K::F(4), NONE, A::NextTier, "F4", "select the next tier", "tier"),
    b!(Global, K::F(4), SHIFT, A::PrevTier, "S-F4", "select the previous tier"),
    b!(Global, K::F(5), NONE, A::Run, "F5", "run the code on the selected tier", "run"),
    b!(Global, K::Char('r'), CTRL, A::Run, "^R", "run (same as F5)"),
    b!(Global, K::F(6), NONE, A::Compare, "F6", "compare: run on every available tier, one at a time, in rounds", "compare"),
    b!(Global, K::F(7), NONE, A::ToggleView, "F7", "switch between the editor and the compare view", "view"),
    b!(Global, K::F(8), NONE, A::Cancel, "F8", "cancel the running run(s), gauntlet or agent", "cancel"),
    b!(Global, K::F(9), NONE, A::Gauntlet, "F9", "gauntlet view; r there sets one up: its tiers and samples", "gauntlet"),
    b!(Global, K::F(10), NONE, A::Agent, "F10", "agent view: a model writes code, runs it on the selected tier", "agent"),
    b!(Global, K::F(11), NONE, A::Runs, "F11", "runs view: every run of every front end and process, live", "runs"),
    b!(Global, K::Char('w'), CTRL, A::FocusNext, "^W", "move focus: editor ↔ output"),
    b!(Global, K::Char('s'), CTRL, A::Save, "^S", "save the code (asks for a name the first time)"),
    b!(Global, K::Char('t'), CTRL, A::ThemeNext, "^T", "next built-in theme"),
    b!(Global, K::Char('l'), CTRL, A::NextLanguage, "^L", "next language for the code: python, sh, javascript"),
    b!(Global, K::Char('p'), CTRL, A::SaveScreen, "^P", "save the screen as an SVG picture in the current directory (docs, slides)"),
    b!(Global, K::Char('q'), CTRL, A::Quit, "^Q", "quit (cancels and cleans up running runs)", "quit"),
    b!(Global, K::Char('c'), CTRL, A::Cancel, "^C", "copy the selection; else cancel a run; else quit"),
    // Editor
    b!(Editor, K::Left, NONE, A::Move(Move::Left), "←", "cursor left"),
    b!(Editor, K::Right, NONE, A::Move(Move::Right), "→", "cursor right"),
    b!(Editor, K::Up, NONE, A::Move(Move::Up), "↑", "cursor up"),
    b!(Editor, K::Down, NONE, A::Move(Move::Down), "↓", "cursor down"),
    b!(Editor, K::Left, CTRL, A::Move(Move::WordLeft), "^←", "word left"),
    b!(Editor, K::Right, CTRL, A::Move(Move::WordRight), "^→", "word right"),
    b!(Editor, K::Home, NONE, A::Move(Move::Home), "Home", "start of line (first non-blank, then column 0)"),
    b!(Editor, K::End, NONE, A::Move(Move::End), "End", "end of line"),
    b!(Editor, K::PageUp, NONE, A::Move(Move::PageUp), "PgUp", "page up"),
    b!(Editor, K::PageDown, NONE, A::Move(Move::PageDown), "PgDn", "page down"),
    b!(Editor, K::Home, CTRL, A::Move(Move::Top), "^Home", "start of file"),
    b!(Editor, K::End, CTRL, A::Move(Move::Bottom), "^End", "end of file"),
    b!(Editor, K::Left, SHIFT, A::Select(Move::Left), "S-←", "select left"),
    b!(Editor, K::Right, SHIFT, A::Select(Move::Right), "S-→", "select right"),
    b!(Editor, K::Up, SHIFT, A::Select(Move::Up), "S-↑", "select up"),
    b!(Editor, K::Down, SHIFT, A::Select(Move::Down), "S-↓", "select down"),
    b!(Editor, K::Left, CTRL_SHIFT, A::Select(Move::WordLeft), "^S-←", "select word left"),
    b!(Editor, K::Right, CTRL_SHIFT, A::Select(Move::WordRight), "^S-→", "select word right"),
    b!(Editor, K::Home, SHIFT, A::Select(Move::Home), "S-Home", "select to line start"),
    b!(Editor, K::End, SHIFT, A::Select(Move::End), "S-End", "select to line end"),
    b!(Editor, K::PageUp, SHIFT, A::Select(Move::PageUp), "S-PgUp", "select page up"),
    b!(Editor, K::PageDown, SHIFT, A::Select(Move::PageDown), "S-PgDn", "select page down"),
    b!(Editor, K::Char('a'), CTRL, A::SelectAll, "^A", "select all"),
    b!(Editor, K::Char('z'), CTRL, A::Undo, "^Z", "undo"),
    b!(Editor, K::Char('y'), CTRL, A::Redo, "^Y", "redo"),
    b!(Editor, K::Char('z'), CTRL_SHIFT, A::Redo, "^S-Z", "redo"),
    b!(Editor, K::Char('c'), CTRL, A::Copy, "^C", "copy the selection"),
    b!(Editor, K::Char('x'), CTRL, A::Cut, "^X", "cut the selection (or the line)"),
    b!(Editor, K::Char('v'), CTRL, A::Paste, "^V", "paste (terminal paste works too)"),
    b!(Editor, K::Backspace, NONE, A::Backspace, "Bksp", "delete back (an indent at a time in leading spaces)"),
    b!(Editor, K::Delete, NONE, A::Delete, "Del", "delete forward"),
    b!(Editor, K::Enter, NONE, A::Newline, "Enter", "new line, keeping the indentation (one level more after a line ending in ':')"),
    b!(Editor, K::Tab, NONE, A::Indent, "Tab", "indent (4 spaces, or the selected lines)"),
    b!(Editor, K::BackTab, SHIFT, A::Dedent, "S-Tab", "dedent the line or the selected lines"),
    // Output
    b!(Output, K::Up, NONE, A::Up, "↑", "scroll up (stops following)"),
    b!(Output, K::Down, NONE, A::Down, "↓", "scroll down"),
    b!(Output, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(Output, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    b!(Output, K::Home, NONE, A::Top, "Home", "oldest kept line"),
    b!(Output, K::End, NONE, A::Bottom, "End", "newest line; follow again"),
    b!(Output, K::Left, NONE, A::Left, "←", "scroll left"),
    b!(Output, K::Right, NONE, A::Right, "→", "scroll right"),
    b!(Output, K::Char('f'), NONE, A::Follow, "f", "toggle follow mode", "follow"),
    b!(Output, K::Char('c'), NONE, A::Clear, "c", "clear the output pane"),
    b!(Output, K::Char('/'), NONE, A::Search, "/", "search the output (newest match first)", "search"),
    b!(Output, K::Char('n'), NONE, A::SearchNext, "n", "next (newer) match"),
    b!(Output, K::Char('N'), NONE, A::SearchPrev, "N", "previous (older) match"),
    // Compare
    b!(Compare, K::Char('r'), NONE, A::Rerun, "r", "compare again with the current rounds and mode", "rerun"),
    b!(Compare, K::Char('+'), NONE, A::RepeatMore, "+", "one round more for the next compare", "rounds"),
    b!(Compare, K::Char('-'), NONE, A::RepeatLess, "-", "one round less for the next compare", "fewer"),
    b!(Compare, K::Char('c'), NONE, A::ToggleConcurrent, "c", "next compare: all tiers of a round at once (skews timings) or one at a time"),
    b!(Compare, K::Char('d'), NONE, A::ToggleDist, "d", "show the latency histograms per tier or the live columns", "histograms"),
    b!(Compare, K::Left, NONE, A::Left, "←", "summary: scroll the columns left"),
    b!(Compare, K::Right, NONE, A::Right, "→", "summary: scroll the columns right"),
    b!(Compare, K::Char('m'), NONE, A::Export(ExportFormat::Markdown), "m", "export the summary as markdown (file in the current directory)", "export"),
    b!(Compare, K::Char('j'), NONE, A::Export(ExportFormat::Json), "j", "export the summary as JSON (file in the current directory)"),
    b!(Compare, K::Char('v'), NONE, A::Export(ExportFormat::Csv), "v", "export the summary as CSV (file in the current directory)"),
    b!(Compare, K::Esc, NONE, A::Close, "Esc", "back to the editor", "back"),
    // Gauntlet
    b!(Gauntlet, K::Up, NONE, A::Up, "↑", "previous sample (scroll up in zoomed details)"),
    b!(Gauntlet, K::Down, NONE, A::Down, "↓", "next sample (scroll down in zoomed details)"),
    b!(Gauntlet, K::Left, NONE, A::Left, "←", "previous tier"),
    b!(Gauntlet, K::Right, NONE, A::Right, "→", "next tier"),
    b!(Gauntlet, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(Gauntlet, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    b!(Gauntlet, K::Enter, NONE, A::Accept, "Enter", "zoom the selected cell's details in and out", "details"),
    b!(Gauntlet, K::Char('r'), NONE, A::Rerun, "r", "set up a gauntlet (again): choose its tiers and samples, then Enter", "run"),
    b!(Gauntlet, K::Esc, NONE, A::Close, "Esc", "unzoom; else back to the editor (a gauntlet keeps going)", "back"),
    // Agent
    b!(Agent, K::Enter, NONE, A::Accept, "Enter", "start the agent on the typed task", "start"),
    b!(Agent, K::Backspace, NONE, A::Backspace, "Bksp", "delete a character of the task"),
    b!(Agent, K::Up, NONE, A::Up, "↑", "scroll the transcript up (stops following)"),
    b!(Agent, K::Down, NONE, A::Down, "↓", "scroll the transcript down"),
    b!(Agent, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(Agent, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    b!(Agent, K::Home, NONE, A::Top, "Home", "start of the transcript"),
    b!(Agent, K::End, NONE, A::Bottom, "End", "end of the transcript; follow again"),
    b!(Agent, K::Esc, NONE, A::Close, "Esc", "back to the editor (a session keeps going)", "back"),
    // Runs
    b!(Runs, K::Up, NONE, A::Up, "↑", "previous run"),
    b!(Runs, K::Down, NONE, A::Down, "↓", "next run"),
    b!(Runs, K::PageUp, NONE, A::PageUp, "PgUp", "page up (scroll the details when open)"),
    b!(Runs, K::PageDown, NONE, A::PageDown, "PgDn", "page down (scroll the details when open)"),
    b!(Runs, K::Home, NONE, A::Top, "Home", "oldest run"),
    b!(Runs, K::End, NONE, A::Bottom, "End", "newest run; follow new runs again"),
    b!(Runs, K::Enter, NONE, A::Accept, "Enter", "open or close the run's code, verdict and output", "open"),
    b!(Runs, K::Char('o'), NONE, A::FilterOutcome, "o", "filter by outcome: all, violation, error, ok, cancelled", "outcome"),
    b!(Runs, K::Char('t'), NONE, A::FilterTier, "t", "filter by tier: all, then each tier in the log", "tier"),
    b!(Runs, K::Char('e'), NONE, A::LoadRun, "e", "load the run's code into the editor (then F4/F5/F6 re-run or compare it)", "edit"),
    b!(Runs, K::Esc, NONE, A::Close, "Esc", "close the details; else back to the editor", "back"),
    // Gauntlet set-up
    b!(GauntletSetup, K::Up, NONE, A::Up, "↑", "previous tier or sample"),
    b!(GauntletSetup, K::Down, NONE, A::Down, "↓", "next tier or sample"),
    b!(GauntletSetup, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(GauntletSetup, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    b!(GauntletSetup, K::Char(' '), NONE, A::Toggle, "Space", "choose or leave out the tier or sample under the cursor", "toggle"),
    b!(GauntletSetup, K::Char('a'), NONE, A::ToggleAll, "a", "all of the list (again: none)", "all"),
    b!(GauntletSetup, K::Tab, NONE, A::NextList, "Tab", "switch between the tiers and the samples", "tiers/samples"),
    b!(GauntletSetup, K::Char('/'), NONE, A::Search, "/", "filter the samples by name or what they try (Enter keeps it, Esc clears it)", "filter"),
    b!(GauntletSetup, K::Backspace, NONE, A::Backspace, "Bksp", "delete a character of the filter"),
    b!(GauntletSetup, K::Enter, NONE, A::Accept, "Enter", "run the chosen samples on the chosen tiers", "run"),
    b!(GauntletSetup, K::Esc, NONE, A::Close, "Esc", "close without running", "close"),
    // Help
    b!(Help, K::Esc, NONE, A::Close, "Esc", "close help", "close"),
    b!(Help, K::F(1), NONE, A::Close, "F1", "close help"),
    b!(Help, K::Up, NONE, A::Up, "↑", "scroll up"),
    b!(Help, K::Down, NONE, A::Down, "↓", "scroll down"),
    b!(Help, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(Help, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    // Samples
    b!(Samples, K::Up, NONE, A::Up, "↑", "previous sample"),
    b!(Samples, K::Down, NONE, A::Down, "↓", "next sample"),
    b!(Samples, K::PageUp, NONE, A::PageUp, "PgUp", "page up"),
    b!(Samples, K::PageDown, NONE, A::PageDown, "PgDn", "page down"),
    b!(Samples, K::Enter, NONE, A::Accept, "Enter", "load the sample into the editor", "load"),
    b!(Samples, K::Backspace, NONE, A::Backspace, "Bksp", "delete a character of the filter (type to filter by name or what it tries)"),
    b!(Samples, K::Esc, NONE, A::Close, "Esc", "close", "close"),
    // Limits
    b!(Limits, K::Up, NONE, A::Up, "↑", "previous field"),
    b!(Limits, K::Down, NONE, A::Down, "↓", "next field"),
    b!(Limits, K::Tab, NONE, A::Down, "Tab", "next field"),
    b!(Limits, K::BackTab, SHIFT, A::Up, "S-Tab", "previous field"),
    b!(Limits, K::Backspace, NONE, A::Backspace, "Bksp", "delete a character"),
    b!(Limits, K::Enter, NONE, A::Accept, "Enter", "apply (refused with a message if a value is invalid)", "apply"),
    b!(Limits, K::Esc, NONE, A::Close, "Esc", "discard changes", "discard"),
    // Prompt
    b!(Prompt, K::Backspace, NONE, A::Backspace, "Bksp", "delete a character"),
    b!(Prompt, K::Enter, NONE, A::Accept, "Enter", "save / search", "ok"),
    b!(Prompt, K::Esc, NONE, A::Close, "Esc", "cancel", "cancel"),
];

/// Modifiers that matter for matching: Shift is part of a typed character.
fn norm(k: &KeyEvent) -> (KeyCode, KeyModifiers) {
    let mods = k.modifiers & (CTRL | SHIFT | ALT);
    match k.code {
        KeyCode::Char(c) if mods.contains(CTRL) => {
            (KeyCode::Char(c.to_ascii_lowercase()), if c.is_ascii_uppercase() { mods | SHIFT } else { mods })
        }
        KeyCode::Char(c) => (KeyCode::Char(c), mods - SHIFT),
        KeyCode::BackTab => (KeyCode::BackTab, SHIFT),
        code => (code, mods),
    }
}

/// The action bound to `key` in the first of `ctxs` that binds it.
pub fn lookup(ctxs: &[Ctx], key: &KeyEvent) -> Option<Action> {
    let (code, mods) = norm(key);
    ctxs.iter()
        .find_map(|ctx| BINDINGS.iter().find(|b| b.ctx == *ctx && b.code == code && b.mods == mods).map(|b| b.action))
}

/// Key-bar entries for the active contexts: (key, label).
pub fn bar(ctxs: &[Ctx]) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = vec![];
    for ctx in ctxs {
        for b in BINDINGS.iter().filter(|b| b.ctx == *ctx) {
            if let Some(label) = b.bar {
                if !out.iter().any(|(k, _)| *k == b.key) {
                    out.push((b.key, label));
                }
            }
        }
    }
    out
}

/// Help text sections: (context title, [(key, help)]).
pub fn help_sections() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    let order = [
        Ctx::Global,
        Ctx::Editor,
        Ctx::Output,
        Ctx::Compare,
        Ctx::Gauntlet,
        Ctx::Agent,
        Ctx::Runs,
        Ctx::Samples,
        Ctx::Limits,
        Ctx::GauntletSetup,
        Ctx::Prompt,
        Ctx::Help,
    ];
    order
        .iter()
        .map(|ctx| (ctx.title(), BINDINGS.iter().filter(|b| b.ctx == *ctx).map(|b| (b.key, b.help)).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn no_binding_is_shadowed_within_a_context() {
        for (i, a) in BINDINGS.iter().enumerate() {
            for b in &BINDINGS[i + 1..] {
                assert!(!(a.ctx == b.ctx && a.code == b.code && a.mods == b.mods), "{:?} {} bound twice", a.ctx, a.key);
            }
        }
    }

    #[test]
    fn inner_context_wins_and_shift_is_normalised() {
        let ctrl_c = key(KeyCode::Char('c'), CTRL);
        assert_eq!(lookup(&[Ctx::Editor, Ctx::Global], &ctrl_c), Some(Action::Copy));
        assert_eq!(lookup(&[Ctx::Output, Ctx::Global], &ctrl_c), Some(Action::Cancel));
        assert_eq!(lookup(&[Ctx::Editor, Ctx::Global], &key(KeyCode::Char('Z'), CTRL | SHIFT)), Some(Action::Redo));
        assert_eq!(lookup(&[Ctx::Editor], &key(KeyCode::Char('A'), SHIFT)), None);
        assert_eq!(lookup(&[Ctx::Editor], &key(KeyCode::BackTab, NONE)), Some(Action::Dedent));
    }

    #[test]
    fn help_lists_every_binding() {
        let n: usize = help_sections().iter().map(|(_, v)| v.len()).sum();
        assert_eq!(n, BINDINGS.len());
    }
}
