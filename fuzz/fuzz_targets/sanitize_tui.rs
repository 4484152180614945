//! The workbench's stateful vte sanitizer, fed in arbitrary chunks: no
//! control character reaches a line, line width stays bounded, and feeding
//! the same bytes in one piece or in chunks gives the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbench::tui::sanitize::Sanitizer;

const COLS: usize = 64;

fn text(data: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut s = Sanitizer::new(COLS);
    let mut out = vec![];
    let mut at = 0;
    for &c in cuts {
        let end = (at + c).min(data.len());
        s.feed(&data[at..end], &mut out);
        at = end;
    }
    s.feed(&data[at..], &mut out);
    out.extend(s.finish());
    out.iter().map(|l| l.text().to_string()).collect()
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = data.split_at(data.len().min(4));
    let cuts: Vec<usize> = head.iter().map(|b| *b as usize % 17 + 1).collect();
    let whole = text(body, &[]);
    for line in &whole {
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert!(unicode_width(line) <= COLS * 4 + 64, "{} chars", line.len());
    }
    assert_eq!(whole, text(body, &cuts), "chunking changed the text");
});

fn unicode_width(s: &str) -> usize {
    s.chars().count()
}
