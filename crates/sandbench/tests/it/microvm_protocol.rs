//! Property tests of the host-side decoder of guest → host frames. The guest
//! is untrusted: whatever bytes it sends, in whatever chunks, the decoder
//! must not panic, must not buffer more than one maximal frame, must not
//! wait on an oversized length, and must find valid frames after garbage.

use proptest::prelude::*;
use sandbench::internals::microvm::proto::{
    self, encode_frame, frames, Decoder, Frame, GuestExit, GuestUsage, Item, HEADER_LEN, K_STDOUT, MAGIC, MAX_PAYLOAD,
};

/// Decode in the given pieces; never more than one maximal frame buffered.
fn decode_chunks(data: &[u8], cuts: &[usize]) -> (Vec<Item>, Decoder) {
    let (out, d, most) = proto::decode_chunks(data, cuts);
    assert!(most <= HEADER_LEN + MAX_PAYLOAD, "buffered {most}");
    (out, d)
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2000).prop_map(Frame::Stdout),
        proptest::collection::vec(any::<u8>(), 0..2000).prop_map(Frame::Stderr),
        Just(Frame::Started),
        Just(Frame::Pong),
        "[a-z ]{0,40}".prop_map(Frame::Log),
        (any::<Option<u32>>(), any::<Option<u32>>(), any::<Option<u16>>()).prop_map(|(c, m, p)| Frame::Usage(
            GuestUsage {
                cpu_ms: c.map(u64::from),
                memory_bytes: m.map(u64::from),
                pids: p.map(u64::from),
                oom_kills: Some(0),
                memory_max_events: m.map(|_| 1),
                pids_max_events: None,
            }
        )),
        (0i32..=255, any::<bool>()).prop_map(|(c, k)| Frame::Exit(Box::new(GuestExit {
            code: Some(c),
            cpu_killed: k,
            ..Default::default()
        }))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Frames survive any chunking of the stream.
    #[sandbench_testkit::test]
    fn round_trip_any_chunking(fs in proptest::collection::vec(arb_frame(), 0..12), cuts in proptest::collection::vec(any::<usize>(), 0..20)) {
        let data: Vec<u8> = fs.iter().flat_map(encode_frame).collect();
        let (out, mut d) = decode_chunks(&data, &cuts);
        prop_assert_eq!(frames(&out), fs);
        prop_assert!(out.iter().all(|i| matches!(i, Item::Frame(_))));
        prop_assert_eq!(d.finish(), None);
    }

    /// Arbitrary bytes never panic, and every byte is accounted for: inside a
    /// frame, skipped as garbage, or held back (and reported at the end).
    #[sandbench_testkit::test]
    fn arbitrary_bytes_are_survived(data in proptest::collection::vec(any::<u8>(), 0..4096), cuts in proptest::collection::vec(any::<usize>(), 0..10)) {
        let (out, mut d) = decode_chunks(&data, &cuts);
        let held = d.buffered();
        prop_assert!(held <= data.len());
        let in_frames: usize = out.iter().map(|i| match i {
            Item::Frame(f) => encode_frame(f).len(),
            _ => 0,
        }).sum();
        let _ = in_frames;
        d.finish();
        prop_assert_eq!(d.buffered(), 0);
        prop_assert!(d.garbage_bytes as usize <= data.len());
    }

    /// Garbage and oversized headers before, between and after frames never
    /// hide the frames around them, and nothing waits on a huge length.
    #[sandbench_testkit::test]
    fn resynchronises_after_garbage(
        fs in proptest::collection::vec(arb_frame(), 1..6),
        junk in proptest::collection::vec(proptest::collection::vec(any::<u8>().prop_filter("no magic start", |b| *b != b'S'), 0..300), 1..7),
        oversized in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut data = vec![];
        for (i, f) in fs.iter().enumerate() {
            data.extend_from_slice(&junk[i % junk.len()]);
            if oversized {
                data.extend_from_slice(&MAGIC);
                data.push(K_STDOUT);
                data.extend_from_slice(&((MAX_PAYLOAD as u32) + 1).to_le_bytes());
            }
            data.extend_from_slice(&encode_frame(f));
        }
        data.extend_from_slice(&junk[0]);
        let (out, d) = decode_chunks(&data, &cuts);
        prop_assert_eq!(frames(&out), fs);
        prop_assert!(d.buffered() <= 1);
    }

    /// A frame cut anywhere yields no frame, only a truncation report.
    #[sandbench_testkit::test]
    fn truncation_anywhere(f in arb_frame(), cut in any::<usize>()) {
        let data = encode_frame(&f);
        let at = cut % data.len();
        let (out, mut d) = decode_chunks(&data[..at], &[]);
        prop_assert!(frames(&out).is_empty());
        if at > 0 {
            let truncated = matches!(d.finish(), Some(Item::Garbage { .. }));
            prop_assert!(truncated);
        }
    }

    /// A flood of maximal-length headers with no payload is skipped without
    /// ever buffering more than a header.
    #[sandbench_testkit::test]
    fn header_floods_do_not_accumulate(n in 1usize..200, len in (MAX_PAYLOAD as u32 + 1)..u32::MAX) {
        let mut d = Decoder::new();
        let mut out = vec![];
        for _ in 0..n {
            let mut h = MAGIC.to_vec();
            h.push(K_STDOUT);
            h.extend_from_slice(&len.to_le_bytes());
            d.push(&h, &mut out);
            prop_assert!(d.buffered() < HEADER_LEN);
        }
        prop_assert!(frames(&out).is_empty());
    }
}

/// One real exchange as the agent writes it, decoded byte by byte.
#[sandbench_testkit::test]
fn agent_bytes_one_at_a_time() {
    let raw: &[u8] = b"SB\x10\x1c\x00\x00\x00{\"agent\": 1, \"cgroup\": true}SB\x12\x02\x00\x00\x00hiSB\x15\x0b\x00\x00\x00{\"code\": 3}";
    let mut d = Decoder::new();
    let mut out = vec![];
    for b in raw {
        d.push(std::slice::from_ref(b), &mut out);
    }
    let f = frames(&out);
    assert_eq!(f.len(), 3, "{out:?}");
    assert!(matches!(&f[0], Frame::Ready(r) if r.agent == 1 && r.cgroup));
    assert_eq!(f[1], Frame::Stdout(b"hi".to_vec()));
    assert!(matches!(&f[2], Frame::Exit(x) if x.code == Some(3)));
}
