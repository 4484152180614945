//! Untrusted bytes on a terminal. Output from a sandbox never reaches the real
//! terminal raw: escape sequences could set the clipboard (OSC 52), rename
//! the window, switch screens or move the cursor over sandbench's own text.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_made_visible() {
        let s = visible_controls(b"a\x1b]52;c;aGk=\x07b\x1b[2J\r\n\xff\xc2\x9b");
        assert_eq!(s, "a␛]52;c;aGk=^Gb␛[2J^M\n\u{FFFD}<U+009B>");
        assert!(!s.contains('\x1b'));
    }
}
