//! The host's decoder of the guest agent's frames: any bytes, in any
//! chunks, never panic, never hold more than one frame's worth, and give
//! the same items whole or chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbench_core::tier::microvm::proto::{Decoder, Item};

fn items(data: &[u8], step: usize) -> (Vec<Item>, usize) {
    let mut d = Decoder::new();
    let mut out = vec![];
    let mut most = 0;
    for c in data.chunks(step.max(1)) {
        d.push(c, &mut out);
        most = most.max(d.buffered());
    }
    (out, most)
}

fuzz_target!(|data: &[u8]| {
    let step = data.first().copied().unwrap_or(1) as usize % 31 + 1;
    let (whole, _) = items(data, data.len().max(1));
    let (chunked, most) = items(data, step);
    assert!(most <= data.len());
    let frames = |v: &[Item]| v.iter().filter(|i| matches!(i, Item::Frame(_))).cloned().collect::<Vec<_>>();
    assert_eq!(frames(&whole), frames(&chunked));
});
