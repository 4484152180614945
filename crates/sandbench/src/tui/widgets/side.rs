//! The tier selector and the resources pane.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{LineGauge, Paragraph, Sparkline, Wrap};
use ratatui::Frame;

use super::{bold, outcome_style, pane};
use crate::event::Phase;
use crate::tui::app::App;
use crate::tui::run_view::{fmt_ms, RunView};

/// Rows the tier pane wants at `width` (borders included).
pub fn tiers_height(app: &App, width: u16) -> u16 {
    let w = width.saturating_sub(2).max(1) as usize;
    let detail: usize = detail_lines(app).iter().map(|l| wrapped_rows(&l.to_string(), w)).sum();
    (app.tiers.len() + detail + 2) as u16
}

/// Rows a greedy word wrap at `w` columns takes.
fn wrapped_rows(text: &str, w: usize) -> usize {
    let mut rows = 1;
    let mut col = 0;
    for word in text.split(' ') {
        let n = word.chars().count();
        let need = if col == 0 { n } else { col + 1 + n };
        if need <= w {
            col = need;
        } else {
            rows += usize::from(col > 0);
            rows += n.saturating_sub(1) / w.max(1);
            col = n % w.max(1);
        }
    }
    rows
}

/// The selected tier's summary, and what failed and the fix when unavailable.
fn detail_lines(app: &App) -> Vec<Line<'static>> {
    let t = &app.theme;
    let mut lines = vec![];
    if let Some(a) = &app.selected_tier().avail {
        lines.push(Line::from(Span::styled(a.summary.clone(), t.dim())));
        if !a.available {
            if let Some(c) = a.checks.iter().find(|c| !c.ok) {
                lines.push(Line::from(Span::styled(format!("{}: {}", c.name, c.detail), Style::new().fg(t.ui.warn))));
                if let Some(fix) = &c.fix {
                    lines.push(Line::from(vec![
                        Span::styled("fix: ", t.key()),
                        Span::styled(fix.clone(), Style::new().fg(t.ui.fg)),
                    ]));
                }
            }
        }
    }
    lines
}

pub fn draw_tiers(app: &App, f: &mut Frame, area: Rect) {
    let t = &app.theme;
    let block = pane(app, " tiers ", false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut lines = vec![];
    for (i, tier) in app.tiers.iter().enumerate() {
        let sel = i == app.tier;
        let (glyph, state, st) = match &tier.avail {
            None => ("…", "probing".to_string(), t.dim()),
            Some(a) if a.available => ("✔", "ready".to_string(), Style::new().fg(t.ui.ok)),
            Some(_) => ("✖", "unavailable".to_string(), Style::new().fg(t.ui.error)),
        };
        let name_style = if sel { bold(Style::new().fg(t.ui.accent)) } else { Style::new().fg(t.ui.fg) };
        lines.push(Line::from(vec![
            Span::styled(if sel { "▶ " } else { "  " }, name_style),
            Span::styled(format!("{:<9}", tier.name), name_style),
            Span::styled(format!("{glyph} {state}"), st),
        ]));
    }
    lines.extend(detail_lines(app));
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

pub fn draw_resources(app: &App, f: &mut Frame, area: Rect) {
    let t = &app.theme;
    let Some(run) = app.current_run() else {
        let block = pane(app, " resources ", false);
        let text = vec![
            Line::from(Span::styled("next run:", t.dim())),
            Line::from(Span::styled(
                format!("memory {}", crate::spec::format_size(app.limits.memory_bytes)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(
                format!("cpu {}", crate::spec::format_duration(app.limits.cpu_time)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(
                format!("wall {}", crate::spec::format_duration(app.limits.wall_time)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(format!("pids {}", app.limits.pids), Style::new().fg(t.ui.fg))),
        ];
        f.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let block = pane(app, format!(" resources · {} ", run.tier), false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    draw_run_resources(app, run, f, inner, true);
}

/// Phase times of a run: (setup, run, teardown) so far.
pub fn phase_times(run: &RunView) -> (Option<f64>, Option<f64>, Option<f64>) {
    if let Some(r) = &run.report {
        let t = &r.timings_ms;
        let ran = run.phase_at(Phase::Running).is_some();
        return (Some(t.setup), ran.then_some(t.run), Some(t.teardown));
    }
    let now = run.elapsed_ms();
    let running = run.phase_at(Phase::Running);
    let down = run.phase_at(Phase::TearingDown);
    let setup = Some(running.unwrap_or(now));
    let ran = running.map(|r| down.unwrap_or(now) - r);
    let td = down.map(|d| now - d);
    (setup, ran, td)
}

/// The body of the resources pane (also used by compare columns).
pub fn draw_run_resources(app: &App, run: &RunView, f: &mut Frame, area: Rect, with_state: bool) {
    let t = &app.theme;
    let (setup, ran, down) = phase_times(run);
    let opt = |v: Option<f64>| v.map(fmt_ms).unwrap_or_else(|| "–".into());
    let state_style = match &run.report {
        Some(r) => outcome_style(app, r.outcome).0,
        None => bold(Style::new().fg(t.ui.accent)),
    };
    let mut top = vec![
        Line::from(Span::styled(run.state_line(), state_style)),
        Line::from(vec![
            Span::styled("setup ", t.dim()),
            Span::styled(opt(setup), Style::new().fg(t.ui.fg)),
            Span::styled(" run ", t.dim()),
            Span::styled(opt(ran), Style::new().fg(t.ui.fg)),
            Span::styled(
                run.report.as_ref().and_then(|r| r.start()).map(|s| format!(" · {}", s.name())).unwrap_or_default(),
                t.dim(),
            ),
        ]),
        Line::from(vec![
            Span::styled("teardown ", t.dim()),
            Span::styled(opt(down), Style::new().fg(t.ui.fg)),
            Span::styled(format!(" · {} out", crate::spec::format_size(run.bytes.max(1)).replace("1B", "0B")), t.dim()),
        ]),
    ];
    if run.bytes == 0 {
        top[2].spans.pop();
    }
    if !with_state {
        top.remove(0);
    }
    let outcome_lines = outcome_lines(app, run);
    let spark_h = if area.height >= 14 { 2 } else { 1 };
    let [head, cpu_l, mem_l, mem_g, pid_g, tail] = Layout::vertical([
        Constraint::Length(top.len() as u16),
        Constraint::Length(spark_h),
        Constraint::Length(spark_h),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(top), head);
    let label_w = 10u16;
    let cpu_txt = run.cpu_pct().map(|c| format!("cpu {c:>3}%")).unwrap_or_else(|| "cpu    –".into());
    sparkline(f, cpu_l, label_w, &cpu_txt, run.cpu_hist.iter().copied(), Some(100), Style::new().fg(t.ui.cpu), t.dim());
    // Once the run is over, the gauges and labels show peaks.
    let done = run.finished();
    let mem = if done { Some(run.peak_memory) } else { run.usage.memory_bytes };
    let pids = if done { run.peak_pids } else { run.usage.pids.unwrap_or(0) };
    let mem_txt =
        format!("{} {:>4}", if done { "peak" } else { "mem " }, mem.map(short_size).unwrap_or_else(|| "–".into()));
    sparkline(
        f,
        mem_l,
        label_w,
        &mem_txt,
        run.mem_hist.iter().copied(),
        Some(run.limits.memory_bytes),
        Style::new().fg(t.ui.memory),
        t.dim(),
    );
    let mem = mem.unwrap_or(0);
    gauge(
        app,
        f,
        mem_g,
        "mem",
        mem as f64 / run.limits.memory_bytes.max(1) as f64,
        format!("{}/{}", short_size(mem), short_size(run.limits.memory_bytes)),
    );
    gauge(app, f, pid_g, "pids", pids as f64 / run.limits.pids.max(1) as f64, format!("{}/{}", pids, run.limits.pids));
    f.render_widget(Paragraph::new(outcome_lines).wrap(Wrap { trim: true }), tail);
}

fn outcome_lines(app: &App, run: &RunView) -> Vec<Line<'static>> {
    let t = &app.theme;
    let mut out = vec![];
    for v in &run.violations {
        out.push(Line::from(vec![
            Span::styled("✖ ", bold(Style::new().fg(t.ui.violation))),
            Span::styled(format!("{} at {}", v.kind.name(), fmt_ms(v.at_ms)), bold(Style::new().fg(t.ui.violation))),
        ]));
    }
    if let Some(r) = &run.report {
        let (st, glyph) = outcome_style(app, r.outcome);
        out.push(Line::from(vec![
            Span::styled(format!("{glyph} {}", r.outcome.name()), st),
            Span::styled(format!(" · {}", r.exit.describe()), Style::new().fg(t.ui.fg)),
        ]));
        if let Some(e) = &r.error {
            out.push(Line::from(Span::styled(
                crate::sanitize::visible_controls(e.as_bytes()),
                Style::new().fg(t.ui.error),
            )));
        }
        let peak = format!(
            "peak mem {} · pids {} · cpu {}",
            r.usage.peak_memory_bytes.map(short_size).unwrap_or_else(|| "?".into()),
            r.usage.peak_pids.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            r.usage.cpu_ms.map(|c| fmt_ms(c as f64)).unwrap_or_else(|| "?".into())
        );
        out.push(Line::from(Span::styled(peak, t.dim())));
    }
    out
}

/// "12M", "512K", "1.5G" — compact for narrow panes.
pub fn short_size(b: u64) -> String {
    let f = b as f64;
    if b >= 1 << 30 {
        format!("{:.1}G", f / (1u64 << 30) as f64)
    } else if b >= 10 << 20 {
        format!("{:.0}M", f / (1u64 << 20) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1}M", f / (1u64 << 20) as f64)
    } else if b >= 1 << 10 {
        format!("{:.0}K", f / 1024.0)
    } else {
        format!("{b}B")
    }
}

#[allow(clippy::too_many_arguments)]
fn sparkline(
    f: &mut Frame,
    area: Rect,
    label_w: u16,
    label: &str,
    data: impl DoubleEndedIterator<Item = u64> + ExactSizeIterator,
    max: Option<u64>,
    style: Style,
    label_style: Style,
) {
    let [l, r] = Layout::horizontal([Constraint::Length(label_w), Constraint::Min(1)]).areas(area);
    f.render_widget(Paragraph::new(Span::styled(label.to_string(), label_style)), l);
    // Newest samples on the right: keep the last `width` of them.
    let n = data.len();
    let data: Vec<u64> = data.skip(n.saturating_sub(r.width as usize)).collect();
    let mut s = Sparkline::default().data(&data).style(style);
    if let Some(m) = max {
        s = s.max(m.max(1));
    }
    f.render_widget(s, r);
}

fn gauge(app: &App, f: &mut Frame, area: Rect, name: &str, ratio: f64, label: String) {
    let t = &app.theme;
    let ratio = ratio.clamp(0.0, 1.0);
    let color = if ratio >= 0.9 {
        t.ui.violation
    } else if ratio >= 0.7 {
        t.ui.warn
    } else {
        t.ui.gauge
    };
    let g = LineGauge::default()
        .ratio(ratio)
        .label(Line::from(vec![
            Span::styled(format!("{name:<4} "), t.dim()),
            Span::styled(format!("{label:<9}"), Style::new().fg(t.ui.fg)),
        ]))
        .filled_style(Style::new().fg(color))
        .unfilled_style(Style::new().fg(t.ui.border))
        .filled_symbol(symbols::line::THICK_HORIZONTAL)
        .unfilled_symbol(symbols::line::HORIZONTAL);
    f.render_widget(g, area);
}
