//! Compare view: one live column per tier (its latest run), then the
//! engine's summary table of every run so far.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use super::side::draw_run_resources;
use super::{bold, outcome_style, output, pane};
use crate::tui::app::App;
use crate::tui::run_view::{OutLine, RunView};

pub fn draw(app: &App, f: &mut Frame, area: Rect) {
    let runs: Vec<&RunView> = app.compare.iter().filter_map(|id| app.runs.get(id)).collect();
    if runs.is_empty() {
        f.render_widget(
            Paragraph::new("no compare yet: F6 runs the code on every available tier").block(pane(
                app,
                " compare ",
                true,
            )),
            area,
        );
        return;
    }
    let summary_h = (runs.len() as u16 + 3).min(area.height / 2);
    let [cols_area, summary] = Layout::vertical([Constraint::Min(6), Constraint::Length(summary_h)]).areas(area);
    // The frontier right of the columns when there is one and room for it.
    let (points, missing) = app.frontier();
    let cols_area = if !points.is_empty() && cols_area.width >= 110 && cols_area.height >= 10 {
        let [cols, chart] = Layout::horizontal([Constraint::Min(60), Constraint::Length(48)]).areas(cols_area);
        super::frontier::draw(app, f, chart, &points, &missing);
        cols
    } else {
        cols_area
    };
    let cols = Layout::horizontal(vec![Constraint::Ratio(1, runs.len() as u32); runs.len()]).split(cols_area);
    for (run, col) in runs.iter().zip(cols.iter()) {
        draw_column(app, run, f, *col);
    }
    draw_summary(app, &runs, f, summary);
}

fn draw_column(app: &App, run: &RunView, f: &mut Frame, area: Rect) {
    let focused = app.current == Some(run.id);
    let block = pane(app, format!(" {} · {} ", run.tier, run.state_line()), focused);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let res_h = (7 + run.violations.len() as u16 + if run.finished() { 2 } else { 0 }).min(inner.height / 2 + 2);
    let [res, out] = Layout::vertical([Constraint::Length(res_h), Constraint::Min(0)]).areas(inner);
    draw_run_resources(app, run, f, res, false);
    // The tail of the output.
    let partials: Vec<OutLine> = run.partials().collect();
    let n = run.lines.len() + partials.len();
    let rows = out.height as usize;
    let lines: Vec<Line> = run
        .lines
        .iter()
        .chain(partials.iter())
        .skip(n.saturating_sub(rows))
        .map(|l| output::render(app, l, 0, out.width as usize))
        .collect();
    f.render_widget(Paragraph::new(lines), out);
}

/// The engine's summary table (the one every export writes), the tier
/// column fixed and the others scrolled with ←/→.
fn draw_summary(app: &App, runs: &[&RunView], f: &mut Frame, area: Rect) {
    use sandbench_core::compare::{self, Mode, COLUMNS};
    let t = &app.theme;
    let Some(c) = app.compare_run.as_ref() else { return };
    let s = c.summary();
    let live = runs.iter().any(|r| !r.finished()) || !c.queue.is_empty();
    let mode = match s.mode {
        Mode::Sequential => "one tier at a time".to_string(),
        Mode::Concurrent => "CONCURRENT (timings skew each other)".to_string(),
    };
    let title = format!(
        " summary{} · {}/{} runs · {mode} · ←→ columns · m/j/v export ",
        if live { " (live)" } else { "" },
        c.reports.len(),
        c.total()
    );
    let rows = compare::rows(&s);
    let skip = app.compare_view.hscroll.min(COLUMNS.len() - 2);
    let width = |i: usize| {
        rows.iter().map(|r| r[i].chars().count()).chain([COLUMNS[i].chars().count()]).max().unwrap_or(4) as u16
    };
    // Whole columns only: as many as fit after the tier column.
    let room = area.width.saturating_sub(2);
    let mut used = width(0);
    let mut shown = vec![0];
    for i in 1 + skip..COLUMNS.len() {
        if used + 2 + width(i) > room && shown.len() > 1 {
            break;
        }
        used += 2 + width(i);
        shown.push(i);
    }
    let header = Row::new(shown.iter().map(|i| COLUMNS[*i])).style(bold(Style::new().fg(t.ui.title)));
    let body = rows.iter().zip(&s.tiers).map(|(r, ts)| {
        let verdict_style = if ts.outcomes.keys().all(|k| k == "ok") {
            outcome_style(app, crate::report::Outcome::Ok).0
        } else {
            Style::new().fg(t.ui.violation)
        };
        Row::new(shown.iter().map(|i| {
            let st = match *i {
                0 => bold(Style::new().fg(t.ui.accent)),
                12 => verdict_style,
                _ => Style::new().fg(t.ui.fg),
            };
            Cell::from(Span::styled(r[*i].clone(), st))
        }))
    });
    let widths: Vec<Constraint> = shown.iter().map(|i| Constraint::Length(width(*i))).collect();
    let table = Table::new(body, widths).header(header).block(pane(app, Line::from(title), false)).column_spacing(2);
    f.render_widget(table, area);
}
