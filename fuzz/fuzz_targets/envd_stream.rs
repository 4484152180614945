//! The decoder of E2B envd's Connect stream (envelopes of protobuf JSON):
//! any bytes never panic, and every byte is consumed or waited for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbench_core::tier::e2b::envd::{step, Step};

fuzz_target!(|data: &[u8]| {
    let mut buf = data.to_vec();
    for _ in 0..data.len() + 1 {
        let before = buf.len();
        match step(&mut buf) {
            Ok(Step::Event(_)) => assert!(buf.len() < before, "an event consumed nothing"),
            Ok(Step::Need) => {
                assert_eq!(buf.len(), before);
                break;
            }
            Ok(Step::End) | Err(_) => break,
        }
    }
});
