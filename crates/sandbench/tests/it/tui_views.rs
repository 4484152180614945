//! The gauntlet and agent views driven headless: keys in, effects out,
//! synthetic `GauntletEvent`s / `TranscriptEvent`s fed the way the event loop
//! feeds them, screens compared with insta.

use std::path::Path;

use ratatui::crossterm::event::KeyCode;
use sandbench::agent::{EndReason, TranscriptEvent};
use sandbench::event::{ExitStatus, Stream, Violation, ViolationKind};
use sandbench::gauntlet::Findings;
use sandbench::gauntlet::{self, GauntletEvent, Latency, Matrix};
use sandbench::report::{Outcome, RunReport, Timings, Usage};
use sandbench::samples::Sample;
use sandbench::spec::Limits;
use sandbench::tier::{Availability, Check};
use sandbench::tui::app::{App, Effect, Msg, View};
use sandbench::tui::gauntlet_view::GState;
use sandbench::tui::headless::{ctrl, key, screen, type_text};
use sandbench::tui::theme::Theme;

fn probed(tier: &str, available: bool) -> Msg {
    Msg::Probed(Availability {
        tier: tier.into(),
        available,
        summary: if available { "ready (synthetic)".into() } else { "no daemon (synthetic)".into() },
        checks: vec![Check::ok("all", "fine")],
    })
}

const HELLO: &str = "# name: hello\n# tries: print a greeting\n# must: run it\n# expect: *=ok\nprint('hi')\n";
const FORK: &str = "# name: fork-bomb\n# tries: fork without end\n# must: refuse new processes at the pids limit\n# expect: *=violation:pids|cpu_time\nimport os\n";
const NET: &str = "# name: net-loopback\n# tries: connect to the host's loopback\n# must: no connection arrives\n# expect: *=ok\nimport socket\n";

/// Samples on disk as the picker and the gauntlet read them.
fn samples_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (rel, text) in [("benign/hello.py", HELLO), ("hostile/fork_bomb.py", FORK), ("hostile/net_loopback.py", NET)] {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

fn sample(rel: &str, text: &str) -> Sample {
    Sample::parse(Path::new(rel), text.into()).unwrap()
}

/// process and docker ready, e2b unavailable; samples from `dir`.
fn app(dir: &Path) -> App {
    let mut app = App::new(Theme::dark(), &["process", "docker", "e2b"], "process", Limits::default());
    app.live_clock = false;
    app.samples_dirs = vec![dir.to_path_buf()];
    app.api_key_set = false;
    app.update(probed("process", true));
    app.update(probed("docker", true));
    app.update(probed("e2b", false));
    // The selected tier's warm-up request is not what these tests look at.
    assert!(matches!(app.take_effects().as_slice(), [Effect::Prewarm(_)]));
    app
}

fn report(tier: &str, outcome: Outcome, violations: Vec<Violation>, stdout: &str) -> RunReport {
    RunReport {
        tier: tier.into(),
        language: "python".into(),
        label: "-".into(),
        outcome,
        exit: ExitStatus { code: Some(if outcome == Outcome::Ok { 0 } else { 1 }), signal: None },
        violations,
        timings_ms: Timings { setup: 20.0, first_output: Some(25.0), run: 80.0, teardown: 4.0, total: 104.0 },
        usage: Usage { cpu_ms: Some(40), peak_memory_bytes: Some(12 << 20), peak_pids: Some(3) },
        stdout: stdout.into(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        error: None,
        limits: gauntlet::default_limits(),
        details: serde_json::json!({"start": "cold"}),
        degraded: vec![],
        network: vec![],
        session: None,
        secrets: vec![],
        incomplete: vec![],
    }
}

fn findings(escapes: &[&str]) -> Findings {
    Findings {
        escapes: escapes.iter().map(|s| s.to_string()).collect(),
        planted: vec![
            "a fake ANTHROPIC_API_KEY in the launcher's environment".into(),
            "secret file /tmp/sandbench-canary-home-x/canary-secret.txt".into(),
            "secret file /root/.sandbench-canary-0123456789ab.secret".into(),
        ],
        host_latency_ms_p50: Some(1.4),
        host_latency_ms_max: Some(3.9),
        notes: vec![],
    }
}

fn started_gauntlet(app: &mut App) -> u64 {
    match app.take_effects().as_slice() {
        [Effect::Gauntlet { id, tiers, skipped, samples, limits }] => {
            assert_eq!(tiers, &["process", "docker"]);
            assert_eq!(skipped.len(), 1);
            assert_eq!(skipped[0].0, "e2b");
            let names: Vec<&str> = samples.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["hello", "fork-bomb", "net-loopback"]);
            assert_eq!(limits, &gauntlet::default_limits());
            *id
        }
        other => panic!("expected one gauntlet start, got {other:?}"),
    }
}

fn g(app: &mut App, id: u64, ev: GauntletEvent) {
    app.update(Msg::Gauntlet(id, ev));
}

fn cell_started(app: &mut App, id: u64, sample: &str, tier: &str) {
    g(app, id, GauntletEvent::CellStarted { sample: sample.into(), tier: tier.into() });
}

/// Two rows done (one cell escaped, against what it declares), the third running.
fn feed_partial(app: &mut App, id: u64) {
    let hello = sample("benign/hello.py", HELLO);
    let fork = sample("hostile/fork_bomb.py", FORK);
    for tier in ["process", "docker"] {
        cell_started(app, id, "hello", tier);
        let c = gauntlet::judge(&hello, tier, report(tier, Outcome::Ok, vec![], "hi\n"), findings(&[]));
        g(app, id, GauntletEvent::CellDone(Box::new(c)));
    }
    cell_started(app, id, "fork-bomb", "process");
    let v = Violation { kind: ViolationKind::Pids, at_ms: 31.0, detail: "pids limit 64 reached".into() };
    let c = gauntlet::judge(&fork, "process", report("process", Outcome::Violation, vec![v], ""), findings(&[]));
    g(app, id, GauntletEvent::CellDone(Box::new(c)));
    cell_started(app, id, "fork-bomb", "docker");
    let out = "forked 12000\n\x1b]52;c;ZXZpbA==\x07\x1b[2Jstill here\tok\n";
    let c = gauntlet::judge(
        &fork,
        "docker",
        report("docker", Outcome::Ok, vec![], out),
        findings(&["3 process(es) of the run still alive: [4242, 4243, 4244]"]),
    );
    g(app, id, GauntletEvent::CellDone(Box::new(c)));
    cell_started(app, id, "net-loopback", "process");
}

/// F9, `r` (the set-up: tiers and samples), Enter: how a user starts a gauntlet.
fn start_gauntlet(app: &mut App) {
    app.update(key(KeyCode::F(9)));
    app.update(key(KeyCode::Char('r')));
    app.update(key(KeyCode::Enter));
}

#[sandbench_testkit::test]
fn gauntlet_fills_live_and_shows_the_selected_cell() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    app.update(key(KeyCode::F(9)));
    assert_eq!(app.view, View::Gauntlet);
    // Many runs start only from the set-up, which says how many; Esc leaves it.
    assert!(app.take_effects().is_empty(), "F9 alone starts nothing");
    app.update(key(KeyCode::Char('r')));
    assert!(app.take_effects().is_empty(), "r opens the set-up, nothing runs yet");
    let s = screen(&mut app, 100, 34);
    assert!(s.contains("gauntlet: 2 tier(s) × 3 sample(s) = 6 runs"), "{s}");
    app.update(key(KeyCode::Esc));
    assert!(app.take_effects().is_empty() && app.overlay.is_none(), "Esc runs nothing");
    app.update(key(KeyCode::Char('r')));
    app.update(key(KeyCode::Enter));
    let id = started_gauntlet(&mut app);
    feed_partial(&mut app, id);
    // The selection followed the cells as they finished: fork-bomb on docker.
    assert_eq!(app.gauntlet.as_ref().unwrap().sel, (1, 1));
    // Keys take it over: it stays where they put it.
    app.update(key(KeyCode::Up));
    app.update(key(KeyCode::Down));
    let net = sample("hostile/net_loopback.py", NET);
    let c = gauntlet::judge(&net, "process", report("process", Outcome::Ok, vec![], ""), findings(&[]));
    g(&mut app, id, GauntletEvent::CellDone(Box::new(c)));
    cell_started(&mut app, id, "net-loopback", "docker");
    assert_eq!(app.gauntlet.as_ref().unwrap().sel, (1, 1));
    // The status line names the (temporary) samples directory.
    assert!(app.status.as_ref().unwrap().text.contains(&dir.path().display().to_string()));
    app.status = None;
    let s = screen(&mut app, 100, 34);
    assert!(s.contains("✗ ESCAPED ") && s.contains("verdict    ESCAPED (3 process(es)"), "{s}");
    assert!(s.contains("✓ contained (blocked)"), "{s}");
    assert!(s.contains("▶ running…"), "{s}");
    assert!(s.contains("secret canary: planted (fake ANTHROPIC_API_KEY + 2 secret file(s))"), "{s}");
    assert!(s.contains("␛]52;c;ZXZpbA==^G␛[2Jstill here ok"), "hostile output is shown inert:\n{s}");
    assert!(!s.contains('\x1b'));
    insta::assert_snapshot!("gauntlet_partial_with_details", s);

    // Enter zooms the details, Esc unzooms, Esc again leaves.
    app.update(key(KeyCode::Enter));
    let z = screen(&mut app, 100, 34);
    assert!(z.contains("host       p50 1.40 ms · max 3.90 ms"), "{z}");
    assert!(!z.contains("program"), "zoomed: no matrix\n{z}");
    app.update(key(KeyCode::Esc));
    assert_eq!(app.view, View::Gauntlet);
    assert!(!app.gauntlet.as_ref().unwrap().zoom);
    app.update(key(KeyCode::Esc));
    assert_eq!(app.view, View::Single);
    // F9 goes back to the same gauntlet, it does not start another.
    app.update(key(KeyCode::F(9)));
    assert!(app.take_effects().is_empty());
    assert_eq!(app.gauntlet.as_ref().unwrap().id, id);
}

#[sandbench_testkit::test]
fn gauntlet_finishes_then_reruns_and_ignores_stale_events() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    start_gauntlet(&mut app);
    let id = started_gauntlet(&mut app);
    feed_partial(&mut app, id);
    // Nothing else starts while the gauntlet holds the machine.
    app.update(key(KeyCode::Char('r')));
    assert!(app.take_effects().is_empty());
    app.update(key(KeyCode::F(5)));
    assert!(app.take_effects().is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("a gauntlet is going"), "{:?}", app.status);
    let m = Matrix {
        tiers: vec!["process".into(), "docker".into()],
        skipped_tiers: vec![],
        samples: vec![],
        cells: vec![],
        latency: vec![Latency { tier: "process".into(), start: "cold".into(), runs: 1, p50_ms: 104.0, p95_ms: 104.0 }],
        mismatches: 1,
        cancelled: false,
        scales: vec![],
    };
    g(&mut app, id, GauntletEvent::Finished(Box::new(m)));
    let gv = app.gauntlet.as_ref().unwrap();
    assert_eq!(gv.state, GState::Finished);
    assert!(!app.busy());
    let s = screen(&mut app, 100, 34);
    assert!(s.contains("benign latency process cold p50 104 ms p95 104 ms (1 runs)"), "{s}");
    assert!(s.contains("not in the matrix: e2b (no daemon (synthetic))"), "{s}");
    assert!(s.contains("– not run"), "{s}");
    assert!(app.status.as_ref().unwrap().text.contains("1 differ"), "{:?}", app.status);
    // Rerun: a new id; events of the old one no longer land.
    app.update(key(KeyCode::Char('r')));
    app.update(key(KeyCode::Enter));
    let id2 = started_gauntlet(&mut app);
    assert_ne!(id, id2);
    cell_started(&mut app, id, "hello", "process");
    assert_eq!(app.gauntlet.as_ref().unwrap().running, None);
    cell_started(&mut app, id2, "hello", "process");
    assert_eq!(app.gauntlet.as_ref().unwrap().running, Some((0, 0)));
}

#[sandbench_testkit::test]
fn gauntlet_cancel_and_quit_wait_for_the_cell_in_progress() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    start_gauntlet(&mut app);
    let id = started_gauntlet(&mut app);
    cell_started(&mut app, id, "hello", "process");
    app.update(key(KeyCode::F(8)));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Cancel(c)] if *c == id));
    assert_eq!(app.gauntlet.as_ref().unwrap().state, GState::Cancelling);
    // Cancelling twice sends one cancel; quitting waits for the cleanup.
    app.update(ctrl('q'));
    assert!(app.take_effects().is_empty());
    assert!(app.quitting && !app.should_exit());
    // The cancelled cell is still judged (what the canaries saw), then the end.
    let hello = sample("benign/hello.py", HELLO);
    // It used its CPU past the limit before the cancel: the figure comes
    // with its violation, and the cell still has no verdict.
    let cpu =
        Violation { kind: ViolationKind::CpuTime, at_ms: 90.0, detail: "CPU time limit 2s hit — killed".into() };
    let mut r = report("process", Outcome::Cancelled, vec![cpu], "");
    r.usage.cpu_ms = Some(4860);
    let c = gauntlet::judge(&hello, "process", r, findings(&[]));
    assert_eq!(c.verdict, gauntlet::Verdict::Cancelled);
    g(&mut app, id, GauntletEvent::CellDone(Box::new(c)));
    let m = Matrix {
        tiers: vec![],
        skipped_tiers: vec![],
        samples: vec![],
        cells: vec![],
        latency: vec![],
        mismatches: 0,
        cancelled: true,
        scales: vec![],
    };
    g(&mut app, id, GauntletEvent::Finished(Box::new(m)));
    assert_eq!(app.gauntlet.as_ref().unwrap().state, GState::Cancelled);
    assert!(app.should_exit());
    // Cancelled everywhere: the status line, the title, the cell, its details.
    let status = app.status.as_ref().unwrap().text.clone();
    assert!(status.contains("CANCELLED") && status.contains("1 stopped without a verdict"), "{status}");
    app.status = None;
    let s = screen(&mut app, 100, 30);
    let matrix: String = s.lines().take_while(|l| !l.contains("hello on process")).collect::<Vec<_>>().join("\n");
    assert!(matrix.contains("■ cancelled") && !matrix.contains("error"), "{s}");
    assert!(s.contains("CANCELLED · 1 of 6 cells ran · 1 stopped without a verdict · 0 mismatches"), "{s}");
    assert!(s.contains("stopped by the cancel at") && s.contains("no verdict"), "{s}");
    assert!(!s.contains("✗") && !s.contains("error"), "a cancel is no mismatch and no error:\n{s}");
    assert!(s.contains("cpu_time at 90.0 ms") && s.contains("cpu 4.86 s"), "{s}");
}

#[sandbench_testkit::test]
fn gauntlet_cells_and_latency_are_readable_at_80_columns() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    start_gauntlet(&mut app);
    let id = started_gauntlet(&mut app);
    feed_partial(&mut app, id);
    let lat = |tier: &str, start: &str, p50: f64| Latency {
        tier: tier.into(),
        start: start.into(),
        runs: 3,
        p50_ms: p50,
        p95_ms: p50 * 1.5,
    };
    let m = Matrix {
        tiers: vec!["process".into(), "docker".into()],
        skipped_tiers: vec![],
        samples: vec![],
        cells: vec![],
        latency: vec![
            lat("docker", "cold", 395.25),
            lat("docker", "warm", 194.75),
            lat("process", "cold", 143.25),
            lat("process", "warm", 104.75),
        ],
        mismatches: 1,
        cancelled: false,
        scales: vec![],
    };
    g(&mut app, id, GauntletEvent::Finished(Box::new(m)));
    app.status = None;
    let s = screen(&mut app, 80, 30);
    // Abbreviated, with a legend, instead of cut.
    assert!(s.contains("✓ contained (pids)") && s.contains("✗ ESCAPED") && s.contains("✓ ran"), "{s}");
    assert!(!s.contains("✗ ESCAPED ("), "a cut text is never shown: {s}");
    assert!(s.contains("short cells: a limit's name = contained by it"), "{s}");
    // Every tier's latency is on the screen, wrapped.
    for v in ["395 ms", "195 ms", "143 ms", "105 ms"] {
        assert!(s.contains(v), "{v} is missing:\n{s}");
    }
    // Narrower columns: the short forms.
    let s = screen(&mut app, 44, 30);
    assert!(s.contains("✓ pids") && s.contains("✓ ran"), "{s}");
}

#[sandbench_testkit::test]
fn gauntlet_without_samples_or_tiers_says_why() {
    let empty = tempfile::tempdir().unwrap();
    let mut app = app(empty.path());
    start_gauntlet(&mut app);
    assert!(app.take_effects().is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("no samples/benign or samples/hostile"), "{:?}", app.status);
    let dir = samples_dir();
    let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
    app.samples_dirs = vec![dir.path().to_path_buf()];
    start_gauntlet(&mut app);
    assert!(app.take_effects().is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("still being probed"), "{:?}", app.status);
    app.update(probed("process", false));
    app.update(key(KeyCode::Char('r')));
    assert!(app.take_effects().is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("no tier is available"), "{:?}", app.status);
    // A small terminal does not panic.
    for (w, h) in [(20, 6), (40, 10), (3, 2)] {
        screen(&mut app, w, h);
    }
}

#[sandbench_testkit::test]
fn agent_without_a_key_says_so_instead_of_starting() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    app.update(key(KeyCode::F(10)));
    assert_eq!(app.view, View::Agent);
    type_text(&mut app, "count the primes below 100");
    app.update(key(KeyCode::Enter));
    assert!(app.take_effects().is_empty());
    assert!(!app.busy());
    let s = screen(&mut app, 100, 20);
    assert!(s.contains("ANTHROPIC_API_KEY is not set"), "{s}");
}

fn agent_started(app: &mut App) -> u64 {
    match app.take_effects().as_slice() {
        [Effect::Agent { id, tier, limits, task }] => {
            assert_eq!(tier, "process");
            assert_eq!(limits, &app.limits);
            assert_eq!(task, "count the primes below 100");
            *id
        }
        other => panic!("expected one agent start, got {other:?}"),
    }
}

fn a(app: &mut App, id: u64, ev: TranscriptEvent) {
    app.update(Msg::Agent(id, ev));
}

#[sandbench_testkit::test]
fn agent_streams_the_transcript_live() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    app.api_key_set = true;
    app.update(key(KeyCode::F(10)));
    type_text(&mut app, "count the primes below 100");
    app.update(key(KeyCode::Enter));
    let id = agent_started(&mut app);
    assert!(app.busy());
    a(
        &mut app,
        id,
        TranscriptEvent::Started {
            task: "count the primes below 100".into(),
            model: "claude-test".into(),
            tier: "process".into(),
            max_turns: 8,
        },
    );
    a(&mut app, id, TranscriptEvent::TextDelta { turn: 1, text: "I'll count them ".into() });
    a(&mut app, id, TranscriptEvent::TextDelta { turn: 1, text: "with a sieve.".into() });
    a(&mut app, id, TranscriptEvent::Text { turn: 1, text: "I'll count them with a sieve.".into() });
    a(
        &mut app,
        id,
        TranscriptEvent::Turn {
            turn: 1,
            stop_reason: Some("tool_use".into()),
            input_tokens: Some(10),
            output_tokens: Some(20),
        },
    );
    a(
        &mut app,
        id,
        TranscriptEvent::ToolCall {
            turn: 1,
            id: "toolu_1".into(),
            language: "python".into(),
            code: "import sys\nprint(len([n for n in range(2, 100) if all(n % d for d in range(2, n))]))".into(),
        },
    );
    a(&mut app, id, TranscriptEvent::ToolOutput { id: "toolu_1".into(), stream: Stream::Stdout, text: "2".into() });
    a(&mut app, id, TranscriptEvent::ToolOutput { id: "toolu_1".into(), stream: Stream::Stdout, text: "5\n".into() });
    a(
        &mut app,
        id,
        TranscriptEvent::ToolOutput {
            id: "toolu_1".into(),
            stream: Stream::Stderr,
            text: "\x1b]0;pwned\x07warning\n".into(),
        },
    );
    a(
        &mut app,
        id,
        TranscriptEvent::ToolResult {
            id: "toolu_1".into(),
            outcome: "ok".into(),
            summary: "ok · exit code 0 · 31.0 ms total".into(),
            content: String::new(),
            is_error: false,
            report: None,
        },
    );
    a(
        &mut app,
        id,
        TranscriptEvent::Retrying { turn: 2, attempt: 1, status: Some(529), wait_ms: 500, reason: "overloaded".into() },
    );
    a(
        &mut app,
        id,
        TranscriptEvent::Text {
            turn: 2,
            text: "There are 25 primes below 100. The program tested every n from 2 to 99 against every smaller \
               divisor, which is slow for large bounds but fine here."
                .into(),
        },
    );
    let live = screen(&mut app, 100, 30);
    assert!(live.contains("turn 1 · running"), "{live}");
    a(
        &mut app,
        id,
        TranscriptEvent::Finished {
            reason: EndReason::FinalAnswer,
            turns: 2,
            answer: Some("There are 25 primes below 100.".into()),
            error: None,
        },
    );
    assert!(!app.busy());
    let s = screen(&mut app, 100, 30);
    assert!(s.contains("  25"), "{s}");
    assert!(s.contains("▍ ␛]0;pwned^Gwarning"), "{s}");
    assert!(s.contains("── final answer after 2 turn(s) ──"), "{s}");
    assert!(s.contains("│divisor, which is slow"), "long model text wraps at a space:\n{s}");
    insta::assert_snapshot!("agent_transcript", s);
    for (w, h) in [(20, 6), (40, 10), (3, 2)] {
        screen(&mut app, w, h);
    }
}

#[sandbench_testkit::test]
fn agent_cancel_and_refused_start() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    app.api_key_set = true;
    app.update(key(KeyCode::F(10)));
    type_text(&mut app, "count the primes below 100");
    app.update(key(KeyCode::Enter));
    let id = agent_started(&mut app);
    // Typing while it works does not change the task.
    type_text(&mut app, "x");
    assert_eq!(app.agent.input, "count the primes below 100");
    app.update(key(KeyCode::F(8)));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Cancel(c)] if *c == id));
    a(&mut app, id, TranscriptEvent::Finished { reason: EndReason::Cancelled, turns: 0, answer: None, error: None });
    assert!(!app.busy());
    // The engine refusing (e.g. the key vanished) ends the session with its message.
    app.update(key(KeyCode::Enter));
    let id2 = agent_started(&mut app);
    a(
        &mut app,
        id2,
        TranscriptEvent::Finished {
            reason: EndReason::Error,
            turns: 0,
            answer: None,
            error: Some("ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY=sk-ant-...".into()),
        },
    );
    let s = screen(&mut app, 100, 20);
    assert!(s.contains("error after 0 turn(s): ANTHROPIC_API_KEY is not set"), "{s}");
    // An unavailable tier is refused before anything starts.
    app.update(key(KeyCode::F(4)));
    app.update(key(KeyCode::F(4)));
    assert_eq!(app.selected_tier().name, "e2b");
    app.take_effects(); // passing over docker warmed it
    app.update(key(KeyCode::Enter));
    assert!(app.take_effects().is_empty());
    assert!(app.status.as_ref().unwrap().text.contains("e2b is unavailable"), "{:?}", app.status);
}

#[sandbench_testkit::test]
fn gauntlet_and_compare_views_draw_the_frontier() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    start_gauntlet(&mut app);
    let id = started_gauntlet(&mut app);
    feed_partial(&mut app, id);
    let lat =
        |tier: &str, p50: f64| Latency { tier: tier.into(), start: "cold".into(), runs: 1, p50_ms: p50, p95_ms: p50 };
    let m = Matrix {
        tiers: vec!["process".into(), "docker".into()],
        skipped_tiers: vec![],
        samples: vec![],
        cells: vec![],
        latency: vec![lat("process", 104.0), lat("docker", 420.0)],
        mismatches: 1,
        cancelled: false,
        scales: vec![],
    };
    g(&mut app, id, GauntletEvent::Finished(Box::new(m)));
    let fr = app.frontier().expect("a gauntlet ran");
    let points = fr.points;
    assert_eq!(points.len(), 2);
    // The fork bomb was contained on process and got out on docker.
    assert_eq!((points[0].tier.as_str(), points[0].contained, points[0].hostile), ("process", 1, 1));
    assert_eq!((points[1].tier.as_str(), points[1].contained, points[1].hostile), ("docker", 0, 1));
    let s = screen(&mut app, 160, 40);
    assert!(s.contains("safety × latency"), "{s}");
    assert!(s.contains("1 process  104 ms cold×1 gnt · 1/1"), "{s}");
    assert!(s.contains("2 docker   420 ms cold×1 gnt · 0/1"), "{s}");
    assert!(s.contains("y: hostile samples contained, this session's gauntlet: 4 of 6 cells"), "{s}");
    insta::assert_snapshot!("frontier_gauntlet_view", s);

    // A compare with warm runs moves the points to the warm latency.
    app.update(key(KeyCode::Esc));
    app.update(key(KeyCode::F(6)));
    for _ in 0..2 {
        let (id, tier) = match app.take_effects().as_slice() {
            [Effect::Start { id, tier, .. }] => (*id, tier.clone()),
            other => panic!("one start expected, got {other:?}"),
        };
        let mut r = report(&tier, Outcome::Ok, vec![], "");
        r.details = serde_json::json!({ "start": "warm" });
        r.timings_ms = Timings { setup: 5.0, first_output: Some(9.0), run: 7.0, teardown: 1.0, total: 13.0 };
        app.update(Msg::Finished(id, Box::new(r)));
    }
    let s = screen(&mut app, 160, 40);
    assert!(s.contains("1 process  12.0 ms warm×1 cmp · 1/1"), "{s}");
    assert!(s.contains("2 docker   12.0 ms warm×1 cmp · 0/1"), "{s}");
    insta::assert_snapshot!("frontier_compare_view", s);
}

#[sandbench_testkit::test]
fn the_gauntlet_view_draws_the_kept_gauntlets_frontier_before_any_run() {
    let dir = samples_dir();
    let mut app = app(dir.path());
    let fork = sample("hostile/fork_bomb.py", FORK);
    let v = Violation { kind: ViolationKind::Pids, at_ms: 31.0, detail: "pids limit 64 reached".into() };
    let cell = gauntlet::judge(&fork, "process", report("process", Outcome::Violation, vec![v], ""), findings(&[]));
    let lat = Latency { tier: "process".into(), start: "warm".into(), runs: 3, p50_ms: 48.0, p95_ms: 60.0 };
    let m = Matrix {
        tiers: vec!["process".into()],
        skipped_tiers: vec![],
        samples: vec!["fork-bomb".into()],
        cells: vec![cell],
        latency: vec![lat],
        mismatches: 0,
        cancelled: false,
        scales: vec![],
    };
    app.update(Msg::SavedGauntlet(Box::new(m), 1_764_657_000));
    app.update(key(KeyCode::F(9)));
    assert!(app.take_effects().is_empty(), "nothing starts");
    let s = screen(&mut app, 120, 36);
    assert!(s.contains("no gauntlet yet") && s.contains("last gauntlet kept in the state dir"), "{s}");
    assert!(s.contains("safety × latency") && s.contains("1 process  48.0 ms warm×3 gnt · 1/1"), "{s}");
    assert!(s.contains("the gauntlet kept from 2025-12-02"), "it says which gauntlet: {s}");
}
