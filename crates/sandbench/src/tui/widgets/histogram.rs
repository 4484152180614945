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

use super::{bold, pane};
use crate::tui::app::App;
use crate::units::duration_ms;

/// Text lines of `samples` as a histogram (the engine's, shared with
/// `sandbench compare`'s text output).
pub fn lines(samples: &[f64], rows: usize, width: usize) -> Vec<String> {
    sandbench_core::compare::histogram_lines(samples, rows, width)
}

/// One panel per tier, as many side by side as fit at 30 columns each.
pub fn draw(app: &App, f: &mut Frame, area: Rect, tiers: &[TierSummary]) {
    let t = &app.theme;
    let tiers: Vec<&TierSummary> = tiers.iter().filter(|s| s.runs > 0).collect();
    if tiers.is_empty() || area.height < 3 {
        return;
    }
    let per_row = ((area.width / 30).max(1) as usize).min(tiers.len());
    let rows = tiers.len().div_ceil(per_row);
    let row_areas = Layout::vertical(vec![Constraint::Ratio(1, rows as u32); rows]).split(area);
    for (r, chunk) in tiers.chunks(per_row).enumerate() {
        let cols = Layout::horizontal(vec![Constraint::Ratio(1, per_row as u32); per_row]).split(row_areas[r]);
        for (s, a) in chunk.iter().zip(cols.iter()) {
            let p50 = s.exit_ms.as_ref().map(|d| format!(" · p50 {}", duration_ms(d.p50))).unwrap_or_default();
            let block = pane(app, format!(" {} · {} runs{p50} ", s.tier, s.exit_samples_ms.len()), false);
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
