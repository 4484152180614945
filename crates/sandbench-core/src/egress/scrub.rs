//! Finding secrets in bytes as they stream by: a set of needles (a secret's
//! value in every spelling of [`TABLE`], or a run's placeholders), each with
//! what replaces it — or nothing, when finding it means the bytes must be
//! refused.
//!
//! [`TABLE`] is the one list of the spellings an echoing server (or a
//! program's own output) may carry a value in: as is, base64 (standard and
//! URL-safe, any alignment, line-wrapped), hex (any case), percent-encoding,
//! JSON and JavaScript escapes, HTML character references and
//! quoted-printable. Each row names its encoders (what common libraries
//! write, used by the tests) and how the scrubber finds it. The raw value is
//! found with aho-corasick. Every other row is found *by unit*: an encoder
//! may write each byte (or character) of the value as itself or escaped, in
//! either hex case — 2^n spellings for n bytes, no list of needles can hold
//! them — so a row says how one unit may be spelled, and the scrubber tries,
//! at every place a spelling of the value's first unit may start, to spell
//! the value unit by unit. The search is unanchored: what stands before a
//! spelling (a stray `%`, `\` or `&`) never changes whether it is found.
//!
//! [`Scrubber`] works on a stream cut anywhere: each row holds back the last
//! bytes of what it was given that the longest spelling starting there
//! could need, and lets them go at [`Scrubber::finish`]. The same needles
//! scrub whole strings ([`Needles::replace_all`]) for the runner's pass over
//! everything sandbench writes.

use aho_corasick::{AhoCorasick, MatchKind};
use zeroize::Zeroizing;

/// One needle: which secret it belongs to, and its replacement (`None`:
/// finding it refuses the bytes).
struct Entry {
    secret: usize,
    with: Option<Zeroizing<Vec<u8>>>,
}

/// An encoder of the table: its name and what it writes for a value.
pub(crate) type Encoder = (&'static str, fn(&[u8]) -> Vec<u8>);

/// How a row's units are spelled: at `text[at..]`, the lengths of the
/// spellings of `unit` found there (pushed to `out`).
type Spell = fn(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>);

/// One row of the table.
pub(crate) struct Encoding {
    /// Its name, as the counters show it.
    pub(crate) name: &'static str,
    /// What common encoders write (each must be found: the tests run them all).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) encoders: &'static [Encoder],
    /// How the scrubber finds it (`None`: the raw value, by aho-corasick).
    spelled: Option<Spelled>,
}

/// A row found unit by unit.
struct Spelled {
    /// What is spelled: the value, or whole-value forms of it (base64, hex).
    targets: fn(&[u8]) -> Vec<Vec<u8>>,
    /// Units are UTF-8 characters (escapes that name a code point), not bytes.
    chars: bool,
    spell: Spell,
    /// What may stand between two units besides nothing (a line break): its length at `at`, or 0.
    between: fn(&[u8], usize) -> usize,
    /// Longest spelling of one unit, and of what may stand between two.
    max_unit: usize,
    max_between: usize,
    /// Bytes that start an escape (any unit's spelling may start with one).
    introducers: &'static [u8],
}

/// Rows, in the order the scrubber applies them (the raw value first: the
/// counters name the plainest form a value came back in).
pub(crate) const TABLE: &[Encoding] = &[
    Encoding { name: "raw", encoders: &[("as is", |v| v.to_vec())], spelled: None },
    Encoding {
        name: "base64",
        encoders: &[
            ("standard", enc::b64_std),
            ("standard unpadded", enc::b64_std_nopad),
            ("url-safe", enc::b64_url),
            ("url-safe unpadded", enc::b64_url_nopad),
            ("after 1 byte", enc::b64_after1),
            ("after 2 bytes", enc::b64_after2),
            ("MIME (76 columns, CRLF)", enc::b64_mime),
            ("PEM (64 columns, LF)", enc::b64_pem),
        ],
        spelled: Some(Spelled {
            targets: base64_forms,
            chars: false,
            spell: spell_exact,
            between: line_break,
            max_unit: 1,
            max_between: 2,
            introducers: b"",
        }),
    },
    Encoding {
        name: "hex",
        encoders: &[("lower", enc::hex_lower), ("upper", enc::hex_upper), ("mixed case", enc::hex_mixed)],
        spelled: Some(Spelled {
            targets: |v| vec![v.iter().flat_map(|b| hex2(*b, false)).collect()],
            chars: false,
            spell: spell_any_case,
            between: line_break,
            max_unit: 1,
            max_between: 2,
            introducers: b"",
        }),
    },
    Encoding {
        name: "percent",
        encoders: &[
            ("every byte, upper hex", |v| enc::percent(v, |_| false, true, false)),
            ("every byte, lower hex", |v| enc::percent(v, |_| false, false, false)),
            ("every byte, + for space", |v| enc::percent(v, |_| false, true, true)),
            ("RFC 3986 unreserved kept, upper", |v| enc::percent(v, enc::unreserved, true, false)),
            ("RFC 3986 unreserved kept, lower", |v| enc::percent(v, enc::unreserved, false, false)),
            ("encodeURIComponent", |v| enc::percent(v, |b| enc::unreserved(b) || b"!'()*".contains(&b), true, false)),
            ("encodeURI", |v| enc::percent(v, |b| enc::unreserved(b) || b"!'()*;,/?:@&=+$#".contains(&b), true, false)),
            ("Python quote", |v| enc::percent(v, |b| enc::unreserved(b) || b == b'/', true, false)),
            ("Python quote_plus", |v| enc::percent(v, enc::unreserved, true, true)),
            ("form-urlencoded (WHATWG)", |v| {
                enc::percent(v, |b| b.is_ascii_alphanumeric() || b"*-._".contains(&b), true, true)
            }),
            ("PHP urlencode", |v| enc::percent(v, |b| b.is_ascii_alphanumeric() || b"-_.".contains(&b), true, true)),
            ("mixed-case hex", enc::percent_mixed),
            ("base64 in a query", |v| enc::percent(&enc::b64_std(v), enc::unreserved, true, true)),
        ],
        spelled: Some(Spelled {
            targets: value_and_base64,
            chars: false,
            spell: spell_percent,
            between: |_, _| 0,
            max_unit: 3,
            max_between: 0,
            introducers: b"%+",
        }),
    },
    Encoding {
        name: "json/js escape",
        encoders: &[
            ("every character \\u, lower", |v| enc::js_all(v, false)),
            ("every character \\u, upper", |v| enc::js_all(v, true)),
            ("JSON, non-ASCII as \\u (Python json.dumps)", enc::json_ascii),
            ("JSON, HTML-safe (Go encoding/json)", enc::json_html_safe),
            ("JSON, \\/ (PHP json_encode)", enc::json_slash),
            ("JavaScript \\xHH", enc::js_x),
            ("JavaScript \\u{...}", enc::js_braces),
            ("backslash before every symbol (regex escape)", enc::regex_escape),
            ("base64 in PHP JSON", |v| enc::json_slash(&enc::b64_std(v))),
        ],
        spelled: Some(Spelled {
            targets: value_and_base64,
            chars: true,
            spell: spell_js,
            between: |_, _| 0,
            max_unit: 12,
            max_between: 0,
            introducers: b"\\",
        }),
    },
    Encoding {
        name: "html entity",
        encoders: &[
            ("decimal &#NN;", |v| enc::html_numeric(v, false, false)),
            ("hex &#xHH;", |v| enc::html_numeric(v, true, false)),
            ("hex &#XHH; upper", |v| enc::html_numeric(v, true, true)),
            ("Python html.escape", enc::html_escape),
            ("named where one exists", enc::html_named),
        ],
        spelled: Some(Spelled {
            targets: value_and_base64,
            chars: true,
            spell: spell_html,
            between: |_, _| 0,
            max_unit: 2 + 1 + MAX_REF_DIGITS + 1,
            max_between: 0,
            introducers: b"&",
        }),
    },
    Encoding {
        name: "quoted-printable",
        encoders: &[("RFC 2045", enc::qp), ("every byte", enc::qp_all), ("soft breaks every 3", enc::qp_broken)],
        spelled: Some(Spelled {
            targets: |v| vec![v.to_vec()],
            chars: false,
            spell: spell_qp,
            between: qp_soft_break,
            max_unit: 3,
            max_between: 3,
            introducers: b"=",
        }),
    },
];

/// How many rows the table has (the counters' width).
pub(crate) const FORMS: usize = 7;
const _: () = assert!(TABLE.len() == FORMS);

/// Counts by row of the table.
pub(crate) type ByForm = [u64; FORMS];

/// Most digits a numeric character reference may have (leading zeros count).
const MAX_REF_DIGITS: usize = 8;

/// The needles of one use (a response's scrub, a request's substitution,
/// the runner's redaction).
pub(crate) struct Needles {
    ac: Option<AhoCorasick>,
    entries: Vec<Entry>,
    longest: usize,
    /// One per spelled row of the table (values only; placeholders are raw).
    rows: Vec<Row>,
}

/// A spelled row's needles.
struct Row {
    form: usize,
    spelled: &'static Spelled,
    targets: Vec<Target>,
    /// Bytes at which some target's spelling may start.
    starts: [bool; 256],
    /// The longest any target's spelling can be.
    longest: usize,
}

struct Target {
    bytes: Zeroizing<Vec<u8>>,
    /// The units, as ranges of `bytes`.
    units: Vec<(usize, usize)>,
    secret: usize,
    with: Zeroizing<Vec<u8>>,
}

/// A needle that must not pass: which secret's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused(pub usize);

/// One needle: its bytes, the secret it belongs to, and what replaces it
/// (`None`: it is refused, not replaced).
pub(crate) type Needle = (Zeroizing<Vec<u8>>, usize, Option<Zeroizing<Vec<u8>>>);

impl Needles {
    /// Raw needles only: `(needle, secret, replacement)`; empty needles are skipped.
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
        Needles { ac, entries, longest, rows: vec![] }
    }

    /// Every spelling in [`TABLE`] of each value (`(value, replacement)`,
    /// in secret order).
    pub(crate) fn values(list: &[(&[u8], Vec<u8>)]) -> Needles {
        let raw = list
            .iter()
            .enumerate()
            .map(|(i, (v, with))| (Zeroizing::new(v.to_vec()), i, Some(Zeroizing::new(with.clone()))));
        let mut n = Needles::new(raw.collect());
        for (form, row) in TABLE.iter().enumerate() {
            let Some(spelled) = &row.spelled else { continue };
            let mut targets = vec![];
            for (i, (value, with)) in list.iter().enumerate() {
                let mut forms = (spelled.targets)(value);
                forms.sort();
                forms.dedup();
                for t in forms.into_iter().filter(|t| !t.is_empty()) {
                    let units = if spelled.chars { char_units(&t) } else { (0..t.len()).map(|i| (i, i + 1)).collect() };
                    targets.push(Target {
                        bytes: Zeroizing::new(t),
                        units,
                        secret: i,
                        with: Zeroizing::new(with.clone()),
                    });
                }
            }
            if targets.is_empty() {
                continue;
            }
            let mut starts = [false; 256];
            for b in spelled.introducers {
                starts[usize::from(*b)] = true;
            }
            for t in &targets {
                let b = t.bytes[0];
                starts[usize::from(b)] = true;
                starts[usize::from(b.to_ascii_lowercase())] = true;
                starts[usize::from(b.to_ascii_uppercase())] = true;
            }
            let longest = targets
                .iter()
                .map(|t| {
                    t.units.iter().map(|(a, b)| (b - a).max(spelled.max_unit) + spelled.max_between).sum::<usize>()
                })
                .max()
                .unwrap_or(0);
            n.rows.push(Row { form, spelled, targets, starts, longest });
        }
        n
    }

    /// The first raw needle in `hay`: (start, end, secret).
    pub(crate) fn find(&self, hay: &[u8]) -> Option<(usize, usize, usize)> {
        let m = self.ac.as_ref()?.find(hay)?;
        Some((m.start(), m.end(), self.entries[m.pattern().as_usize()].secret))
    }

    /// Replace every needle in a whole text; `counts[secret]` grows by each.
    pub(crate) fn replace_all(&self, hay: &[u8], counts: &mut [u64]) -> Result<Option<Vec<u8>>, Refused> {
        self.replace_all_by_form(hay, counts, &mut [])
    }

    /// [`Needles::replace_all`], counting by form too (`forms[secret][row]`).
    pub(crate) fn replace_all_by_form(
        &self,
        hay: &[u8],
        counts: &mut [u64],
        forms: &mut [ByForm],
    ) -> Result<Option<Vec<u8>>, Refused> {
        let mut tally = Tally { counts, forms };
        let mut cur: Option<Vec<u8>> = self.raw_all(hay, &mut tally)?;
        for row in &self.rows {
            let text = cur.as_deref().unwrap_or(hay);
            let (out, _) = row.scan(text, true, &mut tally);
            if let Some(o) = out {
                cur = Some(o);
            }
        }
        Ok(cur)
    }

    fn raw_all(&self, hay: &[u8], t: &mut Tally<'_>) -> Result<Option<Vec<u8>>, Refused> {
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
            t.add(e.secret, 0);
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

/// Where finds are counted.
struct Tally<'a> {
    counts: &'a mut [u64],
    forms: &'a mut [ByForm],
}

impl Tally<'_> {
    fn add(&mut self, secret: usize, form: usize) {
        if let Some(c) = self.counts.get_mut(secret) {
            *c += 1;
        }
        if let Some(f) = self.forms.get_mut(secret) {
            f[form] += 1;
        }
    }
}

impl Row {
    /// Scan `text` for spellings starting where the longest spelling
    /// would fit in `text` (everywhere when `last`). Returns the decided
    /// part with each spelling replaced (`None`: nothing found in it) and
    /// where the undecided rest begins.
    fn scan(&self, text: &[u8], last: bool, t: &mut Tally<'_>) -> (Option<Vec<u8>>, usize) {
        let decided = if last { text.len() } else { (text.len() + 1).saturating_sub(self.longest) };
        let mut out: Option<Vec<u8>> = None;
        let (mut at, mut p) = (0, 0);
        let (mut cur, mut next, mut lens) = (vec![], vec![], vec![]);
        while p < decided {
            if !self.starts[usize::from(text[p])] {
                p += 1;
                continue;
            }
            let mut best: Option<(usize, usize)> = None;
            for (i, tg) in self.targets.iter().enumerate() {
                if let Some(end) = self.spelled.matches(text, p, tg, &mut cur, &mut next, &mut lens) {
                    if best.is_none_or(|(e, _)| end > e) {
                        best = Some((end, i));
                    }
                }
            }
            match best {
                Some((end, i)) => {
                    let tg = &self.targets[i];
                    let o = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
                    o.extend_from_slice(&text[at..p]);
                    o.extend_from_slice(&tg.with);
                    t.add(tg.secret, self.form);
                    at = end;
                    p = end;
                }
                None => p += 1,
            }
        }
        let rest = p.max(at).min(text.len());
        if let Some(o) = out.as_mut() {
            o.extend_from_slice(&text[at..rest]);
        }
        (out, rest)
    }
}

impl Spelled {
    /// The end of the longest spelling of `tg` starting at `at`, if any.
    fn matches(
        &self,
        text: &[u8],
        at: usize,
        tg: &Target,
        cur: &mut Vec<usize>,
        next: &mut Vec<usize>,
        lens: &mut Vec<usize>,
    ) -> Option<usize> {
        cur.clear();
        cur.push(at);
        for (k, (a, b)) in tg.units.iter().enumerate() {
            let unit = &tg.bytes[*a..*b];
            next.clear();
            for &q in cur.iter() {
                let skip = if k == 0 { 0 } else { (self.between)(text, q) };
                for q in [q, q + skip].into_iter().take(if skip > 0 { 2 } else { 1 }) {
                    if q >= text.len() {
                        continue;
                    }
                    lens.clear();
                    (self.spell)(text, q, unit, lens);
                    next.extend(lens.iter().map(|l| q + l));
                }
            }
            if next.is_empty() {
                return None;
            }
            next.sort_unstable();
            next.dedup();
            std::mem::swap(cur, next);
        }
        cur.last().copied()
    }
}

/// The units of a text: its UTF-8 characters, a byte alone where it is not one.
fn char_units(t: &[u8]) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut i = 0;
    while i < t.len() {
        let n = match t[i] {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1,
        };
        let n = if i + n <= t.len() && std::str::from_utf8(&t[i..i + n]).is_ok() { n } else { 1 };
        out.push((i, i + n));
        i += n;
    }
    out
}

/// The code point a unit is, when it is one character.
fn code_point(unit: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(unit).ok()?;
    let mut cs = s.chars();
    let c = cs.next()?;
    cs.next().is_none().then_some(u32::from(c))
}

fn hex_val(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// `n` hex digits at `text[at..]`, their value.
fn hex_at(text: &[u8], at: usize, n: usize) -> Option<u32> {
    let d = text.get(at..at + n)?;
    d.iter().try_fold(0u32, |acc, b| Some(acc * 16 + hex_val(*b)?))
}

fn spell_exact(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    if text[at..].starts_with(unit) {
        out.push(unit.len());
    }
}

fn spell_any_case(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    if text.get(at..at + unit.len()).is_some_and(|t| t.eq_ignore_ascii_case(unit)) {
        out.push(unit.len());
    }
}

fn line_break(text: &[u8], at: usize) -> usize {
    match text.get(at..) {
        Some([b'\r', b'\n', ..]) => 2,
        Some([b'\n', ..]) => 1,
        _ => 0,
    }
}

/// A byte as itself, `%HH` in any case, or `+` for a space.
fn spell_percent(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    let b = unit[0];
    if text[at] == b || (b == b' ' && text[at] == b'+') {
        out.push(1);
    }
    if text[at] == b'%' && hex_at(text, at + 1, 2) == Some(u32::from(b)) {
        out.push(3);
    }
}

/// A character as itself, `\uXXXX` (a surrogate pair beyond the BMP),
/// `\u{X...}`, `\xHH`, or a backslash before itself (`\/`, `\"`, `\-`).
fn spell_js(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    spell_exact(text, at, unit, out);
    if text[at] != b'\\' {
        return;
    }
    let Some(c) = code_point(unit) else { return };
    match text.get(at + 1) {
        Some(b'u') => {
            if text.get(at + 2) == Some(&b'{') {
                let digits = text[at + 3..].iter().take(9).take_while(|b| b.is_ascii_hexdigit()).count();
                if (1..=8).contains(&digits)
                    && text.get(at + 3 + digits) == Some(&b'}')
                    && hex_at(text, at + 3, digits) == Some(c)
                {
                    out.push(digits + 4);
                }
                return;
            }
            match hex_at(text, at + 2, 4) {
                Some(u) if u == c => out.push(6),
                Some(hi @ 0xd800..=0xdbff)
                    if text.get(at + 6..at + 8) == Some(b"\\u") && pair(hi, hex_at(text, at + 8, 4)) == Some(c) =>
                {
                    out.push(12)
                }
                _ => {}
            }
        }
        Some(b'x') if hex_at(text, at + 2, 2) == Some(c) => out.push(4),
        // `\b`, `\n`, `\0`... stand for other characters; any other
        // character escaped is itself.
        Some(&n) if unit.len() == 1 && n == unit[0] && !b"bfnrtvux0123456789".contains(&n) => out.push(2),
        _ => {}
    }
}

/// The character a UTF-16 surrogate pair stands for.
fn pair(hi: u32, lo: Option<u32>) -> Option<u32> {
    let lo = lo.filter(|lo| (0xdc00..=0xdfff).contains(lo))?;
    Some(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00))
}

/// HTML names for ASCII characters an escaper may write (HTML5), and the
/// legacy ones a browser reads without their `;`.
const NAMED: &[(&str, u8)] = &[
    ("amp", b'&'),
    ("AMP", b'&'),
    ("lt", b'<'),
    ("LT", b'<'),
    ("gt", b'>'),
    ("GT", b'>'),
    ("quot", b'"'),
    ("QUOT", b'"'),
    ("apos", b'\''),
    ("excl", b'!'),
    ("num", b'#'),
    ("dollar", b'$'),
    ("percnt", b'%'),
    ("lpar", b'('),
    ("rpar", b')'),
    ("ast", b'*'),
    ("midast", b'*'),
    ("plus", b'+'),
    ("comma", b','),
    ("period", b'.'),
    ("sol", b'/'),
    ("colon", b':'),
    ("semi", b';'),
    ("equals", b'='),
    ("quest", b'?'),
    ("commat", b'@'),
    ("lsqb", b'['),
    ("lbrack", b'['),
    ("bsol", b'\\'),
    ("rsqb", b']'),
    ("rbrack", b']'),
    ("Hat", b'^'),
    ("lowbar", b'_'),
    ("grave", b'`'),
    ("lcub", b'{'),
    ("lbrace", b'{'),
    ("verbar", b'|'),
    ("vert", b'|'),
    ("rcub", b'}'),
    ("rbrace", b'}'),
    ("Tab", b'\t'),
    ("hyphen", b'-'),
    ("dash", b'-'),
];

/// A character as itself, `&#NN;`, `&#xHH;` (either x, any case, up to
/// [`MAX_REF_DIGITS`] digits, the `;` optional as browsers read it), or a
/// name from [`NAMED`].
fn spell_html(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    spell_exact(text, at, unit, out);
    if text[at] != b'&' {
        return;
    }
    let Some(c) = code_point(unit) else { return };
    if text.get(at + 1) == Some(&b'#') {
        let hex = matches!(text.get(at + 2), Some(b'x' | b'X'));
        let from = at + 2 + usize::from(hex);
        let radix = if hex { 16 } else { 10 };
        let digits = text[from.min(text.len())..]
            .iter()
            .take(MAX_REF_DIGITS + 1)
            .take_while(|b| (**b as char).is_digit(radix))
            .count();
        if digits == 0 || digits > MAX_REF_DIGITS {
            return;
        }
        let n =
            text[from..from + digits].iter().fold(0u32, |a, b| a * radix + (*b as char).to_digit(radix).unwrap_or(0));
        if n == c {
            let end = from + digits;
            out.push(end - at + usize::from(text.get(end) == Some(&b';')));
        }
        return;
    }
    for (name, ch) in NAMED {
        if u32::from(*ch) != c || !text[at + 1..].starts_with(name.as_bytes()) {
            continue;
        }
        let end = at + 1 + name.len();
        if text.get(end) == Some(&b';') {
            out.push(end + 1 - at);
        } else if matches!(*name, "amp" | "AMP" | "lt" | "LT" | "gt" | "GT" | "quot" | "QUOT") {
            out.push(end - at);
        }
    }
}

/// A byte as itself or `=HH` (any case).
fn spell_qp(text: &[u8], at: usize, unit: &[u8], out: &mut Vec<usize>) {
    let b = unit[0];
    if text[at] == b {
        out.push(1);
    }
    if text[at] == b'=' && hex_at(text, at + 1, 2) == Some(u32::from(b)) {
        out.push(3);
    }
}

/// A quoted-printable soft line break (`=` at a line's end).
fn qp_soft_break(text: &[u8], at: usize) -> usize {
    match text.get(at..) {
        Some([b'=', b'\r', b'\n', ..]) => 3,
        Some([b'=', b'\n', ..]) => 2,
        _ => 0,
    }
}

/// A stream's scrub: bytes in, bytes safe to pass out.
pub(crate) struct Scrubber<'a> {
    needles: &'a Needles,
    /// What the raw needles' search holds back, then each spelled row's.
    held: Vec<Vec<u8>>,
    /// Needles found, per secret.
    pub counts: Vec<u64>,
    /// And by row of the table, per secret.
    pub forms: Vec<ByForm>,
}

impl<'a> Scrubber<'a> {
    pub(crate) fn new(needles: &'a Needles, secrets: usize) -> Scrubber<'a> {
        Scrubber {
            needles,
            held: vec![vec![]; 1 + needles.rows.len()],
            counts: vec![0; secrets],
            forms: vec![[0; FORMS]; secrets],
        }
    }

    /// Take `data`; return what may go on. A needle is decided only once
    /// the longest needle starting where it starts would be whole, so the
    /// pieces' cuts never change what is found; the undecided tail is held
    /// back for the next piece. The raw needles go first (a refusing one
    /// refuses), then each spelled row on what the one before let go.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Refused> {
        let mut x = self.push_raw(data)?;
        for i in 0..self.needles.rows.len() {
            x = self.push_row(i, &x, false);
        }
        Ok(x)
    }

    fn push_raw(&mut self, data: &[u8]) -> Result<Vec<u8>, Refused> {
        let Some(ac) = &self.needles.ac else { return Ok(data.to_vec()) };
        let mut buf = std::mem::take(&mut self.held[0]);
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
        self.held[0] = buf[safe..].to_vec();
        Ok(out)
    }

    fn push_row(&mut self, i: usize, data: &[u8], last: bool) -> Vec<u8> {
        let row = &self.needles.rows[i];
        let mut buf = std::mem::take(&mut self.held[1 + i]);
        buf.extend_from_slice(data);
        let mut t = Tally { counts: &mut self.counts, forms: &mut self.forms };
        let (out, rest) = row.scan(&buf, last, &mut t);
        let out = match out {
            Some(o) => o,
            None => buf[..rest].to_vec(),
        };
        self.held[1 + i] = buf[rest..].to_vec();
        out
    }

    fn take(&mut self, pattern: usize, before: &[u8], out: &mut Vec<u8>) -> Result<(), Refused> {
        let e = &self.needles.entries[pattern];
        let with = e.with.as_ref().ok_or(Refused(e.secret))?;
        out.extend_from_slice(before);
        out.extend_from_slice(with);
        Tally { counts: &mut self.counts, forms: &mut self.forms }.add(e.secret, 0);
        Ok(())
    }

    /// Whether bytes are held back (to be let go by [`Scrubber::finish`]).
    pub(crate) fn holding(&self) -> bool {
        self.held.iter().any(|h| !h.is_empty())
    }

    /// The end of the stream: what was held back, its needles replaced.
    pub(crate) fn finish(&mut self) -> Result<Vec<u8>, Refused> {
        let held = std::mem::take(&mut self.held[0]);
        let mut t = Tally { counts: &mut self.counts, forms: &mut self.forms };
        let mut x = match self.needles.raw_all(&held, &mut t)? {
            Some(b) => b,
            None => held,
        };
        for i in 0..self.needles.rows.len() {
            x = self.push_row(i, &x, true);
        }
        Ok(x)
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

/// The base64 forms of a value inside a longer text: it starts at any
/// offset mod 3, and the groups that hold value bytes only are the same for
/// every text at that offset.
fn base64_forms(v: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    for skip in 0..3 {
        let rest = &v[skip.min(v.len())..];
        let whole = &rest[..rest.len() / 3 * 3];
        if whole.len() >= 6 {
            out.push(base64_groups(whole, B64));
            out.push(base64_groups(whole, B64URL));
        }
    }
    out
}

/// The value and its base64 forms (base64 goes in URLs and JSON too).
fn value_and_base64(v: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![v.to_vec()];
    out.extend(base64_forms(v));
    out
}

fn hex2(b: u8, upper: bool) -> [u8; 2] {
    let d = if upper { b"0123456789ABCDEF" } else { b"0123456789abcdef" };
    [d[usize::from(b >> 4)], d[usize::from(b & 15)]]
}

/// The table's encoders: what common libraries write.
mod enc {
    use super::hex2;
    use base64::Engine;

    pub(super) fn b64_std(v: &[u8]) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD.encode(v).into_bytes()
    }
    pub(super) fn b64_std_nopad(v: &[u8]) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(v).into_bytes()
    }
    pub(super) fn b64_url(v: &[u8]) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE.encode(v).into_bytes()
    }
    pub(super) fn b64_url_nopad(v: &[u8]) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v).into_bytes()
    }
    /// The value after other bytes in the same encoded text.
    pub(super) fn b64_after1(v: &[u8]) -> Vec<u8> {
        b64_std(&[b"k".as_slice(), v].concat())
    }
    pub(super) fn b64_after2(v: &[u8]) -> Vec<u8> {
        b64_url(&[b"k=".as_slice(), v].concat())
    }
    fn wrapped(s: Vec<u8>, cols: usize, eol: &[u8]) -> Vec<u8> {
        s.chunks(cols).collect::<Vec<_>>().join(eol)
    }
    pub(super) fn b64_mime(v: &[u8]) -> Vec<u8> {
        // A long text so that the value is cut by a line end.
        let mut t = b"Authorization: Bearer ".repeat(3);
        t.extend_from_slice(v);
        wrapped(b64_std(&t), 76, b"\r\n")
    }
    pub(super) fn b64_pem(v: &[u8]) -> Vec<u8> {
        let mut t = b"x-api-key: ".repeat(5);
        t.extend_from_slice(v);
        wrapped(b64_std(&t), 64, b"\n")
    }
    pub(super) fn hex_lower(v: &[u8]) -> Vec<u8> {
        v.iter().flat_map(|b| hex2(*b, false)).collect()
    }
    pub(super) fn hex_upper(v: &[u8]) -> Vec<u8> {
        v.iter().flat_map(|b| hex2(*b, true)).collect()
    }
    pub(super) fn hex_mixed(v: &[u8]) -> Vec<u8> {
        v.iter().enumerate().flat_map(|(i, b)| hex2(*b, i % 2 == 0)).collect()
    }
    pub(super) fn unreserved(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b"-._~".contains(&b)
    }
    pub(super) fn percent(v: &[u8], keep: fn(u8) -> bool, upper: bool, plus: bool) -> Vec<u8> {
        let mut out = vec![];
        for b in v {
            if plus && *b == b' ' {
                out.push(b'+');
            } else if keep(*b) {
                out.push(*b);
            } else {
                out.push(b'%');
                out.extend(hex2(*b, upper));
            }
        }
        out
    }
    pub(super) fn percent_mixed(v: &[u8]) -> Vec<u8> {
        let mut out = vec![];
        for (i, b) in v.iter().enumerate() {
            let [h, l] = hex2(*b, true);
            out.extend([b'%', h, if i % 2 == 0 { l.to_ascii_lowercase() } else { l }]);
        }
        out
    }
    fn chars(v: &[u8]) -> Vec<Result<char, u8>> {
        let mut out = vec![];
        for (a, b) in super::char_units(v) {
            match std::str::from_utf8(&v[a..b]).ok().and_then(|s| s.chars().next()) {
                Some(c) => out.push(Ok(c)),
                None => out.push(Err(v[a])),
            }
        }
        out
    }
    fn u_escape(c: char, upper: bool) -> String {
        let mut s = String::new();
        let mut buf = [0u16; 2];
        for u in c.encode_utf16(&mut buf) {
            s.push_str(&if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") });
        }
        s
    }
    /// Every character escaped (bytes that are no character stay as they are).
    pub(super) fn js_all(v: &[u8], upper: bool) -> Vec<u8> {
        let mut out = vec![];
        for c in chars(v) {
            match c {
                Ok(c) => out.extend(u_escape(c, upper).into_bytes()),
                Err(b) => out.push(b),
            }
        }
        out
    }
    fn json_with(v: &[u8], esc: impl Fn(char) -> Option<String>) -> Vec<u8> {
        let mut out = vec![];
        for c in chars(v) {
            match c {
                Ok(c) => match esc(c) {
                    Some(e) => out.extend(e.into_bytes()),
                    None if c == '"' || c == '\\' => out.extend([b'\\', c as u8]),
                    None => out.extend(c.to_string().into_bytes()),
                },
                Err(b) => out.push(b),
            }
        }
        out
    }
    pub(super) fn json_ascii(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| (!c.is_ascii()).then(|| u_escape(c, false)))
    }
    pub(super) fn json_html_safe(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}').then(|| u_escape(c, false)))
    }
    pub(super) fn json_slash(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| (c == '/').then(|| "\\/".to_string()))
    }
    pub(super) fn js_x(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| (u32::from(c) < 256).then(|| format!("\\x{:02x}", u32::from(c))))
    }
    pub(super) fn js_braces(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| Some(format!("\\u{{{:X}}}", u32::from(c))))
    }
    pub(super) fn regex_escape(v: &[u8]) -> Vec<u8> {
        json_with(v, |c| (c.is_ascii_punctuation()).then(|| format!("\\{c}")))
    }
    pub(super) fn html_numeric(v: &[u8], hex: bool, upper: bool) -> Vec<u8> {
        let mut out = vec![];
        for c in chars(v) {
            match c {
                Ok(c) if hex && upper => out.extend(format!("&#X{:X};", u32::from(c)).into_bytes()),
                Ok(c) if hex => out.extend(format!("&#x{:x};", u32::from(c)).into_bytes()),
                Ok(c) => out.extend(format!("&#{};", u32::from(c)).into_bytes()),
                Err(b) => out.push(b),
            }
        }
        out
    }
    pub(super) fn html_escape(v: &[u8]) -> Vec<u8> {
        json_like_html(v, |c| match c {
            '&' => Some("&amp;".into()),
            '<' => Some("&lt;".into()),
            '>' => Some("&gt;".into()),
            '"' => Some("&quot;".into()),
            '\'' => Some("&#x27;".into()),
            _ => None,
        })
    }
    pub(super) fn html_named(v: &[u8]) -> Vec<u8> {
        json_like_html(v, |c| super::NAMED.iter().find(|(_, ch)| char::from(*ch) == c).map(|(n, _)| format!("&{n};")))
    }
    fn json_like_html(v: &[u8], esc: impl Fn(char) -> Option<String>) -> Vec<u8> {
        let mut out = vec![];
        for c in chars(v) {
            match c {
                Ok(c) => match esc(c) {
                    Some(e) => out.extend(e.into_bytes()),
                    None => out.extend(c.to_string().into_bytes()),
                },
                Err(b) => out.push(b),
            }
        }
        out
    }
    /// RFC 2045: printable ASCII but `=` as is, the rest `=HH`, lines of at
    /// most 76 with soft breaks.
    pub(super) fn qp(v: &[u8]) -> Vec<u8> {
        let mut t = b"Subject: ".repeat(8);
        t.extend_from_slice(v);
        let mut out = vec![];
        let mut col = 0;
        for b in t {
            let piece: Vec<u8> =
                if (33..=126).contains(&b) && b != b'=' { vec![b] } else { [&[b'='][..], &hex2(b, true)].concat() };
            if col + piece.len() > 75 {
                out.extend_from_slice(b"=\r\n");
                col = 0;
            }
            col += piece.len();
            out.extend(piece);
        }
        out
    }
    pub(super) fn qp_all(v: &[u8]) -> Vec<u8> {
        v.iter().flat_map(|b| [b'=', hex2(*b, false)[0], hex2(*b, false)[1]]).collect()
    }
    pub(super) fn qp_broken(v: &[u8]) -> Vec<u8> {
        v.chunks(3).collect::<Vec<_>>().join(&b"=\n"[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const V: &[u8] = b"sk-live-9f8e7d6c5b4a/+=";

    fn scrub_in_pieces(n: &Needles, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<u64>, Vec<ByForm>) {
        let mut s = Scrubber::new(n, 1);
        let mut out = vec![];
        let mut at = 0;
        for c in cuts.iter().copied().chain([input.len()]) {
            let c = c.clamp(at, input.len());
            out.extend(s.push(&input[at..c]).unwrap());
            at = c;
        }
        out.extend(s.finish().unwrap());
        (out, s.counts, s.forms)
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn every_encoder_of_the_table_is_found_by_its_row() {
        let n = Needles::values(&[(V, b"PH".to_vec())]);
        for (form, row) in TABLE.iter().enumerate() {
            for (name, e) in row.encoders {
                let spelled = e(V);
                for prefix in ["", "x", "%", "\\", "&", "=", "&#", "%2", "Authorization: Bearer "] {
                    let text = [prefix.as_bytes(), &spelled, b" tail"].concat();
                    let mut c = [0];
                    let mut f = [[0; FORMS]];
                    let out = n.replace_all_by_form(&text, &mut c, &mut f).unwrap();
                    let out = out.unwrap_or_else(|| panic!("{} {name} after {prefix:?}: not found", row.name));
                    assert!(c[0] >= 1 && !contains(&out, &spelled) && !contains(&out, V), "{} {name}", row.name);
                    assert!(f[0][form] >= 1 || f[0][..form].iter().any(|x| *x > 0), "{} {name}: {f:?}", row.name);
                }
            }
        }
        let mut c = [0];
        assert_eq!(n.replace_all(b"nothing here, %41%42 &amp; \\u0041 =3D", &mut c).unwrap(), None);
    }

    #[test]
    fn encoders_write_what_their_libraries_write() {
        // Known answers from the libraries themselves, one per encoder family.
        let v = b"a b/c+d~e'f";
        let row = |name: &str| TABLE.iter().find(|r| r.name == name).unwrap();
        let enc = |r: &str, e: &str| {
            let f = row(r).encoders.iter().find(|(n, _)| *n == e).unwrap().1;
            String::from_utf8(f(v)).unwrap()
        };
        assert_eq!(enc("percent", "encodeURIComponent"), "a%20b%2Fc%2Bd~e'f");
        assert_eq!(enc("percent", "encodeURI"), "a%20b/c+d~e'f");
        assert_eq!(enc("percent", "Python quote"), "a%20b/c%2Bd~e%27f");
        assert_eq!(enc("percent", "Python quote_plus"), "a+b%2Fc%2Bd~e%27f");
        assert_eq!(enc("percent", "form-urlencoded (WHATWG)"), "a+b%2Fc%2Bd%7Ee%27f");
        assert_eq!(enc("json/js escape", "JSON, \\/ (PHP json_encode)"), "a b\\/c+d~e'f");
        assert_eq!(enc("html entity", "Python html.escape"), "a b/c+d~e&#x27;f");
        assert_eq!(enc("json/js escape", "every character \\u, lower")[..12], *"\\u0061\\u0020");
        assert_eq!(String::from_utf8(enc::js_all("é😀".as_bytes(), false)).unwrap(), "\\u00e9\\ud83d\\ude00");
    }

    #[test]
    fn a_refusing_needle_refuses() {
        let n = Needles::new(vec![(Zeroizing::new(b"sbx-secret-K-00".to_vec()), 3, None)]);
        let mut s = Scrubber::new(&n, 4);
        assert_eq!(s.push(b"GET /?k=sbx-sec").unwrap(), b"G", "held back: it may be a needle's start");
        assert_eq!(s.push(b"ret-K-00 HTTP/1.1"), Err(Refused(3)));
        assert_eq!(n.find(b"a sbx-secret-K-00"), Some((2, 17, 3)));
    }

    /// Secret values: printable ASCII, sometimes with non-ASCII characters.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        let ascii = proptest::collection::vec(0x20u8..0x7f, 8..40);
        let text = "[!-~é€😀]{8,24}".prop_map(|s: String| s.into_bytes());
        prop_oneof![3 => ascii, 1 => text]
    }

    proptest! {
        /// Every encoder of every row, any value, any text around it, the
        /// stream cut anywhere: the value is found, nothing of its spelling
        /// passes, and the cuts change nothing.
        #[test]
        fn every_spelling_is_found_whatever_the_cuts(
            v in value(),
            before in proptest::collection::vec(any::<u8>(), 0..48),
            after in proptest::collection::vec(any::<u8>(), 0..48),
            cuts in proptest::collection::vec(0usize..2000, 0..8),
        ) {
            let n = Needles::values(&[(&v, b"<PH>".to_vec())]);
            let mut cuts = cuts;
            cuts.sort();
            for row in TABLE {
                for (name, e) in row.encoders {
                    let spelled = e(&v);
                    let input = [before.as_slice(), &spelled, &after].concat();
                    let (out, counts, _) = scrub_in_pieces(&n, &input, &cuts);
                    let whole = n.replace_all(&input, &mut [0]).unwrap();
                    prop_assert_eq!(Some(&out), whole.as_ref(), "{} {}", row.name, name);
                    prop_assert!(counts[0] >= 1, "{} {}", row.name, name);
                    prop_assert!(!contains(&out, &spelled), "{} {}", row.name, name);
                    prop_assert!(!contains(&out, &v), "{} {}", row.name, name);
                }
            }
        }

        /// Text with no value in it passes whole, however it is cut.
        #[test]
        fn text_without_the_value_passes_unchanged(
            text in proptest::collection::vec(any::<u8>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..8),
        ) {
            let n = Needles::values(&[(V, b"<PH>".to_vec())]);
            let mut cuts = cuts;
            cuts.sort();
            let (out, counts, _) = scrub_in_pieces(&n, &text, &cuts);
            prop_assert_eq!(counts[0], 0);
            prop_assert_eq!(out, text);
        }
    }
}
