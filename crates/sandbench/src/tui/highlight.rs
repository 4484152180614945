//! Syntax highlighting, cached per line and computed off the render path:
//! the app's tick highlights dirty lines (from the first edited row down to
//! the visible end, within a time budget); `draw` only borrows cached spans
//! and shows a line plain until it is highlighted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::style::{Color, Modifier, Style};
use syntect::highlighting::{
    FontStyle, HighlightIterator, HighlightState, Highlighter as SynHighlighter, Theme, ThemeSet,
};
use syntect::parsing::{ParseState, ScopeStack, SyntaxReference, SyntaxSet};

use crate::spec::Language;

/// Syntaxes and themes, loaded once (slow in debug builds: done on a
/// blocking thread at start-up).
pub struct SyntaxAssets {
    pub syntaxes: SyntaxSet,
    pub themes: ThemeSet,
}

impl SyntaxAssets {
    pub fn load() -> SyntaxAssets {
        let a = SyntaxAssets { syntaxes: SyntaxSet::load_defaults_newlines(), themes: ThemeSet::load_defaults() };
        a.warm_up();
        a
    }

    /// syntect compiles each regex on first use (hundreds of ms in a debug
    /// build): parse typical code once here, on the loading thread, so the
    /// first highlight on the UI thread is not the one that pays.
    fn warm_up(&self) {
        const PY: &str = r#"import os, sys
@dec
class A(B):
    def f(self, x=1, *a, **k) -> int:
        '''doc'''
        s = f"{x!r:>3}" + r'\d' + b'\x00' # c
        return [i for i in range(10) if i % 2 == 0 and not None]
while True:
    try:
        pass
    except Exception as e:
        raise
x = lambda y: y ** 2; print(x(3), 0x1f, 1.5e3)
"#;
        const SH: &str = r#"#!/bin/sh
set -eu
for i in $(seq 1 3); do
  echo "$i ${HOME:-x}" 'q' > /dev/null 2>&1 | cat
done
if [ -n "$1" ]; then f() { local a=$((1+2)); }; fi
case $x in a) ;; esac
while :; do :; done & wait
"#;
        for (ext, code) in [("py", PY), ("sh", SH)] {
            if let Some(syntax) = self.syntaxes.find_syntax_by_extension(ext) {
                let mut ps = ParseState::new(syntax);
                for line in code.split_inclusive('\n') {
                    let _ = ps.parse_line(line, &self.syntaxes);
                }
            }
        }
    }
}

pub type Spans = Vec<(Style, String)>;

/// Lines longer than this are not highlighted (kept plain).
const MAX_HIGHLIGHT_LINE: usize = 4000;

pub struct Highlighter {
    assets: Arc<SyntaxAssets>,
    theme: Theme,
    language: Language,
    /// Parser state at the start of each line; `states[i]` is valid for `i <= cached.len()`.
    states: Vec<(ParseState, HighlightState)>,
    cached: Vec<Spans>,
}

impl Highlighter {
    pub fn new(assets: Arc<SyntaxAssets>, theme_name: &str, language: Language) -> Highlighter {
        let theme = assets
            .themes
            .themes
            .get(theme_name)
            .or_else(|| assets.themes.themes.get("base16-ocean.dark"))
            .cloned()
            .unwrap_or_default();
        let mut h = Highlighter { assets, theme, language, states: vec![], cached: vec![] };
        h.reset();
        h
    }

    fn syntax(&self) -> &SyntaxReference {
        let ext = self.language.extension();
        self.assets
            .syntaxes
            .find_syntax_by_extension(ext)
            .unwrap_or_else(|| self.assets.syntaxes.find_syntax_plain_text())
    }

    fn reset(&mut self) {
        let hl = SynHighlighter::new(&self.theme);
        let start = (ParseState::new(self.syntax()), HighlightState::new(&hl, ScopeStack::new()));
        self.states = vec![start];
        self.cached.clear();
    }

    pub fn set_language(&mut self, language: Language) {
        if language != self.language {
            self.language = language;
            self.reset();
        }
    }

    /// Forget every line from `row` on.
    pub fn invalidate(&mut self, row: usize) {
        self.cached.truncate(row);
        self.states.truncate(row + 1);
    }

    /// Highlight lines up to `upto` (exclusive) within `budget`. Returns
    /// whether anything changed.
    pub fn update(&mut self, lines: &[String], upto: usize, budget: Duration) -> bool {
        let start = Instant::now();
        let upto = upto.min(lines.len());
        let mut changed = false;
        while self.cached.len() < upto {
            let row = self.cached.len();
            let (mut ps, mut hs) = self.states[row].clone();
            let line = &lines[row];
            let spans = if line.len() > MAX_HIGHLIGHT_LINE {
                vec![(Style::new(), line.clone())]
            } else {
                let text = format!("{line}\n");
                match ps.parse_line(&text, &self.assets.syntaxes) {
                    Ok(ops) => {
                        let hl = SynHighlighter::new(&self.theme);
                        let mut out: Spans = vec![];
                        for (st, piece) in HighlightIterator::new(&mut hs, &ops, &text, &hl) {
                            let piece = piece.trim_end_matches('\n');
                            if !piece.is_empty() {
                                out.push((to_style(st), piece.to_string()));
                            }
                        }
                        out
                    }
                    Err(_) => vec![(Style::new(), line.clone())],
                }
            };
            self.cached.push(spans);
            self.states.push((ps, hs));
            changed = true;
            if start.elapsed() > budget {
                break;
            }
        }
        changed
    }

    pub fn line(&self, row: usize) -> Option<&Spans> {
        self.cached.get(row)
    }
}

fn to_style(s: syntect::highlighting::Style) -> Style {
    let c = s.foreground;
    let mut st = Style::new().fg(Color::Rgb(c.r, c.g, c.b));
    if s.font_style.contains(FontStyle::BOLD) {
        st = st.add_modifier(Modifier::BOLD);
    }
    if s.font_style.contains(FontStyle::ITALIC) {
        st = st.add_modifier(Modifier::ITALIC);
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highlights_incrementally_and_invalidates() {
        let assets = Arc::new(SyntaxAssets::load());
        let mut h = Highlighter::new(assets, "base16-ocean.dark", Language::Python);
        let lines: Vec<String> = vec!["def f():".into(), "    return \"s\"".into(), "x = 1".into()];
        assert!(h.update(&lines, 2, Duration::from_secs(5)));
        assert!(h.line(1).is_some());
        assert!(h.line(2).is_none());
        let text: String = h.line(1).unwrap().iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(text, "    return \"s\"");
        // Keywords and strings get different colours.
        let styles: std::collections::HashSet<_> = h.line(1).unwrap().iter().map(|(s, _)| s.fg).collect();
        assert!(styles.len() >= 2);
        h.invalidate(1);
        assert!(h.line(1).is_none());
        assert!(!h.update(&lines, 1, Duration::from_secs(5)));
        assert!(h.update(&lines, 3, Duration::from_secs(5)));
        assert!(h.line(2).is_some());
    }

    #[test]
    fn javascript_has_its_own_syntax() {
        let assets = Arc::new(SyntaxAssets::load());
        let mut h = Highlighter::new(assets, "base16-ocean.dark", Language::Javascript);
        assert_eq!(h.syntax().name, "JavaScript");
        let lines: Vec<String> = vec!["const s = require('fs'); // x".into()];
        assert!(h.update(&lines, 1, Duration::from_secs(5)));
        let styles: std::collections::HashSet<_> = h.line(0).unwrap().iter().map(|(s, _)| s.fg).collect();
        assert!(styles.len() >= 3, "keyword, string and comment are told apart");
    }
}
