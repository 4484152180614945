//! Driving the workbench without a terminal: render into a `TestBackend`
//! and read the screen as text (tests, snapshots, the UI bench).

use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::Terminal;

use super::app::{App, Msg};
use super::widgets;

/// Lay out, prepare and draw `app` on a `width` × `height` screen.
pub fn render(app: &mut App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test backend never fails");
    app.prepare(Rect::new(0, 0, width, height), Duration::from_secs(1));
    terminal.draw(|f| widgets::draw(&app.scene(), f)).expect("a test backend never fails");
    terminal.backend().buffer().clone()
}

/// The screen as lines of text (trailing spaces trimmed).
pub fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in 0..area.height {
        let mut line = String::new();
        for x in 0..area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Render and return the text in one go.
pub fn screen(app: &mut App, width: u16, height: u16) -> String {
    text(&render(app, width, height))
}

pub fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

pub fn ctrl(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
}

/// Type text into whatever has focus, a key per character.
pub fn type_text(app: &mut App, s: &str) {
    for c in s.chars() {
        let code = if c == '\n' { KeyCode::Enter } else { KeyCode::Char(c) };
        app.update(Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)));
    }
}

/// A minimal finished-run report, for feeding synthetic runs.
pub fn report(tier: &str, outcome: crate::report::Outcome) -> crate::report::RunReport {
    crate::report::RunReport { outcome, error: None, ..crate::report::RunReport::failed(tier, "python", "-", "") }
}
