//! The workbench state and everything it does in answer to keys and run
//! events. No terminal here: the event loop (or a test) feeds `Msg`s in,
//! takes `Effect`s (start / cancel a run) out, and draws with `widgets::draw`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::Rect;

use super::agent_view::AgentView;
use super::compare_view::{CompareRun, CompareView};
use super::editor::Editor;
use super::gauntlet_view::{GState, GauntletView};
use super::highlight::{Highlighter, SyntaxAssets};
use super::keymap::{self, Action, Ctx, ExportFormat};
pub use super::msg::{Effect, Msg};

/// How often a run's error may make the workbench probe its tier again.
const REPROBE_AFTER_ERROR: std::time::Duration = std::time::Duration::from_secs(30);
use super::output_pane::OutputPane;
pub use super::overlays::Overlay;
use super::overlays::{GauntletSetup, Help, LimitsForm, Prompt, PromptKind, SamplesPicker};
use super::run_view::RunView;
use super::runs_view::RunsView;
use super::theme::Theme;
pub use super::types::{Areas, Focus, Level, Status, TierEntry, View};
use super::view::{Intent, Key, Reply};
use super::widgets::{self, Scene};
use crate::samples::{self, Sample};
use crate::spec::{Language, Limits, RunSpec};

// Plain data the widgets draw; named here as before.
pub use super::types::Frontier;

/// What goes with an editor text besides the text: undo brings it back.
#[derive(Debug, Clone)]
struct DocIdentity {
    path: Option<PathBuf>,
    label: String,
    language: Language,
}

pub struct App {
    pub theme: Theme,
    pub editor: Editor,
    pub path: Option<PathBuf>,
    pub language: Language,
    pub label: String,
    assets: Option<Arc<SyntaxAssets>>,
    pub highlighter: Option<Highlighter>,
    pub tiers: Vec<TierEntry>,
    pub tier: usize,
    pub limits: Limits,
    pub runs: BTreeMap<u64, RunView>,
    /// The run the output and resources panes show.
    pub current: Option<u64>,
    /// The runs the compare columns show: the latest of each tier.
    pub compare: Vec<u64>,
    /// The last (or running) compare: its schedule and reports.
    pub compare_run: Option<CompareRun>,
    /// Rounds, mode and scrolling of the compare view.
    pub compare_view: CompareView,
    /// Where exports and screenshots are written (the current directory).
    pub export_dir: PathBuf,
    /// ^P: the event loop saves the next drawn screen as SVG (`save_screen`).
    pub screenshot_wanted: bool,
    /// The sample the picker showed last: F2 opens on it again.
    samples_pos: Option<String>,
    next_id: u64,
    pub focus: Focus,
    pub view: View,
    pub overlay: Option<Overlay>,
    /// The output pane's scrolling and search.
    pub output: OutputPane,
    pub status: Option<Status>,
    clipboard: String,
    pub samples_dirs: Vec<PathBuf>,
    effects: Vec<Effect>,
    /// Quit asked for; the loop ends once no run is active.
    pub quitting: bool,
    quit_armed: bool,
    /// The tiers chosen for the last gauntlet and the samples left out of
    /// it: the next set-up starts from them (a sample new since is chosen).
    gauntlet_choice: Option<(Vec<String>, Vec<String>)>,
    /// Identities of the documents the editor has held, by `Editor::doc` id.
    docs: Vec<DocIdentity>,
    /// Tiers already asked to warm up (each is asked once).
    prewarmed: std::collections::HashSet<String>,
    /// When each tier was last probed again because a run on it could not
    /// be made (at most once a [`REPROBE_AFTER_ERROR`]).
    reprobed: HashMap<String, std::time::Instant>,
    /// Something changed since the last draw.
    pub dirty: bool,
    pub areas: Areas,
    /// Run clocks follow the wall clock (tests turn this off).
    pub live_clock: bool,
    /// The last (or running) gauntlet.
    pub gauntlet: Option<GauntletView>,
    /// The gauntlet of an earlier session, until this one runs its own, and
    /// when it was saved (seconds since 1970).
    pub saved_gauntlet: Option<(Box<crate::gauntlet::Matrix>, u64)>,
    pub agent: AgentView,
    /// The run log as the runs view shows it (F11).
    pub runs_log: RunsView,
    /// ANTHROPIC_API_KEY is in sandbench's environment (from the config,
    /// which read it at start): the agent needs it.
    pub api_key_set: bool,
    /// The operator's `[secrets.NAME]` declarations (the config's); the
    /// limits form (F3) picks among them by name.
    pub offered_secrets: BTreeMap<String, crate::egress::secrets::SecretConfig>,
    /// The secrets the next run gets (names; values read when it starts).
    pub secrets: Vec<String>,
}

impl App {
    pub fn new(theme: Theme, tiers: &[&str], default_tier: &str, limits: Limits) -> App {
        let tiers: Vec<TierEntry> =
            tiers.iter().map(|n| TierEntry { name: n.to_string(), avail: None, warm: None }).collect();
        let tier = tiers.iter().position(|t| t.name == default_tier).unwrap_or(0);
        App {
            theme,
            editor: Editor::new("print(\"hello from the sandbox\")\n"),
            path: None,
            language: Language::Python,
            label: "untitled.py".into(),
            assets: None,
            highlighter: None,
            tiers,
            tier,
            limits,
            runs: BTreeMap::new(),
            current: None,
            compare: vec![],
            compare_run: None,
            compare_view: CompareView::default(),
            export_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            screenshot_wanted: false,
            samples_pos: None,
            next_id: 1,
            focus: Focus::Editor,
            view: View::Single,
            overlay: None,
            output: OutputPane::default(),
            status: None,
            clipboard: String::new(),
            samples_dirs: default_samples_dirs(None),
            effects: vec![],
            quitting: false,
            quit_armed: false,
            gauntlet_choice: None,
            docs: vec![],
            prewarmed: Default::default(),
            reprobed: Default::default(),
            dirty: true,
            areas: Areas::default(),
            live_clock: true,
            gauntlet: None,
            saved_gauntlet: None,
            agent: AgentView::new(),
            runs_log: RunsView::default(),
            api_key_set: false,
            offered_secrets: Default::default(),
            secrets: vec![],
        }
    }

    /// Open a file: its text, or an empty buffer that saves there when it does not exist yet.
    pub fn open(&mut self, path: &Path) -> anyhow::Result<()> {
        let text = match std::fs::read(path) {
            Ok(b) => String::from_utf8(b).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        };
        self.editor = Editor::new(&text);
        self.set_language(Language::from_path(path).unwrap_or(Language::Python));
        self.path = Some(path.to_path_buf());
        self.label = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "-".into());
        Ok(())
    }

    fn set_language(&mut self, l: Language) {
        self.language = l;
        if let Some(h) = &mut self.highlighter {
            h.set_language(l);
        }
    }

    pub fn selected_tier(&self) -> &TierEntry {
        &self.tiers[self.tier]
    }

    pub fn current_run(&self) -> Option<&RunView> {
        self.current.and_then(|id| self.runs.get(&id))
    }

    pub fn active_runs(&self) -> Vec<u64> {
        self.runs.values().filter(|r| !r.finished()).map(|r| r.id).collect()
    }

    /// A run, a gauntlet or an agent session is going.
    pub fn busy(&self) -> bool {
        !self.active_runs().is_empty() || self.gauntlet.as_ref().is_some_and(|g| g.active()) || self.agent.running
    }

    /// What is going, for "F8 cancels it" messages.
    fn busy_with(&self) -> &'static str {
        if self.gauntlet.as_ref().is_some_and(|g| g.active()) {
            "a gauntlet is going"
        } else if self.agent.running {
            "an agent session is going"
        } else {
            "a run is going"
        }
    }

    /// The loop may stop: quit was asked for and nothing runs any more.
    pub fn should_exit(&self) -> bool {
        self.quitting && !self.busy()
    }

    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    pub fn say(&mut self, level: Level, text: impl Into<String>) {
        self.status = Some(Status { text: text.into(), level, at: Instant::now() });
        self.dirty = true;
    }

    /// Active keymap contexts, innermost first.
    pub fn contexts(&self) -> Vec<Ctx> {
        let inner = match &self.overlay {
            Some(o) => o.ctx(),
            None if self.view == View::Compare => Ctx::Compare,
            None if self.view == View::Gauntlet => Ctx::Gauntlet,
            None if self.view == View::Agent => Ctx::Agent,
            None if self.view == View::Runs => Ctx::Runs,
            None if self.focus == Focus::Output => Ctx::Output,
            None => Ctx::Editor,
        };
        vec![inner, Ctx::Global]
    }

    pub fn update(&mut self, msg: Msg) {
        self.dirty = true;
        // A message said in one view is about that view: leaving it, or
        // opening a dialog over it, clears it (the ^Q warning under the ^S
        // prompt said "^Q again quits" about a screen no longer shown).
        let (view, overlay, t0) = (self.view, self.overlay.as_ref().map(Overlay::ctx), Instant::now());
        self.handle(msg);
        let opened = self.overlay.as_ref().map(Overlay::ctx).is_some_and(|c| Some(c) != overlay);
        if (self.view != view || opened) && self.status.as_ref().is_some_and(|s| s.at < t0) {
            self.status = None;
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Key(k) => self.on_key(k),
            Msg::Paste(s) => self.on_paste(&s),
            Msg::Run(id, ev) => {
                if let Some(r) = self.runs.get_mut(&id) {
                    r.apply(ev);
                }
            }
            Msg::Finished(id, report) => self.on_run_finished(id, report),
            Msg::Lines { id, at_ms, stream, lines, partial, bytes } => {
                if let Some(r) = self.runs.get_mut(&id) {
                    r.apply_lines(at_ms, stream, lines, partial, bytes);
                }
            }
            Msg::Probed(a) => {
                if let Some(t) = self.tiers.iter_mut().find(|t| t.name == a.tier) {
                    let was_down = t.avail.as_ref().is_some_and(|old| !old.available);
                    if was_down && a.available {
                        let m = format!("{} is available now", t.name);
                        t.avail = Some(a);
                        self.say(Level::Info, m);
                    } else {
                        t.avail = Some(a);
                    }
                }
                self.prewarm_selected();
            }
            Msg::Assets(a) => {
                self.highlighter = Some(Highlighter::new(a.clone(), &self.theme.syntax, self.language));
                self.assets = Some(a);
            }
            Msg::Terminate => self.quit(true),
            Msg::SavedGauntlet(m, at) => self.saved_gauntlet = Some((m, at)),
            Msg::Warm(tier, what) => {
                if let Some(t) = self.tiers.iter_mut().find(|t| t.name == tier) {
                    t.warm = what;
                }
            }
            Msg::LogEntries(entries) => self.runs_log.add(entries),
            Msg::Gauntlet(id, ev) => self.on_gauntlet_event(id, ev),
            Msg::GauntletCell(id, cv) => {
                if let Some(g) = self.gauntlet.as_mut().filter(|g| g.id == id) {
                    g.apply_cell(cv);
                }
            }
            Msg::GauntletFailed(id, why) => {
                if let Some(g) = self.gauntlet.as_mut().filter(|g| g.id == id && g.active()) {
                    g.fail(why.clone());
                    self.say(Level::Error, format!("the gauntlet failed: {why}"));
                }
            }
            Msg::Agent(id, ev) => {
                if self.agent.id == Some(id) {
                    let end = match &ev {
                        crate::agent::TranscriptEvent::Finished { reason, turns, error, .. } => {
                            Some((*reason, *turns, error.clone()))
                        }
                        _ => None,
                    };
                    self.agent.apply(ev);
                    if let Some((reason, turns, error)) = end {
                        use crate::agent::EndReason;
                        match reason {
                            EndReason::FinalAnswer => {
                                self.say(Level::Info, format!("agent: final answer after {turns} turn(s)"))
                            }
                            EndReason::TurnLimit => {
                                self.say(Level::Warn, format!("agent: turn limit ({turns}) reached"))
                            }
                            EndReason::Cancelled => self.say(Level::Info, "agent session cancelled"),
                            EndReason::Error => self.say(
                                Level::Error,
                                format!(
                                    "agent: {}",
                                    crate::sanitize::visible_controls(error.unwrap_or_default().as_bytes())
                                ),
                            ),
                        }
                    }
                }
            }
        }
    }

    fn on_gauntlet_event(&mut self, id: u64, ev: crate::gauntlet::GauntletEvent) {
        let Some(g) = self.gauntlet.as_mut().filter(|g| g.id == id) else {
            return;
        };
        let finished = matches!(ev, crate::gauntlet::GauntletEvent::Finished(_));
        g.apply(ev);
        if finished {
            let (done, total, bad, stopped) = (g.done(), g.total(), g.live_mismatches(), g.cancelled_cells());
            let cancelled = g.state == GState::Cancelled;
            let judged =
                if bad == 0 { "all as declared".to_string() } else { format!("{bad} differ from what they declare") };
            let msg = if cancelled {
                format!(
                    "gauntlet CANCELLED: {done} of {total} cells ran ({stopped} stopped without a verdict); of the rest {judged}"
                )
            } else {
                format!("gauntlet finished: {done}/{total} cells, {judged}")
            };
            self.say(if bad == 0 && !cancelled { Level::Info } else { Level::Warn }, msg);
        }
    }

    fn on_run_finished(&mut self, id: u64, report: Box<crate::report::RunReport>) {
        let Some(run) = self.runs.get_mut(&id) else {
            return;
        };
        run.finish(report);
        let line = run.report.as_ref().map(|r| format!("{}: {}", r.tier, r.summary_line())).unwrap_or_default();
        let bad = run.report.as_ref().is_some_and(|r| r.error.is_some());
        // A run whose sandbox could not be made may mean the tier went away
        // (its engine stopped, its runtime removed): probe it again, so the
        // tier list says what is true now. Not more than once in a while: a
        // probe builds a sandbox too.
        if let Some(r) = run.report.as_ref().filter(|r| r.outcome == crate::report::Outcome::Error) {
            let due = self.reprobed.get(&r.tier).is_none_or(|t| t.elapsed() >= REPROBE_AFTER_ERROR);
            if due && self.tiers.iter().any(|t| t.name == r.tier) {
                self.reprobed.insert(r.tier.clone(), std::time::Instant::now());
                self.effects.push(Effect::Probe(r.tier.clone()));
            }
        }
        if self.compare.contains(&id) {
            if let (Some(c), Some(rep)) = (self.compare_run.as_mut(), run.report.as_ref()) {
                c.record(rep);
                if rep.outcome == crate::report::Outcome::Cancelled {
                    c.stopped = true;
                    c.queue.clear();
                }
            }
            if self.compare.iter().all(|c| self.runs.get(c).is_none_or(|r| r.finished())) {
                self.advance_compare();
            }
        } else {
            self.say(if bad { Level::Error } else { Level::Info }, line);
        }
    }

    fn on_paste(&mut self, s: &str) {
        match &mut self.overlay {
            Some(o) => o.paste(s),
            None if self.view == View::Agent && !self.agent.running => {
                self.agent.input.push_str(s.lines().next().unwrap_or(""))
            }
            None if self.view == View::Single && self.focus == Focus::Editor => self.editor.insert_str(s),
            None => {}
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        let ctxs = self.contexts();
        let action = keymap::lookup(&ctxs, &key);
        if !matches!(action, Some(Action::Quit)) {
            self.quit_armed = false;
        }
        let typed = match key.code {
            ratatui::crossterm::event::KeyCode::Char(c)
                if !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) =>
            {
                Some(c)
            }
            _ => None,
        };
        let k = Key { action, typed };
        let reply = match ctxs[0] {
            Ctx::Help | Ctx::Samples | Ctx::Limits | Ctx::Prompt | Ctx::GauntletSetup => {
                let unsaved = self.editor.modified();
                match self.overlay.as_mut() {
                    Some(Overlay::Help(h)) => h.key(k),
                    Some(Overlay::Samples(p)) => p.key(k, unsaved),
                    Some(Overlay::Limits(f)) => f.key(k),
                    Some(Overlay::Prompt(p)) => p.key(k),
                    Some(Overlay::GauntletSetup(s)) => s.key(k),
                    None => Reply::Consumed,
                }
            }
            Ctx::Compare => self.compare_view.key(k),
            Ctx::Gauntlet => match self.gauntlet.as_mut() {
                Some(g) => g.key(k, self.areas.list_rows as usize),
                None => match action {
                    Some(Action::Close) => Reply::Do(Intent::Close(None)),
                    Some(Action::Rerun) => Reply::Do(Intent::AskGauntlet),
                    a => Reply::pass(a),
                },
            },
            Ctx::Agent => {
                let rows = self.agent_rows();
                self.agent.key(k, rows)
            }
            Ctx::Runs => self.runs_log.key(k, self.areas.list_rows as usize),
            Ctx::Output => {
                let rows = self.output_rows();
                let run = self.current.and_then(|id| self.runs.get(&id));
                self.output.key(k, run, rows)
            }
            Ctx::Editor | Ctx::Global => match (action, typed) {
                (Some(a), _) => return self.editor_key(a),
                (None, Some(c)) => {
                    self.editor.insert_char(c);
                    Reply::Consumed
                }
                (None, None) => Reply::Consumed,
            },
        };
        self.reply(reply);
        if let Some(Overlay::Samples(p)) = &self.overlay {
            if let Some((_, s)) = p.current() {
                self.samples_pos = Some(s.name.clone());
            }
        }
    }

    /// Carry out a view's answer to a key.
    fn reply(&mut self, r: Reply) {
        match r {
            Reply::Consumed => {}
            Reply::Pass(a) => self.global(a),
            Reply::Say(level, text) => self.say(level, text),
            Reply::Do(i) => self.intent(i),
        }
    }

    fn intent(&mut self, i: Intent) {
        match i {
            Intent::Close(msg) => {
                if self.overlay.take().is_none() {
                    self.view = View::Single;
                }
                if let Some(m) = msg {
                    self.say(Level::Info, m);
                }
            }
            Intent::ApplyLimits(l, secrets) => {
                self.limits = l;
                self.secrets = secrets;
                self.overlay = None;
                self.say(Level::Info, "limits set for the next run");
            }
            Intent::LoadSample(s) => {
                self.samples_pos = Some(s.name.clone());
                self.overlay = None;
                self.load_sample(&s);
            }
            Intent::SaveTo(p) => {
                self.overlay = None;
                self.write_to(&p);
            }
            Intent::Search(q) => {
                self.overlay = None;
                let rows = self.output_rows();
                let run = self.current.and_then(|id| self.runs.get(&id));
                let r = self.output.search(q, run, rows);
                self.reply(r);
            }
            Intent::OpenSearch => {
                let input = self.output.search.clone().unwrap_or_default();
                self.overlay = Some(Overlay::Prompt(Prompt { kind: PromptKind::Search, input }));
            }
            Intent::ClearRun => {
                if let Some(r) = self.current.and_then(|id| self.runs.get(&id)) {
                    if r.finished() {
                        self.current = None;
                    } else {
                        self.say(Level::Info, "the run is still going");
                    }
                }
            }
            Intent::Compare => self.compare(),
            Intent::ExportCompare(f) => self.export_compare(f),
            Intent::ToggleDist => {
                let live = !self.active_runs().is_empty();
                if let Some(c) = self.compare_run.as_mut() {
                    let live = live || !c.queue.is_empty();
                    c.toggle_dist(live);
                }
            }
            Intent::AskGauntlet => self.ask_gauntlet(),
            Intent::StartGauntlet { tiers, samples } => {
                self.overlay = None;
                self.start_gauntlet(tiers, samples);
            }
            Intent::StartAgent => self.start_agent(),
            Intent::LoadRun => self.load_run(),
        }
    }

    fn global(&mut self, a: Action) {
        match a {
            Action::Quit => self.quit(false),
            Action::Help => self.overlay = Some(Overlay::Help(Help::default())),
            Action::Run => self.run(),
            Action::Compare => self.compare(),
            Action::Cancel if !self.cancel_all() => self.quit(false),
            Action::Gauntlet => self.open_gauntlet(),
            Action::Agent => {
                self.view = View::Agent;
                self.overlay = None;
            }
            Action::Runs => {
                self.view = View::Runs;
                self.overlay = None;
            }
            Action::ToggleView => {
                self.view = match self.view {
                    View::Single if !self.compare.is_empty() => View::Compare,
                    View::Single => {
                        self.say(Level::Info, "no compare yet: F6 runs the code on every available tier");
                        View::Single
                    }
                    View::Compare | View::Gauntlet | View::Agent | View::Runs => View::Single,
                }
            }
            Action::Samples => self.open_samples(),
            Action::Limits => {
                let tier = self.tiers.get(self.tier).map_or("", |t| t.name.as_str());
                let offered: Vec<String> = self.offered_secrets.keys().cloned().collect();
                self.overlay =
                    Some(Overlay::Limits(LimitsForm::new(&self.limits, tier).with_secrets(&self.secrets, offered)));
            }
            Action::NextTier => {
                self.tier = (self.tier + 1) % self.tiers.len().max(1);
                self.prewarm_selected();
            }
            Action::PrevTier => {
                self.tier = (self.tier + self.tiers.len().max(1) - 1) % self.tiers.len().max(1);
                self.prewarm_selected();
            }
            Action::NextLanguage => {
                let all = Language::ALL;
                let next = all[(all.iter().position(|l| *l == self.language).unwrap_or(0) + 1) % all.len()];
                self.set_language(next);
                self.say(Level::Info, format!("language: {next} (the next run starts the code with it)"));
            }
            Action::Save => self.save(),
            Action::SaveScreen => self.screenshot_wanted = true,
            Action::FocusNext => {
                self.view = View::Single;
                self.focus = match self.focus {
                    Focus::Editor => Focus::Output,
                    Focus::Output => Focus::Editor,
                }
            }
            Action::ThemeNext => {
                let names = Theme::builtin_names();
                let i = names.iter().position(|n| *n == self.theme.name).map_or(0, |i| (i + 1) % names.len());
                if let Ok(t) = Theme::load(names[i]) {
                    self.set_theme(t);
                }
            }
            _ => {}
        }
    }

    pub fn set_theme(&mut self, t: Theme) {
        if let Some(a) = &self.assets {
            self.highlighter = Some(Highlighter::new(a.clone(), &t.syntax, self.language));
        }
        self.say(Level::Info, format!("theme {}", t.name));
        self.theme = t;
    }

    fn editor_key(&mut self, a: Action) {
        let e = &mut self.editor;
        match a {
            Action::Move(m) => e.move_cursor(m, false),
            Action::Select(m) => e.move_cursor(m, true),
            Action::Undo | Action::Redo => {
                let before = e.doc();
                let done = if a == Action::Undo { e.undo() } else { e.redo() };
                if !done {
                    let what = if a == Action::Undo { "undo" } else { "redo" };
                    return self.say(Level::Info, format!("nothing to {what}"));
                }
                self.remember_doc_as(before);
                self.restore_doc(before);
            }
            Action::Copy => match e.selected_text() {
                Some(t) => {
                    let n = t.lines().count().max(1);
                    self.clipboard = t;
                    self.say(Level::Info, format!("copied {n} line(s)"));
                }
                // Nothing selected: ^C means cancel (or quit), as everywhere else.
                None => self.global(Action::Cancel),
            },
            Action::Cut => {
                if let Some(t) = e.cut() {
                    self.clipboard = t;
                }
            }
            Action::Paste => {
                if self.clipboard.is_empty() {
                    self.say(Level::Info, "clipboard empty (your terminal's paste works too)");
                } else {
                    let t = self.clipboard.clone();
                    self.editor.insert_str(&t);
                }
            }
            Action::SelectAll => e.select_all(),
            Action::Backspace => e.backspace(),
            Action::Delete => e.delete(),
            Action::Newline => e.newline(),
            Action::Indent => e.tab(),
            Action::Dedent => e.dedent(),
            other => self.global(other),
        }
    }

    fn output_rows(&self) -> usize {
        self.areas.output.height.saturating_sub(2).max(1) as usize
    }

    /// Absolute index of the first line the output pane shows.
    pub fn output_top(&self) -> u64 {
        self.output.fit(self.current_run(), self.output_rows())
    }

    /// Work between frames, never in draw: layout sizes, editor scroll,
    /// highlighting of the visible lines (within `budget`).
    pub fn prepare(&mut self, area: Rect, budget: Duration) {
        // The layout reads no frontier: it is not worked out for it.
        self.areas = widgets::areas(&self.scene_with(None), area);
        let e = self.areas.editor;
        let gutter = widgets::gutter_width(self.editor.lines().len()) as usize;
        let rows = e.height.saturating_sub(2) as usize;
        let cols = (e.width.saturating_sub(2) as usize).saturating_sub(gutter);
        self.editor.scroll_to_cursor(rows, cols, widgets::EDITOR_TAB);
        if let Some(h) = &mut self.highlighter {
            if let Some(row) = self.editor.take_dirty() {
                h.invalidate(row);
            }
            let upto = self.editor.scroll.0 + rows + 1;
            if h.update(self.editor.lines(), upto, budget) {
                self.dirty = true;
            }
        }
        if let Some(s) = &self.status {
            if s.at.elapsed() > Duration::from_secs(8) && s.level == Level::Info {
                self.status = None;
                self.dirty = true;
            }
        }
    }

    /// What the widgets draw this frame. The frontier is worked out only
    /// for the views that show it.
    pub fn scene(&self) -> Scene<'_> {
        let frontier = match self.view {
            View::Compare | View::Gauntlet => self.frontier(),
            _ => None,
        };
        self.scene_with(frontier)
    }

    fn scene_with(&self, frontier: Option<Frontier>) -> Scene<'_> {
        Scene {
            theme: &self.theme,
            view: self.view,
            focus: self.focus,
            overlay: self.overlay.as_ref(),
            status: self.status.as_ref(),
            editor: &self.editor,
            highlighter: self.highlighter.as_ref(),
            label: &self.label,
            language: self.language,
            tiers: &self.tiers,
            tier: self.tier,
            limits: &self.limits,
            secrets: &self.secrets,
            runs: &self.runs,
            current: self.current,
            output: &self.output,
            output_top: self.output_top(),
            compare: &self.compare,
            compare_run: self.compare_run.as_ref(),
            compare_view: &self.compare_view,
            gauntlet: self.gauntlet.as_ref(),
            frontier,
            agent: &self.agent,
            api_key_set: self.api_key_set,
            runs_log: &self.runs_log,
            busy: self.busy(),
            contexts: self.contexts(),
        }
    }

    fn save(&mut self) {
        match self.path.clone() {
            Some(p) => self.write_to(&p),
            None => {
                let input = format!(
                    "{}.{}",
                    Language::ALL
                        .iter()
                        .fold(self.label.as_str(), |l, x| l.trim_end_matches(&format!(".{}", x.extension()))),
                    self.language.extension()
                );
                self.overlay = Some(Overlay::Prompt(Prompt { kind: PromptKind::SaveAs, input }));
            }
        }
    }

    fn write_to(&mut self, p: &Path) {
        let mut text = self.editor.text();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        match std::fs::write(p, text) {
            Ok(()) => {
                self.editor.mark_saved();
                self.path = Some(p.to_path_buf());
                self.label = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if let Some(l) = Language::from_path(p) {
                    self.set_language(l);
                }
                let shown = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
                self.say(Level::Info, format!("saved {}", shown.display()));
            }
            Err(e) => self.say(Level::Error, format!("cannot save {}: {e}", p.display())),
        }
    }

    pub fn quit(&mut self, force: bool) {
        if !force && self.editor.modified() && !self.quit_armed {
            self.quit_armed = true;
            self.say(Level::Warn, "unsaved changes: ^Q again quits without saving, ^S saves");
            return;
        }
        self.cancel_all();
        self.quitting = true;
        if self.busy() {
            self.say(Level::Info, "stopping the running runs and cleaning up…");
        }
    }

    /// Cancel every active run. Returns whether there was one.
    pub fn cancel_all(&mut self) -> bool {
        let mut other = false;
        if let Some(g) = self.gauntlet.as_mut().filter(|g| g.active()) {
            other = true;
            if g.state == GState::Running {
                g.state = GState::Cancelling;
                self.effects.push(Effect::Cancel(g.id));
                self.say(Level::Info, "cancelling the gauntlet: the cell in progress is stopped and cleaned up…");
            }
        }
        if self.agent.running {
            other = true;
            if let (false, Some(id)) = (self.agent.cancelling, self.agent.id) {
                self.agent.cancelling = true;
                self.effects.push(Effect::Cancel(id));
                self.say(Level::Info, "cancelling the agent session…");
            }
        }
        if other {
            return true;
        }
        if let Some(c) = self.compare_run.as_mut().filter(|c| !c.queue.is_empty()) {
            c.queue.clear();
            c.stopped = true;
        }
        let active = self.active_runs();
        for id in &active {
            if let Some(r) = self.runs.get_mut(id) {
                if !r.cancelling {
                    r.cancelling = true;
                    self.effects.push(Effect::Cancel(*id));
                }
            }
        }
        if !active.is_empty() {
            self.say(Level::Info, format!("cancelling {} run(s)…", active.len()));
        }
        !active.is_empty()
    }

    /// The next run, or why there is none (said as a warning).
    fn spec(&self) -> Result<RunSpec, String> {
        let code = self.editor.text();
        if code.trim().is_empty() {
            return Err("nothing to run: the editor is empty".into());
        }
        let mut s = RunSpec::new(self.language, code);
        s.limits = self.limits.clone();
        s.label = self.label.clone();
        if !self.secrets.is_empty() {
            // Read now, as `run --secret NAME` reads them: a value changed
            // since the form was filled is the one used.
            use crate::egress::secrets;
            let decls = secrets::declarations(&self.offered_secrets, &self.secrets, &[])?;
            s.secrets = secrets::resolve_all(&decls, &|v| std::env::var_os(v))?;
        }
        Ok(s)
    }

    fn start(&mut self, tier: &str, spec: RunSpec) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut view = RunView::new(id, tier, &spec.label, spec.limits.clone());
        view.secrets = spec.secrets.names();
        view.live_clock = self.live_clock;
        self.runs.insert(id, view);
        self.effects.push(Effect::Start { id, tier: tier.to_string(), spec });
        self.prune();
        id
    }

    /// Keep finished runs only while they are shown (bounded memory).
    fn prune(&mut self) {
        let keep: HashSet<u64> = self.compare.iter().copied().chain(self.current).collect();
        let newest = self.next_id - 1;
        self.runs.retain(|id, r| !r.finished() || keep.contains(id) || *id == newest);
    }

    pub fn run(&mut self) {
        if self.busy() {
            return self.say(Level::Warn, format!("{}: F8 cancels it", self.busy_with()));
        }
        let t = self.selected_tier().clone();
        match &t.avail {
            None => return self.say(Level::Warn, format!("{} is still being probed; try again in a moment", t.name)),
            Some(a) if !a.available => {
                let fix = a.checks.iter().find(|c| !c.ok).and_then(|c| c.fix.clone());
                let mut m = format!("{} is unavailable: {}", t.name, a.summary);
                if let Some(f) = fix {
                    m.push_str(&format!(" — fix: {f}"));
                }
                // The key is also the way to ask again: a fixed tier is
                // found without a restart.
                m.push_str(" — probing it again");
                self.effects.push(Effect::Probe(t.name.clone()));
                return self.say(Level::Error, m);
            }
            Some(_) => {}
        }
        let spec = match self.spec() {
            Ok(s) => s,
            Err(why) => return self.say(Level::Warn, why),
        };
        self.view = View::Single;
        self.output.show_new_run();
        let id = self.start(&t.name, spec);
        self.current = Some(id);
        self.say(Level::Info, format!("running on {}…", t.name));
    }

    pub fn compare(&mut self) {
        if self.busy() {
            return self.say(Level::Warn, format!("{}: F8 cancels it", self.busy_with()));
        }
        let ready = self.ready_tiers();
        if ready.is_empty() {
            return self
                .say(Level::Error, "no tier is available to compare (see the tier list, or `sandbench doctor`)");
        }
        let spec = match self.spec() {
            Ok(s) => s,
            Err(why) => return self.say(Level::Warn, why),
        };
        let skipped: Vec<(String, String)> = self
            .tiers
            .iter()
            .filter(|t| !ready.contains(&t.name))
            .map(|t| (t.name.clone(), t.avail.as_ref().map_or("still being probed".into(), |a| a.summary.clone())))
            .collect();
        let n = skipped.len();
        self.compare.clear();
        let (mode, repeat) = (self.compare_view.mode, self.compare_view.repeat.max(1));
        self.compare_run = Some(CompareRun::new(ready.clone(), spec, mode, repeat, skipped));
        self.output.show_new_run();
        self.view = View::Compare;
        self.advance_compare();
        self.say(
            Level::Info,
            format!(
                "comparing on {} tier(s), {} round(s), {}{}",
                ready.len(),
                repeat,
                match mode {
                    sandbench_core::compare::Mode::Sequential => "one tier at a time",
                    sandbench_core::compare::Mode::Concurrent => "tiers at once (timings skewed)",
                },
                if n > 0 { format!(" ({n} unavailable, skipped)") } else { String::new() }
            ),
        );
    }

    /// Start the compare's next run (or round); say so when it is over.
    fn advance_compare(&mut self) {
        let Some(c) = self.compare_run.as_mut() else { return };
        let batch = c.next_batch();
        if batch.is_empty() {
            let (done, total, stopped) = (c.reports.len(), c.total(), c.stopped);
            return self.say(
                Level::Info,
                if stopped {
                    format!("compare cancelled after {done}/{total} runs: summary below the columns")
                } else {
                    format!("compare finished: {done} runs, summary below the columns (m/j/v export it)")
                },
            );
        }
        let spec = c.spec.clone();
        let tiers = c.tiers.clone();
        for t in batch {
            let id = self.start(&t, spec.clone());
            // One column per tier, showing its latest run.
            let col = tiers.iter().position(|x| *x == t).unwrap_or(0);
            let ids: Vec<(String, u64)> =
                self.compare.iter().filter_map(|i| self.runs.get(i).map(|r| (r.tier.clone(), *i))).collect();
            let mut cols: Vec<Option<u64>> = vec![None; tiers.len()];
            for (tier, i) in ids {
                if let Some(p) = tiers.iter().position(|x| *x == tier) {
                    cols[p] = Some(i);
                }
            }
            cols[col] = Some(id);
            self.compare = cols.into_iter().flatten().collect();
            self.current = Some(id);
        }
        self.prune();
    }

    /// Write the compare summary to `export_dir` and say where.
    pub fn save_screen(&mut self, svg: &str) {
        self.screenshot_wanted = false;
        let name = format!("sandbench-screen-{}.svg", chrono::Local::now().format("%Y%m%d-%H%M%S"));
        let path = self.export_dir.join(name);
        match std::fs::write(&path, svg) {
            Ok(()) => self.say(Level::Info, format!("screen saved as {}", path.display())),
            Err(e) => self.say(
                Level::Error,
                format!("cannot write {}: {e} (start sandbench in a writable directory)", path.display()),
            ),
        }
    }

    /// Write the compare summary to `export_dir` and say where.
    pub fn export_compare(&mut self, f: ExportFormat) {
        use sandbench_core::compare;
        let Some(c) = self.compare_run.as_ref().filter(|c| !c.reports.is_empty()) else {
            return self.say(Level::Info, "nothing to export yet: F6 compares the code on every ready tier");
        };
        let s = c.summary();
        let text = match f {
            ExportFormat::Markdown => compare::markdown(&s),
            ExportFormat::Json => compare::json(&s),
            ExportFormat::Csv => compare::csv(&s),
        };
        let path = self.export_dir.join(format!("sandbench-compare.{}", f.ext()));
        match std::fs::write(&path, text) {
            Ok(()) => self.say(Level::Info, format!("exported {}", path.display())),
            Err(e) => self.say(
                Level::Error,
                format!("cannot write {}: {e} (start sandbench in a writable directory)", path.display()),
            ),
        }
    }

    /// The frontier: hostile cells of one gauntlet (this session's, else the
    /// one kept in the state dir), each tier's latency from this session's
    /// compare when it ran the tier, else from that gauntlet's benign
    /// controls, and where each figure comes from. `None` before any gauntlet.
    pub fn frontier(&self) -> Option<Frontier> {
        use sandbench_core::frontier;
        let live = self.gauntlet.as_ref().filter(|g| g.done() > 0);
        let (mut tiers, gauntlet, latency) = match (live, &self.saved_gauntlet) {
            (Some(g), _) => {
                let state = match g.state {
                    GState::Running | GState::Cancelling => ", running",
                    GState::Cancelled => ", CANCELLED",
                    GState::Failed => ", FAILED",
                    GState::Finished => "",
                };
                let note = format!("this session's gauntlet: {} of {} cells{state}", g.done(), g.total());
                (g.tiers.clone(), note, &g.latency)
            }
            (None, Some((m, at))) => {
                let when = chrono::DateTime::from_timestamp(*at as i64, 0)
                    .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_else(|| "an earlier session".into());
                let cancelled = if m.cancelled { ", CANCELLED" } else { "" };
                let note = format!("the gauntlet kept from {when}: {} cells{cancelled}", m.cells.len());
                (m.tiers.clone(), note, &m.latency)
            }
            (None, None) => return None,
        };
        let mut obs = vec![];
        let mut program = None;
        if let Some(c) = self.compare_run.as_ref().filter(|c| !c.reports.is_empty()) {
            let s = c.summary();
            obs.extend(frontier::obs_of_compare(&s, "compare"));
            program = Some(s.program.clone());
            // A tier the compare ran but the gauntlet did not gets a note, not silence.
            for t in &c.tiers {
                if !tiers.contains(t) {
                    tiers.push(t.clone());
                }
            }
        }
        obs.extend(frontier::obs_of_gauntlet(latency));
        let (points, missing) = match (live, &self.saved_gauntlet) {
            (Some(g), _) => frontier::points(&tiers, g.cells.iter().flatten().flatten().map(|cv| &cv.cell), &obs),
            (None, Some((m, _))) => frontier::points(&tiers, &m.cells, &obs),
            (None, None) => return None,
        };
        Some(Frontier { points, missing, gauntlet, compare_program: program })
    }

    /// Names of the tiers the tier pane shows as ready.
    pub fn ready_tiers(&self) -> Vec<String> {
        self.tiers.iter().filter(|t| t.avail.as_ref().is_some_and(|a| a.available)).map(|t| t.name.clone()).collect()
    }

    /// The samples directory the picker uses: the first of `samples_dirs`
    /// holding a `benign/` or `hostile/` folder.
    pub fn samples_root(&self) -> Option<PathBuf> {
        self.samples_dirs.iter().find(|d| ["benign", "hostile"].iter().any(|g| d.join(g).is_dir())).cloned()
    }

    fn no_samples_message(&self) -> String {
        let dirs: Vec<String> = self.samples_dirs.iter().map(|d| d.display().to_string()).collect();
        format!("no samples/benign or samples/hostile found in: {}", dirs.join(", "))
    }

    fn open_samples(&mut self) {
        let mut items = vec![];
        let mut problems = vec![];
        match self.samples_root() {
            Some(dir) => {
                for group in ["benign", "hostile"] {
                    let d = dir.join(group);
                    if !d.is_dir() {
                        continue;
                    }
                    match samples::load_dir(&d) {
                        Ok(v) => items.extend(v.into_iter().map(|s| (group.to_string(), s))),
                        Err(e) => problems.push(format!("{e:#}")),
                    }
                }
            }
            None => problems.push(self.no_samples_message()),
        }
        let mut p = SamplesPicker { items, selected: 0, problems, confirm: false, filter: String::new() };
        if let Some(n) = &self.samples_pos {
            p.select_name(n);
        }
        self.overlay = Some(Overlay::Samples(p));
    }

    /// F9: show the gauntlet view (a gauntlet starts only when asked: `r`).
    fn open_gauntlet(&mut self) {
        self.overlay = None;
        self.view = View::Gauntlet;
        if self.gauntlet.is_none() {
            self.say(Level::Info, "r sets up a gauntlet: the samples and tiers to run, then Enter");
        }
    }

    /// `r` in the gauntlet view: a gauntlet is many runs and minutes to hours
    /// long, so it starts from a set-up where the tiers and samples are
    /// chosen (the last choice again, or sandbench's own ready tiers and
    /// every sample) and the number of runs is said.
    fn ask_gauntlet(&mut self) {
        if self.busy() {
            return self.say(Level::Warn, format!("{}: F8 cancels it", self.busy_with()));
        }
        let probing = self.tiers.iter().any(|t| t.avail.is_none());
        if self.ready_tiers().is_empty() {
            return if probing {
                self.say(Level::Warn, "the tiers are still being probed; press r in a moment")
            } else {
                self.say(
                    Level::Error,
                    "no tier is available for the gauntlet (see the tier list, or `sandbench doctor`)",
                )
            };
        }
        let Some(dir) = self.samples_root() else {
            let m = self.no_samples_message();
            return self.say(Level::Error, m);
        };
        let samples = match samples::load_dir(&dir) {
            Ok(v) if v.is_empty() => return self.say(Level::Error, format!("no samples in {}", dir.display())),
            Ok(v) => v,
            Err(e) => return self.say(Level::Error, format!("{e:#}")),
        };
        let tiers = self
            .tiers
            .iter()
            .map(|t| {
                let why = match &t.avail {
                    None => Some("still being probed".to_string()),
                    Some(a) if !a.available => Some(a.summary.clone()),
                    Some(_) => None,
                };
                (t.name.clone(), why)
            })
            .collect();
        self.overlay = Some(Overlay::GauntletSetup(GauntletSetup::new(tiers, samples, self.gauntlet_choice.as_ref())));
    }

    /// Run `samples` on `tiers` (the ready ones), one cell at a time.
    pub fn start_gauntlet(&mut self, tiers: Vec<String>, samples: Vec<Sample>) {
        if self.busy() {
            return self.say(Level::Warn, format!("{}: F8 cancels it", self.busy_with()));
        }
        let ready: Vec<String> = self.ready_tiers().into_iter().filter(|t| tiers.contains(t)).collect();
        if ready.is_empty() || samples.is_empty() {
            return self.say(Level::Warn, "choose at least one ready tier and one sample (r in the gauntlet view)");
        }
        let left_out = match samples::load_dir(&self.samples_root().unwrap_or_default()) {
            Ok(all) => all.into_iter().filter(|a| !samples.iter().any(|s| s.name == a.name)).map(|a| a.name).collect(),
            Err(_) => vec![],
        };
        self.gauntlet_choice = Some((ready.clone(), left_out));
        let dir = self.samples_root().map(|d| d.display().to_string()).unwrap_or_default();
        // Tiers that cannot run are listed under the matrix, with why; ready
        // ones left out by choice are not in it at all.
        let all_ready = self.ready_tiers();
        let skipped: Vec<(String, String)> = self
            .tiers
            .iter()
            .filter(|t| !all_ready.contains(&t.name))
            .map(|t| {
                let why = match &t.avail {
                    None => "still being probed".to_string(),
                    Some(a) => a.summary.clone(),
                };
                (t.name.clone(), why)
            })
            .collect();
        let id = self.next_id;
        self.next_id += 1;
        let limits = crate::gauntlet::default_limits();
        let mut g = GauntletView::new(id, ready.clone(), skipped.clone(), &samples, limits.clone());
        // Keep the selection where it was on a rerun.
        if let Some(old) = &self.gauntlet {
            g.sel = (old.sel.0.min(g.rows.len().saturating_sub(1)), old.sel.1.min(g.tiers.len().saturating_sub(1)));
        }
        let n = samples.len() * ready.len();
        self.gauntlet = Some(g);
        self.view = View::Gauntlet;
        self.effects.push(Effect::Gauntlet { id, tiers: ready.clone(), skipped, samples, limits });
        self.say(Level::Info, format!("gauntlet: {n} cells ({dir} on {}), one at a time…", ready.join(", ")));
    }

    fn agent_rows(&self) -> usize {
        self.areas.detail_rows.max(1) as usize
    }

    /// First transcript line shown (absolute).
    pub fn agent_top(&self) -> u64 {
        self.agent.fit(self.agent_rows())
    }

    /// Put the selected run's code in the editor, on its tier, to re-run it
    /// there (F5), on another tier (F4, F5) or across tiers (F6).
    fn load_run(&mut self) {
        let Some(e) = self.runs_log.selected_entry() else {
            return self.say(Level::Info, "no run selected");
        };
        let (code, label, tier, truncated) = (e.code.clone(), e.label.clone(), e.tier.clone(), e.code_truncated);
        let language = e.language.parse::<Language>().unwrap_or(Language::Python);
        self.editor = Editor::new(&code);
        self.set_language(language);
        self.path = None;
        self.label = crate::sanitize::inert_line(&label, 60);
        if let Some(i) = self.tiers.iter().position(|t| t.name == tier) {
            self.tier = i;
        }
        self.view = View::Single;
        self.focus = Focus::Editor;
        if truncated {
            self.say(Level::Warn, "the log kept only the head and tail of this program: check it before running");
        } else {
            self.say(Level::Info, "run loaded: F5 runs it again, F4 picks another tier, F6 compares across tiers");
        }
    }

    /// Start an agent session on the selected tier with the current limits.
    pub fn start_agent(&mut self) {
        if self.busy() {
            return self.say(Level::Warn, format!("{}: F8 cancels it", self.busy_with()));
        }
        let task = self.agent.input.trim().to_string();
        if task.is_empty() {
            return self.say(Level::Warn, "type a task for the model first, then Enter");
        }
        if !self.api_key_set {
            let m = "ANTHROPIC_API_KEY is not set: export it before starting sandbench to use the agent";
            self.agent.id = None;
            self.agent.lines.clear();
            self.agent.refuse(m);
            return self.say(Level::Error, m);
        }
        let t = self.selected_tier().clone();
        match &t.avail {
            None => return self.say(Level::Warn, format!("{} is still being probed; try again in a moment", t.name)),
            Some(a) if !a.available => {
                return self
                    .say(Level::Error, format!("{} is unavailable: {} (F4 selects another tier)", t.name, a.summary))
            }
            Some(_) => {}
        }
        let id = self.next_id;
        self.next_id += 1;
        self.agent.begin(id, &t.name);
        self.effects.push(Effect::Agent { id, tier: t.name.clone(), limits: self.limits.clone(), task });
        self.say(Level::Info, format!("agent: working on {}…", t.name));
    }

    /// Ask once to warm the selected tier when it is ready: warm sandboxes
    /// hold memory, so only a tier the user picked gets one.
    fn prewarm_selected(&mut self) {
        let Some(t) = self.tiers.get(self.tier) else { return };
        if t.avail.as_ref().is_some_and(|a| a.available) && self.prewarmed.insert(t.name.clone()) {
            self.effects.push(Effect::Prewarm(t.name.clone()));
        }
    }

    pub fn load_sample(&mut self, s: &Sample) {
        let doc = self.new_doc(DocIdentity { path: None, label: s.name.clone(), language: s.language });
        self.editor.set_document(s.code.trim_end_matches('\n'), doc);
        self.editor.mark_saved();
        self.set_language(s.language);
        self.path = None;
        self.label = s.name.clone();
        self.say(Level::Info, format!("loaded sample {}: {}", s.name, s.tries));
    }

    /// Register the identity of a document about to enter the editor. The
    /// one it replaces is recorded first, so undo can go back to it.
    fn new_doc(&mut self, id: DocIdentity) -> u64 {
        self.remember_doc();
        self.docs.push(id);
        (self.docs.len() - 1) as u64
    }

    /// Record the current file name and language under the editor's doc id.
    fn remember_doc(&mut self) {
        self.remember_doc_as(self.editor.doc());
    }

    /// Record the current file name and language under `doc` (the document
    /// an undo or redo just left).
    fn remember_doc_as(&mut self, doc: u64) {
        let now = DocIdentity { path: self.path.clone(), label: self.label.clone(), language: self.language };
        let i = doc as usize;
        if i >= self.docs.len() {
            self.docs.resize(i + 1, now.clone());
        }
        self.docs[i] = now;
    }

    /// After undo/redo: the file name and language of the text now shown.
    fn restore_doc(&mut self, before: u64) {
        let now = self.editor.doc();
        if now == before {
            return;
        }
        if let Some(d) = self.docs.get(now as usize).cloned() {
            self.path = d.path;
            self.label = d.label;
            self.set_language(d.language);
        }
    }
}

/// Where the samples picker looks: `first` (`$SANDBENCH_SAMPLES`, from the
/// config), `./samples`, next to the binary's checkout, the source tree it
/// was built from.
pub fn default_samples_dirs(first: Option<&Path>) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = first.map(Path::to_path_buf).into_iter().collect();
    if let Ok(cwd) = std::env::current_dir() {
        v.push(cwd.join("samples"));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(root) = exe.parent().and_then(|p| p.parent()).and_then(|p| p.parent()) {
            v.push(root.join("samples"));
        }
    }
    v.push(crate::samples::shipped_dir());
    let mut seen = HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
    v
}
