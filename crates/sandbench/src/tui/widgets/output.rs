//! The output pane: sanitized stdout/stderr, phase and violation lines.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use super::common::{bold, outcome_style, pane};
use super::scene::Scene;
use crate::tui::run_view::{Origin, OutLine};
use crate::tui::theme::Theme;
use crate::tui::types::Focus;

pub fn draw(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let focused = sc.focus == Focus::Output;
    let Some(run) = sc.current_run() else {
        let block = pane(sc.theme, " output ", focused);
        let hint = Line::from(vec![
            Span::styled("F5", t.key()),
            Span::styled(" runs the code on the selected tier, ", t.dim()),
            Span::styled("F6", t.key()),
            Span::styled(" on every tier", t.dim()),
        ]);
        f.render_widget(Paragraph::new(hint).block(block), area);
        return;
    };
    let mut title =
        format!(" output · {} · {} ", run.tier, if sc.output.scroll.follows() { "following" } else { "scrolled" });
    if !run.secrets.is_empty() {
        // Names only: a run's header never holds a value.
        title.push_str(&format!("· secrets {} ", run.secrets.join(",")));
    }
    if run.lines.dropped > 0 {
        title.push_str(&format!("· {} dropped ", run.lines.dropped));
    }
    let block = pane(sc.theme, title, focused);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let rows = inner.height as usize;
    let top = sc.output_top.saturating_sub(run.lines.dropped) as usize;
    let partials: Vec<OutLine> = run.partials().collect();
    let all = run.lines.iter().chain(partials.iter());
    // The search's matches are highlighted, the current match's line marked.
    let query: Option<Vec<char>> = sc.output.search.as_ref().map(|q| lower(q)).filter(|q| !q.is_empty());
    let first = run.lines.dropped + top as u64;
    let lines: Vec<Line> = all
        .skip(top)
        .take(rows)
        .enumerate()
        .map(|(i, l)| {
            let current = sc.output.found == Some(first + i as u64);
            render_marked(sc.theme, l, sc.output.hscroll, inner.width as usize, query.as_deref(), current)
        })
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}

/// Lowercase, one char for one char (so positions carry over).
fn lower(s: &str) -> Vec<char> {
    s.chars().map(|c| c.to_lowercase().next().unwrap_or(c)).collect()
}

/// Char positions of `line` inside a match of `q`.
fn matched(line: &[char], q: &[char]) -> Vec<bool> {
    let mut hit = vec![false; line.len()];
    if q.is_empty() || q.len() > line.len() {
        return hit;
    }
    for i in 0..=line.len() - q.len() {
        if line[i..i + q.len()] == *q {
            hit[i..i + q.len()].iter_mut().for_each(|h| *h = true);
        }
    }
    hit
}

pub fn origin_style(theme: &Theme, o: Origin) -> Style {
    let t = &theme.ui;
    match o {
        Origin::Stdout => Style::new().fg(t.stdout),
        Origin::Stderr => Style::new().fg(t.stderr),
        Origin::Phase | Origin::Exit => Style::new().fg(t.phase),
        Origin::Note => Style::new().fg(t.note),
        Origin::Violation => bold(Style::new().fg(t.violation)),
        Origin::Outcome(o) => outcome_style(theme, o).0,
    }
}

/// One output line: a one-column gutter (stderr is marked), the text from
/// display column `left`, at most `width` columns, a note when it was cut.
pub fn render(theme: &Theme, l: &OutLine, left: usize, width: usize) -> Line<'static> {
    render_marked(theme, l, left, width, None, false)
}

/// `render`, with the matches of `query` (lowercased) highlighted and, for
/// the current match, a marker in the gutter.
fn render_marked(
    theme: &Theme,
    l: &OutLine,
    left: usize,
    width: usize,
    query: Option<&[char]>,
    current: bool,
) -> Line<'static> {
    let base = origin_style(theme, l.origin);
    let hits = query.map(|q| matched(&lower(l.line.text()), q)).unwrap_or_default();
    let hl = Style::new().fg(theme.ui.bg).bg(theme.ui.warn);
    let gutter = match l.origin {
        _ if current => Span::styled("▶", bold(Style::new().fg(theme.ui.warn))),
        Origin::Stderr => Span::styled("▍", Style::new().fg(theme.ui.stderr)),
        _ => Span::raw(" "),
    };
    let mut spans = vec![gutter];
    let mut col = 0usize;
    // A cut line ends with how much was cut, always visible.
    let note = (l.line.cut > 0).then(|| format!(" …+{}", l.line.cut));
    let room = width.saturating_sub(1).saturating_sub(note.as_ref().map_or(0, |n| n.chars().count()));
    let mut used = 0usize;
    let mut at = 0usize;
    'outer: for (style, text) in l.line.segments() {
        let plain = base.patch(style);
        let mut s = String::new();
        let mut lit = false;
        for c in text.chars() {
            let w = c.width().unwrap_or(0);
            let hit = hits.get(at).copied().unwrap_or(false);
            at += 1;
            if col >= left {
                if used + w > room {
                    if !s.is_empty() {
                        spans.push(Span::styled(std::mem::take(&mut s), if lit { hl } else { plain }));
                    }
                    break 'outer;
                }
                if hit != lit && !s.is_empty() {
                    spans.push(Span::styled(std::mem::take(&mut s), if lit { hl } else { plain }));
                }
                lit = hit;
                s.push(c);
                used += w;
            }
            col += w;
        }
        if !s.is_empty() {
            spans.push(Span::styled(s, if lit { hl } else { plain }));
        }
    }
    if let Some(n) = note {
        spans.push(Span::styled(n, Style::new().fg(theme.ui.dim)));
    }
    Line::from(spans)
}
