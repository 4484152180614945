//! The control-channel protocol between sandbench and the guest agent
//! (`guest/agent.py`), and the host-side frame decoder.
//!
//! Frame: `b"SB"` | kind `u8` | payload length `u32` little-endian | payload.
//!
//! **The guest is untrusted.** The decoder bounds every length, never buffers
//! more than one maximal frame, resynchronises on the magic after garbage,
//! reports oversized, unknown and malformed frames instead of trusting them,
//! and never panics whatever bytes arrive in whatever chunks.

use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 2] = *b"SB";
pub const HEADER_LEN: usize = 7;
/// Largest payload the host accepts from the guest. The agent sends output in
/// 16 KiB chunks and small JSON objects; anything bigger is garbage.
pub const MAX_PAYLOAD: usize = 256 << 10;

pub const K_RUN: u8 = 0x01;
pub const K_PING: u8 = 0x02;
/// Host → guest, during a session's call: kill the call's program (cancel).
pub const K_KILL: u8 = 0x03;
pub const K_READY: u8 = 0x10;
pub const K_STARTED: u8 = 0x11;
pub const K_STDOUT: u8 = 0x12;
pub const K_STDERR: u8 = 0x13;
pub const K_USAGE: u8 = 0x14;
pub const K_EXIT: u8 = 0x15;
pub const K_LOG: u8 = 0x16;
pub const K_PONG: u8 = 0x17;

/// Longest agent log line kept (the rest is cut).
const MAX_LOG: usize = 2048;

/// What the agent says once it is up and waiting for a program.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ready {
    pub agent: u32,
    pub kernel: String,
    pub python: String,
    pub cgroup: bool,
    /// Guest uptime (s) when the agent started and when it was ready.
    pub uptime_agent_start: Option<f64>,
    pub uptime_ready: Option<f64>,
}

/// A usage sample of the run's cgroup inside the guest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestUsage {
    pub cpu_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    pub oom_kills: Option<u64>,
    /// Times usage reached the cgroup's memory.max (`memory.events` max).
    pub memory_max_events: Option<u64>,
    pub pids_max_events: Option<u64>,
}

/// The program's end, as the agent saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuestExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_ms: Option<u64>,
    pub memory_peak: Option<u64>,
    pub pids_peak: Option<u64>,
    pub oom_kills: Option<u64>,
    pub memory_max_events: Option<u64>,
    pub pids_max_events: Option<u64>,
    pub cpu_killed: bool,
    /// A scratch file at the file-size limit (bounded guest-side scan).
    pub fsize_hit: Option<String>,
    /// A scratch file system ran out of space or inodes.
    pub disk_full: bool,
    /// Which ones were full at some moment (the agent's watch), comma-separated.
    pub full_mounts: Option<String>,
    /// Did the agent's watch see file events (fanotify in the guest)?
    pub file_events: bool,
    /// Calls that waited for the agent's scratch guard (None: no guard).
    pub guarded_calls: Option<u64>,
    /// Session mode: scratch mounts already full when the call began
    /// (space-separated), not counted as this call's.
    pub prior_full: Option<String>,
    /// The agent could not write the call's program file into /work (full,
    /// or what the previous call left at its name could not be removed):
    /// nothing ran. Guest text: shown inert.
    pub refused: Option<String>,
    /// Bounds the agent's scan and watch hit (`NAME:LIMIT:WHERE`, see
    /// `judge::BoundHit::parse`): with no violation, the run is incomplete.
    pub incomplete: Vec<String>,
    /// Where the call's time went inside the guest: `name:ms` pairs,
    /// space-separated, ms since the agent read the RUN frame
    /// ([`guest_steps`] keeps the known names only).
    pub steps: Option<String>,
}

/// The agent's steps of a call (`guest/agent.py`, `Steps`), in the order it
/// takes them: (the agent's name, the report's). Any other name from the
/// guest is not trusted into a report; `guest_` sets them apart from the
/// host's own steps.
pub const GUEST_STEPS: &[(&str, &str)] = &[
    ("decoded", "guest_decoded"),
    ("configured", "guest_configured"),
    ("zygote_remade", "guest_zygote_remade"),
    ("clock_and_seed", "guest_clock_and_seed"),
    ("program_written", "guest_program_written"),
    ("base_sampled", "guest_base_sampled"),
    ("spec_sent", "guest_spec_sent"),
    ("child_spec", "guest_child_spec"),
    ("child_rlimits", "guest_child_rlimits"),
    ("child_uid", "guest_child_uid"),
    ("child_ready", "guest_child_ready"),
    ("zygote_answered", "guest_zygote_answered"),
    ("first_output", "guest_first_output"),
    ("program_reaped", "guest_program_reaped"),
    ("output_drained", "guest_output_drained"),
    ("counters_read", "guest_counters_read"),
    ("scratch_scanned", "guest_scratch_scanned"),
    ("exit_sent", "guest_exit_sent"),
];

/// The known steps of an EXIT's `steps` text with their times (ms since the
/// agent read RUN): at most one per name, finite, within an hour.
pub fn guest_steps(text: &str) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&'static str, f64)> = vec![];
    for part in text.split_ascii_whitespace().take(4 * GUEST_STEPS.len()) {
        let Some((name, ms)) = part.split_once(':') else { continue };
        let Some(&(_, k)) = GUEST_STEPS.iter().find(|(g, _)| *g == name) else { continue };
        let Ok(ms) = ms.parse::<f64>() else { continue };
        if ms.is_finite() && (0.0..=3_600_000.0).contains(&ms) && !out.iter().any(|(n, _)| *n == k) {
            out.push((k, ms));
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Ready(Ready),
    Started,
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Usage(GuestUsage),
    Exit(Box<GuestExit>),
    Log(String),
    Pong,
}

/// One thing the decoder found in the byte stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Frame(Frame),
    /// Bytes that were not part of any frame (skipped while resynchronising).
    Garbage {
        bytes: usize,
        reason: &'static str,
    },
    /// A well-delimited frame whose kind or content was unacceptable.
    Invalid {
        kind: u8,
        reason: String,
    },
}

/// What the host sends: the program to run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunRequest {
    pub language: String,
    /// The program's file name in /work (`Language::program_file`: an ES
    /// module is `main.mjs`); the agent refuses anything with a slash.
    #[serde(default)]
    pub file: String,
    pub code: String,
    pub env: Vec<(String, String)>,
    pub limits: GuestLimits,
    /// Hex of host randomness the agent mixes into the guest's entropy pool.
    pub seed: String,
    /// The host's clock (Unix seconds): the guest has no RTC, and a restored
    /// snapshot carries the time it was saved at.
    pub now: f64,
    /// The run's network is an allow list: the agent's relay listens here
    /// (on the guest's loopback) and carries connections over `sandbench.net`.
    #[serde(default)]
    pub net_port: Option<u16>,
    /// The run CA's certificate (PEM) when a secret goes over TLS: the agent
    /// writes the trust bundle the program's variables point at.
    #[serde(default)]
    pub ca: Option<String>,
    /// A session's call (the guest stays for the next one): files whose
    /// ctime is before `since` (host clock) are earlier calls'.
    #[serde(default)]
    pub session_since: Option<f64>,
    /// A shell program's interpreter command line (`RunSpec::interpreter`:
    /// bash when its `#!` line says so); empty: the agent's for the language.
    #[serde(default)]
    pub argv: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GuestLimits {
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    pub pids: u64,
    pub file_size_bytes: u64,
    pub disk_bytes: u64,
    pub open_files: u64,
}

pub fn encode(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&MAGIC);
    v.push(kind);
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Encode a frame the way the agent does (used by tests and fuzzing).
pub fn encode_frame(f: &Frame) -> Vec<u8> {
    let json = |v: serde_json::Result<Vec<u8>>| v.unwrap_or_default();
    match f {
        Frame::Ready(r) => encode(K_READY, &json(serde_json::to_vec(r))),
        Frame::Started => encode(K_STARTED, b"{\"pid\": 2}"),
        Frame::Stdout(b) => encode(K_STDOUT, b),
        Frame::Stderr(b) => encode(K_STDERR, b),
        Frame::Usage(u) => encode(K_USAGE, &json(serde_json::to_vec(u))),
        Frame::Exit(x) => encode(K_EXIT, &json(serde_json::to_vec(x))),
        Frame::Log(s) => encode(K_LOG, s.as_bytes()),
        Frame::Pong => encode(K_PONG, b"p"),
    }
}

/// The RUN frame: (key, value) pairs, each a u32 LE length and bytes (the
/// agent decodes it without importing json).
pub fn encode_run(req: &RunRequest) -> Vec<u8> {
    let mut p = Vec::with_capacity(req.code.len() + 512);
    let mut field = |k: &str, v: &[u8]| {
        p.extend_from_slice(&(k.len() as u32).to_le_bytes());
        p.extend_from_slice(k.as_bytes());
        p.extend_from_slice(&(v.len() as u32).to_le_bytes());
        p.extend_from_slice(v);
    };
    field("language", req.language.as_bytes());
    if !req.file.is_empty() {
        field("file", req.file.as_bytes());
    }
    field("code", req.code.as_bytes());
    field("seed", req.seed.as_bytes());
    field("now", format!("{:.6}", req.now).as_bytes());
    if let Some(p) = req.net_port {
        field("net_port", p.to_string().as_bytes());
    }
    if let Some(ca) = &req.ca {
        field("ca", ca.as_bytes());
    }
    let l = &req.limits;
    for (k, v) in [
        ("cpu_ms", l.cpu_ms),
        ("memory_bytes", l.memory_bytes),
        ("pids", l.pids),
        ("file_size_bytes", l.file_size_bytes),
        ("disk_bytes", l.disk_bytes),
        ("open_files", l.open_files),
    ] {
        field(k, v.to_string().as_bytes());
    }
    for (k, v) in &req.env {
        field("env", format!("{k}={v}").as_bytes());
    }
    for a in &req.argv {
        field("argv", a.as_bytes());
    }
    if let Some(since) = req.session_since {
        field("session", b"1");
        field("since", format!("{since:.3}").as_bytes());
    }
    encode(K_RUN, &p)
}

/// Incremental decoder of guest → host frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes skipped as garbage so far (for the report).
    pub garbage_bytes: u64,
}

impl Decoder {
    pub fn new() -> Self {
        Decoder::default()
    }

    /// Bytes held back waiting for the rest of a frame (at most one frame).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feed bytes as they arrive; complete items are appended to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<Item>) {
        self.buf.extend_from_slice(data);
        let mut pos = 0;
        loop {
            let rest = &self.buf[pos..];
            if rest.is_empty() {
                break;
            }
            // Resynchronise: everything before the next magic is garbage. A
            // lone trailing 'S' may be the start of a magic split by a chunk.
            if !rest.starts_with(&MAGIC) {
                let skip = match find_magic(rest) {
                    Some(i) => i,
                    None if rest.last() == Some(&MAGIC[0]) => rest.len() - 1,
                    None => rest.len(),
                };
                if skip == 0 {
                    break; // just a trailing 'S'
                }
                self.garbage(skip, "bytes outside any frame", out);
                pos += skip;
                continue;
            }
            if rest.len() < HEADER_LEN {
                break;
            }
            let kind = rest[2];
            let len = u32::from_le_bytes([rest[3], rest[4], rest[5], rest[6]]) as usize;
            if len > MAX_PAYLOAD {
                // Not a frame we will ever accept: drop the magic and look
                // for the next one instead of waiting for `len` bytes.
                self.garbage(MAGIC.len(), "frame length over the limit", out);
                pos += MAGIC.len();
                continue;
            }
            if rest.len() < HEADER_LEN + len {
                break;
            }
            let payload = &rest[HEADER_LEN..HEADER_LEN + len];
            out.push(parse(kind, payload));
            pos += HEADER_LEN + len;
        }
        self.buf.drain(..pos);
    }

    /// The stream ended: whatever is still buffered was a truncated frame.
    pub fn finish(&mut self) -> Option<Item> {
        if self.buf.is_empty() {
            return None;
        }
        let n = self.buf.len();
        self.buf.clear();
        self.garbage_bytes += n as u64;
        Some(Item::Garbage { bytes: n, reason: "stream ended inside a frame" })
    }

    fn garbage(&mut self, n: usize, reason: &'static str, out: &mut Vec<Item>) {
        self.garbage_bytes += n as u64;
        // Merge runs of garbage so a flood of it yields few items.
        if let Some(Item::Garbage { bytes, reason: r }) = out.last_mut() {
            if *r == reason {
                *bytes += n;
                return;
            }
        }
        out.push(Item::Garbage { bytes: n, reason });
    }
}

fn find_magic(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == MAGIC)
}

fn parse(kind: u8, payload: &[u8]) -> Item {
    fn json<T: for<'de> Deserialize<'de>>(kind: u8, p: &[u8], f: impl FnOnce(T) -> Frame) -> Item {
        match serde_json::from_slice::<T>(p) {
            Ok(v) => Item::Frame(f(v)),
            Err(e) => Item::Invalid { kind, reason: format!("malformed payload: {e}") },
        }
    }
    match kind {
        K_READY => json(kind, payload, Frame::Ready),
        K_STARTED => Item::Frame(Frame::Started),
        K_STDOUT => Item::Frame(Frame::Stdout(payload.to_vec())),
        K_STDERR => Item::Frame(Frame::Stderr(payload.to_vec())),
        K_USAGE => json(kind, payload, Frame::Usage),
        K_EXIT => json(kind, payload, |x: GuestExit| Frame::Exit(Box::new(sanitize_exit(x)))),
        K_LOG => {
            let cut = &payload[..payload.len().min(MAX_LOG)];
            Item::Frame(Frame::Log(String::from_utf8_lossy(cut).into_owned()))
        }
        K_PONG => Item::Frame(Frame::Pong),
        other => Item::Invalid { kind: other, reason: "unknown frame kind".into() },
    }
}

/// Keep only exit facts that can be true of a Linux process.
fn sanitize_exit(mut x: GuestExit) -> GuestExit {
    if x.code.is_some_and(|c| !(0..=255).contains(&c)) {
        x.code = None;
    }
    if x.signal.is_some_and(|s| !(1..=64).contains(&s)) {
        x.signal = None;
    }
    if x.code.is_some() && x.signal.is_some() {
        x.code = None;
    }
    x
}

/// Decode `data` fed in pieces cut at `cuts` (taken modulo its length, in
/// order): what the decoder made of it, the decoder, and the most it ever
/// buffered. For the property tests and the fuzz targets.
pub fn decode_chunks(data: &[u8], cuts: &[usize]) -> (Vec<Item>, Decoder, usize) {
    let mut d = Decoder::new();
    let mut out = vec![];
    let (mut last, mut most) = (0, 0);
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    cuts.sort_unstable();
    for c in cuts.into_iter().chain([data.len()]) {
        d.push(&data[last..c], &mut out);
        most = most.max(d.buffered());
        last = c;
    }
    (out, d, most)
}

/// The frames among decoded items.
pub fn frames(items: &[Item]) -> Vec<Frame> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Frame(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_steps_keep_known_names_once_and_sane_times() {
        let got =
            guest_steps("decoded:0.40 spec_sent:12.5 spec_sent:1.0 evil:3 configured:NaN child_uid:-1 exit_sent:1e9 x");
        assert_eq!(got, vec![("guest_decoded", 0.4), ("guest_spec_sent", 12.5)]);
        assert!(guest_steps("").is_empty());
    }

    #[test]
    fn decodes_the_agent_format() {
        let mut d = Decoder::new();
        let mut out = vec![];
        d.push(&encode(K_READY, br#"{"agent": 1, "kernel": "6.1", "python": "3.11.2", "cgroup": true}"#), &mut out);
        d.push(&encode(K_EXIT, br#"{"code": 0, "signal": null, "cpu_ms": 81, "memory_peak": 1048576, "pids_peak": 1, "oom_kills": 0, "memory_max_events": 3, "pids_max_events": 0, "cpu_killed": false}"#), &mut out);
        assert!(matches!(&out[0], Item::Frame(Frame::Ready(r)) if r.cgroup && r.python == "3.11.2"));
        assert!(
            matches!(&out[1], Item::Frame(Frame::Exit(x)) if x.code == Some(0) && x.cpu_ms == Some(81) && x.memory_max_events == Some(3))
        );
    }

    #[test]
    fn run_frame_is_length_prefixed_pairs() {
        let req = RunRequest {
            language: "python".into(),
            file: "main.py".into(),
            code: "print('a=b')\n".into(),
            env: vec![("A".into(), "x=y\tz".into())],
            limits: GuestLimits {
                cpu_ms: 5000,
                memory_bytes: 1,
                pids: 2,
                file_size_bytes: 3,
                disk_bytes: 4,
                open_files: 5,
            },
            seed: "00ff".into(),
            now: 1.5,
            net_port: None,
            ca: None,
            session_since: None,
            argv: vec![],
        };
        let f = encode_run(&req);
        assert_eq!(&f[..3], b"SB\x01");
        let mut p = &f[HEADER_LEN..];
        let mut fields = vec![];
        while !p.is_empty() {
            let n = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
            fields.push(String::from_utf8(p[4..4 + n].to_vec()).unwrap());
            p = &p[4 + n..];
        }
        assert_eq!(fields[0..6], ["language", "python", "file", "main.py", "code", "print('a=b')\n"]);
        assert!(fields.windows(2).any(|w| w == ["env", "A=x=y\tz"]));
        assert!(fields.windows(2).any(|w| w == ["cpu_ms", "5000"]));
        assert!(fields.windows(2).any(|w| w == ["now", "1.500000"]));
    }

    #[test]
    fn oversized_length_is_garbage_not_a_wait() {
        let mut d = Decoder::new();
        let mut out = vec![];
        let mut bad = MAGIC.to_vec();
        bad.push(K_STDOUT);
        bad.extend_from_slice(&u32::MAX.to_le_bytes());
        d.push(&bad, &mut out);
        d.push(&encode(K_STDOUT, b"hi"), &mut out);
        assert_eq!(frames(&out), vec![Frame::Stdout(b"hi".to_vec())]);
        assert!(out.iter().any(|i| matches!(i, Item::Garbage { reason: "frame length over the limit", .. })));
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn unknown_and_malformed_frames_are_reported() {
        let mut d = Decoder::new();
        let mut out = vec![];
        d.push(&encode(0x7f, b"x"), &mut out);
        d.push(&encode(K_USAGE, b"{not json"), &mut out);
        d.push(&encode(K_EXIT, br#"{"code": 99999, "signal": -4}"#), &mut out);
        assert!(matches!(out[0], Item::Invalid { kind: 0x7f, .. }));
        assert!(matches!(out[1], Item::Invalid { kind: K_USAGE, .. }));
        assert!(matches!(&out[2], Item::Frame(Frame::Exit(x)) if x.code.is_none() && x.signal.is_none()));
    }

    #[test]
    fn truncated_stream_is_reported_at_the_end() {
        let f = encode(K_STDOUT, b"hello world");
        let (out, mut d, most) = decode_chunks(&f[..f.len() - 3], &[]);
        assert!(most <= HEADER_LEN + MAX_PAYLOAD);
        assert!(out.is_empty());
        assert!(matches!(d.finish(), Some(Item::Garbage { bytes, .. }) if bytes == f.len() - 3));
        assert_eq!(d.finish(), None);
    }
}
