//! The screen as an SVG picture (^P in the workbench, for docs and slides):
//! the drawn buffer, cell by cell, runs of one style as one text element
//! stretched to its cells so columns stay aligned whatever the font. The
//! buffer holds sandbox output (already made inert by the sanitizer); it is
//! XML-escaped here all the same, and characters XML cannot carry are dropped.

use std::fmt::Write as _;

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

const CW: f64 = 8.4;
const CH: f64 = 17.0;

/// `c` as #rrggbb; `None` for the terminal's default (Reset).
fn hex(c: Color) -> Option<String> {
    let (r, g, b) = match c {
        Color::Reset => return None,
        Color::Rgb(r, g, b) => (r, g, b),
        Color::Black => (0, 0, 0),
        Color::Red => (205, 49, 49),
        Color::Green => (13, 188, 121),
        Color::Yellow => (229, 229, 16),
        Color::Blue => (36, 114, 200),
        Color::Magenta => (188, 63, 188),
        Color::Cyan => (17, 168, 205),
        Color::Gray => (204, 204, 204),
        Color::DarkGray => (118, 118, 118),
        Color::LightRed => (241, 76, 76),
        Color::LightGreen => (35, 209, 139),
        Color::LightYellow => (245, 245, 67),
        Color::LightBlue => (59, 142, 234),
        Color::LightMagenta => (214, 112, 214),
        Color::LightCyan => (41, 184, 219),
        Color::White => (242, 242, 242),
        Color::Indexed(i) => indexed(i),
    };
    Some(format!("#{r:02x}{g:02x}{b:02x}"))
}

/// The xterm 256-colour palette.
fn indexed(i: u8) -> (u8, u8, u8) {
    const BASE: [(u8, u8, u8); 16] = [
        (0, 0, 0),
        (205, 0, 0),
        (0, 205, 0),
        (205, 205, 0),
        (0, 0, 238),
        (205, 0, 205),
        (0, 205, 205),
        (229, 229, 229),
        (127, 127, 127),
        (255, 0, 0),
        (0, 255, 0),
        (255, 255, 0),
        (92, 92, 255),
        (255, 0, 255),
        (0, 255, 255),
        (255, 255, 255),
    ];
    match i {
        0..=15 => BASE[i as usize],
        16..=231 => {
            let n = i - 16;
            let v = |x: u8| if x == 0 { 0 } else { 55 + x * 40 };
            (v(n / 36), v((n / 6) % 6), v(n % 6))
        }
        _ => {
            let g = 8 + (i - 232) * 10;
            (g, g, g)
        }
    }
}

/// A run of cells as SVG text: the one inert XML form (escaped, hidden
/// characters and noncharacters shown by name). The sanitizer never lets
/// such characters into the buffer, but a picture must parse and hold no
/// control whatever drew the buffer.
fn xml(s: &str, out: &mut String) {
    out.push_str(&sandbench_core::sanitize::inert::xml_text(s, s.chars().count()));
}

/// The buffer as a standalone SVG document; `fg`/`bg` stand for the
/// terminal's default colours.
pub fn svg(buf: &Buffer, fg: Color, bg: Color) -> String {
    let area = buf.area;
    let dfg = hex(fg).unwrap_or_else(|| "#d4d4d4".into());
    let dbg = hex(bg).unwrap_or_else(|| "#1e1e1e".into());
    let (w, h) = (area.width as f64 * CW, area.height as f64 * CH);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w:.1} {h:.1}\" width=\"{w:.0}\" height=\"{h:.0}\" \
font-family=\"'DejaVu Sans Mono',Menlo,Consolas,monospace\" font-size=\"14\">\n<rect width=\"100%\" height=\"100%\" fill=\"{dbg}\"/>\n"
    );
    for y in 0..area.height {
        let mut x = 0u16;
        while x < area.width {
            let cell = &buf[(area.x + x, area.y + y)];
            let style = (cell.fg, cell.bg, cell.modifier);
            let start = x;
            let mut text = String::new();
            while x < area.width {
                let c = &buf[(area.x + x, area.y + y)];
                if (c.fg, c.bg, c.modifier) != style {
                    break;
                }
                text.push_str(if c.symbol().is_empty() { " " } else { c.symbol() });
                x += 1;
            }
            let (cfg, cbg, m) = style;
            let (cfg, cbg) = if m.contains(Modifier::REVERSED) { (cbg, cfg) } else { (cfg, cbg) };
            let (px, py, n) = (start as f64 * CW, y as f64 * CH, (x - start) as f64);
            if let Some(b) = hex(cbg).filter(|b| *b != dbg) {
                let _ = writeln!(
                    s,
                    "<rect x=\"{px:.1}\" y=\"{py:.1}\" width=\"{:.1}\" height=\"{CH}\" fill=\"{b}\"/>",
                    n * CW
                );
            }
            if text.trim().is_empty() {
                continue;
            }
            let _ = write!(
                s,
                "<text x=\"{px:.1}\" y=\"{:.1}\" textLength=\"{:.1}\" lengthAdjust=\"spacingAndGlyphs\" fill=\"{}\"{}{}{} xml:space=\"preserve\">",
                py + CH * 0.78,
                n * CW,
                hex(cfg).unwrap_or_else(|| dfg.clone()),
                if m.contains(Modifier::BOLD) { " font-weight=\"bold\"" } else { "" },
                if m.contains(Modifier::ITALIC) { " font-style=\"italic\"" } else { "" },
                if m.contains(Modifier::UNDERLINED) { " text-decoration=\"underline\"" } else { "" },
            );
            xml(&text, &mut s);
            s.push_str("</text>\n");
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::layout::Rect;
    use ratatui::style::Style;

    #[test]
    fn cells_become_text_runs_escaped() {
        let mut b = Buffer::empty(Rect::new(0, 0, 12, 2));
        b.set_string(0, 0, "<b>&\"x", Style::new().fg(Color::Red).bg(Color::Rgb(1, 2, 3)));
        b.set_string(0, 1, "ok\u{7}", Style::new().add_modifier(Modifier::BOLD));
        let s = svg(&b, Color::Reset, Color::Reset);
        assert!(s.contains("&lt;b&gt;&amp;&quot;x"), "{s}");
        assert!(s.contains("fill=\"#cd3131\"") && s.contains("fill=\"#010203\""), "{s}");
        assert!(s.contains("font-weight=\"bold\""));
        assert!(!s.contains('\u{7}') && !s.contains("<b>"));
        assert_eq!(s.matches("<text").count(), 2, "{s}");
        assert_eq!(indexed(196), (255, 0, 0));
        assert_eq!(indexed(244), (128, 128, 128));
    }
}
