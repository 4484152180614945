//! The popups over the workbench — help, the samples picker, the limits
//! form, the save-as and search prompts — each with its own state and keys
//! (see `view` for the contract). Drawn by `widgets::overlays`.

use std::path::PathBuf;

use super::app::Level;
use super::keymap::{self, Action};
use super::scroll::Scroll;
use super::view::{Intent, Key, Reply};
use crate::samples::Sample;
use crate::spec::{self, format_duration, format_size, Limits};

pub enum Overlay {
    Help(Help),
    Samples(SamplesPicker),
    Limits(LimitsForm),
    Prompt(Prompt),
}

impl Overlay {
    pub fn ctx(&self) -> keymap::Ctx {
        match self {
            Overlay::Help(_) => keymap::Ctx::Help,
            Overlay::Samples(_) => keymap::Ctx::Samples,
            Overlay::Limits(_) => keymap::Ctx::Limits,
            Overlay::Prompt(_) => keymap::Ctx::Prompt,
        }
    }

    /// A paste goes into the overlay's text field, if it has one (first line only).
    pub fn paste(&mut self, s: &str) {
        let line = s.lines().next().unwrap_or("");
        match self {
            Overlay::Limits(f) => f.fields[f.selected].1.push_str(line),
            Overlay::Prompt(p) => p.input.push_str(line),
            Overlay::Help(_) | Overlay::Samples(_) => {}
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

pub struct SamplesPicker {
    /// (group: "benign" / "hostile", sample)
    pub items: Vec<(String, Sample)>,
    pub selected: usize,
    pub problems: Vec<String>,
    /// Enter was pressed once over unsaved edits; a second Enter replaces them.
    pub confirm: bool,
}

impl SamplesPicker {
    /// `unsaved`: the editor holds edits a sample would replace.
    pub fn key(&mut self, k: Key, unsaved: bool) -> Reply {
        let n = self.items.len();
        let accept = matches!(k.action, Some(Action::Accept));
        if !accept {
            self.confirm = false;
        }
        match k.action {
            Some(Action::Close) => Reply::Do(Intent::Close(None)),
            Some(Action::Up) => {
                self.selected = self.selected.saturating_sub(1);
                Reply::Consumed
            }
            Some(Action::Down) => {
                self.selected = (self.selected + 1).min(n.saturating_sub(1));
                Reply::Consumed
            }
            Some(Action::PageUp) => {
                self.selected = self.selected.saturating_sub(10);
                Reply::Consumed
            }
            Some(Action::PageDown) => {
                self.selected = (self.selected + 10).min(n.saturating_sub(1));
                Reply::Consumed
            }
            Some(Action::Accept) => match self.items.get(self.selected) {
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
            a => Reply::pass(a),
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
}

impl LimitField {
    pub const ALL: [LimitField; 7] = [
        LimitField::CpuTime,
        LimitField::WallTime,
        LimitField::Memory,
        LimitField::Pids,
        LimitField::FileSize,
        LimitField::Disk,
        LimitField::Output,
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
        }
    }

    pub fn hint(self) -> &'static str {
        match self {
            LimitField::CpuTime | LimitField::WallTime => "e.g. 5s, 500ms, 2m",
            LimitField::Pids => "a whole number",
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
}

impl LimitsForm {
    pub fn new(limits: &Limits, tier: &str) -> LimitsForm {
        let fields = LimitField::ALL.iter().map(|f| (*f, f.get(limits))).collect();
        LimitsForm { fields, selected: 0, error: None, base: limits.clone(), tier: tier.to_string() }
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
                Ok(l) => Reply::Do(Intent::ApplyLimits(l)),
                Err(()) => Reply::Consumed,
            },
            (Some(a), _) => Reply::Pass(a),
            (None, Some(c)) => {
                let t = &mut self.fields[self.selected].1;
                if t.len() < 24 {
                    t.push(c);
                }
                self.error = None;
                Reply::Consumed
            }
            (None, None) => Reply::Consumed,
        }
    }

    /// The values as limits, or the first problem shown in the form.
    fn check(&mut self) -> Result<Limits, ()> {
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
        if let Err(e) = crate::tier::max_limits(&self.tier).check(&self.tier, &l) {
            self.error = Some(e);
            return Err(());
        }
        Ok(l)
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
        let Reply::Do(Intent::ApplyLimits(l)) = f.key(act(Action::Accept)) else { panic!("accepted") };
        assert_eq!(l.memory_bytes, 256 << 20);
        assert_eq!(l.pids, Limits::default().pids);
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

    #[test]
    fn an_empty_search_closes_and_an_empty_name_waits() {
        let mut p = Prompt { kind: PromptKind::Search, input: "  ".into() };
        assert!(matches!(p.key(act(Action::Accept)), Reply::Do(Intent::Close(None))));
        let mut p = Prompt { kind: PromptKind::SaveAs, input: String::new() };
        assert!(matches!(p.key(act(Action::Accept)), Reply::Consumed));
    }
}
