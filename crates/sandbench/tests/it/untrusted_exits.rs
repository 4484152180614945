//! Issue 42: one exit for untrusted text. A table of hostile strings (escape
//! sequences, OSC 8 and 52, C1 controls, bidi, zero-width and tag
//! characters, line separators, NUL, CR, invalid UTF-8, markup, `]]>`, an
//! entity, noncharacters, forged lines) put in every text field a report
//! has and fed through every output: the terminal summary, the JSON report,
//! the agent's transcript (everything the CLI prints as JSON),
//! the run log's entry, MCP's text and structured content, the shared
//! report's HTML page and JSON record, the frontier and histogram SVGs and
//! the workbench's SVG picture.

use sandbench::event::{Decision, Incomplete, NetRecord, Violation, ViolationKind};
use sandbench::report::{Outcome, RunReport};
use sandbench::sanitize::is_hidden;

/// (what, the bytes a program could write).
const HOSTILE: &[(&str, &[u8])] = &[
    ("CSI clear", b"\x1b[2J\x1b[H"),
    ("OSC 8 link", b"\x1b]8;;http://127.0.0.1:9/\x1b\\click\x1b]8;;\x1b\\"),
    ("OSC 52 clipboard", b"\x1b]52;c;ZWNobyBwd25lZA==\x07"),
    ("C1 CSI as UTF-8", b"\xc2\x9b2J\xc2\x9d0;t\xc2\x9c"),
    ("C1 CSI raw byte", b"\x9b2J"),
    ("bidi override", "abc\u{202E}cba".as_bytes()),
    ("bidi isolates", "\u{2066}\u{2067}x\u{2068}\u{2069}".as_bytes()),
    ("zero width", "a\u{200B}b\u{FEFF}c\u{200D}".as_bytes()),
    ("tag characters", "\u{E0001}\u{E0049}\u{E0047}\u{E007F}".as_bytes()),
    ("line and paragraph separators", "x\u{2028}outcome   ok\u{2029}".as_bytes()),
    ("NUL", b"a\0b"),
    ("CR", b"done\routcome   ok"),
    ("invalid UTF-8", b"\xff\xfe\xc3(\xed\xa0\x80"),
    ("script", b"</script><script>alert(1)</script>"),
    ("svg", b"<svg onload=alert(1)>"),
    ("CDATA end", b"]]><x/>"),
    ("entity", b"&#27;[2J&lt;b&gt;"),
    ("noncharacters", "\u{FFFF}\u{FFFE}\u{FDD0}\u{10FFFF}".as_bytes()),
    ("forged lines", b"x\noutcome   ok\nexit      exit code 0"),
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn nonchar(c: char) -> bool {
    let u = c as u32;
    (0xFDD0..=0xFDEF).contains(&u) || u & 0xFFFE == 0xFFFE
}

/// The dangerous forms of a string that is data: a hidden character other
/// than newline and tab. (Noncharacters are text to a terminal and to JSON,
/// shown as a box; only markup must not hold them: XML 1.0 forbids U+FFFE
/// and U+FFFF.)
fn hidden_in(s: &str) -> Vec<String> {
    s.chars().filter(|c| !matches!(c, '\n' | '\t') && is_hidden(*c)).map(|c| format!("U+{:04X}", c as u32)).collect()
}

/// Every string (and key) of a JSON value.
fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out)
        }),
        _ => {}
    }
}

fn json_is_inert(what: &str, json: &str, leaks: &mut Vec<String>) {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
    let mut all = vec![];
    strings(&v, &mut all);
    for s in all {
        let bad = hidden_in(&s);
        if !bad.is_empty() {
            leaks.push(format!("{what}: {bad:?} in {s:?}"));
            return;
        }
    }
}

/// Markup (HTML, SVG): no hidden character or noncharacter raw, and no tag
/// or entity of the program's: the markup has exactly the `<`, `>` and
/// entities the same page has with harmless text in place of the hostile.
fn markup_is_inert(what: &str, hostile: &str, harmless: &str, leaks: &mut Vec<String>) {
    let mut bad = hidden_in(hostile);
    bad.extend(hostile.chars().filter(|c| nonchar(*c)).map(|c| format!("U+{:04X}", c as u32)));
    if !bad.is_empty() {
        leaks.push(format!("{what}: {bad:?} raw in the markup"));
    }
    for tag in ["<script", "<svg onload", "<x/>", "]]>", "&#27;"] {
        if hostile.contains(tag) {
            leaks.push(format!("{what}: {tag} from the program is markup"));
        }
    }
    for c in ['<', '>'] {
        if hostile.matches(c).count() != harmless.matches(c).count() {
            leaks.push(format!("{what}: a {c} of the program's"));
        }
    }
}

/// Every text field of a report, filled with `s`.
fn report_with(s: &str) -> RunReport {
    let mut r = RunReport::failed(s, "python", s, s);
    r.outcome = Outcome::Violation;
    r.stdout = s.into();
    r.stderr = s.into();
    r.violations.push(Violation { kind: ViolationKind::FileSize, at_ms: 1.0, detail: s.into() });
    r.degraded = vec![s.into()];
    r.incomplete = vec![Incomplete { bound: s.into(), limit: Some(1), at: s.into(), detail: s.into() }];
    r.details = serde_json::json!({ "start": "warm", "start_note": s, "shell": s, "warnings": [s], s: s });
    r.network = vec![NetRecord {
        id: 1,
        at_ms: 1.0,
        decision: Decision::Denied,
        method: s.into(),
        host: s.into(),
        port: 1,
        address: Some(s.into()),
        detail: s.into(),
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0.0,
        open: false,
        secrets: vec![s.into()],
        misdirected: Some(s.into()),
    }];
    r.session = Some(sandbench::report::SessionRef { id: s.into(), call: 1 });
    r
}

/// The shared report (`sandbench report`) of one gauntlet cell and one
/// tier's latency, every text of it `s`.
fn shared_with(s: &str) -> sandbench::share::Report {
    use sandbench::share;
    let header = format!("# name: {}\n# tries: x\n# must: y\n# expect: *=ok\nprint(1)\n", s.replace('\n', " "));
    let sample = sandbench::samples::Sample::parse(std::path::Path::new("hostile/x.py"), header).unwrap();
    let findings = sandbench::gauntlet::Findings {
        escapes: vec![s.into()],
        planted: vec![s.into()],
        notes: vec![s.into()],
        ..Default::default()
    };
    let mut cell = sandbench::gauntlet::judge(&sample, s, report_with(s), findings);
    cell.tier = s.into();
    cell.start = s.into();
    cell.mismatch = Some(s.into());
    cell.expected = Some(s.into());
    let matrix = sandbench::gauntlet::Matrix {
        tiers: vec![s.into()],
        skipped_tiers: vec![(s.into(), s.into())],
        samples: vec![cell.sample.clone()],
        cells: vec![cell],
        latency: vec![],
        mismatches: 1,
        cancelled: false,
        scales: vec![],
    };
    let section = |d| share::Section { measured_at: s.into(), sandbench_version: s.into(), reused: true, data: d };
    let facts = vec![share::TierFacts {
        tier: s.into(),
        available: false,
        summary: s.into(),
        checks: vec![share::CheckFact { name: s.into(), ok: false, level: s.into(), detail: s.into() }],
    }];
    let mut machine = share::Machine::here(&[]);
    machine.engines = vec![s.into()];
    machine.cpu_model = Some(s.into());
    machine.os = Some(s.into());
    let mut r = share::build(&[s.into()], facts, machine, Some(section(matrix)), None);
    r.frontier.points.push(sandbench_core::frontier::Point {
        tier: s.into(),
        latency_ms: 10.0,
        start: s.into(),
        runs: 3,
        source: s.into(),
        contained: 1,
        hostile: 1,
        share: 1.0,
        cancelled: 0,
        errors: 0,
    });
    r.histograms.push(share::TierHistogram { tier: s.into(), n: 1, p50_ms: Some(1.0), bins: vec![] });
    r
}

/// What each output makes of a report built from `s`: (name, output, is markup).
fn outputs(s: &str) -> Vec<(&'static str, String, bool)> {
    let r = report_with(s);
    let spec = sandbench::spec::RunSpec::new(sandbench::spec::Language::Python, s);
    let entry = sandbench::runlog::Entry::new("mcp", Some(s), &spec, &r);
    let reply = serde_json::to_value(sandbench::cmd::mcp::inert_reply(sandbench::cmd::mcp::reply(&r))).unwrap();
    let shared = shared_with(s);
    let picture = {
        use ratatui::buffer::Buffer;
        use ratatui::layout::Rect;
        let mut buf = Buffer::empty(Rect::new(0, 0, 80, 2));
        // Straight into the buffer, past the workbench's sanitizer: the
        // picture must hold whatever a cell holds.
        for (x, c) in s.chars().take(80).enumerate() {
            buf[(x as u16, 0)].set_char(c);
        }
        sandbench::tui::screenshot::svg(&buf, ratatui::style::Color::Reset, ratatui::style::Color::Reset)
    };
    let transcript = {
        use sandbench::agent::{EndReason, Transcript, TranscriptEvent};
        let t = |x: &str| x.to_string();
        Transcript {
            task: t(s),
            model: t("m"),
            tier: t("process"),
            reason: EndReason::FinalAnswer,
            turns: 1,
            answer: Some(t(s)),
            error: Some(t(s)),
            events: vec![
                TranscriptEvent::Text { turn: 1, text: t(s) },
                TranscriptEvent::ToolCall { turn: 1, id: t("c1"), language: t("python"), code: t(s) },
                TranscriptEvent::ToolResult {
                    id: t("c1"),
                    outcome: t("ok"),
                    summary: t(s),
                    content: t(s),
                    is_error: false,
                    report: Some(Box::new(r.clone())),
                },
                TranscriptEvent::Finished { reason: EndReason::FinalAnswer, turns: 1, answer: Some(t(s)), error: None },
            ],
        }
    };
    vec![
        ("terminal summary", sandbench::cmd::run::summary(&r), false),
        (
            "agent transcript JSON (sandbench agent --format json)",
            sandbench::cmd::json_text(&transcript).unwrap(),
            false,
        ),
        ("summary line", r.summary_line(), false),
        ("JSON report", serde_json::to_string(&r.versioned()).unwrap(), false),
        ("run log entry", serde_json::to_string(&entry).unwrap(), false),
        ("MCP reply", reply.to_string(), false),
        ("shared report JSON", sandbench::share::json(&shared), false),
        ("HTML report", sandbench::share::html(&shared), true),
        ("frontier SVG", sandbench_core::frontier::svg(&shared.frontier.points), true),
        ("histogram SVG", sandbench::share::histogram_svg(&shared.histograms[0], 0), true),
        ("workbench picture SVG", picture, true),
    ]
}

#[sandbench_testkit::test]
fn hostile_strings_leave_every_output_inert() {
    let harmless = outputs("harmless");
    let mut leaks = vec![];
    for (what, bytes) in HOSTILE {
        let s = text(bytes);
        for ((name, out, markup), (_, plain, _)) in outputs(&s).into_iter().zip(&harmless) {
            let what = format!("{what} through the {name}");
            if name.contains("JSON") || name.contains("run log") || name.contains("MCP") {
                json_is_inert(&what, &out, &mut leaks);
                // The same shape: no key or value made a new one (the
                // details' keys are the program's here, so left aside).
                let paths = |j: &str| {
                    let mut v = vec![];
                    collect_paths(&serde_json::from_str(j).unwrap(), "", &mut v);
                    v.retain(|p| !p.contains("details/") || p.ends_with("details/start"));
                    v
                };
                assert_eq!(paths(&out), paths(plain), "{what}: the record's shape changed");
            } else if markup {
                markup_is_inert(&what, &out, plain, &mut leaks);
            } else {
                // A terminal's text: nothing hidden, and the program's
                // newlines forge no line of sandbench's.
                let bad = hidden_in(&out);
                if !bad.is_empty() {
                    leaks.push(format!("{what}: {bad:?}"));
                }
                if out.lines().count() != plain.lines().count() {
                    leaks.push(format!("{what}: a forged line"));
                }
            }
        }
    }
    assert!(leaks.is_empty(), "{} leaks:\n{}", leaks.len(), leaks.join("\n"));
}

/// Paths of a JSON value's leaves, in order (objects' keys sorted by serde_json).
fn collect_paths(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Array(a) => {
            a.iter().enumerate().for_each(|(i, x)| collect_paths(x, &format!("{at}/{i}"), out))
        }
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| collect_paths(x, &format!("{at}/{k}"), out)),
        _ => out.push(at.to_string()),
    }
}
