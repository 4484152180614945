//! Popups: help (from the keymap), samples picker, limits form, the
//! gauntlet's set-up, save-as.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, List, ListItem, ListState, Paragraph, Wrap};
use ratatui::Frame;

use super::common::{bold, centered, pane};
use super::scene::Scene;
use crate::tui::keymap;
use crate::tui::overlays::{GauntletSetup, Help, LimitsForm, Overlay, Prompt, PromptKind, SamplesPicker};
use crate::tui::theme::Theme;

pub fn draw(sc: &Scene, f: &mut Frame, area: Rect) {
    match sc.overlay {
        None => {}
        Some(Overlay::Help(h)) => help(sc.theme, f, area, h),
        Some(Overlay::Samples(p)) => samples(sc.theme, f, area, p),
        Some(Overlay::Limits(form)) => limits(sc.theme, f, area, form),
        Some(Overlay::GauntletSetup(s)) => gauntlet_setup(sc.theme, f, area, s),
        Some(Overlay::Prompt(Prompt { kind: PromptKind::SaveAs, input })) => {
            // Where a relative name lands, so "saved" is never a surprise.
            let dir = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
            let title = format!(" save as (relative to {dir}) · Enter saves · Esc cancels ");
            prompt(sc.theme, f, area, &title, "file: ", input)
        }
        Some(Overlay::Prompt(Prompt { kind: PromptKind::Search, input })) => {
            prompt(sc.theme, f, area, " search the output · Enter finds · Esc cancels ", "find: ", input)
        }
    }
}

fn popup(theme: &Theme, f: &mut Frame, rect: Rect, title: &str) -> Rect {
    f.render_widget(Clear, rect);
    let block = pane(theme, title.to_string(), true).style(Style::new().fg(theme.ui.fg).bg(theme.ui.popup_bg));
    let inner = block.inner(rect);
    f.render_widget(block, rect);
    inner
}

fn help(t: &Theme, f: &mut Frame, area: Rect, h: &Help) {
    let rect = centered(area, 76, area.height.saturating_sub(2));
    let inner = popup(t, f, rect, " help · keys (Esc closes) ");
    let mut lines = vec![];
    for (title, keys) in keymap::help_sections() {
        lines.push(Line::from(Span::styled(title, bold(Style::new().fg(t.ui.accent)))));
        for (key, help) in keys {
            lines.push(Line::from(vec![
                Span::styled(format!("  {key:<8}"), t.key()),
                Span::styled(help, Style::new().fg(t.ui.fg)),
            ]));
        }
        lines.push(Line::default());
    }
    let top = h.scroll.fit(0, lines.len() as u64, inner.height as u64);
    f.render_widget(Paragraph::new(lines).scroll((top.min(u16::MAX as u64) as u16, 0)), inner);
}

fn samples(t: &Theme, f: &mut Frame, area: Rect, p: &SamplesPicker) {
    let rect = centered(area, area.width.saturating_sub(4).max(40), area.height.saturating_sub(2));
    let title = if p.filter.is_empty() {
        " samples · type to filter · Enter loads · Esc closes ".to_string()
    } else {
        format!(" samples · filter: {}_ · Bksp · Enter loads · Esc closes ", p.filter)
    };
    let inner = popup(t, f, rect, &title);
    // Enter over unsaved edits asks first, here where the eyes are.
    let inner = if p.confirm && inner.height > 2 {
        let [ask, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
        let text = "unsaved changes in the editor: Enter again replaces them (^Z brings them back), Esc keeps them";
        f.render_widget(
            Paragraph::new(Span::styled(text, bold(Style::new().fg(t.ui.warn)))).wrap(Wrap { trim: true }),
            ask,
        );
        rest
    } else {
        inner
    };
    let list_w = (inner.width / 3).clamp(18, 30);
    let [left, right] = Layout::horizontal([Constraint::Length(list_w), Constraint::Min(10)]).areas(inner);
    let visible = p.visible();
    if visible.is_empty() && !p.items.is_empty() {
        f.render_widget(Paragraph::new(Span::styled(format!("no sample matches '{}'", p.filter), t.dim())), left);
    }
    let items: Vec<ListItem> = visible
        .iter()
        .map(|i| &p.items[*i])
        .map(|(group, s)| {
            let tag = if group == "hostile" {
                Span::styled("☠ ", Style::new().fg(t.ui.violation))
            } else {
                Span::styled("· ", Style::new().fg(t.ui.ok))
            };
            ListItem::new(Line::from(vec![tag, Span::raw(s.name.clone())]))
        })
        .collect();
    let list = List::new(items)
        .style(Style::new().fg(t.ui.fg))
        .highlight_symbol("▶")
        .highlight_style(Style::new().bg(t.ui.selection_bg).add_modifier(Modifier::BOLD));
    let mut state = ListState::default().with_selected(Some(p.selected));
    f.render_stateful_widget(list, left, &mut state);
    let mut lines = vec![];
    for prob in &p.problems {
        lines.push(Line::from(Span::styled(prob.clone(), Style::new().fg(t.ui.warn))));
    }
    if let Some((group, s)) = p.current() {
        let field = |k: &str, v: String| {
            Line::from(vec![Span::styled(format!("{k:<7}"), t.key()), Span::styled(v, Style::new().fg(t.ui.fg))])
        };
        lines.push(field("name", format!("{} ({group}, {})", s.name, s.language)));
        lines.push(field("tries", s.tries.clone()));
        lines.push(field("must", s.must.clone()));
        let mut exp: Vec<String> = s
            .expect
            .iter()
            .map(|(tier, e)| {
                let kinds: Vec<&str> = e.kinds.iter().map(|k| k.name()).collect();
                if kinds.is_empty() {
                    format!("{tier}={}", e.outcome.name())
                } else {
                    format!("{tier}={}:{}", e.outcome.name(), kinds.join("|"))
                }
            })
            .collect();
        if exp.is_empty() {
            exp.push("—".into());
        }
        lines.push(field("expect", exp.join(" ")));
        let file = s.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        lines.push(field("file", format!("{group}/{file}")));
        lines.push(Line::default());
        for code in s.code.lines().filter(|l| !l.starts_with('#')).take(right.height as usize) {
            lines.push(Line::from(Span::styled(crate::sanitize::visible_controls(code.as_bytes()), t.dim())));
        }
    } else if p.problems.is_empty() {
        lines.push(Line::from(Span::styled("no samples", t.dim())));
    }
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }),
        right.inner(ratatui::layout::Margin { horizontal: 1, vertical: 0 }),
    );
}

/// Two lists side by side, tiers and samples, each item checked or not; the
/// run count in the title.
fn gauntlet_setup(t: &Theme, f: &mut Frame, area: Rect, s: &GauntletSetup) {
    let rect = centered(area, area.width.saturating_sub(4).max(40), area.height.saturating_sub(2));
    let (nt, ns) = (s.chosen_tiers().len(), s.samples.iter().filter(|(_, on)| *on).count());
    let title =
        format!(" gauntlet: {nt} tier(s) × {ns} sample(s) = {} runs, one at a time · Enter runs · Esc ", s.runs());
    let inner = popup(t, f, rect, &title);
    let tiers_w = (inner.width / 3).clamp(24, 44);
    let [left, right] = Layout::horizontal([Constraint::Length(tiers_w), Constraint::Min(10)]).areas(inner);
    let mark = |on: bool| if on { "[x] " } else { "[ ] " };
    let head = |text: &str, focused: bool| {
        let st = if focused { bold(Style::new().fg(t.ui.accent)) } else { t.dim() };
        Line::from(Span::styled(text.to_string(), st))
    };
    let draw_list =
        |f: &mut Frame, area: Rect, title: Line<'static>, items: Vec<ListItem<'static>>, sel: Option<usize>| {
            let [h, l] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
            f.render_widget(Paragraph::new(title), h);
            let list = List::new(items)
                .style(Style::new().fg(t.ui.fg))
                .highlight_symbol("▶")
                .highlight_style(Style::new().bg(t.ui.selection_bg).add_modifier(Modifier::BOLD));
            let mut state = ListState::default().with_selected(sel);
            f.render_stateful_widget(list, l, &mut state);
        };
    let tiers: Vec<ListItem> = s
        .tiers
        .iter()
        .map(|(name, why, on)| match why {
            None => ListItem::new(Line::from(format!("{}{name}", mark(*on)))),
            Some(w) => ListItem::new(Line::from(Span::styled(
                format!("    {name} ({})", crate::sanitize::inert_line(w, 60)),
                t.dim(),
            ))),
        })
        .collect();
    draw_list(f, left, head("tiers (Tab: samples)", !s.in_samples), tiers, (!s.in_samples).then_some(s.cursor[0]));
    let samples: Vec<ListItem> = s
        .visible_samples()
        .into_iter()
        .map(|i| &s.samples[i])
        .map(|(sample, on)| {
            let tag = if sample.is_hostile() { "☠" } else { "·" };
            ListItem::new(Line::from(vec![
                Span::raw(format!("{}{tag} {:<22} ", mark(*on), sample.name)),
                Span::styled(sample.tries.clone(), t.dim()),
            ]))
        })
        .collect();
    draw_list(
        f,
        right.inner(ratatui::layout::Margin { horizontal: 1, vertical: 0 }),
        head(
            &match (s.filtering, s.filter.is_empty()) {
                (true, _) => format!(
                    "samples · filter: {}▏ (Enter keeps, Esc clears)",
                    crate::sanitize::inert_line(&s.filter, 40)
                ),
                (false, false) => format!(
                    "samples · filter: {} ({} shown; / changes, Esc clears; a: all shown)",
                    crate::sanitize::inert_line(&s.filter, 40),
                    s.visible_samples().len()
                ),
                (false, true) => "samples (Space chooses, a: all or none, / filters)".to_string(),
            },
            s.in_samples,
        ),
        samples,
        s.in_samples.then_some(s.cursor[1]),
    );
}

fn limits(t: &Theme, f: &mut Frame, area: Rect, form: &LimitsForm) {
    let rect = centered(area, 56, form.fields.len() as u16 + 6);
    let inner = popup(t, f, rect, " limits of the next run · Enter applies ");
    let mut lines = vec![];
    for (i, (field, text)) in form.fields.iter().enumerate() {
        let sel = i == form.selected;
        let val_style = if sel { Style::new().fg(t.ui.fg).bg(t.ui.selection_bg) } else { Style::new().fg(t.ui.fg) };
        // A long allow list shows its end, where the typing happens.
        let n = text.chars().count();
        let text = if n > 30 { format!("…{}", text.chars().skip(n - 29).collect::<String>()) } else { text.clone() };
        lines.push(Line::from(vec![
            Span::styled(if sel { "▶ " } else { "  " }, t.key()),
            Span::styled(format!("{:<10}", field.label()), Style::new().fg(t.ui.title)),
            Span::styled(format!("{:<12}", format!("{text}{}", if sel { "▏" } else { "" })), val_style),
            Span::styled(format!(" {}", field.hint()), t.dim()),
        ]));
    }
    lines.push(Line::default());
    match &form.error {
        Some(e) => lines.push(Line::from(Span::styled(e.clone(), bold(Style::new().fg(t.ui.error))))),
        None => lines.push(Line::from(Span::styled("↑↓ move · type to edit · Esc discards", t.dim()))),
    }
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

fn prompt(t: &Theme, f: &mut Frame, area: Rect, title: &str, label: &'static str, input: &str) {
    let rect = centered(area, (title.chars().count() as u16).saturating_add(4).max(60), 3);
    let inner = popup(t, f, rect, title);
    let line =
        Line::from(vec![Span::styled(label, t.key()), Span::styled(format!("{input}▏"), Style::new().fg(t.ui.fg))]);
    f.render_widget(Paragraph::new(line), inner);
}
