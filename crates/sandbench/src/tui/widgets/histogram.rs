//! A latency histogram per tier, the way oha prints one: a row per bin, its
//! lower edge, the count, and a bar scaled to the fullest bin; the p50 and
//! the range in the title. The compare view shows one per tier once a tier
//! has repeated runs.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use sandbench_core::compare::TierSummary;

use super::common::{bold, pane};
use crate::tui::theme::Theme;
use crate::units::duration_ms;

/// Text lines of `samples` as a histogram (the engine's, shared with
/// `sandbench compare`'s text output).
pub fn lines(samples: &[f64], rows: usize, width: usize) -> Vec<String> {
    sandbench_core::compare::histogram_lines(samples, rows, width)
}

/// One panel per tier, as many side by side as fit at 30 columns each, when
/// every panel gets at least two bins; else one line per tier.
pub fn draw(theme: &Theme, f: &mut Frame, area: Rect, tiers: &[TierSummary]) {
    let tiers: Vec<&TierSummary> = tiers.iter().filter(|s| s.runs > 0).collect();
    if tiers.is_empty() || area.height < 3 {
        return;
    }
    let per_row = ((area.width / 30).max(1) as usize).min(tiers.len());
    let rows = tiers.len().div_ceil(per_row);
    if (area.height as usize) < rows * 4 {
        return compact(theme, f, area, &tiers);
    }
    let t = theme;
    let row_areas = Layout::vertical(vec![Constraint::Ratio(1, rows as u32); rows]).split(area);
    for (r, chunk) in tiers.chunks(per_row).enumerate() {
        let cols = Layout::horizontal(vec![Constraint::Ratio(1, per_row as u32); per_row]).split(row_areas[r]);
        for (s, a) in chunk.iter().zip(cols.iter()) {
            let p50 = s.exit_ms.as_ref().map(|d| format!(" · p50 {}", duration_ms(d.p50))).unwrap_or_default();
            let block = pane(theme, format!(" {} · {} runs{p50} ", s.tier, s.exit_samples_ms.len()), false);
            let inner = block.inner(*a);
            f.render_widget(block, *a);
            let body: Vec<Line> = lines(&s.exit_samples_ms, inner.height as usize, inner.width as usize)
                .into_iter()
                .map(|l| match l.find('■') {
                    Some(i) => Line::from(vec![
                        Span::styled(l[..i].to_string(), t.dim()),
                        Span::styled(l[i..].to_string(), bold(Style::new().fg(t.ui.accent))),
                    ]),
                    None => Line::from(Span::styled(l, t.dim())),
                })
                .collect();
            f.render_widget(Paragraph::new(body), inner);
        }
    }
}

/// A line per tier: the fastest run, the distribution as bars (one per bin,
/// as tall as its count), the slowest run, the p50 and the runs.
fn compact(theme: &Theme, f: &mut Frame, area: Rect, tiers: &[&TierSummary]) {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let t = theme;
    let block = pane(theme, " time to exit per tier (each bar a bin, as tall as its runs) ", false);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let rows = inner.height as usize;
    let shown = if tiers.len() > rows { rows.saturating_sub(1) } else { tiers.len() };
    let mut out: Vec<Line> = tiers
        .iter()
        .take(shown)
        .map(|s| {
            let bins = sandbench_core::compare::histogram_bins(&s.exit_samples_ms, 12);
            let max = bins.iter().map(|(b, _)| b.count).max().unwrap_or(1).max(1);
            let bars: String = bins
                .iter()
                .map(|(b, _)| if b.count == 0 { ' ' } else { BARS[((b.count * 8).div_ceil(max) - 1).min(7)] })
                .collect();
            let (lo, hi) =
                s.exit_ms.as_ref().map_or((String::new(), String::new()), |d| (duration_ms(d.min), duration_ms(d.max)));
            let p50 = s.exit_ms.as_ref().map(|d| duration_ms(d.p50)).unwrap_or_default();
            Line::from(vec![
                Span::styled(format!("{:<9}", s.tier), bold(Style::new().fg(t.ui.accent))),
                Span::styled(format!("{lo:>8} "), t.dim()),
                Span::styled(format!("{bars:<12}"), bold(Style::new().fg(t.ui.accent))),
                Span::styled(format!(" {hi:<8}"), t.dim()),
                Span::styled(format!(" p50 {p50} · {} runs", s.exit_samples_ms.len()), Style::new().fg(t.ui.fg)),
            ])
        })
        .collect();
    if shown < tiers.len() {
        let rest: Vec<&str> = tiers[shown..].iter().map(|s| s.tier.as_str()).collect();
        out.push(Line::from(Span::styled(format!("+{} more: {}", rest.len(), rest.join(", ")), t.dim())));
    }
    f.render_widget(Paragraph::new(out), inner);
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn bins_counts_and_bars() {
        let l = lines(&[10.0, 11.0, 12.0, 30.0], 4, 30);
        assert_eq!(l.len(), 4);
        assert!(l[0].starts_with(" 10.0 ms [3] ■"), "{l:?}");
        assert!(l[1].contains("[0]") && !l[1].contains('■'), "{l:?}");
        assert!(l[3].contains("[1] ■"), "{l:?}");
        // The fullest bin fills the row.
        assert_eq!(l[0].chars().count(), 30, "{l:?}");
        assert!(lines(&[5.0], 4, 30)[0].starts_with("1 run(s): repeat"));
    }
}
