//! Agent view: the task prompt and the live transcript.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use super::common::{bold, pane};
use crate::agent::EndReason;
use crate::tui::agent_view::{ALine, AgentView, Kind, VerdictKind};
use crate::tui::theme::Theme;

pub fn layout(body: Rect) -> (Rect, Rect) {
    let [prompt, transcript] = Layout::vertical([Constraint::Length(3), Constraint::Min(0)]).areas(body);
    (prompt, transcript)
}

/// Lines the transcript pane shows.
pub fn rows(body: Rect) -> u16 {
    layout(body).1.height.saturating_sub(2)
}

/// The agent view `a`, whose runs go to `tier`; `api_key_set` says whether
/// the model can be reached at all.
pub fn draw(theme: &Theme, a: &AgentView, tier: &str, api_key_set: bool, f: &mut Frame, body: Rect) {
    let t = theme;
    let (prompt, transcript) = layout(body);
    let title = if a.running {
        format!(" task · the agent is working on {} · F8 cancels ", a.tier)
    } else {
        format!(" task · Enter starts the agent on {tier} · F4 changes the tier ")
    };
    let line = if a.running {
        Line::from(Span::styled(format!("> {}", clean_input(&a.input)), t.dim()))
    } else {
        Line::from(vec![
            Span::styled("> ", t.key()),
            Span::styled(format!("{}▏", clean_input(&a.input)), Style::new().fg(t.ui.fg)),
        ])
    };
    // The end of a long task stays visible.
    let w = prompt.width.saturating_sub(2) as usize;
    let len: usize = line.spans.iter().map(|s| s.content.chars().count()).sum();
    let skip = len.saturating_sub(w) as u16;
    f.render_widget(Paragraph::new(line).scroll((0, skip)).block(pane(theme, title, !a.running)), prompt);

    let state = match (a.running, a.cancelling, a.end) {
        (true, true, _) => "cancelling…".to_string(),
        (true, false, _) => format!("turn {} · running", a.turns.max(1)),
        (false, _, Some(EndReason::FinalAnswer)) => format!("final answer after {} turn(s)", a.turns),
        (false, _, Some(EndReason::TurnLimit)) => format!("turn limit reached ({})", a.turns),
        (false, _, Some(EndReason::Cancelled)) => "cancelled".into(),
        (false, _, Some(EndReason::Error)) => "stopped by an error".into(),
        (false, _, None) => "idle".into(),
    };
    let mut title = format!(" transcript · {state} · {} ", if a.scroll.follows() { "following" } else { "scrolled" });
    if let Some(s) = &a.session {
        title.push_str(&format!("· session {} ", crate::sanitize::inert_line(s, 20)));
    }
    if a.dropped > 0 {
        title.push_str(&format!("· {} dropped ", a.dropped));
    }
    let block = pane(theme, title, a.running);
    let inner = block.inner(transcript);
    f.render_widget(block, transcript);
    if a.lines.is_empty() {
        let mut hint = vec![Line::from(Span::styled(
            "Type a task; the model gets one tool, run_code, executed on the selected tier with the current limits.",
            t.dim(),
        ))];
        if !api_key_set {
            hint.push(Line::from(Span::styled(
                "ANTHROPIC_API_KEY is not set: export it (and optionally ANTHROPIC_BASE_URL) before starting sandbench.",
                Style::new().fg(t.ui.warn),
            )));
        }
        f.render_widget(Paragraph::new(hint).wrap(ratatui::widgets::Wrap { trim: false }), inner);
        return;
    }
    let rows = inner.height as usize;
    let width = inner.width as usize;
    // Only the lines on screen are wrapped: from the end when following,
    // from the first shown line otherwise.
    let mut shown: std::collections::VecDeque<Line> = std::collections::VecDeque::new();
    let top = (a.fit(rows) - a.dropped) as usize;
    if a.scroll.follows() {
        for l in a.lines.iter().rev() {
            for row in wrap(theme, l, width).into_iter().rev() {
                shown.push_front(row);
            }
            if shown.len() >= rows {
                break;
            }
        }
        while shown.len() > rows {
            shown.pop_front();
        }
    } else {
        for l in a.lines.iter().skip(top) {
            shown.extend(wrap(theme, l, width));
            if shown.len() >= rows {
                break;
            }
        }
        shown.truncate(rows);
    }
    f.render_widget(Paragraph::new(Vec::from(shown)), inner);
}

/// The typed task: only printable characters reach the screen.
fn clean_input(s: &str) -> String {
    crate::sanitize::visible_controls(s.as_bytes()).replace(['\n', '\t'], " ")
}

fn style(theme: &Theme, k: Kind) -> Style {
    let t = &theme.ui;
    match k {
        Kind::Header => bold(Style::new().fg(t.title)),
        Kind::Task => Style::new().fg(t.accent),
        Kind::Turn => bold(Style::new().fg(t.accent)),
        Kind::Model => Style::new().fg(t.fg),
        Kind::ToolCall => bold(Style::new().fg(t.key)),
        Kind::Code => Style::new().fg(t.dim),
        Kind::Stdout => Style::new().fg(t.stdout),
        Kind::Stderr => Style::new().fg(t.stderr),
        Kind::Verdict(VerdictKind::Ok) => bold(Style::new().fg(t.ok)),
        Kind::Verdict(VerdictKind::Violation) => bold(Style::new().fg(t.violation)),
        Kind::Verdict(VerdictKind::Error) => bold(Style::new().fg(t.error)),
        Kind::Verdict(VerdictKind::Cancelled) | Kind::Retry => Style::new().fg(t.warn),
        Kind::End(EndReason::FinalAnswer) => bold(Style::new().fg(t.ok)),
        Kind::End(EndReason::Error) => bold(Style::new().fg(t.error)),
        Kind::End(_) => bold(Style::new().fg(t.warn)),
    }
}

/// One transcript line wrapped to `width` columns; output lines get a
/// gutter on every row (stderr marked like in the output pane); a cut line
/// says how much was cut.
fn wrap(theme: &Theme, l: &ALine, width: usize) -> Vec<Line<'static>> {
    let st = style(theme, l.kind);
    let gutter = || match l.kind {
        Kind::Stderr => Span::styled("▍ ", Style::new().fg(theme.ui.stderr)),
        Kind::Stdout | Kind::Code | Kind::Verdict(_) => Span::raw("  "),
        _ => Span::raw(""),
    };
    let room = width.saturating_sub(gutter().content.chars().count()).max(1);
    let mut rows: Vec<(String, usize)> = vec![(String::new(), 0)];
    for c in l.text.chars() {
        let w = c.width().unwrap_or(0);
        if rows.last().is_some_and(|(_, used)| used + w > room) {
            // Break after the last space when there is one (word wrap).
            let (cur, used) = rows.last_mut().expect("never empty");
            let tail = match cur.rfind(' ') {
                Some(i) if c != ' ' && i + 1 < cur.len() => cur.split_off(i + 1),
                _ => String::new(),
            };
            *used -= tail.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>();
            let w_tail = tail.chars().map(|c| c.width().unwrap_or(0)).sum();
            rows.push((tail, w_tail));
            if c == ' ' {
                continue;
            }
        }
        let (s, used) = rows.last_mut().expect("never empty");
        s.push(c);
        *used += w;
    }
    let n = rows.len();
    rows.into_iter()
        .enumerate()
        .map(|(i, (s, _))| {
            let mut spans = vec![gutter(), Span::styled(s, st)];
            if i + 1 == n && l.cut > 0 {
                spans.push(Span::styled(format!(" …+{}", l.cut), Style::new().fg(theme.ui.dim)));
            }
            Line::from(spans)
        })
        .collect()
}
