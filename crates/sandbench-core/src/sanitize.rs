//! Untrusted text made inert. Everything a sandbox produces (output, file
//! names, status lines) is hostile: escape sequences could set the clipboard
//! (OSC 52), rename the window, clear the screen or forge sandbench's own
//! lines. These stateless passes make such text safe for a terminal line or
//! a report field; the workbench's stateful, colour-keeping sanitizer is
//! built on them in the front end.

/// Make bytes safe to print on a terminal line by line: invalid UTF-8 becomes
/// U+FFFD, ESC becomes `␛`, other C0/C1 controls become `^X` / `<U+0085>`;
/// newlines and tabs stay.
pub fn visible_controls(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\x1b' => out.push('␛'),
            '\r' => out.push_str("^M"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from_u32(c as u32 + 0x40).unwrap_or('?'));
            }
            '\x7f' => out.push_str("^?"),
            c if ('\u{80}'..='\u{9f}').contains(&c) => out.push_str(&format!("<U+{:04X}>", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Make one untrusted string safe for a single-line field (a violation's
/// detail, a note, a file name in a report): every control character,
/// newlines and tabs included, and every invisible reordering character is
/// shown as visible text, and the result is cut at `max_chars` characters.
/// The one function every tier's event text goes through where the event is
/// created, so no front end can forget it.
pub fn inert_line(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_chars * 4));
    for (shown, c) in s.chars().enumerate() {
        if shown >= max_chars {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push('␤'),
            '\t' => out.push(' '),
            '\x1b' => out.push('␛'),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from_u32(c as u32 + 0x40).unwrap_or('?'));
            }
            '\x7f' => out.push_str("^?"),
            c if ('\u{80}'..='\u{9f}').contains(&c)
                || is_invisible_format(c)
                || matches!(c, '\u{2028}' | '\u{2029}') =>
            {
                out.push_str(&format!("<U+{:04X}>", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters that are printable but reorder or hide text: shown as `<U+202E>`.
pub fn is_invisible_format(c: char) -> bool {
    matches!(c as u32, 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2069 | 0xFEFF | 0xFFF9..=0xFFFB)
}

/// Keep the head and the tail of `text` within about `max` bytes, cut at
/// character boundaries, with a line saying how much was left out between.
/// An agent needs both ends: the start says what ran, the end how it died.
pub fn head_tail(text: &str, max: usize) -> (String, usize) {
    if text.len() <= max {
        return (text.to_string(), 0);
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted = tail_start - head_end;
    let out = format!("{}\n… {omitted} bytes omitted …\n{}", &text[..head_end], &text[tail_start..]);
    (out, omitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail_are_kept_at_char_boundaries() {
        assert_eq!(head_tail("short", 100), ("short".to_string(), 0));
        let text = format!("{}{}", "é".repeat(100), "z".repeat(100));
        let (out, omitted) = head_tail(&text, 50);
        assert!(out.starts_with('é') && out.ends_with('z'));
        assert!(out.contains(&format!("… {omitted} bytes omitted …")));
        assert_eq!(text.len(), omitted + out.lines().next().unwrap().len() + out.lines().last().unwrap().len());
    }

    #[test]
    fn escapes_are_made_visible() {
        let s = visible_controls(b"a\x1b]52;c;aGk=\x07b\x1b[2J\r\n\xff\xc2\x9b");
        assert_eq!(s, "a␛]52;c;aGk=^Gb␛[2J^M\n\u{FFFD}<U+009B>");
        assert!(!s.contains('\x1b'));
    }

    #[test]
    fn inert_lines_hold_no_control_and_are_bounded() {
        let s = inert_line("a\nb\tc\x1b]0;t\x07\u{202e}d\u{2028}", 100);
        assert_eq!(s, "a␤b c␛]0;t^G<U+202E>d<U+2028>");
        assert_eq!(inert_line("abcdef", 3), "abc…");
    }
}
