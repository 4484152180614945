//! The workbench's view of untrusted output: a stateful `vte` parser that
//! survives chunk boundaries (an escape sequence or a UTF-8 character split
//! across two reads), keeps printable text and SGR colours (as ratatui
//! styles), expands tabs, shows every other control visibly (`␛[2J`, `^G`),
//! turns invalid UTF-8 into U+FFFD, and caps line length. [`LineRing`] caps
//! the line count. Nothing it produces contains a control character.

use std::collections::VecDeque;

use ratatui::style::{Color, Modifier, Style};
use sandbench_core::sanitize::{is_hidden, push_shown, visible_controls};
use unicode_width::UnicodeWidthChar;

/// Tab stops every this many columns.
pub const TAB_WIDTH: usize = 8;
/// Bytes fed without the parser reporting anything (an unterminated OSC or
/// DCS string) before it is reset. `vte` with `std` buffers OSC payloads
/// without bound; this bounds it.
const MAX_SILENT_BYTES: usize = 4096;
/// Largest slice handed to the parser at once (so the silence check runs).
const FEED_SLICE: usize = 4096;
/// How much of a dropped escape sequence is shown.
const MAX_SHOWN_SEQUENCE: usize = 24;

/// Style of text sandbench inserts to show a control (`␛[2J`, `^G`).
pub fn marker_style() -> Style {
    Style::new().add_modifier(Modifier::DIM | Modifier::ITALIC)
}

/// One sanitized line of printable text only, with style runs. Two heap
/// blocks per line (text and runs), whatever its colours: a flood moves
/// millions of these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StyledLine {
    text: String,
    /// (byte offset where the run starts, style), ascending.
    runs: Vec<(u32, Style)>,
    /// Display width in terminal columns.
    pub width: usize,
    /// Characters dropped past the line-length cap.
    pub cut: u64,
}

impl StyledLine {
    pub fn plain(style: Style, text: &str) -> StyledLine {
        let mut l = StyledLine::default();
        for c in visible_controls(text.as_bytes()).chars() {
            let c = if c == '\n' || c == '\t' { ' ' } else { c };
            l.push(style, c, c.width().unwrap_or(0));
        }
        l
    }

    #[inline]
    fn push(&mut self, style: Style, c: char, w: usize) {
        if self.runs.last().is_none_or(|(_, s)| *s != style) {
            self.runs.push((self.text.len() as u32, style));
        }
        self.text.push(c);
        self.width += w;
    }

    fn push_str(&mut self, style: Style, s: &str, max_cols: usize) {
        for c in s.chars() {
            let w = c.width().unwrap_or(0);
            if self.width + w > max_cols {
                self.cut += 1;
            } else {
                self.push(style, c, w);
            }
        }
    }

    /// The style runs: (style, text).
    pub fn segments(&self) -> impl Iterator<Item = (Style, &str)> + '_ {
        self.runs.iter().enumerate().map(move |(i, (start, style))| {
            let end = self.runs.get(i + 1).map_or(self.text.len(), |(e, _)| *e as usize);
            (*style, &self.text[*start as usize..end])
        })
    }

    /// The text without styles.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.cut == 0
    }

    fn clear(&mut self) {
        self.text.clear();
        self.runs.clear();
        self.width = 0;
        self.cut = 0;
    }
}

/// A stateful sanitizer for one output stream.
pub struct Sanitizer {
    parser: vte::Parser,
    perf: Performer,
    silent: usize,
    /// Skipping the rest of an over-long escape string, up to its terminator.
    discarding: bool,
    /// The start of a UTF-8 sequence the last chunk ended inside: held back
    /// so that the parser sees every sequence whole (vte dropped the control
    /// that followed a sequence split across two feeds; found by fuzzing).
    carry: Vec<u8>,
}

struct Performer {
    style: Style,
    line: StyledLine,
    done: Vec<StyledLine>,
    max_cols: usize,
    /// A carriage return was seen: the next printed character starts the
    /// line again (progress bars), a newline just ends it.
    cr: bool,
    /// Set by every callback; the silence counter is reset when it is.
    heard: bool,
}

impl Sanitizer {
    /// `max_cols`: the longest line kept, in columns; the rest is counted in `cut`.
    pub fn new(max_cols: usize) -> Sanitizer {
        Sanitizer {
            parser: vte::Parser::new(),
            perf: Performer {
                style: Style::new(),
                line: StyledLine::default(),
                done: vec![],
                max_cols: max_cols.max(8),
                cr: false,
                heard: false,
            },
            silent: 0,
            discarding: false,
            carry: Vec::new(),
        }
    }

    /// Feed a chunk; completed lines are appended to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<StyledLine>) {
        let mut joined;
        let mut bytes = bytes;
        if !self.carry.is_empty() {
            joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(bytes);
            bytes = &joined[..];
        }
        let keep = incomplete_utf8_tail(bytes);
        self.carry.extend_from_slice(&bytes[bytes.len() - keep..]);
        let bytes = &bytes[..bytes.len() - keep];
        self.feed_whole(bytes, out);
    }

    fn feed_whole(&mut self, bytes: &[u8], out: &mut Vec<StyledLine>) {
        for mut slice in bytes.chunks(FEED_SLICE) {
            if self.discarding {
                // BEL or ESC end the string (ESC \\ or a new sequence); a
                // newline resumes output so that a program cannot hide the rest.
                match slice.iter().position(|&b| matches!(b, 0x07 | 0x1b | b'\n')) {
                    None => continue,
                    Some(i) => {
                        self.discarding = false;
                        let skip = if slice[i] == 0x07 { i + 1 } else { i };
                        slice = &slice[skip..];
                    }
                }
            }
            self.perf.heard = false;
            self.parser.advance(&mut self.perf, slice);
            if self.perf.heard {
                self.silent = 0;
            } else {
                self.silent += slice.len();
                if self.silent > MAX_SILENT_BYTES {
                    // An endless OSC/DCS/APC string: drop it and start over.
                    self.parser = vte::Parser::new();
                    self.silent = 0;
                    self.discarding = true;
                    self.perf.marker("␛…[over-long escape sequence dropped]");
                }
            }
        }
        out.append(&mut self.perf.done);
    }

    /// The line being written (no newline yet).
    pub fn partial(&self) -> &StyledLine {
        &self.perf.line
    }

    /// End of stream: the unterminated line, if any.
    pub fn finish(&mut self) -> Option<StyledLine> {
        if !self.carry.is_empty() {
            // The stream ended inside a sequence: it is invalid, shown as such.
            let tail = std::mem::take(&mut self.carry);
            let mut out = vec![];
            self.feed_whole(&tail, &mut out);
            self.perf.done.extend(out);
        }
        let l = std::mem::take(&mut self.perf.line);
        self.perf.cr = false;
        (!l.is_empty()).then_some(l)
    }
}

/// How many trailing bytes of `b` are the start of a UTF-8 sequence that
/// is not complete yet (0 when it ends on a boundary).
fn incomplete_utf8_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0x80..=0xBF => continue, // a continuation byte: look further back
            _ => return 0,
        };
        return if back < need { back } else { 0 };
    }
    0
}

impl Performer {
    fn marker(&mut self, s: &str) {
        let style = self.style.patch(marker_style());
        self.take_cr();
        self.line.push_str(style, s, self.max_cols);
    }

    fn take_cr(&mut self) {
        if self.cr {
            self.cr = false;
            self.line.clear();
        }
    }

    fn newline(&mut self) {
        self.cr = false;
        self.done.push(std::mem::take(&mut self.line));
    }

    fn sgr(&mut self, params: &vte::Params) {
        let mut it = params.iter();
        if params.is_empty() {
            self.style = Style::new();
            return;
        }
        while let Some(p) = it.next() {
            let code = p.first().copied().unwrap_or(0);
            match code {
                0 => self.style = Style::new(),
                1 => self.style = self.style.add_modifier(Modifier::BOLD),
                2 => self.style = self.style.add_modifier(Modifier::DIM),
                3 => self.style = self.style.add_modifier(Modifier::ITALIC),
                4 => self.style = self.style.add_modifier(Modifier::UNDERLINED),
                7 => self.style = self.style.add_modifier(Modifier::REVERSED),
                9 => self.style = self.style.add_modifier(Modifier::CROSSED_OUT),
                // Blink and hidden text are not kept: hidden text could hide
                // what a program really printed.
                22 => self.style = self.style.remove_modifier(Modifier::BOLD | Modifier::DIM),
                23 => self.style = self.style.remove_modifier(Modifier::ITALIC),
                24 => self.style = self.style.remove_modifier(Modifier::UNDERLINED),
                27 => self.style = self.style.remove_modifier(Modifier::REVERSED),
                29 => self.style = self.style.remove_modifier(Modifier::CROSSED_OUT),
                30..=37 => self.style.fg = Some(Color::Indexed((code - 30) as u8)),
                39 => self.style.fg = None,
                40..=47 => self.style.bg = Some(Color::Indexed((code - 40) as u8)),
                49 => self.style.bg = None,
                90..=97 => self.style.fg = Some(Color::Indexed((code - 90 + 8) as u8)),
                100..=107 => self.style.bg = Some(Color::Indexed((code - 100 + 8) as u8)),
                38 | 48 => {
                    // Colon form carries the rest in this parameter's
                    // sub-parameters; semicolon form in the next parameters.
                    let rest: Vec<u16> = if p.len() > 1 {
                        p[1..].to_vec()
                    } else {
                        let mut v = vec![];
                        if let Some(kind) = it.next() {
                            let kind = kind.first().copied().unwrap_or(0);
                            v.push(kind);
                            let n = if kind == 5 {
                                1
                            } else if kind == 2 {
                                3
                            } else {
                                0
                            };
                            for _ in 0..n {
                                v.push(it.next().and_then(|x| x.first().copied()).unwrap_or(0));
                            }
                        }
                        v
                    };
                    let color = match rest.as_slice() {
                        [5, n, ..] => Some(Color::Indexed((*n).min(255) as u8)),
                        // `38:2::r:g:b` has an empty colour-space id.
                        [2, _, r, g, b] | [2, r, g, b] => {
                            Some(Color::Rgb((*r).min(255) as u8, (*g).min(255) as u8, (*b).min(255) as u8))
                        }
                        _ => None,
                    };
                    if let Some(c) = color {
                        if code == 38 {
                            self.style.fg = Some(c);
                        } else {
                            self.style.bg = Some(c);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

fn short(s: &str) -> String {
    let mut out: String = s.chars().take(MAX_SHOWN_SEQUENCE).collect();
    if s.chars().count() > MAX_SHOWN_SEQUENCE {
        out.push('…');
    }
    out
}

fn params_text(params: &vte::Params) -> String {
    let mut s = String::new();
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            s.push(';');
        }
        for (j, sub) in p.iter().enumerate() {
            if j > 0 {
                s.push(':');
            }
            s.push_str(&sub.to_string());
        }
        if s.len() > MAX_SHOWN_SEQUENCE {
            break;
        }
    }
    s
}

fn printable_bytes(b: &[u8]) -> String {
    b.iter().map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '?' }).collect()
}

impl vte::Perform for Performer {
    fn print(&mut self, c: char) {
        self.heard = true;
        // Fast path: printable ASCII (the bulk of any flood).
        if (' '..='~').contains(&c) && !self.cr {
            if self.line.width >= self.max_cols {
                self.line.cut += 1;
                return;
            }
            let style = self.style;
            self.line.push(style, c, 1);
            return;
        }
        // A C1 control split across two chunks arrives here, not in execute.
        if c.is_control() && c != '\x7f' && (c as u32) < 0x100 {
            return self.execute(c as u32 as u8);
        }
        self.take_cr();
        if c == '\x7f' {
            return self.marker("^?");
        }
        if is_hidden(c) {
            let mut shown = String::new();
            push_shown(&mut shown, c);
            return self.marker(&shown);
        }
        let w = c.width().unwrap_or(0);
        if self.line.width + w > self.max_cols {
            self.line.cut += 1;
        } else {
            let style = self.style;
            self.line.push(style, c, w);
        }
    }

    fn execute(&mut self, byte: u8) {
        self.heard = true;
        match byte {
            b'\n' => self.newline(),
            b'\r' => self.cr = true,
            b'\t' => {
                self.take_cr();
                let n = TAB_WIDTH - self.line.width % TAB_WIDTH;
                let style = self.style;
                self.line.push_str(style, &" ".repeat(n), self.max_cols);
            }
            0x00..=0x1f => self.marker(&format!("^{}", (byte + 0x40) as char)),
            _ => self.marker(&format!("<U+{byte:04X}>")),
        }
    }

    fn hook(&mut self, params: &vte::Params, intermediates: &[u8], _ignore: bool, action: char) {
        self.heard = true;
        let s = format!("␛P{}{}{action}", params_text(params), printable_bytes(intermediates));
        self.marker(&short(&s));
    }

    fn put(&mut self, _byte: u8) {
        self.heard = true;
    }

    fn unhook(&mut self) {
        self.heard = true;
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], _bell_terminated: bool) {
        self.heard = true;
        // Show which command it was (52 = clipboard, 0/2 = title), not its payload.
        let what = params.first().map(|p| printable_bytes(&p[..p.len().min(8)])).unwrap_or_default();
        self.marker(&format!("␛]{what}…"));
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        self.heard = true;
        if action == 'm' && intermediates.is_empty() && !ignore {
            self.sgr(params);
            return;
        }
        let s = format!("␛[{}{}{action}", printable_bytes(intermediates), params_text(params));
        self.marker(&short(&s));
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        self.heard = true;
        if intermediates.is_empty() && byte == b'\\' {
            // String terminator of an OSC/DCS already shown.
            return;
        }
        let s = format!("␛{}{}", printable_bytes(intermediates), printable_bytes(&[byte]));
        self.marker(&short(&s));
    }
}

/// A bounded FIFO of lines: the oldest go when it is full.
#[derive(Debug, Clone)]
pub struct LineRing<T> {
    lines: VecDeque<T>,
    cap: usize,
    /// Lines dropped from the front so far.
    pub dropped: u64,
}

impl<T> LineRing<T> {
    pub fn new(cap: usize) -> Self {
        LineRing { lines: VecDeque::new(), cap: cap.max(1), dropped: 0 }
    }

    pub fn push(&mut self, line: T) {
        if self.lines.len() == self.cap {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.lines.get(i)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.lines.iter()
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_utf8_sequence_split_across_chunks_changes_nothing() {
        // Found by fuzz/fuzz_targets/sanitize_tui.rs: the NUL after a split
        // sequence was dropped.
        let body = [0x2a, 0xdf, 0xbb, 0x00, 0xff];
        let run = |cuts: &[usize]| {
            let mut s = super::Sanitizer::new(64);
            let mut out = vec![];
            let mut at = 0;
            for &c in cuts {
                s.feed(&body[at..at + c], &mut out);
                at += c;
            }
            s.feed(&body[at..], &mut out);
            out.extend(s.finish());
            out.iter().map(|l| l.text().to_string()).collect::<Vec<_>>()
        };
        let whole = run(&[]);
        assert_eq!(whole, vec!["*\u{7fb}^@\u{fffd}".to_string()]);
        for cuts in [&[1, 1][..], &[2], &[1, 2, 1], &[4]] {
            assert_eq!(run(cuts), whole, "cut at {cuts:?}");
        }
        assert_eq!(super::incomplete_utf8_tail(&[b'a', 0xe2, 0x82]), 2);
        assert_eq!(super::incomplete_utf8_tail(&[b'a', 0xe2, 0x82, 0xac]), 0);
        assert_eq!(super::incomplete_utf8_tail(&[0xff]), 0);
    }

    use super::*;

    /// Feed `input` split at every position into two chunks, and at every
    /// byte; every split must give the same lines as one chunk.
    fn lines_all_splits(input: &[u8]) -> Vec<StyledLine> {
        let run = |chunks: &[&[u8]]| {
            let mut s = Sanitizer::new(200);
            let mut out = vec![];
            for c in chunks {
                s.feed(c, &mut out);
            }
            out.extend(s.finish());
            out
        };
        let whole = run(&[input]);
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(run(&[a, b]), whole, "split at byte {i} of {:?}", String::from_utf8_lossy(input));
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(&bytes), whole, "byte by byte");
        whole
    }

    fn texts(lines: &[StyledLine]) -> Vec<String> {
        lines.iter().map(|l| l.text().to_string()).collect()
    }

    fn assert_clean(lines: &[StyledLine]) {
        for l in lines {
            for c in l.text().chars() {
                assert!(!c.is_control(), "control {c:?} survived in {:?}", l.text());
            }
        }
    }

    #[test]
    fn osc52_title_altscreen_and_cursor_moves_never_pass() {
        let input = b"hi\x1b]52;c;ZXZpbA==\x07 \x1b]0;pwned title\x1b\\ \x1b[?1049h\x1b[H\x1b[2J\x1b[10;20Hend\n";
        let lines = lines_all_splits(input);
        assert_clean(&lines);
        assert_eq!(texts(&lines), ["hi␛]52… ␛]0… ␛[?1049h␛[0H␛[2J␛[10;20Hend"]);
        // The payloads (clipboard data, title) are not shown at all.
        assert!(!lines[0].text().contains("ZXZpbA"));
        assert!(!lines[0].text().contains("pwned"));
    }

    #[test]
    fn sgr_colours_become_styles() {
        let lines = lines_all_splits(b"\x1b[31mred\x1b[0m plain \x1b[1;38;5;208mor\x1b[38:2::1:2:3mrgb\x1b[m\n");
        let l = &lines[0];
        assert_eq!(l.text(), "red plain orrgb");
        let segs: Vec<(Style, &str)> = l.segments().collect();
        assert_eq!(segs[0], (Style::new().fg(Color::Indexed(1)), "red"));
        assert_eq!(segs[1], (Style::new(), " plain "));
        assert_eq!(segs[2], (Style::new().fg(Color::Indexed(208)).add_modifier(Modifier::BOLD), "or"));
        assert_eq!(segs[3].0.fg, Some(Color::Rgb(1, 2, 3)));
    }

    #[test]
    fn controls_tabs_and_bad_utf8() {
        let lines = lines_all_splits(b"a\x07b\tc\x08\xff\xfe\xe2\x82\xac\xe2\x82 \xc2\x85z\x7f\n\xe2\x80\xaeevil\n");
        assert_clean(&lines);
        assert_eq!(texts(&lines), ["a^Gb    c^H\u{FFFD}\u{FFFD}€\u{FFFD} <U+0085>z^?", "<U+202E>evil"]);
    }

    #[test]
    fn carriage_return_rewrites_the_line() {
        let lines = lines_all_splits(b"10%\r50%\r100%\r\ndone\r\n");
        assert_eq!(texts(&lines), ["100%", "done"]);
    }

    #[test]
    fn huge_line_is_capped_and_counted() {
        let mut s = Sanitizer::new(100);
        let mut out = vec![];
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..320 {
            // 20 MiB without a newline
            s.feed(&chunk, &mut out);
        }
        assert!(out.is_empty());
        assert_eq!(s.partial().width, 100);
        assert_eq!(s.partial().cut, 20 * (1 << 20) - 100);
        assert_eq!(s.partial().text().len(), 100);
    }

    #[test]
    fn unterminated_osc_is_bounded() {
        let mut s = Sanitizer::new(100);
        let mut out = vec![];
        s.feed(b"\x1b]52;c;", &mut out);
        for _ in 0..100 {
            s.feed(&[b'A'; 1 << 16], &mut out);
        }
        s.feed(b"\x07after\n", &mut out);
        let t = texts(&out);
        assert_eq!(t.len(), 1);
        assert!(t[0].contains("over-long escape sequence dropped"), "{t:?}");
        assert!(t[0].ends_with("after"), "{t:?}");
        assert!(!t[0].contains("AAAA"));
    }

    #[test]
    fn wide_characters_respect_the_cap() {
        let mut s = Sanitizer::new(10);
        let mut out = vec![];
        s.feed("日本語日本語日本語\n".as_bytes(), &mut out);
        assert_eq!(out[0].text(), "日本語日本");
        assert_eq!(out[0].width, 10);
        assert_eq!(out[0].cut, 4);
    }

    #[test]
    fn ring_drops_oldest() {
        let mut r = LineRing::new(3);
        for i in 0..5 {
            r.push(i);
        }
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(r.dropped, 2);
    }

    #[test]
    fn invisible_and_reordering_characters_become_markers() {
        let mut s = Sanitizer::new(200);
        let mut out = vec![];
        let forged =
            "ok\u{2028}outcome   ok\u{2066}\u{202E}x\u{2069}\u{200B}\u{FEFF}\u{E0041}\u{FE0F}\u{00AD}\u{061C}\n";
        // Split inside a four-byte tag character: the parser holds it whole.
        let b = forged.as_bytes();
        let cut = forged.find('\u{E0041}').unwrap() + 2;
        s.feed(&b[..cut], &mut out);
        s.feed(&b[cut..], &mut out);
        assert_eq!(
            out[0].text(),
            "ok<U+2028>outcome   ok<U+2066><U+202E>x<U+2069><U+200B><U+FEFF><U+E0041><U+FE0F><U+00AD><U+061C>"
        );
    }

    fn class_text() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let class = [
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{200B}',
            '\u{FEFF}',
            '\u{2028}',
            '\u{2029}',
            '\u{E0041}',
            '\u{FE0F}',
            '\u{E0100}',
            '\u{00AD}',
            '\u{061C}',
            '\u{3164}',
            '\u{1B}',
            '\u{85}',
            '\u{9B}',
        ];
        let one = prop_oneof![any::<char>(), proptest::sample::select(class.to_vec()), proptest::char::range(' ', '~')];
        proptest::collection::vec(one, 0..120).prop_map(|v| v.into_iter().collect::<String>().into_bytes())
    }

    proptest::proptest! {
        #[test]
        fn nothing_control_ever_comes_out(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), split in 0usize..400) {
            let mut s = Sanitizer::new(50);
            let mut out = vec![];
            let split = split.min(bytes.len());
            s.feed(&bytes[..split], &mut out);
            s.feed(&bytes[split..], &mut out);
            out.extend(s.finish());
            for l in &out {
                proptest::prop_assert!(l.width <= 50);
                for c in l.text().chars() {
                    proptest::prop_assert!(!c.is_control());
                }
            }
        }

        #[test]
        fn nothing_hidden_ever_comes_out(bytes in class_text(), split in 0usize..500) {
            let mut s = Sanitizer::new(80);
            let mut out = vec![];
            let split = split.min(bytes.len());
            s.feed(&bytes[..split], &mut out);
            s.feed(&bytes[split..], &mut out);
            out.extend(s.finish());
            for l in &out {
                for c in l.text().chars() {
                    proptest::prop_assert!(!is_hidden(c), "U+{:04X} in {:?}", c as u32, l.text());
                }
            }
        }
    }
}
