//! The tier selector and the resources pane.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{LineGauge, Paragraph, Sparkline, Wrap};
use ratatui::Frame;

use super::common::{bold, outcome_style, pane};
use super::scene::Scene;
use crate::event::Phase;
use crate::tui::run_view::RunView;
use crate::tui::theme::Theme;
use crate::units::duration_ms;

/// Rows the tier pane wants at `width` (borders included).
pub fn tiers_height(sc: &Scene, width: u16) -> u16 {
    let w = width.saturating_sub(2).max(1) as usize;
    let detail: usize = detail_lines(sc).iter().map(|l| wrapped_rows(&l.to_string(), w)).sum();
    (sc.tiers.len() + detail + 2) as u16
}

/// Rows a greedy word wrap at `w` columns takes.
pub fn wrapped_rows(text: &str, w: usize) -> usize {
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
fn detail_lines(sc: &Scene) -> Vec<Line<'static>> {
    let t = sc.theme;
    let mut lines = vec![];
    if let Some(a) = &sc.selected_tier().avail {
        lines.push(Line::from(Span::styled(a.summary.clone(), t.dim())));
        if let (true, Some(w)) = (a.available, &sc.selected_tier().warm) {
            lines.push(Line::from(vec![Span::styled("warm: ", t.key()), Span::styled(w.clone(), t.dim())]));
        }
        // The interpreters programs get here (tiers differ: the host's Node
        // beside the image's).
        let interpreters: Vec<&str> = ["python", "javascript"]
            .iter()
            .filter_map(|n| a.checks.iter().find(|c| c.name == *n && c.ok).map(|c| c.detail.as_str()))
            .collect();
        if a.available && !interpreters.is_empty() {
            lines.push(Line::from(vec![
                Span::styled("runs: ", t.key()),
                Span::styled(interpreters.join(" · "), t.dim()),
            ]));
        }
        // A tier that works through a slower or weaker fallback says so.
        for c in a.checks.iter().filter(|c| a.available && c.level == crate::tier::CheckLevel::Warn) {
            lines.push(Line::from(Span::styled(format!("⚠ {}: {}", c.name, c.detail), Style::new().fg(t.ui.warn))));
        }
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

/// The tiers the pane lists in `rows` rows: all of them, or a window that
/// keeps the selected one in view.
pub fn tier_window(n: usize, selected: usize, rows: usize) -> std::ops::Range<usize> {
    if n <= rows {
        return 0..n;
    }
    let rows = rows.max(1);
    let top = selected.saturating_sub(rows / 2).min(n - rows);
    top..top + rows
}

pub fn draw_tiers(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let n = sc.tiers.len();
    let h = area.height.saturating_sub(2) as usize;
    // The list first (the selected tier always in view), then as much of the
    // selected tier's details as fits; at least their first line when the
    // list must scroll.
    let rows = if n <= h { n } else { h.saturating_sub(usize::from(h >= 4)) };
    let window = tier_window(n, sc.tier, rows);
    let title = if window.len() < n {
        format!(" tiers · {}–{} of {n} (F4) ", window.start + 1, window.end)
    } else {
        " tiers ".to_string()
    };
    let block = pane(sc.theme, title, false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut lines = vec![];
    for (i, tier) in sc.tiers.iter().enumerate().skip(window.start).take(window.len()) {
        let sel = i == sc.tier;
        let (glyph, state, st) = match &tier.avail {
            None => ("…", "probing".to_string(), t.dim()),
            // As doctor marks it: a tier that works through a slower or
            // weaker fallback (the microVM under TCG) is ready with a warning.
            Some(a) if a.available && a.checks.iter().any(|c| c.level == crate::tier::CheckLevel::Warn) => {
                ("⚠", "ready".to_string(), Style::new().fg(t.ui.warn))
            }
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
    lines.extend(detail_lines(sc));
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

pub fn draw_resources(sc: &Scene, f: &mut Frame, area: Rect) {
    let t = sc.theme;
    let Some(run) = sc.current_run() else {
        let block = pane(sc.theme, " resources ", false);
        let text = vec![
            Line::from(Span::styled("next run:", t.dim())),
            Line::from(Span::styled(
                format!("memory {}", crate::spec::format_size(sc.limits.memory_bytes)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(
                format!("cpu {}", crate::spec::format_duration(sc.limits.cpu_time)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(
                format!("wall {}", crate::spec::format_duration(sc.limits.wall_time)),
                Style::new().fg(t.ui.fg),
            )),
            Line::from(Span::styled(format!("pids {}", sc.limits.pids), Style::new().fg(t.ui.fg))),
        ];
        f.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let block = pane(sc.theme, format!(" resources · {} ", run.tier), false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    draw_run_resources(sc.theme, run, f, inner, true);
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
pub fn draw_run_resources(t: &Theme, run: &RunView, f: &mut Frame, area: Rect, with_state: bool) {
    let (setup, ran, down) = phase_times(run);
    let opt = |v: Option<f64>| v.map(duration_ms).unwrap_or_else(|| "–".into());
    let state_style = match &run.report {
        Some(r) => outcome_style(t, r.outcome).0,
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
            Span::styled(format!(" · {} out", crate::units::size_short(run.bytes)), t.dim()),
        ]),
    ];
    if run.bytes == 0 {
        top[2].spans.pop();
    }
    if !with_state {
        top.remove(0);
    }
    let outcome_lines = outcome_lines(t, run);
    let spark_h = if area.height >= 14 { 2 } else { 1 };
    let [head, cpu_l, mem_l, axis_l, mem_g, pid_g, tail] = Layout::vertical([
        Constraint::Length(top.len() as u16),
        Constraint::Length(spark_h),
        Constraint::Length(spark_h),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(top), head);
    // "peak 64.0M" and a space before the curve.
    let label_w = 11u16;
    let cpu_txt = run.cpu_pct().map(|c| format!("cpu {c:>3}%")).unwrap_or_else(|| "cpu    –".into());
    // Once the run is over, the gauges and labels show peaks.
    let done = run.finished();
    // Unknown is "—", never 0 (a guest still booting has no figure yet).
    let mem = if done { Some(run.peak_memory).filter(|m| *m > 0) } else { run.usage.memory_bytes };
    let pids = if done { Some(run.peak_pids).filter(|p| *p > 0) } else { run.usage.pids };
    // A pids violation means the count reached the limit, whatever the
    // samples saw (gVisor's processes are not visible to the host's cgroup).
    let pids = if run.violations.iter().any(|v| v.kind == crate::event::ViolationKind::Pids) {
        Some(pids.unwrap_or(0).max(run.limits.pids))
    } else {
        pids
    };
    let mem_txt = format!(
        "{} {:>4}",
        if done { "peak" } else { "mem " },
        mem.map(crate::units::size_short).unwrap_or_else(|| "—".into())
    );
    // A curve needs a few points: a run shorter than the sampling interval
    // says so instead of drawing a lone bar.
    if run.samples < 3 {
        let why = match run.samples_span {
            None => "no usage sample yet".to_string(),
            Some(_) => format!("too few to draw: {} sample(s) in {}", run.samples, duration_ms(run.elapsed_ms())),
        };
        label(f, cpu_l, label_w, &cpu_txt, Span::styled(why, t.dim()));
        label(f, mem_l, label_w, &mem_txt, Span::raw(""));
    } else {
        let cpu_max = run.cpu_hist.iter().copied().max().unwrap_or(0).max(10);
        sparkline(
            f,
            cpu_l,
            label_w,
            &cpu_txt,
            &run.cpu_hist,
            cpu_max,
            format!("{cpu_max}%"),
            Style::new().fg(t.ui.cpu),
            t.dim(),
        );
        // The scale's top is never below the figure in the label: a peak the
        // cgroup counted between two samples is higher than every bar.
        let shown = if done { mem.unwrap_or(0) } else { 0 };
        let mem_max = run.mem_hist.iter().copied().max().unwrap_or(0).max(shown).max(1);
        sparkline(
            f,
            mem_l,
            label_w,
            &mem_txt,
            &run.mem_hist,
            mem_max,
            crate::units::size_short(mem_max),
            Style::new().fg(t.ui.memory),
            t.dim(),
        );
        if let Some((a, b)) = run.samples_span {
            // The time axis under both curves: first sample … latest.
            let [_, axis] = Layout::horizontal([Constraint::Length(label_w), Constraint::Min(1)]).areas(axis_l);
            let l = duration_ms(a);
            let mut r = format!("{} · {} samples", duration_ms(b), run.samples);
            if l.chars().count() + r.chars().count() + 2 > axis.width as usize {
                r = duration_ms(b);
            }
            let gap = (axis.width as usize).saturating_sub(l.chars().count() + r.chars().count() + 2);
            let line = format!("{l} {} {r}", "─".repeat(gap));
            f.render_widget(Paragraph::new(Span::styled(line, t.dim())), axis);
        }
    }
    let of = |v: Option<u64>, limit: u64| v.map_or(0.0, |v| v as f64 / limit.max(1) as f64);
    gauge(
        t,
        f,
        mem_g,
        "mem",
        of(mem, run.limits.memory_bytes),
        format!(
            "{}/{}",
            crate::units::or_dash(mem, crate::units::size_short),
            crate::units::size_short(run.limits.memory_bytes)
        ),
    );
    gauge(
        t,
        f,
        pid_g,
        "pids",
        of(pids, run.limits.pids),
        format!("{}/{}", crate::units::or_dash(pids, |p| p.to_string()), run.limits.pids),
    );
    f.render_widget(Paragraph::new(outcome_lines).wrap(Wrap { trim: true }), tail);
}

fn outcome_lines(t: &Theme, run: &RunView) -> Vec<Line<'static>> {
    let mut out = vec![];
    for v in &run.violations {
        out.push(Line::from(vec![
            Span::styled("✖ ", bold(Style::new().fg(t.ui.violation))),
            Span::styled(
                format!("{} at {}", v.kind.name(), duration_ms(v.at_ms)),
                bold(Style::new().fg(t.ui.violation)),
            ),
        ]));
    }
    if let Some(r) = &run.report {
        let (st, glyph) = outcome_style(t, r.outcome);
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
            // Unknown is "—": a zero would be a measurement.
            // The figure the label above shows (the report's, or a higher sample).
            Some(run.peak_memory).filter(|b| *b > 0).map(crate::units::size_short).unwrap_or_else(|| "—".into()),
            r.usage.peak_pids.map(|p| p.to_string()).unwrap_or_else(|| "—".into()),
            r.usage.cpu_ms.map(|c| duration_ms(c as f64)).unwrap_or_else(|| "—".into())
        );
        out.push(Line::from(Span::styled(peak, t.dim())));
    }
    out
}

fn label(f: &mut Frame, area: Rect, label_w: u16, text: &str, rest: Span<'static>) {
    let [l, r] = Layout::horizontal([Constraint::Length(label_w), Constraint::Min(1)]).areas(area);
    f.render_widget(Paragraph::new(Span::raw(text.to_string())), l);
    f.render_widget(Paragraph::new(rest).wrap(Wrap { trim: true }), r);
}

/// A sparkline scaled to `max` (the largest value shown, not the limit: a
/// 10 MB program under a 256 MB limit still draws a curve), with its scale
/// on the right.
#[allow(clippy::too_many_arguments)]
fn sparkline(
    f: &mut Frame,
    area: Rect,
    label_w: u16,
    label: &str,
    data: &std::collections::VecDeque<u64>,
    max: u64,
    max_label: String,
    style: Style,
    label_style: Style,
) {
    let scale_w = (max_label.chars().count() as u16 + 2).min(area.width / 3);
    let [l, r, m] =
        Layout::horizontal([Constraint::Length(label_w), Constraint::Min(1), Constraint::Length(scale_w)]).areas(area);
    f.render_widget(Paragraph::new(Span::styled(label.to_string(), label_style)), l);
    f.render_widget(Paragraph::new(Span::styled(format!("▕{max_label}"), label_style)), m);
    // Newest samples on the right: keep the last `width` of them.
    let n = data.len();
    let data: Vec<u64> = data.iter().copied().skip(n.saturating_sub(r.width as usize)).collect();
    f.render_widget(Sparkline::default().data(&data).style(style).max(max.max(1)), r);
}

fn gauge(t: &Theme, f: &mut Frame, area: Rect, name: &str, ratio: f64, label: String) {
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
