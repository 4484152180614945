//! The safety × latency frontier as a ratatui chart: x the log10 of the warm
//! p50 latency (labelled in ms), y the share of hostile samples contained.
//! A chart cannot label its points, so each tier is its own dataset with its
//! own marker colour, named with its numbers in a legend below the plot.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph};
use ratatui::Frame;

use sandbench_core::frontier::{self, Point};

use super::pane;
use crate::tui::app::App;

pub fn draw(app: &App, f: &mut Frame, area: Rect, points: &[Point], missing: &[(String, String)]) {
    let t = &app.theme;
    let block = pane(app, " safety × latency (warm p50, log) ", false);
    if points.is_empty() {
        let why = if missing.is_empty() {
            "run the gauntlet (F9) and a compare (F6) to draw the frontier".to_string()
        } else {
            missing.iter().map(|(t, w)| format!("{t}: {w}")).collect::<Vec<_>>().join("; ")
        };
        f.render_widget(Paragraph::new(Span::styled(why, t.dim())).block(block).wrap(Default::default()), area);
        return;
    }
    let (lo, hi) = frontier::x_range(points);
    let palette = [t.ui.accent, t.ui.ok, t.ui.warn, t.ui.cpu, t.ui.memory, t.ui.violation, t.ui.stdout, Color::Magenta];
    let data: Vec<[(f64, f64); 1]> = points.iter().map(|p| [(p.latency_ms.log10(), p.share * 100.0)]).collect();
    let names: Vec<String> = points
        .iter()
        .map(|p| {
            format!(
                "{} {} {} · {}/{} contained",
                crate::sanitize::inert_line(&p.tier, 24),
                frontier::tick_label((p.latency_ms * 10.0).round() / 10.0),
                crate::sanitize::inert_line(&p.start, 12),
                p.contained,
                p.hostile
            )
        })
        .collect();
    let datasets: Vec<Dataset> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Dataset::default()
                .marker(Marker::Block)
                .graph_type(GraphType::Scatter)
                .style(Style::new().fg(palette[i % palette.len()]))
                .data(d)
        })
        .collect();
    // Decade labels only: ratatui spreads labels evenly, which a log axis
    // matches exactly at whole decades.
    let mut labels = vec![];
    let mut d = lo;
    while d <= hi * 1.000001 {
        labels.push(Line::from(frontier::tick_label(d)));
        d *= 10.0;
    }
    // The legend goes below the plot, not over it (a point may sit anywhere).
    let inner = block.inner(area);
    f.render_widget(block, area);
    let legend_h = (points.len() as u16).min(inner.height / 3);
    let [plot, legend] = Layout::vertical([Constraint::Min(3), Constraint::Length(legend_h)]).areas(inner);
    let chart = Chart::new(datasets)
        .x_axis(Axis::default().bounds([lo.log10(), hi.log10()]).labels(labels).style(t.dim()))
        .y_axis(
            Axis::default().bounds([0.0, 100.0]).labels(["0%", "50%", "100%"].map(Line::from).to_vec()).style(t.dim()),
        )
        .legend_position(None);
    f.render_widget(chart, plot);
    let lines: Vec<Line> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            Line::from(vec![
                Span::styled("■ ", Style::new().fg(palette[i % palette.len()])),
                Span::styled(n.clone(), Style::new().fg(t.ui.fg)),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines), legend);
}
