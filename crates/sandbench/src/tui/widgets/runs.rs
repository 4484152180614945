//! Runs view: the run log as a table, and the selected run's code, verdict
//! and output. Every field comes from the log file and is made inert here.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::common::{outcome_style, pane};
use crate::runlog::Entry;
use crate::sanitize::{inert_line, visible_controls};
use crate::tui::runs_view::RunsView;
use crate::tui::theme::Theme;
use crate::units::duration_ms;

/// Lines of code, stdout and stderr shown each in the details.
const DETAIL_LINES: usize = 200;

pub fn layout(v: &RunsView, body: Rect) -> (Rect, Option<Rect>) {
    if v.open {
        let [list, detail] = Layout::vertical([Constraint::Percentage(40), Constraint::Min(4)]).areas(body);
        (list, Some(detail))
    } else {
        (body, None)
    }
}

/// (table rows, detail rows) for paging.
pub fn rows(v: &RunsView, body: Rect) -> (u16, u16) {
    let (list, detail) = layout(v, body);
    (list.height.saturating_sub(3), detail.map_or(0, |d| d.height.saturating_sub(2)))
}

fn who(e: &Entry) -> String {
    match &e.client {
        Some(c) => format!("{}({})", e.front_end, c),
        None => e.front_end.clone(),
    }
}

/// Width of the "front end" column: as wide as the widest shown (at most 22).
fn who_width<'a>(entries: impl Iterator<Item = &'a Entry>) -> usize {
    entries.map(|e| inert_line(&who(e), 22).chars().count()).max().unwrap_or(0).clamp(9, 22)
}

/// Width of the outcome column: a glyph, a space and the longest outcome's
/// name ("incomplete"), so every row's total lines up under its heading.
const OUTCOME_W: usize = 2 + 10;

fn row_text(e: &Entry, who_w: usize) -> String {
    let who = who(e);
    let kinds: Vec<&str> = e.report.violations.iter().map(|v| v.kind.name()).collect();
    let first = e.code.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    // A session's call says which: the session's short id and the call.
    let first = match &e.report.session {
        Some(s) => format!("[{} #{}] {first}", inert_line(s.id.get(..8).unwrap_or(&s.id), 8), s.call),
        None => first.to_string(),
    };
    // The clock part of an RFC 3339 time: 2026-12-01T10:00:00.123Z → 10:00:00.
    let clock = e.time.get(11..19).unwrap_or(&e.time);
    format!(
        "{:<8}  {:<who_w$} {:<9} {:>9}  {:<14} {}",
        inert_line(clock, 8),
        inert_line(&who, 22),
        inert_line(&e.tier, 9),
        duration_ms(e.report.timings_ms.total),
        inert_line(&kinds.join(","), 14),
        inert_line(&first, 80),
    )
}

pub fn draw(theme: &Theme, v: &RunsView, f: &mut Frame, body: Rect) {
    let t = theme;
    let (list, detail) = layout(v, body);
    let visible = v.visible();
    let counts = format!(" runs · {} of {} · {} ", visible.len(), v.entries.len(), v.filter_label());
    // The hints go when they would be cut (the key bar names the same keys).
    let hinted = format!("{counts}· o/t filter · Enter opens · e loads into the editor ");
    let title = if hinted.chars().count() + 2 <= list.width as usize { hinted } else { counts };
    let rows = list.height.saturating_sub(3) as usize;
    let top = (v.selected + 1).saturating_sub(rows.max(1));
    let who_w = who_width(visible.iter().skip(top).take(rows).map(|i| &v.entries[*i]));
    let mut lines = vec![Line::from(Span::styled(
        format!(
            "  {:<8}  {:<who_w$} {:<9} {:<OUTCOME_W$}{:>9}  {:<14} code",
            "time", "front end", "tier", "outcome", "total", "violations"
        ),
        t.dim(),
    ))];
    if visible.is_empty() {
        lines.push(Line::from(Span::styled(
            "  no runs yet: runs of every sandbench front end (run, compare, gauntlet, agent, mcp, this workbench) appear here",
            t.dim(),
        )));
    }
    for (pos, &i) in visible.iter().enumerate().skip(top).take(rows) {
        let e = &v.entries[i];
        let (ostyle, glyph) = outcome_style(theme, e.report.outcome);
        let text = row_text(e, who_w);
        // The outcome goes in coloured between the tier and the total.
        let at = 8 + 2 + who_w + 1 + 9 + 1;
        let (head, rest) = text.split_at(text.char_indices().nth(at).map_or(text.len(), |(b, _)| b));
        let mut spans = vec![
            Span::raw(if pos == v.selected { "▶ " } else { "  " }),
            Span::raw(head.to_string()),
            Span::styled(format!("{glyph} {:<w$}", e.report.outcome.name(), w = OUTCOME_W - 2), ostyle),
            Span::raw(rest.to_string()),
        ];
        if pos == v.selected {
            for s in &mut spans {
                s.style = s.style.add_modifier(Modifier::REVERSED);
            }
        }
        lines.push(Line::from(spans));
    }
    f.render_widget(Paragraph::new(lines).block(pane(theme, title, !v.open)), list);

    if let (Some(area), Some(e)) = (detail, v.selected_entry()) {
        let lines = detail_lines(theme, e);
        let title =
            format!(" {} · {} · PgUp/PgDn scroll · Esc closes ", inert_line(&e.label, 40), inert_line(&e.time, 30));
        let top = v.detail.fit(0, lines.len() as u64, area.height.saturating_sub(2) as u64);
        f.render_widget(
            Paragraph::new(lines).scroll((top.min(u16::MAX as u64) as u16, 0)).block(pane(theme, title, true)),
            area,
        );
    }
}

fn block(out: &mut Vec<Line<'static>>, heading: String, text: &str, style: Style) {
    out.push(Line::from(Span::styled(heading, style.add_modifier(Modifier::BOLD))));
    let shown = visible_controls(text.as_bytes());
    let total = shown.lines().count();
    for l in shown.lines().take(DETAIL_LINES) {
        out.push(Line::from(format!("  {}", l.replace('\t', "    "))));
    }
    if total > DETAIL_LINES {
        out.push(Line::from(format!("  … {} more lines", total - DETAIL_LINES)));
    }
}

pub fn detail_lines(theme: &Theme, e: &Entry) -> Vec<Line<'static>> {
    let t = theme;
    let r = &e.report;
    let (ostyle, glyph) = outcome_style(theme, r.outcome);
    let mut out = vec![];
    let who = match &e.client {
        Some(c) => format!("{} (client {})", e.front_end, inert_line(c, 40)),
        None => e.front_end.clone(),
    };
    out.push(Line::from(vec![
        Span::styled(format!("{glyph} {}", r.outcome.name()), ostyle),
        Span::raw(format!(
            "  {} · {} · {} · {} · total {} (setup {}, run {})",
            inert_line(&e.tier, 20),
            inert_line(&e.language, 10),
            who,
            inert_line(&r.exit.describe(), 40),
            duration_ms(r.timings_ms.total),
            duration_ms(r.timings_ms.setup),
            duration_ms(r.timings_ms.run)
        )),
    ]));
    if let Some(s) = &r.session {
        out.push(Line::from(Span::styled(
            format!(
                "session {} · call {} (files in /work kept from the session's earlier calls)",
                inert_line(&s.id, 40),
                s.call
            ),
            t.dim(),
        )));
    }
    if let Some(err) = &r.error {
        out.push(Line::from(Span::styled(format!("error: {}", inert_line(err, 300)), Style::new().fg(t.ui.error))));
    }
    for v in &r.violations {
        out.push(Line::from(Span::styled(
            format!("violation {} at {}: {}", v.kind.name(), duration_ms(v.at_ms), inert_line(&v.detail, 300)),
            Style::new().fg(t.ui.violation),
        )));
    }
    let cut = if e.code_truncated { ", head and tail kept" } else { "" };
    let sha = inert_line(e.code_sha256.get(..12).unwrap_or(""), 12);
    block(&mut out, format!("code ({} bytes, sha256 {sha}…{cut})", e.code_bytes), &e.code, t.key());
    let trunc = |b: bool| if b { " (truncated)" } else { "" };
    block(&mut out, format!("stdout{}", trunc(r.stdout_truncated)), &r.stdout, t.key());
    block(&mut out, format!("stderr{}", trunc(r.stderr_truncated)), &r.stderr, t.key());
    out
}
