//! Compare view: one live column per tier, then a summary table.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use super::side::{draw_run_resources, phase_times};
use super::{bold, outcome_style, output, pane};
use crate::tui::app::App;
use crate::tui::run_view::{fmt_ms, OutLine, RunView};

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

fn draw_summary(app: &App, runs: &[&RunView], f: &mut Frame, area: Rect) {
    let t = &app.theme;
    let all_done = runs.iter().all(|r| r.finished());
    let title = if all_done { " summary " } else { " summary (live) " };
    let header = Row::new(["tier", "setup", "run", "teardown", "total", "outcome", "violations"])
        .style(bold(Style::new().fg(t.ui.title)));
    let opt = |v: Option<f64>| v.map(fmt_ms).unwrap_or_else(|| "…".into());
    let rows = runs.iter().map(|r| {
        let (setup, ran, down) = phase_times(r);
        let outcome = match &r.report {
            Some(rep) => {
                let (st, glyph) = outcome_style(app, rep.outcome);
                Cell::from(Span::styled(format!("{glyph} {}", rep.outcome.name()), st))
            }
            None => Cell::from(Span::styled(r.phase().map(|p| p.name()).unwrap_or("starting"), t.dim())),
        };
        let viol = if r.violations.is_empty() {
            Cell::from(Span::styled("none", t.dim()))
        } else {
            let v: Vec<String> =
                r.violations.iter().map(|v| format!("{}@{}", v.kind.name(), fmt_ms(v.at_ms))).collect();
            Cell::from(Span::styled(v.join(" "), Style::new().fg(t.ui.violation)))
        };
        let total = r.report.as_ref().map(|rep| fmt_ms(rep.timings_ms.total)).unwrap_or_else(|| "…".into());
        Row::new(vec![
            Cell::from(Span::styled(r.tier.clone(), bold(Style::new().fg(t.ui.accent)))),
            Cell::from(opt(setup)),
            Cell::from(opt(ran)),
            Cell::from(opt(down)),
            Cell::from(total),
            outcome,
            viol,
        ])
        .style(Style::new().fg(t.ui.fg))
    });
    let widths = [
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Min(10),
    ];
    let table = Table::new(rows, widths).header(header).block(pane(app, Line::from(title), false)).column_spacing(1);
    f.render_widget(table, area);
}
