//! Drawing. Everything here reads a [`Scene`] — the views, the theme and
//! the facts of one frame, lent by the app — never the app itself: no
//! highlighting, no parsing, no I/O (that happens in `App::prepare` and the
//! event loop), and the widgets sit below the app in the front end's layers.

mod agent;
mod common;
mod compare;
mod editor;
pub mod frontier;
pub mod gauntlet;
mod histogram;
mod output;
mod overlays;
pub mod runs;
mod scene;
mod side;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::keymap;
use super::types::{Areas, Level, View};

pub use common::EDITOR_TAB;
pub use scene::Scene;

pub use editor::gutter_width;

struct Main {
    body: Rect,
    status: Rect,
    keybar: Rect,
    left: Rect,
    editor: Rect,
    output: Rect,
    tiers: Rect,
    resources: Rect,
}

fn main_layout(sc: &Scene, area: Rect) -> Main {
    let [body, status, keybar] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1), Constraint::Length(1)]).areas(area);
    let right_w = (area.width * 32 / 100).clamp(26, 44).min(area.width / 2);
    let [left, right] = Layout::horizontal([Constraint::Min(10), Constraint::Length(right_w)]).areas(body);
    let [editor, output] = Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(left);
    let tiers_h = side::tiers_height(sc, right.width).max(sc.tiers.len() as u16 + 3).min(right.height / 2);
    let [tiers, resources] = Layout::vertical([Constraint::Length(tiers_h), Constraint::Min(3)]).areas(right);
    Main { body, status, keybar, left, editor, output, tiers, resources }
}

/// Pane areas for `App::prepare` (paging and scrolling need their sizes).
pub fn areas(sc: &Scene, area: Rect) -> Areas {
    let m = main_layout(sc, area);
    let (list_rows, detail_rows) = match sc.view {
        View::Gauntlet => gauntlet::rows(sc, m.body),
        View::Agent => (0, agent::rows(m.body)),
        View::Runs => runs::rows(sc.runs_log, m.body),
        _ => (0, 0),
    };
    Areas { editor: m.editor, output: m.output, list_rows, detail_rows }
}

pub fn draw(sc: &Scene, f: &mut Frame) {
    let area = f.area();
    f.render_widget(Block::new().style(sc.theme.base()), area);
    let m = main_layout(sc, area);
    match sc.view {
        View::Single => {
            editor::draw(sc, f, m.editor);
            output::draw(sc, f, m.output);
            side::draw_tiers(sc, f, m.tiers);
            side::draw_resources(sc, f, m.resources);
        }
        View::Compare => {
            let _ = m.left;
            compare::draw(sc, f, m.body);
        }
        View::Gauntlet => gauntlet::draw(sc, f, m.body),
        View::Agent => agent::draw(sc.theme, sc.agent, &sc.selected_tier().name, sc.api_key_set, f, m.body),
        View::Runs => runs::draw(sc.theme, sc.runs_log, f, m.body),
    }
    draw_status(sc, f, m.status);
    draw_keybar(sc, f, m.keybar);
    // Over the body only: the status line (an overlay's warning, e.g.
    // "unsaved changes") and the key bar stay in view.
    overlays::draw(sc, f, m.body);
}

fn draw_status(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let line = match sc.status {
        Some(s) => {
            let c = match s.level {
                Level::Info => t.ui.fg,
                Level::Warn => t.ui.warn,
                Level::Error => t.ui.error,
            };
            Line::from(Span::styled(format!(" {}", s.text), Style::new().fg(c)))
        }
        None => {
            let tier = sc.selected_tier();
            let state = match &tier.avail {
                None => "probing…".to_string(),
                Some(a) if a.available => "ready".into(),
                Some(_) => "unavailable".into(),
            };
            let l = &sc.limits;
            Line::from(vec![
                Span::styled(format!(" {} ", tier.name), t.key()),
                Span::styled(state, t.dim()),
                Span::styled(
                    format!(
                        " · mem {} · cpu {} · wall {} · pids {}",
                        crate::spec::format_size(l.memory_bytes),
                        crate::spec::format_duration(l.cpu_time),
                        crate::spec::format_duration(l.wall_time),
                        l.pids
                    ),
                    t.dim(),
                ),
                Span::styled(
                    if sc.secrets.is_empty() { String::new() } else { format!(" · secrets {}", sc.secrets.join(",")) },
                    t.dim(),
                ),
            ])
        }
    };
    f.render_widget(Paragraph::new(line), area);
}

fn draw_keybar(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let mut spans = vec![];
    // While something runs, F8 keeps its word: it is the key that stops it.
    let keep: &[&str] = if sc.busy { &["F1", "^Q", "F8"] } else { &["F1", "^Q"] };
    for (key, label) in keybar_entries(&keymap::bar(&sc.contexts), area.width as usize, keep) {
        spans.push(Span::styled(key.to_string(), t.key()));
        spans.push(Span::styled(
            if label.is_empty() { " ".into() } else { format!(" {label} ") },
            Style::new().fg(t.ui.fg),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)).style(Style::new().bg(t.ui.keybar_bg)), area);
}

/// The key bar's entries at `width` columns. Every key stays visible: when
/// the labels do not all fit, the global keys lose theirs from the right
/// (F1 help names them all), except those in `keep` (help, quit, and cancel
/// while something runs), then the view's own keys do; only if the bare keys
/// still do not fit are the last ones dropped.
pub fn keybar_entries(
    entries: &[(&'static str, &'static str)],
    width: usize,
    keep: &[&str],
) -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&str, &str)> = entries.to_vec();
    let w = |v: &[(&str, &str)]| -> usize {
        v.iter().map(|(k, l)| k.chars().count() + if l.is_empty() { 1 } else { l.chars().count() + 2 }).sum()
    };
    let global = |k: &str| k.starts_with('F') || k.starts_with('^');
    let mut i = v.len();
    while w(&v) > width && i > 0 {
        i -= 1;
        if global(v[i].0) && !keep.contains(&v[i].0) {
            v[i].1 = "";
        }
    }
    // Still too wide (a view with many keys of its own): its keys lose
    // their labels too, from the right, Esc ("back") last.
    let mut i = v.len();
    while w(&v) > width && i > 0 {
        i -= 1;
        if !global(v[i].0) && v[i].0 != "Esc" {
            v[i].1 = "";
        }
    }
    while w(&v) > width && !v.is_empty() {
        v.pop();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::keybar_entries;
    use crate::tui::keymap::{bar, Ctx};

    #[test]
    fn every_key_stays_in_the_key_bar_at_80_columns() {
        for ctx in [Ctx::Editor, Ctx::Compare, Ctx::Gauntlet, Ctx::Runs, Ctx::Output] {
            let all = bar(&[ctx, Ctx::Global]);
            let shown = keybar_entries(&all, 80, &["F1", "^Q", "F8"]);
            assert_eq!(shown.len(), all.len(), "{ctx:?}: {shown:?}");
            let w: usize =
                shown.iter().map(|(k, l)| k.chars().count() + if l.is_empty() { 1 } else { l.len() + 2 }).sum();
            assert!(w <= 80, "{ctx:?}: {w} columns");
            for k in ["F8", "F9", "F10", "F11"] {
                assert!(shown.iter().any(|(key, _)| *key == k), "{ctx:?} lost {k}");
            }
            assert!(shown.contains(&("^Q", "quit")) && shown.contains(&("F1", "help")), "{ctx:?}: {shown:?}");
            assert!(shown.contains(&("F8", "cancel")), "while something runs F8 says cancel: {ctx:?}: {shown:?}");
        }
        // Wide enough: every label.
        let all = bar(&[Ctx::Editor, Ctx::Global]);
        assert_eq!(keybar_entries(&all, 200, &[]), all);
    }
}
