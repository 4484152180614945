//! The safety × latency frontier drawn in cells: x the log10 of each tier's
//! p50 time from start to exit, y the share of the hostile samples it
//! contained. Every point is its own key (`1`–`9`, then `a`–`z`), placed on
//! the plot and named in the legend with its figures and where they come
//! from, so tiers are told apart by label, not by colour alone; points that
//! land on one cell move aside. The first lines say which gauntlet and which
//! latency measurement the chart shows; a legend that does not fit says how
//! many tiers it leaves out.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use sandbench_core::frontier::{self, Point};

use super::common::{bold, pane};
use crate::sanitize::inert_line;
use crate::tui::theme::Theme;
use crate::tui::types::Frontier;
use crate::units::duration_ms;

/// The key of the `i`th point.
pub fn key(i: usize) -> char {
    const KEYS: &[u8] = b"123456789abcdefghijklmnopqrstuvwxyz";
    KEYS.get(i).map_or('+', |k| *k as char)
}

fn palette(theme: &Theme) -> [Color; 8] {
    let t = &theme.ui;
    [t.accent, t.ok, t.warn, t.cpu, t.memory, t.violation, t.stdout, Color::Magenta]
}

/// Where the latency figures come from, in one line.
fn latency_note(f: &Frontier) -> String {
    let from = |s: &str| f.points.iter().filter(|p| p.source == s).count();
    let (compare, gauntlet) = (from("compare"), from("gauntlet"));
    let compare_what = f.compare_program.as_deref().map(|p| format!(" of {}", inert_line(p, 30))).unwrap_or_default();
    match (compare, gauntlet) {
        (0, _) => "x: p50 start→exit (log) of the gauntlet's benign controls".to_string(),
        (_, 0) => format!("x: p50 start→exit (log) of the compare{compare_what}"),
        (c, g) => format!(
            "x: p50 start→exit (log): {c} tiers from the compare{compare_what}, {g} from the gauntlet's controls"
        ),
    }
}

/// One legend entry after the key and tier: latency (start kind × runs,
/// source: `cmp` the compare, `gnt` the gauntlet's controls, `bench` the
/// report's benchmark), contained of judged, and the cells left out.
fn entry(p: &Point) -> String {
    let src = match p.source.as_str() {
        "compare" => "cmp",
        "gauntlet" => "gnt",
        "benchmark" => "bench",
        other => other,
    };
    let left = if p.left_out() > 0 { format!(" ({} out)", p.left_out()) } else { String::new() };
    format!(
        "{} {}×{} {src} · {}/{}{left}",
        duration_ms(p.latency_ms),
        inert_line(&p.start, 12),
        p.runs,
        p.contained,
        p.hostile
    )
}

pub fn draw(theme: &Theme, f: &mut Frame, area: Rect, fr: &Frontier) {
    let t = theme;
    let block = pane(theme, " safety × latency ", false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut head = vec![
        Line::from(Span::styled(format!("y: hostile samples contained, {}", fr.gauntlet), t.dim())),
        Line::from(Span::styled(latency_note(fr), t.dim())),
    ];
    if fr.points.is_empty() {
        head.push(Line::default());
        let why = if fr.missing.is_empty() {
            "run the gauntlet (F9) and a compare (F6) to draw the frontier".to_string()
        } else {
            let list: Vec<String> =
                fr.missing.iter().map(|(t, w)| format!("{}: {}", inert_line(t, 24), inert_line(w, 80))).collect();
            format!("no tier has a point: {}", list.join("; "))
        };
        head.push(Line::from(Span::styled(why, t.dim())));
        f.render_widget(Paragraph::new(head).wrap(Wrap { trim: false }), inner);
        return;
    }
    let w = inner.width.max(1) as usize;
    let head_h: u16 = head.iter().map(|l| super::side::wrapped_rows(&l.to_string(), w) as u16).sum();
    // The plot needs seven rows (five of points, its axis, its labels); the
    // legend gets what is left, and says how many tiers it could not name.
    let missing_h = u16::from(!fr.missing.is_empty());
    let room = inner.height.saturating_sub(head_h + 7 + missing_h);
    let legend_h = (fr.points.len() as u16).min(room.max(1));
    let [head_a, plot_a, legend_a, missing_a] = Layout::vertical([
        Constraint::Length(head_h),
        Constraint::Min(3),
        Constraint::Length(legend_h),
        Constraint::Length(missing_h),
    ])
    .areas(inner);
    f.render_widget(Paragraph::new(head).wrap(Wrap { trim: false }), head_a);
    plot(theme, f, plot_a, &fr.points);
    legend(theme, f, legend_a, &fr.points);
    if !fr.missing.is_empty() {
        let list: Vec<String> =
            fr.missing.iter().map(|(t, w)| format!("{} ({})", inert_line(t, 24), inert_line(w, 60))).collect();
        let text: String = format!("no point: {}", list.join(", ")).chars().take(w).collect();
        f.render_widget(Paragraph::new(Span::styled(text, t.dim())), missing_a);
    }
}

fn legend(theme: &Theme, f: &mut Frame, area: Rect, points: &[Point]) {
    let t = theme;
    let pal = palette(theme);
    let rows = area.height as usize;
    let w = area.width as usize;
    let shown = if points.len() > rows { rows.saturating_sub(1) } else { points.len() };
    let mut lines: Vec<Line> = points
        .iter()
        .enumerate()
        .take(shown)
        .map(|(i, p)| {
            let name = format!("{:<8} ", inert_line(&p.tier, 12));
            let rest: String = entry(p).chars().take(w.saturating_sub(2 + name.chars().count())).collect();
            Line::from(vec![
                Span::styled(format!("{} ", key(i)), bold(Style::new().fg(pal[i % pal.len()]))),
                Span::styled(name, Style::new().fg(t.ui.fg)),
                Span::styled(rest, t.dim()),
            ])
        })
        .collect();
    if shown < points.len() {
        let names: Vec<String> =
            points[shown..].iter().enumerate().map(|(j, p)| format!("{} {}", key(shown + j), p.tier)).collect();
        let text = format!("+{} more: {}", points.len() - shown, names.join(", "));
        lines.push(Line::from(Span::styled(text.chars().take(w).collect::<String>(), t.dim())));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// The plot: y labels, the axes, the points as keys, decade labels under x.
fn plot(theme: &Theme, f: &mut Frame, area: Rect, points: &[Point]) {
    let t = theme;
    let pal = palette(theme);
    let label_w = 5usize;
    let (w, h) = (area.width as usize, area.height as usize);
    if w < label_w + 4 || h < 3 {
        return;
    }
    // Cells of the plot proper: above the x axis and its labels, right of the y axis.
    let (pw, ph) = (w - label_w - 1, h - 2);
    let (lo, hi) = frontier::x_range(points);
    let (llo, lhi) = (lo.log10(), hi.log10());
    let col_of = |ms: f64| (((ms.log10() - llo) / (lhi - llo)).clamp(0.0, 1.0) * (pw - 1) as f64).round() as usize;
    let row_of = |share: f64| ((1.0 - share.clamp(0.0, 1.0)) * (ph - 1) as f64).round() as usize;
    let mut grid: Vec<Vec<Option<(char, Style)>>> = vec![vec![None; pw]; ph];
    for (i, p) in points.iter().enumerate() {
        let (r0, c0) = (row_of(p.share) as isize, col_of(p.latency_ms) as isize);
        // The nearest free cell: beside first, then above and below.
        let tries = [(0, 0), (0, 1), (0, -1), (0, 2), (0, -2), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1)];
        let spot = tries
            .iter()
            .map(|(dr, dc)| (r0 + dr, c0 + dc))
            .find(|(r, c)| {
                *r >= 0
                    && *c >= 0
                    && (*r as usize) < ph
                    && (*c as usize) < pw
                    && grid[*r as usize][*c as usize].is_none()
            })
            .or_else(|| {
                (0..ph as isize)
                    .flat_map(|r| (0..pw as isize).map(move |c| (r, c)))
                    .find(|(r, c)| grid[*r as usize][*c as usize].is_none())
            });
        if let Some((r, c)) = spot {
            grid[r as usize][c as usize] = Some((key(i), bold(Style::new().fg(pal[i % pal.len()]))));
        }
    }
    let mut lines = vec![];
    for (r, row) in grid.iter().enumerate() {
        let label = if r == 0 {
            "100%"
        } else if r == ph - 1 {
            "0%"
        } else if r == (ph - 1) / 2 && ph >= 5 {
            "50%"
        } else {
            ""
        };
        let mut spans = vec![Span::styled(format!("{label:<label_w$}"), t.dim()), Span::styled("│", t.dim())];
        spans.extend(row.iter().map(|c| match c {
            Some((k, st)) => Span::styled(k.to_string(), *st),
            None => Span::raw(" "),
        }));
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(Span::styled(format!("{:label_w$}└{}", "", "─".repeat(pw)), t.dim())));
    // Decade labels where they fall, none over another.
    let mut axis = vec![' '; pw + 8];
    let mut d = lo;
    let mut free_from = 0;
    while d <= hi * 1.000001 {
        let text: Vec<char> = frontier::tick_label(d).chars().collect();
        let c = col_of(d);
        let start = c.saturating_sub(text.len() / 2).min(pw.saturating_sub(text.len()));
        if start >= free_from {
            for (k, ch) in text.iter().enumerate() {
                if start + k < axis.len() {
                    axis[start + k] = *ch;
                }
            }
            free_from = start + text.len() + 1;
        }
        d *= 10.0;
    }
    let axis: String = axis.into_iter().take(pw).collect();
    lines.push(Line::from(Span::styled(format!("{:label_w$} {axis}", ""), t.dim())));
    f.render_widget(Paragraph::new(lines), area);
}
