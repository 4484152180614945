//! What every widget draws with: the pane block, bold, centring, an
//! outcome's style and the editor's tab width. Apart from `mod.rs` so the
//! widgets import it and not the module that dispatches to them.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Block;

use crate::tui::theme::Theme;

/// Tab stops in the editor (the file keeps its tabs).
pub const EDITOR_TAB: usize = 4;

/// A bordered block in the theme's colours.
pub(super) fn pane<'a>(theme: &Theme, title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    Block::bordered()
        .border_style(theme.border(focused))
        .title(title.into().style(theme.title(focused)))
        .style(theme.base())
}

pub(super) fn bold(s: Style) -> Style {
    s.add_modifier(Modifier::BOLD)
}

/// A centred rectangle of at most `w` × `h` inside `area`.
pub(super) fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

/// Style and glyph of an outcome.
pub(super) fn outcome_style(theme: &Theme, o: crate::report::Outcome) -> (Style, &'static str) {
    use crate::report::Outcome::*;
    let t = theme;
    match o {
        Ok => (bold(Style::new().fg(t.ui.ok)), "✔"),
        Violation => (bold(Style::new().fg(t.ui.violation)), "✖"),
        Error => (bold(Style::new().fg(t.ui.error)), "‼"),
        Cancelled => (bold(Style::new().fg(t.ui.warn)), "■"),
        // Not seen whole: never the ok colour or mark.
        Incomplete => (bold(Style::new().fg(t.ui.violation)), "◐"),
    }
}
