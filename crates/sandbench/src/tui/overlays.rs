//! The popups over the workbench — help, the samples picker, the limits
//! form, the gauntlet's set-up, the save-as and search prompts — each with
//! its own state and keys (see `view` for the contract). Drawn by
//! `widgets::overlays`.

use std::path::PathBuf;

use super::keymap::{self, Action};
use super::scroll::Scroll;
use super::types::Level;
use super::view::{Intent, Key, Reply};
use crate::samples::Sample;
use crate::spec::{self, format_duration, format_size, Limits};

pub enum Overlay {
    Help(Help),
    Samples(SamplesPicker),
    Limits(LimitsForm),
    Prompt(Prompt),
    GauntletSetup(GauntletSetup),
}

impl Overlay {
    pub fn ctx(&self) -> keymap::Ctx {
        match self {
            Overlay::Help(_) => keymap::Ctx::Help,
            Overlay::Samples(_) => keymap::Ctx::Samples,
            Overlay::Limits(_) => keymap::Ctx::Limits,
            Overlay::Prompt(_) => keymap::Ctx::Prompt,
            Overlay::GauntletSetup(_) => keymap::Ctx::GauntletSetup,
        }
    }

    /// A paste goes into the overlay's text field, if it has one (first line only).
    pub fn paste(&mut self, s: &str) {
        let line = s.lines().next().unwrap_or("");
        match self {
            Overlay::Limits(f) => f.fields[f.selected].1.push_str(line),
            Overlay::Prompt(p) => p.input.push_str(line),
            Overlay::Help(_) | Overlay::Samples(_) | Overlay::GauntletSetup(_) => {}
        }
    }
}

/// Before a gauntlet: which tiers and which samples (a gauntlet is every
/// chosen sample on every chosen tier, one run at a time: minutes to hours).
pub struct GauntletSetup {
    /// (tier, why it cannot run, chosen): only ready tiers can be chosen.
    pub tiers: Vec<(String, Option<String>, bool)>,
    /// (sample, chosen).
    pub samples: Vec<(Sample, bool)>,
    /// The list the keys move in: false = tiers, true = samples.
    pub in_samples: bool,
    /// The cursor in the tiers, and in the samples the filter shows.
    pub cursor: [usize; 2],
    /// Typed after `/`: only the samples it matches show (as F2's filter),
    /// and `a` chooses or leaves out those.
    pub filter: String,
    /// `/` was pressed: typed characters go to the filter until Enter (keep
    /// it) or Esc (clear it).
    pub filtering: bool,
}

impl GauntletSetup {
    /// `chosen`: the tiers chosen for the last gauntlet and the samples left
    /// out of it; without one, sandbench's own ready tiers (the peers are a
    /// comparison one asks for) and every sample.
    pub fn new(
        tiers: Vec<(String, Option<String>)>,
        samples: Vec<Sample>,
        chosen: Option<&(Vec<String>, Vec<String>)>,
    ) -> GauntletSetup {
        let own = |t: &str| crate::tier::KNOWN.contains(&t);
        let tiers = tiers
            .into_iter()
            .map(|(t, why)| {
                let on = why.is_none() && chosen.map_or(own(&t), |(ts, _)| ts.contains(&t));
                (t, why, on)
            })
            .collect();
        let samples = samples
            .into_iter()
            .map(|s| {
                let on = chosen.is_none_or(|(_, out)| !out.contains(&s.name));
                (s, on)
            })
            .collect();
        GauntletSetup { tiers, samples, in_samples: false, cursor: [0, 0], filter: String::new(), filtering: false }
    }

    pub fn chosen_tiers(&self) -> Vec<String> {
        self.tiers.iter().filter(|(_, why, on)| *on && why.is_none()).map(|(t, _, _)| t.clone()).collect()
    }

    pub fn chosen_samples(&self) -> Vec<Sample> {
        self.samples.iter().filter(|(_, on)| *on).map(|(s, _)| s.clone()).collect()
    }

    /// Runs the gauntlet will make (each chosen sample once on each chosen tier).
    pub fn runs(&self) -> usize {
        self.chosen_tiers().len() * self.samples.iter().filter(|(_, on)| *on).count()
    }

    /// Indices of the samples the filter shows, best match first.
    pub fn visible_samples(&self) -> Vec<usize> {
        let group = |s: &Sample| if s.is_hostile() { "hostile" } else { "benign" };
        ranked(&self.filter, self.samples.iter().map(|(s, _)| (group(s), s)))
    }

    fn len(&self) -> usize {
        if self.in_samples {
            self.visible_samples().len()
        } else {
            self.tiers.len()
        }
    }

    fn toggle(&mut self, i: usize) {
        if self.in_samples {
            let shown = self.visible_samples();
            if let Some((_, on)) = shown.get(i).and_then(|j| self.samples.get_mut(*j)) {
                *on = !*on;
            }
        } else if let Some((_, None, on)) = self.tiers.get_mut(i) {
            *on = !*on;
        }
    }

    /// A key while the filter is being typed: characters (`a` and Space
    /// too) go to it; Enter keeps it, Esc clears it.
    fn filter_key(&mut self, k: Key) -> Reply {
        match (k.action, k.typed) {
            (Some(Action::Accept), _) => self.filtering = false,
            (Some(Action::Close), _) => {
                self.filtering = false;
                self.filter.clear();
            }
            (Some(Action::Backspace), _) => {
                self.filter.pop();
            }
            (Some(Action::Up | Action::Down | Action::PageUp | Action::PageDown), _) => {
                self.filtering = false;
                return self.key(k);
            }
            (_, Some(c)) if self.filter.chars().count() < 40 => self.filter.push(c),
            _ => {}
        }
        // The best match under the cursor, as F2's filter does.
        self.cursor[1] = 0;
        Reply::Consumed
    }

    pub fn key(&mut self, k: Key) -> Reply {
        if self.filtering {
            return self.filter_key(k);
        }
        let list = usize::from(self.in_samples);
        let n = self.len();
        match k.action {
            Some(Action::Search) => {
                self.in_samples = true;
                self.filtering = true;
                Reply::Consumed
            }
            Some(Action::Close) if !self.filter.is_empty() => {
                self.filter.clear();
                self.cursor[1] = 0;
                Reply::Consumed
            }
            Some(Action::Close) => Reply::Do(Intent::Close(Some("no gauntlet started".into()))),
            Some(Action::Up) => {
                self.cursor[list] = self.cursor[list].saturating_sub(1);
                Reply::Consumed
            }
            Some(Action::Down) => {
                self.cursor[list] = (self.cursor[list] + 1).min(n.saturating_sub(1));
                Reply::Consumed
            }
            Some(Action::PageUp) => {
                self.cursor[list] = self.cursor[list].saturating_sub(10);
                Reply::Consumed
            }
            Some(Action::PageDown) => {
                self.cursor[list] = (self.cursor[list] + 10).min(n.saturating_sub(1));
                Reply::Consumed
            }
            Some(Action::NextList) => {
                self.in_samples = !self.in_samples;
                Reply::Consumed
            }
            Some(Action::Toggle) => {
                self.toggle(self.cursor[list]);
                Reply::Consumed
            }
            Some(Action::ToggleAll) => {
                // All on, unless all are on already: then all off.
                if self.in_samples {
                    // Those the filter shows.
                    let shown = self.visible_samples();
                    let all = shown.iter().all(|i| self.samples[*i].1);
                    shown.iter().for_each(|i| self.samples[*i].1 = !all);
                } else {
                    let all = self.tiers.iter().filter(|(_, why, _)| why.is_none()).all(|(_, _, on)| *on);
                    self.tiers.iter_mut().filter(|(_, why, _)| why.is_none()).for_each(|(_, _, on)| *on = !all);
                }
                Reply::Consumed
            }
            Some(Action::Accept) if self.runs() == 0 => Reply::Say(
                Level::Warn,
                "choose at least one tier and one sample (Space toggles, Tab switches lists)".into(),
            ),
            Some(Action::Accept) => {
                Reply::Do(Intent::StartGauntlet { tiers: self.chosen_tiers(), samples: self.chosen_samples() })
            }
            a => Reply::pass(a),
        }
    }
}

/// Every key, generated from the keymap.
#[derive(Default)]
pub struct Help {
    pub scroll: Scroll,
}

impl Help {
    pub fn key(&mut self, k: Key) -> Reply {
        match k.action {
            Some(Action::Close) => Reply::Do(Intent::Close(None)),
            Some(a) if self.scroll.key(a) => Reply::Consumed,
            a => Reply::pass(a),
        }
    }
}

/// Indices of the samples `filter` lets through, best match first: the
/// name itself, then names that start with it, then names that contain it,
/// then group or "tries" (each rank in the list's order). F2's picker and
/// F9's set-up filter alike.
fn ranked<'a>(filter: &str, items: impl Iterator<Item = (&'a str, &'a Sample)>) -> Vec<usize> {
    let f = filter.to_lowercase();
    let rank = |g: &str, s: &Sample| -> Option<u8> {
        let name = s.name.to_lowercase();
        if f.is_empty() || name == f {
            Some(0)
        } else if name.starts_with(&f) {
            Some(1)
        } else if name.contains(&f) {
            Some(2)
        } else if [g, &s.tries].iter().any(|t| t.to_lowercase().contains(&f)) {
            Some(3)
        } else {
            None
        }
    };
    let mut shown: Vec<(u8, usize)> = items.enumerate().filter_map(|(i, (g, s))| rank(g, s).map(|r| (r, i))).collect();
    shown.sort_by_key(|&(r, i)| (r, i));
    shown.into_iter().map(|(_, i)| i).collect()
}

pub struct SamplesPicker {
    /// (group: "benign" / "hostile", sample)
    pub items: Vec<(String, Sample)>,
    /// Index into `visible()`.
    pub selected: usize,
    pub problems: Vec<String>,
    /// Enter was pressed once over unsaved edits; a second Enter replaces them.
    pub confirm: bool,
    /// Typed text: only samples whose name, group or "tries" contain it show.
    pub filter: String,
}

impl SamplesPicker {
    /// Indices of the items the filter lets through, best match first: the
    /// name itself, then names that start with the filter, then names that
    /// contain it, then group or "tries" (each rank in the list's order).
    pub fn visible(&self) -> Vec<usize> {
        ranked(&self.filter, self.items.iter().map(|(g, s)| (g.as_str(), s)))
    }

    pub fn current(&self) -> Option<&(String, Sample)> {
        self.visible().get(self.selected).map(|i| &self.items[*i])
    }

    /// Put the selection on the sample named `name` (if it is shown).
    pub fn select_name(&mut self, name: &str) {
        if let Some(p) = self.visible().iter().position(|i| self.items[*i].1.name == name) {
            self.selected = p;
        }
    }

    /// The filter changed. A character typed narrows it: the best match is
    /// selected (Enter then loads the sample the name says, never one picked
    /// before); a character taken away widens it: the selection stays.
    fn refilter(&mut self, before: Option<String>, narrowed: bool) {
        self.selected = 0;
        if let (false, Some(n)) = (narrowed, before) {
            self.select_name(&n);
        }
    }

    /// `unsaved`: the editor holds edits a sample would replace.
    pub fn key(&mut self, k: Key, unsaved: bool) -> Reply {
        let n = self.visible().len();
        let accept = matches!(k.action, Some(Action::Accept));
        if !accept {
            self.confirm = false;
        }
        let before = self.current().map(|(_, s)| s.name.clone());
        match (k.action, k.typed) {
            (Some(Action::Close), _) => Reply::Do(Intent::Close(None)),
            (Some(Action::Up), _) => {
                self.selected = self.selected.saturating_sub(1);
                Reply::Consumed
            }
            (Some(Action::Down), _) => {
                self.selected = (self.selected + 1).min(n.saturating_sub(1));
                Reply::Consumed
            }
            (Some(Action::PageUp), _) => {
                self.selected = self.selected.saturating_sub(10);
                Reply::Consumed
            }
            (Some(Action::PageDown), _) => {
                self.selected = (self.selected + 10).min(n.saturating_sub(1));
                Reply::Consumed
            }
            (Some(Action::Backspace), _) => {
                self.filter.pop();
                self.refilter(before, false);
                Reply::Consumed
            }
            (Some(Action::Accept), _) => match self.current() {
                None => Reply::Consumed,
                Some(_) if unsaved && !self.confirm => {
                    self.confirm = true;
                    Reply::Say(
                        Level::Warn,
                        "unsaved changes: Enter again replaces them (^Z brings them back), Esc keeps them".into(),
                    )
                }
                Some((_, s)) => Reply::Do(Intent::LoadSample(Box::new(s.clone()))),
            },
            (None, Some(c)) => {
                if self.filter.chars().count() < 40 {
                    self.filter.push(c);
                }
                self.refilter(before, true);
                Reply::Consumed
            }
            (a, _) => Reply::pass(a),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitField {
    CpuTime,
    WallTime,
    Memory,
    Pids,
    FileSize,
    Disk,
    Output,
    Network,
    /// Not a limit: the operator's `[secrets.NAME]` the run gets, by name.
    Secrets,
}

impl LimitField {
    pub const ALL: [LimitField; 9] = [
        LimitField::CpuTime,
        LimitField::WallTime,
        LimitField::Memory,
        LimitField::Pids,
        LimitField::FileSize,
        LimitField::Disk,
        LimitField::Output,
        LimitField::Network,
        LimitField::Secrets,
    ];

    pub fn label(self) -> &'static str {
        match self {
            LimitField::CpuTime => "CPU time",
            LimitField::WallTime => "wall time",
            LimitField::Memory => "memory",
            LimitField::Pids => "pids",
            LimitField::FileSize => "file size",
            LimitField::Disk => "disk",
            LimitField::Output => "output",
            LimitField::Network => "network",
            LimitField::Secrets => "secrets",
        }
    }

    /// Longest text the field takes (an allow list is long).
    pub fn max_len(self) -> usize {
        match self {
            LimitField::Network | LimitField::Secrets => 400,
            _ => 24,
        }
    }

    pub fn hint(self) -> &'static str {
        match self {
            LimitField::CpuTime | LimitField::WallTime => "e.g. 5s, 500ms, 2m",
            LimitField::Pids => "a whole number",
            LimitField::Network => "none or allow=pypi.org,…",
            LimitField::Secrets => "names from [secrets]",
            _ => "e.g. 256M, 1G, 512K",
        }
    }

    fn get(self, l: &Limits) -> String {
        match self {
            LimitField::CpuTime => format_duration(l.cpu_time),
            LimitField::WallTime => format_duration(l.wall_time),
            LimitField::Memory => format_size(l.memory_bytes),
            LimitField::Pids => l.pids.to_string(),
            LimitField::FileSize => format_size(l.file_size_bytes),
            LimitField::Disk => format_size(l.disk_bytes),
            LimitField::Output => format_size(l.output_bytes),
            LimitField::Network => l.network.to_string(),
            LimitField::Secrets => String::new(),
        }
    }

    fn set(self, l: &mut Limits, s: &str) -> Result<(), String> {
        match self {
            LimitField::CpuTime => l.cpu_time = spec::parse_duration(s)?,
            LimitField::WallTime => l.wall_time = spec::parse_duration(s)?,
            LimitField::Memory => l.memory_bytes = spec::parse_size(s)?,
            LimitField::Pids => l.pids = spec::parse_count(s)?,
            LimitField::FileSize => l.file_size_bytes = spec::parse_size(s)?,
            LimitField::Disk => l.disk_bytes = spec::parse_size(s)?,
            LimitField::Output => l.output_bytes = spec::parse_size(s)?,
            LimitField::Network => l.network = s.parse()?,
            // Checked by the form against what the config offers.
            LimitField::Secrets => {}
        }
        Ok(())
    }
}

/// The limits of the next run, edited as text and checked as the command
/// line checks them (`run` refuses the same values).
pub struct LimitsForm {
    pub fields: Vec<(LimitField, String)>,
    pub selected: usize,
    pub error: Option<String>,
    /// The limits the form started from (fields not shown keep these).
    base: Limits,
    /// The tier the next run goes to: its maxima bound the values.
    tier: String,
    /// The names of the config's `[secrets]` (what the field may name).
    offered: Vec<String>,
}

impl LimitsForm {
    pub fn new(limits: &Limits, tier: &str) -> LimitsForm {
        let fields = LimitField::ALL.iter().map(|f| (*f, f.get(limits))).collect();
        LimitsForm { fields, selected: 0, error: None, base: limits.clone(), tier: tier.to_string(), offered: vec![] }
    }

    /// The secrets field filled with `chosen`, checked against `offered`.
    pub fn with_secrets(mut self, chosen: &[String], offered: Vec<String>) -> LimitsForm {
        if let Some(f) = self.fields.iter_mut().find(|(f, _)| *f == LimitField::Secrets) {
            f.1 = chosen.join(",");
        }
        self.offered = offered;
        self
    }

    /// The names in the secrets field: each one the config declares, and
    /// only on a tier that takes secrets.
    fn secrets(&self) -> Result<Vec<String>, String> {
        let text = self.fields.iter().find(|(f, _)| *f == LimitField::Secrets).map_or("", |(_, t)| t.as_str());
        let mut names: Vec<String> = vec![];
        for n in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !self.offered.iter().any(|o| o == n) {
                let n = crate::sanitize::inert_line(n, 40);
                return Err(if self.offered.is_empty() {
                    format!("no [secrets.{n}] in the config (it declares none)")
                } else {
                    format!("no [secrets.{n}] in the config (it declares {})", self.offered.join(", "))
                });
            }
            if !names.iter().any(|m| m == n) {
                names.push(n.to_string());
            }
        }
        let proxied = crate::tier::kinds::of(&self.tier).is_some_and(|k| k.egress == crate::tier::kinds::Egress::Proxy);
        if !names.is_empty() && !proxied {
            return Err(format!(
                "the {} tier takes no secrets (sandbench's egress proxy does not carry its traffic); use {}",
                self.tier,
                crate::tier::kinds::with_proxy_or()
            ));
        }
        Ok(names)
    }

    pub fn key(&mut self, k: Key) -> Reply {
        let n = self.fields.len();
        match (k.action, k.typed) {
            (Some(Action::Close), _) => Reply::Do(Intent::Close(Some("limits unchanged".into()))),
            (Some(Action::Up), _) => {
                self.selected = (self.selected + n - 1) % n;
                Reply::Consumed
            }
            (Some(Action::Down), _) => {
                self.selected = (self.selected + 1) % n;
                Reply::Consumed
            }
            (Some(Action::Backspace), _) => {
                self.fields[self.selected].1.pop();
                self.error = None;
                Reply::Consumed
            }
            (Some(Action::Accept), _) => match self.check() {
                Ok((l, secrets)) => Reply::Do(Intent::ApplyLimits(l, secrets)),
                Err(()) => Reply::Consumed,
            },
            (Some(a), _) => Reply::Pass(a),
            (None, Some(c)) => {
                let (field, t) = &mut self.fields[self.selected];
                if t.len() < field.max_len() {
                    t.push(c);
                }
                self.error = None;
                Reply::Consumed
            }
            (None, None) => Reply::Consumed,
        }
    }

    /// The values as limits, or the first problem shown in the form.
    fn check(&mut self) -> Result<(Limits, Vec<String>), ()> {
        let mut l = self.base.clone();
        for (i, (field, text)) in self.fields.iter().enumerate() {
            if let Err(e) = field.set(&mut l, text) {
                self.error = Some(format!("{}: {e}", field.label()));
                self.selected = i;
                return Err(());
            }
        }
        // The same refusal `run` gives: a limit the tier cannot enforce
        // never reaches a run.
        let checked = crate::tier::max_limits(&self.tier)
            .check(&self.tier, &l)
            .and_then(|_| crate::tier::check_network(&self.tier, &l.network));
        if let Err(e) = checked {
            self.error = Some(e);
            return Err(());
        }
        match self.secrets() {
            Ok(names) => Ok((l, names)),
            Err(e) => {
                self.error = Some(format!("secrets: {e}"));
                self.selected = self.fields.iter().position(|(f, _)| *f == LimitField::Secrets).unwrap_or(0);
                Err(())
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    SaveAs,
    Search,
}

/// One line of text to type: a file name to save to, or a search.
pub struct Prompt {
    pub kind: PromptKind,
    pub input: String,
}

impl Prompt {
    pub fn key(&mut self, k: Key) -> Reply {
        match (k.action, k.typed) {
            (Some(Action::Close), _) => Reply::Do(Intent::Close(None)),
            (Some(Action::Backspace), _) => {
                self.input.pop();
                Reply::Consumed
            }
            (Some(Action::Accept), _) => {
                let text = self.input.trim().to_string();
                match self.kind {
                    PromptKind::Search if text.is_empty() => Reply::Do(Intent::Close(None)),
                    PromptKind::Search => Reply::Do(Intent::Search(text)),
                    PromptKind::SaveAs if text.is_empty() => Reply::Consumed,
                    PromptKind::SaveAs => Reply::Do(Intent::SaveTo(PathBuf::from(text))),
                }
            }
            (Some(a), _) => Reply::Pass(a),
            (None, Some(c)) => {
                self.input.push(c);
                Reply::Consumed
            }
            (None, None) => Reply::Consumed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(c: char) -> Key {
        Key { action: None, typed: Some(c) }
    }

    fn act(a: Action) -> Key {
        Key { action: Some(a), typed: None }
    }

    #[test]
    fn the_form_refuses_a_bad_value_and_keeps_the_rest() {
        let mut f = LimitsForm::new(&Limits::default(), "process");
        f.selected = 2;
        f.fields[2].1.clear();
        for c in "256Q".chars() {
            f.key(typed(c));
        }
        assert!(matches!(f.key(act(Action::Accept)), Reply::Consumed));
        assert!(f.error.as_deref().is_some_and(|e| e.starts_with("memory:")), "{:?}", f.error);
        f.key(act(Action::Backspace));
        f.key(typed('M'));
        let Reply::Do(Intent::ApplyLimits(l, secrets)) = f.key(act(Action::Accept)) else { panic!("accepted") };
        assert_eq!(l.memory_bytes, 256 << 20);
        assert_eq!(l.pids, Limits::default().pids);
        assert!(secrets.is_empty());
    }

    #[test]
    fn the_form_picks_secrets_the_config_declares_by_name_only() {
        let offered = vec!["API_KEY".to_string(), "GH_TOKEN".to_string()];
        let at = LimitField::ALL.iter().position(|f| *f == LimitField::Secrets).unwrap();
        let mut f = LimitsForm::new(&Limits::default(), "process").with_secrets(&["API_KEY".into()], offered.clone());
        assert_eq!(f.fields[at].1, "API_KEY");
        f.selected = at;
        for c in ", NOPE".chars() {
            f.key(typed(c));
        }
        assert!(matches!(f.key(act(Action::Accept)), Reply::Consumed));
        let e = f.error.clone().unwrap_or_default();
        assert!(e.contains("no [secrets.NOPE]") && e.contains("API_KEY, GH_TOKEN"), "{e}");
        for _ in 0..4 {
            f.key(act(Action::Backspace));
        }
        for c in "GH_TOKEN,API_KEY".chars() {
            f.key(typed(c));
        }
        let Reply::Do(Intent::ApplyLimits(_, secrets)) = f.key(act(Action::Accept)) else { panic!("accepted") };
        assert_eq!(secrets, ["API_KEY", "GH_TOKEN"]);
        // A tier without sandbench's egress proxy takes none.
        let mut f = LimitsForm::new(&Limits::default(), "bwrap").with_secrets(&["API_KEY".into()], offered);
        assert!(matches!(f.key(act(Action::Accept)), Reply::Consumed));
        assert!(f.error.as_deref().is_some_and(|e| e.contains("takes no secrets")), "{:?}", f.error);
    }

    #[test]
    fn every_field_shows_what_it_parses_back_to() {
        let l = Limits { cpu_time: std::time::Duration::from_millis(1500), ..Limits::default() };
        let f = LimitsForm::new(&l, "process");
        let mut again = Limits::default();
        for (field, text) in &f.fields {
            field.set(&mut again, text).unwrap();
        }
        assert_eq!(again.cpu_time, l.cpu_time);
        assert_eq!(again.memory_bytes, l.memory_bytes);
    }

    fn sample(name: &str, group: &str) -> Sample {
        let text = format!("# name: {name}\n# tries: t\n# must: m\n# expect: *=ok\nprint(1)\n");
        Sample::parse(std::path::Path::new(&format!("{group}/{name}.py")), text).unwrap()
    }

    #[test]
    fn the_gauntlet_set_up_chooses_tiers_and_samples_and_counts_the_runs() {
        let tiers = vec![
            ("process".to_string(), None),
            ("docker".to_string(), None),
            ("e2b".to_string(), Some("no key".to_string())),
            ("bwrap".to_string(), None),
        ];
        let samples = vec![sample("hello", "benign"), sample("fork-bomb", "hostile"), sample("mount", "hostile")];
        // By default sandbench's own ready tiers and every sample.
        let mut s = GauntletSetup::new(tiers.clone(), samples.clone(), None);
        assert_eq!(s.chosen_tiers(), ["process", "docker"]);
        assert_eq!(s.runs(), 6);
        // A tier that cannot run cannot be chosen.
        s.key(act(Action::Down));
        s.key(act(Action::Down));
        s.key(act(Action::Toggle));
        assert_eq!(s.chosen_tiers(), ["process", "docker"]);
        s.key(act(Action::Down));
        s.key(act(Action::Toggle));
        assert_eq!(s.chosen_tiers(), ["process", "docker", "bwrap"]);
        // Tab to the samples: none, then one.
        s.key(act(Action::NextList));
        s.key(act(Action::ToggleAll));
        assert_eq!(s.runs(), 0);
        assert!(matches!(s.key(act(Action::Accept)), Reply::Say(Level::Warn, _)));
        s.key(act(Action::Down));
        s.key(act(Action::Toggle));
        let Reply::Do(Intent::StartGauntlet { tiers: t, samples: chosen }) = s.key(act(Action::Accept)) else {
            panic!("Enter starts it")
        };
        assert_eq!(t, ["process", "docker", "bwrap"]);
        assert_eq!(chosen.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["fork-bomb"]);
        // The next set-up starts from the last choice.
        let last = (t, vec!["hello".to_string(), "mount".to_string()]);
        let again = GauntletSetup::new(tiers, samples, Some(&last));
        assert_eq!((again.chosen_tiers().len(), again.runs()), (3, 3));
    }

    #[test]
    fn the_gauntlet_set_ups_filter_ranks_like_f2_and_all_means_those_shown() {
        let tiers = vec![("process".to_string(), None)];
        let samples = vec![
            sample("js-memory-bomb", "hostile"),
            sample("daemon", "hostile"),
            sample("memory-bomb", "hostile"),
            sample("fork-bomb", "hostile"),
            sample("hello", "benign"),
        ];
        let mut s = GauntletSetup::new(tiers, samples, None);
        let chars = |s: &mut GauntletSetup, text: &str| text.chars().for_each(|c| drop(s.key(typed(c))));
        // `/` starts the filter in the samples list; `a` and Space are typed.
        s.key(act(Action::Search));
        assert!(s.in_samples && s.filtering);
        chars(&mut s, "memory-b");
        let names =
            |s: &GauntletSetup| s.visible_samples().iter().map(|i| s.samples[*i].0.name.clone()).collect::<Vec<_>>();
        // The name's prefix first, then names that contain it.
        assert_eq!(names(&s), ["memory-bomb", "js-memory-bomb"]);
        assert_eq!(s.cursor[1], 0);
        s.key(act(Action::Accept));
        assert!(!s.filtering && s.filter == "memory-b");
        // `a` leaves out (then chooses) only the samples shown.
        s.key(act(Action::ToggleAll));
        assert_eq!(s.runs(), 3);
        // Space toggles the one under the cursor, among those shown.
        s.key(act(Action::Toggle));
        let chosen: Vec<String> = s.chosen_samples().iter().map(|x| x.name.clone()).collect();
        assert_eq!(chosen, ["daemon", "memory-bomb", "fork-bomb", "hello"]);
        // Esc clears the filter first, then closes.
        assert!(matches!(s.key(act(Action::Close)), Reply::Consumed));
        assert_eq!(s.visible_samples().len(), 5);
        s.key(act(Action::Search));
        chars(&mut s, "fork ab");
        assert!(s.visible_samples().is_empty(), "typed `a` and Space are the filter's");
        s.key(act(Action::Backspace));
        s.key(act(Action::Backspace));
        s.key(act(Action::Backspace));
        assert_eq!(names(&s), ["fork-bomb"]);
        s.key(act(Action::Close));
        assert!(s.filter.is_empty() && !s.filtering);
        assert!(matches!(s.key(act(Action::Close)), Reply::Do(Intent::Close(_))));
    }

    #[test]
    fn an_empty_search_closes_and_an_empty_name_waits() {
        let mut p = Prompt { kind: PromptKind::Search, input: "  ".into() };
        assert!(matches!(p.key(act(Action::Accept)), Reply::Do(Intent::Close(None))));
        let mut p = Prompt { kind: PromptKind::SaveAs, input: String::new() };
        assert!(matches!(p.key(act(Action::Accept)), Reply::Consumed));
    }
}
