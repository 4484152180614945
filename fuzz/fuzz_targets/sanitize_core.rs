//! The stateless passes every sandbox string goes through: nothing that can
//! steer a terminal survives, single-line output holds no line break, and
//! the length bound holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbench_core::sanitize::{inert_line, visible_controls};

fuzz_target!(|data: &[u8]| {
    let max = 1 + data.first().copied().unwrap_or(0) as usize;
    let text = String::from_utf8_lossy(data);
    let line = inert_line(&text, max);
    assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
    assert!(!line.contains('\u{2028}') && !line.contains('\u{2029}'));
    assert!(line.chars().count() <= max * 8 + 1);
    let shown = visible_controls(data);
    assert!(!shown.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{shown:?}");
});
