//! Drawing. Everything here only reads the app (`&App`): no highlighting,
//! no parsing, no I/O — that happens in `App::prepare` and the event loop.

mod agent;
mod compare;
mod editor;
pub mod frontier;
pub mod gauntlet;
mod output;
mod overlays;
pub mod runs;
mod side;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::Frame;

use super::app::{App, Areas, Level, View};
use super::keymap;

/// Tab stops in the editor (the file keeps its tabs).
pub const EDITOR_TAB: usize = 4;

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

fn main_layout(app: &App, area: Rect) -> Main {
    let [body, status, keybar] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1), Constraint::Length(1)]).areas(area);
    let right_w = (area.width * 32 / 100).clamp(26, 44).min(area.width / 2);
    let [left, right] = Layout::horizontal([Constraint::Min(10), Constraint::Length(right_w)]).areas(body);
    let [editor, output] = Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(left);
    let tiers_h = side::tiers_height(app, right.width).max(app.tiers.len() as u16 + 3).min(right.height / 2);
    let [tiers, resources] = Layout::vertical([Constraint::Length(tiers_h), Constraint::Min(3)]).areas(right);
    Main { body, status, keybar, left, editor, output, tiers, resources }
}

/// Pane areas for `App::prepare` (paging and scrolling need their sizes).
pub fn areas(app: &App, area: Rect) -> Areas {
    let m = main_layout(app, area);
    let (list_rows, detail_rows) = match app.view {
        View::Gauntlet => gauntlet::rows(app, m.body),
        View::Agent => (0, agent::rows(m.body)),
        View::Runs => runs::rows(app, m.body),
        _ => (0, 0),
    };
    Areas { editor: m.editor, output: m.output, list_rows, detail_rows }
}

pub fn draw(app: &App, f: &mut Frame) {
    let area = f.area();
    f.render_widget(Block::new().style(app.theme.base()), area);
    let m = main_layout(app, area);
    match app.view {
        View::Single => {
            editor::draw(app, f, m.editor);
            output::draw(app, f, m.output);
            side::draw_tiers(app, f, m.tiers);
            side::draw_resources(app, f, m.resources);
        }
        View::Compare => {
            let _ = m.left;
            compare::draw(app, f, m.body);
        }
        View::Gauntlet => gauntlet::draw(app, f, m.body),
        View::Agent => agent::draw(app, f, m.body),
        View::Runs => runs::draw(app, f, m.body),
    }
    draw_status(app, f, m.status);
    draw_keybar(app, f, m.keybar);
    overlays::draw(app, f, area);
}

fn draw_status(app: &App, f: &mut Frame, area: Rect) {
    let t = &app.theme;
    let line = match &app.status {
        Some(s) => {
            let c = match s.level {
                Level::Info => t.ui.fg,
                Level::Warn => t.ui.warn,
                Level::Error => t.ui.error,
            };
            Line::from(Span::styled(format!(" {}", s.text), Style::new().fg(c)))
        }
        None => {
            let tier = app.selected_tier();
            let state = match &tier.avail {
                None => "probing…".to_string(),
                Some(a) if a.available => "ready".into(),
                Some(_) => "unavailable".into(),
            };
            let l = &app.limits;
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
            ])
        }
    };
    f.render_widget(Paragraph::new(line), area);
}

fn draw_keybar(app: &App, f: &mut Frame, area: Rect) {
    let t = &app.theme;
    let mut spans = vec![];
    let mut used = 0usize;
    for (key, label) in keymap::bar(&app.contexts()) {
        let w = key.chars().count() + label.chars().count() + 2;
        if used + w > area.width as usize {
            break;
        }
        used += w;
        spans.push(Span::styled(key.to_string(), t.key()));
        spans.push(Span::styled(format!(" {label} "), Style::new().fg(t.ui.fg)));
    }
    f.render_widget(Paragraph::new(Line::from(spans)).style(Style::new().bg(t.ui.keybar_bg)), area);
}

/// A bordered block in the theme's colours.
fn pane<'a>(app: &App, title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    Block::bordered()
        .border_style(app.theme.border(focused))
        .title(title.into().style(app.theme.title(focused)))
        .style(app.theme.base())
}

fn bold(s: Style) -> Style {
    s.add_modifier(Modifier::BOLD)
}

/// A centred rectangle of at most `w` × `h` inside `area`.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

/// Style and glyph of an outcome.
fn outcome_style(app: &App, o: crate::report::Outcome) -> (Style, &'static str) {
    use crate::report::Outcome::*;
    let t = &app.theme;
    match o {
        Ok => (bold(Style::new().fg(t.ui.ok)), "✔"),
        Violation => (bold(Style::new().fg(t.ui.violation)), "✖"),
        Error => (bold(Style::new().fg(t.ui.error)), "‼"),
        Cancelled => (bold(Style::new().fg(t.ui.warn)), "■"),
    }
}
