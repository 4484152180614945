//! Compare view: the engine's summary table of every run so far (a row per
//! tier, always whole), and above it the live state of each tier's latest run
//! — a column per tier when each gets room for its figures, else a row per
//! tier — or, once a compare has repeated runs, a latency histogram per tier
//! (panels when they fit, one line each when not).

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::common::{bold, outcome_style, pane};
use super::output;
use super::scene::Scene;
use super::side::draw_run_resources;
use crate::tui::run_view::{OutLine, RunView};
use crate::tui::theme::Theme;
use crate::units::{duration_ms, or_dash, size_short};

/// Narrowest live column: its resources (`mem 12.0M/256M ───`) and a few
/// words of output. Below it the tiers get a row each.
pub const MIN_COLUMN: u16 = 24;

pub fn draw(sc: &Scene, f: &mut Frame, area: Rect) {
    let runs: Vec<&RunView> = sc.compare.iter().filter_map(|id| sc.runs.get(id)).collect();
    if runs.is_empty() {
        f.render_widget(
            Paragraph::new("no compare yet: F6 runs the code on every available tier").block(pane(
                sc.theme,
                " compare ",
                true,
            )),
            area,
        );
        return;
    }
    // The summary is the result: a row for every tier, whole, whatever the
    // height; the live area gets the rest.
    let tiers = sc.compare_run.map_or(runs.len(), |c| c.tiers.len());
    let summary_h = (tiers as u16 + 3).min(area.height.saturating_sub(3)).max(4.min(area.height));
    let [cols_area, summary] = Layout::vertical([Constraint::Min(0), Constraint::Length(summary_h)]).areas(area);
    // The frontier right of the columns when there is one and room for it.
    let fr =
        sc.frontier.as_ref().filter(|fr| !fr.points.is_empty() && cols_area.width >= 110 && cols_area.height >= 10);
    let cols_area = if let Some(fr) = fr {
        let chart_w = (cols_area.width * 2 / 5).clamp(48, 90);
        let [cols, chart] = Layout::horizontal([Constraint::Min(60), Constraint::Length(chart_w)]).areas(cols_area);
        super::frontier::draw(sc.theme, f, chart, fr);
        cols
    } else {
        cols_area
    };
    let live = runs.iter().any(|r| !r.finished()) || sc.compare_run.is_some_and(|c| !c.queue.is_empty());
    match sc.compare_run.filter(|c| c.show_dist(live)) {
        Some(c) => super::histogram::draw(sc.theme, f, cols_area, &c.summary().tiers),
        None if cols_area.width / runs.len().max(1) as u16 >= MIN_COLUMN => {
            let cols = Layout::horizontal(vec![Constraint::Ratio(1, runs.len() as u32); runs.len()]).split(cols_area);
            for (run, col) in runs.iter().zip(cols.iter()) {
                draw_column(sc, run, f, *col);
            }
        }
        None => draw_rows(sc, &runs, f, cols_area),
    }
    draw_summary(sc, &runs, f, summary);
}

/// A row per tier when columns would be too narrow to read: state and time,
/// CPU, memory and pids against their limits, and the newest output line.
fn draw_rows(sc: &Scene, runs: &[&RunView], f: &mut Frame, area: Rect) {
    if area.height < 3 {
        return;
    }
    // Room left under the rows: the output of the run in progress (or the last).
    let table_h = (runs.len() as u16 + 3).min(area.height);
    let [area, below] = Layout::vertical([Constraint::Length(table_h), Constraint::Min(0)]).areas(area);
    if below.height >= 4 {
        if let Some(run) = sc.current.and_then(|id| runs.iter().find(|r| r.id == id)) {
            let block = pane(sc.theme, format!(" output · {} · {} ", run.tier, run.state_line()), false);
            let inner = block.inner(below);
            f.render_widget(block, below);
            f.render_widget(Paragraph::new(tail(sc.theme, run, inner)), inner);
        }
    }
    let t = sc.theme;
    let header = Row::new(["tier", "state", "cpu", "mem", "pids", "output"]).style(bold(Style::new().fg(t.ui.title)));
    let rows = runs.iter().map(|run| {
        let (st, glyph) = match &run.report {
            Some(r) => outcome_style(sc.theme, r.outcome),
            None => (bold(Style::new().fg(t.ui.accent)), "·"),
        };
        let done = run.finished();
        let mem = if done { Some(run.peak_memory).filter(|m| *m > 0) } else { run.usage.memory_bytes };
        let pids = if done { Some(run.peak_pids).filter(|p| *p > 0) } else { run.usage.pids };
        let cpu = match (&run.report, run.cpu_pct()) {
            (Some(r), _) => or_dash(r.usage.cpu_ms, |c| duration_ms(c as f64)),
            (None, pct) => or_dash(pct, |p| format!("{p}%")),
        };
        let newest = run
            .lines
            .iter()
            .rev()
            .find(|l| matches!(l.origin, crate::tui::run_view::Origin::Stdout | crate::tui::run_view::Origin::Stderr))
            .map(|l| l.line.text().to_string())
            .unwrap_or_default();
        Row::new(vec![
            Cell::from(Span::styled(run.tier.clone(), bold(Style::new().fg(t.ui.accent)))),
            Cell::from(Span::styled(format!("{glyph} {}", run.state_line()), st)),
            Cell::from(cpu),
            Cell::from(format!("{}/{}", or_dash(mem, size_short), size_short(run.limits.memory_bytes))),
            Cell::from(format!("{}/{}", or_dash(pids, |p| p.to_string()), run.limits.pids)),
            Cell::from(Span::styled(newest, t.dim())),
        ])
        .style(Style::new().fg(t.ui.fg))
    });
    let widths = [
        Constraint::Length(9),
        Constraint::Length(20),
        Constraint::Length(7),
        Constraint::Length(11),
        Constraint::Length(6),
        Constraint::Min(4),
    ];
    let shown = area.height.saturating_sub(3) as usize;
    let title = if runs.len() > shown {
        format!(" live · a row per tier · {} of {} shown ", shown, runs.len())
    } else {
        " live · a row per tier (too narrow for a column each) ".to_string()
    };
    let current = runs.iter().position(|r| sc.current == Some(r.id));
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::BOLD))
        .highlight_symbol("▶ ")
        .block(pane(sc.theme, title, false));
    let mut state = TableState::default().with_selected(current);
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_column(sc: &Scene, run: &RunView, f: &mut Frame, area: Rect) {
    let focused = sc.current == Some(run.id);
    let block = pane(sc.theme, format!(" {} · {} ", run.tier, run.state_line()), focused);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let res_h = (7 + run.violations.len() as u16 + if run.finished() { 2 } else { 0 }).min(inner.height / 2 + 2);
    let [res, out] = Layout::vertical([Constraint::Length(res_h), Constraint::Min(0)]).areas(inner);
    draw_run_resources(sc.theme, run, f, res, false);
    f.render_widget(Paragraph::new(tail(sc.theme, run, out)), out);
}

/// The newest lines of a run's output that fit `area`.
fn tail(theme: &Theme, run: &RunView, area: Rect) -> Vec<Line<'static>> {
    let partials: Vec<OutLine> = run.partials().collect();
    let n = run.lines.len() + partials.len();
    let rows = area.height as usize;
    run.lines
        .iter()
        .chain(partials.iter())
        .skip(n.saturating_sub(rows))
        .map(|l| output::render(theme, l, 0, area.width as usize))
        .collect()
}

/// The engine's summary table (the one every export writes), the tier
/// column fixed and the others scrolled with ←/→.
fn draw_summary(sc: &Scene, runs: &[&RunView], f: &mut Frame, area: Rect) {
    use sandbench_core::compare::{self, Mode, COLUMNS};
    let t = sc.theme;
    let Some(c) = sc.compare_run else { return };
    let s = c.summary();
    let live = runs.iter().any(|r| !r.finished()) || !c.queue.is_empty();
    let mode = match s.mode {
        Mode::Sequential => "one tier at a time".to_string(),
        Mode::Concurrent => "CONCURRENT (timings skew each other)".to_string(),
    };
    // Unlike starts (cold beside warm) are said where the times are.
    let mixed = if compare::mixed_starts(&s).is_some() { " · MIXED STARTS (see starts)" } else { "" };
    let title = format!(
        " summary{} · {}/{} runs · {mode}{mixed} · ←→ columns · m/j/v export ",
        if live { " (live)" } else { "" },
        c.reports.len(),
        c.total()
    );
    let rows = compare::rows(&s);
    let skip = sc.compare_view.hscroll.min(COLUMNS.len() - 2);
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
            outcome_style(sc.theme, crate::report::Outcome::Ok).0
        } else {
            Style::new().fg(t.ui.violation)
        };
        Row::new(shown.iter().map(|i| {
            let st = match *i {
                0 => bold(Style::new().fg(t.ui.accent)),
                compare::VERDICT_COLUMN => verdict_style,
                _ => Style::new().fg(t.ui.fg),
            };
            Cell::from(Span::styled(r[*i].clone(), st))
        }))
    });
    let widths: Vec<Constraint> = shown.iter().map(|i| Constraint::Length(width(*i))).collect();
    let table =
        Table::new(body, widths).header(header).block(pane(sc.theme, Line::from(title), false)).column_spacing(2);
    f.render_widget(table, area);
}
