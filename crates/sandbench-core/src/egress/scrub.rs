//! Finding secrets in bytes as they stream by: a set of needles (a secret's
//! value and the forms an echoing server might hand it back in, or a run's
//! placeholders), each with what replaces it — or nothing, when finding it
//! means the bytes must be refused.
//!
//! [`Scrubber`] works on a stream cut anywhere: it holds back the last
//! `longest - 1` bytes of what it was given (they may be the start of a
//! needle the next piece completes) and lets them go at [`Scrubber::finish`].
//! The same needles scrub whole strings ([`Needles::replace_all`]) for the
//! runner's final pass over everything sandbench writes.

use aho_corasick::{AhoCorasick, MatchKind};
use zeroize::Zeroizing;

/// One needle: which secret it belongs to, and its replacement (`None`:
/// finding it refuses the bytes).
struct Entry {
    secret: usize,
    with: Option<Zeroizing<Vec<u8>>>,
}

/// The needles of one use (a response's scrub, a request's substitution,
/// the runner's redaction).
pub(crate) struct Needles {
    ac: Option<AhoCorasick>,
    entries: Vec<Entry>,
    longest: usize,
}

/// A needle that must not pass: which secret's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused(pub usize);

/// One needle: its bytes, the secret it belongs to, and what replaces it
/// (`None`: it is refused, not replaced).
pub(crate) type Needle = (Zeroizing<Vec<u8>>, usize, Option<Zeroizing<Vec<u8>>>);

impl Needles {
    /// From `(needle, secret, replacement)`; empty needles are skipped.
    pub(crate) fn new(list: Vec<Needle>) -> Needles {
        let list: Vec<_> = list.into_iter().filter(|(n, _, _)| !n.is_empty()).collect();
        let longest = list.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
        let ac = (!list.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(list.iter().map(|(n, _, _)| n.as_slice()))
                .expect("a few short literal needles always build")
        });
        let entries = list.into_iter().map(|(_, secret, with)| Entry { secret, with }).collect();
        Needles { ac, entries, longest }
    }

    /// Every form of each value (`(value, replacement)`, in secret order)
    /// an echo may carry: as is, base64 (standard and URL-safe, at each of
    /// the three alignments a value can have inside a longer text), hex
    /// (both cases) and percent-encoded.
    pub(crate) fn values(list: &[(&[u8], Vec<u8>)]) -> Needles {
        let mut out = vec![];
        for (i, (value, with)) in list.iter().enumerate() {
            for form in forms(value) {
                out.push((form, i, Some(Zeroizing::new(with.clone()))));
            }
        }
        Needles::new(out)
    }

    /// The first needle in `hay`: (start, end, secret).
    pub(crate) fn find(&self, hay: &[u8]) -> Option<(usize, usize, usize)> {
        let m = self.ac.as_ref()?.find(hay)?;
        Some((m.start(), m.end(), self.entries[m.pattern().as_usize()].secret))
    }

    /// Replace every needle in a whole text; `counts[secret]` grows by each.
    pub(crate) fn replace_all(&self, hay: &[u8], counts: &mut [u64]) -> Result<Option<Vec<u8>>, Refused> {
        let Some(ac) = &self.ac else { return Ok(None) };
        let mut out: Option<Vec<u8>> = None;
        let mut at = 0;
        for m in ac.find_iter(hay) {
            let e = &self.entries[m.pattern().as_usize()];
            let with = e.with.as_ref().ok_or(Refused(e.secret))?;
            let o = out.get_or_insert_with(|| Vec::with_capacity(hay.len()));
            o.extend_from_slice(&hay[at..m.start()]);
            o.extend_from_slice(with);
            at = m.end();
            if let Some(c) = counts.get_mut(e.secret) {
                *c += 1;
            }
        }
        if let Some(o) = out.as_mut() {
            o.extend_from_slice(&hay[at..]);
        }
        Ok(out)
    }

    /// `replace_all` on text (the runner's strings): lossless for UTF-8
    /// input whose needles are ASCII or whole characters.
    pub(crate) fn replace_str(&self, s: &str, counts: &mut [u64]) -> Option<String> {
        match self.replace_all(s.as_bytes(), counts) {
            Ok(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    }
}

/// A stream's scrub: bytes in, bytes safe to pass out.
pub(crate) struct Scrubber<'a> {
    needles: &'a Needles,
    held: Vec<u8>,
    /// Needles found, per secret.
    pub counts: Vec<u64>,
}

impl<'a> Scrubber<'a> {
    pub(crate) fn new(needles: &'a Needles, secrets: usize) -> Scrubber<'a> {
        Scrubber { needles, held: vec![], counts: vec![0; secrets] }
    }

    /// Take `data`; return what may go on. A needle is decided only once
    /// the longest needle starting where it starts would be whole, so the
    /// pieces' cuts never change what is found; the undecided tail (under
    /// `longest` bytes) is held back for the next piece.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Refused> {
        let Some(ac) = &self.needles.ac else { return Ok(data.to_vec()) };
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(data);
        let longest = self.needles.longest;
        let mut out = Vec::with_capacity(buf.len());
        let mut at = 0;
        for m in ac.find_iter(&buf) {
            if m.start() + longest > buf.len() {
                break;
            }
            self.take(m.pattern().as_usize(), &buf[at..m.start()], &mut out)?;
            at = m.end();
        }
        let safe = at.max(buf.len().saturating_sub(longest - 1));
        out.extend_from_slice(&buf[at..safe]);
        self.held = buf[safe..].to_vec();
        Ok(out)
    }

    fn take(&mut self, pattern: usize, before: &[u8], out: &mut Vec<u8>) -> Result<(), Refused> {
        let e = &self.needles.entries[pattern];
        let with = e.with.as_ref().ok_or(Refused(e.secret))?;
        out.extend_from_slice(before);
        out.extend_from_slice(with);
        if let Some(c) = self.counts.get_mut(e.secret) {
            *c += 1;
        }
        Ok(())
    }

    /// Whether bytes are held back (to be let go by [`Scrubber::finish`]).
    pub(crate) fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// The end of the stream: what was held back, its needles replaced.
    pub(crate) fn finish(&mut self) -> Result<Vec<u8>, Refused> {
        let held = std::mem::take(&mut self.held);
        match self.needles.replace_all(&held, &mut self.counts)? {
            Some(b) => Ok(b),
            None => Ok(held),
        }
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 of whole 3-byte groups only (no padding): the part of a longer
/// text's encoding that depends on these bytes alone.
fn base64_groups(b: &[u8], table: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() / 3 * 4);
    for g in b.chunks_exact(3) {
        let n = (u32::from(g[0]) << 16) | (u32::from(g[1]) << 8) | u32::from(g[2]);
        for shift in [18, 12, 6, 0] {
            out.push(table[((n >> shift) & 63) as usize]);
        }
    }
    out
}

/// The forms of a value an echo may carry (see [`Needles::values`]).
fn forms(v: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let mut out: Vec<Zeroizing<Vec<u8>>> = vec![Zeroizing::new(v.to_vec())];
    // Inside a longer text the value starts at any offset mod 3: the groups
    // that hold value bytes only are the same for every text at that offset.
    for skip in 0..3 {
        let rest = &v[skip.min(v.len())..];
        let whole = &rest[..rest.len() / 3 * 3];
        if whole.len() >= 6 {
            out.push(Zeroizing::new(base64_groups(whole, B64)));
            out.push(Zeroizing::new(base64_groups(whole, B64URL)));
        }
    }
    out.push(Zeroizing::new(v.iter().flat_map(|b| format!("{b:02x}").into_bytes()).collect()));
    out.push(Zeroizing::new(v.iter().flat_map(|b| format!("{b:02X}").into_bytes()).collect()));
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    if v.iter().any(|b| !unreserved(*b)) {
        for upper in [true, false] {
            let mut p = Vec::with_capacity(v.len() * 3);
            for b in v {
                if unreserved(*b) {
                    p.push(*b);
                } else if upper {
                    p.extend_from_slice(format!("%{b:02X}").as_bytes());
                } else {
                    p.extend_from_slice(format!("%{b:02x}").as_bytes());
                }
            }
            out.push(Zeroizing::new(p));
        }
    }
    out.sort_by(|a, b| a.as_slice().cmp(b.as_slice()));
    out.dedup_by(|a, b| a.as_slice() == b.as_slice());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V: &[u8] = b"sk-live-9f8e7d6c5b4a/+=";

    fn b64(b: &[u8]) -> String {
        // Full standard base64 with padding, as an echo would write it.
        let mut out = String::from_utf8(base64_groups(&b[..b.len() / 3 * 3], B64)).unwrap();
        let rest = &b[b.len() / 3 * 3..];
        if !rest.is_empty() {
            let mut g = rest.to_vec();
            g.resize(3, 0);
            let s = String::from_utf8(base64_groups(&g, B64)).unwrap();
            out.push_str(&s[..rest.len() + 1]);
            out.push_str(&"=".repeat(3 - rest.len()));
        }
        out
    }

    fn scrub_in_pieces(n: &Needles, input: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut s = Scrubber::new(n, 1);
        let mut out = vec![];
        let mut at = 0;
        for c in cuts.iter().copied().chain([input.len()]) {
            let c = c.clamp(at, input.len());
            out.extend(s.push(&input[at..c]).unwrap());
            at = c;
        }
        out.extend(s.finish().unwrap());
        out
    }

    #[test]
    fn every_form_of_the_value_is_replaced() {
        let n = Needles::values(&[(V, b"PH".to_vec())]);
        let hex: String = V.iter().map(|b| format!("{b:02x}")).collect();
        for prefix in ["", "x", "xy", "Authorization: Bearer "] {
            let text = format!("{prefix}{}", String::from_utf8_lossy(V));
            for form in [text.clone(), b64(text.as_bytes()), hex.clone(), hex.to_uppercase()] {
                let mut c = [0];
                let out = n.replace_all(form.as_bytes(), &mut c).unwrap().unwrap_or_else(|| form.clone().into_bytes());
                let out = String::from_utf8_lossy(&out);
                assert!(c[0] >= 1, "{prefix:?}: {form} → {out}");
                assert!(!out.contains("sk-live") && !out.contains(&hex), "{out}");
            }
        }
        let pct = "sk-live-9f8e7d6c5b4a%2F%2B%3D";
        let mut c = [0];
        assert!(n.replace_all(pct.as_bytes(), &mut c).unwrap().is_some());
        assert!(n.replace_all(pct.to_lowercase().as_bytes(), &mut c).unwrap().is_some());
        assert_eq!(n.replace_all(b"nothing here", &mut c).unwrap(), None);
    }

    #[test]
    fn a_refusing_needle_refuses() {
        let n = Needles::new(vec![(Zeroizing::new(b"sbx-secret-K-00".to_vec()), 3, None)]);
        let mut s = Scrubber::new(&n, 4);
        assert_eq!(s.push(b"GET /?k=sbx-sec").unwrap(), b"G", "held back: it may be a needle's start");
        assert_eq!(s.push(b"ret-K-00 HTTP/1.1"), Err(Refused(3)));
        assert_eq!(n.find(b"a sbx-secret-K-00"), Some((2, 17, 3)));
    }

    proptest! {
        /// However the stream is cut, the output is the whole text scrubbed.
        #[test]
        fn cuts_never_let_a_value_through(
            before in proptest::collection::vec(any::<u8>(), 0..64),
            after in proptest::collection::vec(any::<u8>(), 0..64),
            cuts in proptest::collection::vec(0usize..200, 0..8),
            twice in any::<bool>(),
        ) {
            let n = Needles::values(&[(V, b"<PH>".to_vec())]);
            let mut input = before.clone();
            input.extend_from_slice(V);
            if twice { input.extend_from_slice(V); }
            input.extend_from_slice(&after);
            let mut cuts = cuts;
            cuts.sort();
            let out = scrub_in_pieces(&n, &input, &cuts);
            let whole = n.replace_all(&input, &mut [0]).unwrap().unwrap();
            prop_assert_eq!(&out, &whole);
            prop_assert!(!out.windows(V.len()).any(|w| w == V));
        }
    }
}
