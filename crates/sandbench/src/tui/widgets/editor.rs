//! The editor pane: line numbers, cached highlighting, selection, cursor.

use ratatui::layout::{Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use super::common::{pane, EDITOR_TAB};
use super::scene::Scene;
use crate::tui::editor::{display_col, Pos};
use crate::tui::types::Focus;

/// Columns of the line-number gutter (digits + a space).
pub fn gutter_width(lines: usize) -> u16 {
    (lines.max(1).ilog10() as u16 + 1).max(2) + 1
}

pub fn draw(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let e = &sc.editor;
    let focused = sc.focus == Focus::Editor;
    let title = format!(" code · {}{} · {} ", sc.label, if e.modified() { " [+]" } else { "" }, sc.language.name());
    let block = pane(sc.theme, title, focused);
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    let gutter = gutter_width(e.lines().len());
    let text_w = inner.width.saturating_sub(gutter) as usize;
    let (top, left) = e.scroll;
    let sel = e.selection();
    let mut lines = vec![];
    for row in top..(top + inner.height as usize).min(e.lines().len()) {
        let num_style = if row == e.cursor.row { Style::new().fg(t.ui.fg) } else { Style::new().fg(t.ui.line_number) };
        let mut spans = vec![Span::styled(format!("{:>w$} ", row + 1, w = gutter as usize - 1), num_style)];
        let plain;
        let segs: &[(Style, String)] = match sc.highlighter.and_then(|h| h.line(row)) {
            Some(s) => s,
            None => {
                plain = vec![(Style::new().fg(t.ui.fg), e.lines()[row].clone())];
                &plain
            }
        };
        let line_bg = if row == e.cursor.row && focused { Some(t.ui.cursor_line) } else { None };
        spans.extend(render_line(segs, row, sel, left, text_w, t.ui.selection_bg, line_bg));
        lines.push(Line::from(spans));
    }
    f.render_widget(Paragraph::new(lines), inner);
    if focused && sc.overlay.is_none() {
        let dc = display_col(&e.lines()[e.cursor.row], e.cursor.col, EDITOR_TAB);
        let x = inner.x + gutter + (dc.saturating_sub(left)) as u16;
        let y = inner.y + (e.cursor.row - top) as u16;
        if x < inner.right() && y < inner.bottom() {
            f.set_cursor_position(Position { x, y });
        }
    }
}

/// One editor line: tabs expanded, scrolled by `left` columns, cut at
/// `width`, the selection and the cursor line painted.
fn render_line(
    segs: &[(Style, String)],
    row: usize,
    sel: Option<(Pos, Pos)>,
    left: usize,
    width: usize,
    sel_bg: ratatui::style::Color,
    line_bg: Option<ratatui::style::Color>,
) -> Vec<Span<'static>> {
    let mut out: Vec<Span<'static>> = vec![];
    let mut col = 0usize; // display column
    let mut idx = 0usize; // char index
    let selected = |i: usize| match sel {
        Some((s, e)) => Pos { row, col: i } >= s && Pos { row, col: i } < e,
        None => false,
    };
    let push = |out: &mut Vec<Span<'static>>, style: Style, s: &str| match out.last_mut() {
        Some(last) if last.style == style => last.content.to_mut().push_str(s),
        _ => out.push(Span::styled(s.to_string(), style)),
    };
    'outer: for (style, text) in segs {
        for c in text.chars() {
            let (w, glyph) = if c == '\t' {
                (EDITOR_TAB - col % EDITOR_TAB, None)
            } else if c.is_control() {
                (1, Some('�'))
            } else {
                (c.width().unwrap_or(0), Some(c))
            };
            let mut st = *style;
            if let Some(bg) = line_bg {
                st = st.bg(bg);
            }
            if selected(idx) {
                st = st.bg(sel_bg);
            }
            for k in 0..w.max(1) {
                let dc = col + k;
                if dc < left {
                    continue;
                }
                if dc + w.saturating_sub(k) > left + width && dc >= left + width {
                    break 'outer;
                }
                match glyph {
                    Some(g) if k == 0 && dc + w <= left + width => push(&mut out, st, g.encode_utf8(&mut [0; 4])),
                    Some(_) if k == 0 => break 'outer,
                    Some(_) => {}
                    None => push(&mut out, st, " "),
                }
            }
            col += w;
            idx += 1;
        }
    }
    // Show a selected line break as one painted column.
    if sel.is_some() && selected(idx) && col >= left && col < left + width {
        push(&mut out, Style::new().bg(sel_bg), " ");
    }
    out
}
