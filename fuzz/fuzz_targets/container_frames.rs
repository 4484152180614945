//! The decoder of the docker/gvisor loader's frame stream (the container's
//! stdout): any bytes, in any chunks, never panic, a broken stream stays
//! broken, and output frames carry exactly the bytes they framed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbench_core::tier::docker::container::{Frame, Frames};

fn decode(data: &[u8], step: usize) -> (Vec<Frame>, bool) {
    let mut f = Frames::default();
    let mut out = vec![];
    for c in data.chunks(step.max(1)) {
        out.extend(f.feed(c));
        assert!(f.pending() <= data.len());
    }
    (out, f.broken.is_some())
}

fuzz_target!(|data: &[u8]| {
    let step = data.first().copied().unwrap_or(1) as usize % 29 + 1;
    let whole = decode(data, data.len().max(1));
    let chunked = decode(data, step);
    assert_eq!(whole, chunked);
});
