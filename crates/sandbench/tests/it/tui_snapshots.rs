//! Screens of the workbench, driven headless with synthetic run events and
//! keys, rendered on a `TestBackend` at 80×24 and compared with insta.

use ratatui::crossterm::event::KeyCode;
use sandbench::event::{EventKind, ExitStatus, Phase, RunEvent, Stream, UsageSample, Violation, ViolationKind};
use sandbench::report::{Outcome, RunReport, Timings, Usage};
use sandbench::spec::Limits;
use sandbench::tier::{Availability, Check};
use sandbench::tui::app::{App, Effect, Msg};
use sandbench::tui::headless::{key, screen};
use sandbench::tui::theme::Theme;

fn ready(tier: &str) -> Msg {
    Msg::Probed(Availability {
        tier: tier.into(),
        available: true,
        summary: "ready (synthetic)".into(),
        checks: vec![Check::ok("all", "fine")],
    })
}

fn app(tiers: &[&str]) -> App {
    let mut app = App::new(Theme::dark(), tiers, tiers[0], Limits::default());
    app.live_clock = false;
    app
}

fn ev(id: u64, at_ms: f64, kind: EventKind) -> Msg {
    Msg::Run(id, RunEvent { at_ms, kind })
}

fn started(app: &mut App) -> Vec<u64> {
    app.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Start { id, .. } => Some(id),
            _ => None,
        })
        .collect()
}

fn report(tier: &str, outcome: Outcome, exit: ExitStatus, violations: Vec<Violation>, total: f64) -> RunReport {
    RunReport {
        tier: tier.into(),
        language: "python".into(),
        label: "untitled.py".into(),
        outcome,
        exit,
        violations,
        timings_ms: Timings { setup: 24.0, first_output: Some(30.0), run: total - 30.0, teardown: 3.0, total },
        usage: Usage { cpu_ms: Some(120), peak_memory_bytes: Some(48 << 20), peak_pids: Some(3) },
        stdout: String::new(),
        stderr: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        error: None,
        limits: Limits::default(),
        details: serde_json::Value::Null,
        degraded: vec![],
        network: vec![],
        session: None,
        secrets: vec![],
        incomplete: vec![],
    }
}

/// Phases, some output (with a hostile escape and a colour), usage samples.
fn feed_running(app: &mut App, id: u64) {
    app.update(ev(id, 0.0, EventKind::Phase(Phase::Preparing)));
    app.update(ev(id, 24.0, EventKind::Phase(Phase::Running)));
    app.update(ev(
        id,
        30.0,
        EventKind::Output(
            Stream::Stdout,
            b"hello from the sandbox\n\x1b[32mgreen\x1b[0m and \x1b]52;c;ZXZpbA==\x07clipboard\n".to_vec(),
        ),
    ));
    app.update(ev(id, 31.0, EventKind::Output(Stream::Stderr, b"warning: on stderr\n".to_vec())));
    for i in 0..8u64 {
        app.update(ev(
            id,
            100.0 + 100.0 * i as f64,
            EventKind::Usage(UsageSample {
                cpu_ms: Some(i * 60),
                memory_bytes: Some((i + 1) * (8 << 20)),
                pids: Some(2),
            }),
        ));
    }
    app.update(ev(id, 820.0, EventKind::Output(Stream::Stdout, b"allocating".to_vec())));
}

#[sandbench_testkit::test]
fn idle() {
    let mut app = app(&["process"]);
    app.update(ready("process"));
    insta::assert_snapshot!(screen(&mut app, 80, 24));
}

#[sandbench_testkit::test]
fn running_with_output() {
    let mut app = app(&["process"]);
    app.update(ready("process"));
    app.update(key(KeyCode::F(5)));
    let ids = started(&mut app);
    assert_eq!(ids.len(), 1);
    feed_running(&mut app, ids[0]);
    insta::assert_snapshot!(screen(&mut app, 80, 24));
}

#[sandbench_testkit::test]
fn violation_shown() {
    let mut app = app(&["process"]);
    app.update(ready("process"));
    app.update(key(KeyCode::F(5)));
    let id = started(&mut app)[0];
    feed_running(&mut app, id);
    let v = Violation { kind: ViolationKind::Memory, at_ms: 1420.0, detail: "memory limit 256M hit — killed".into() };
    app.update(ev(id, 1420.0, EventKind::Violation(v.clone())));
    let exit = ExitStatus { code: None, signal: Some(9) };
    app.update(ev(id, 1421.0, EventKind::Exit(exit)));
    app.update(ev(id, 1421.0, EventKind::Phase(Phase::TearingDown)));
    app.update(Msg::Finished(id, Box::new(report("process", Outcome::Violation, exit, vec![v], 1424.0))));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("✖ memory at 1.42 s: memory limit 256M hit — killed"), "{s}");
    insta::assert_snapshot!(s);
}

#[sandbench_testkit::test]
fn compare_mode() {
    let mut app = app(&["process", "docker", "microvm"]);
    app.update(ready("process"));
    app.update(ready("docker"));
    app.update(Msg::Probed(Availability {
        tier: "microvm".into(),
        available: false,
        summary: "qemu-system-x86_64 not found".into(),
        checks: vec![Check::fail("qemu", "not installed", "apt-get install qemu-system-x86")],
    }));
    app.update(key(KeyCode::F(6)));
    let first = started(&mut app);
    assert_eq!(first.len(), 1, "one tier at a time");
    feed_running(&mut app, first[0]);
    let exit = ExitStatus { code: Some(0), signal: None };
    app.update(ev(first[0], 900.0, EventKind::Exit(exit)));
    app.update(Msg::Finished(first[0], Box::new(report("process", Outcome::Ok, exit, vec![], 904.0))));
    let second = started(&mut app);
    assert_eq!(second.len(), 1, "the next tier starts when the first is done; microvm is unavailable");
    let ids = [first[0], second[0]];
    app.update(ev(ids[1], 0.0, EventKind::Phase(Phase::Preparing)));
    app.update(ev(ids[1], 280.0, EventKind::Phase(Phase::Running)));
    app.update(ev(ids[1], 300.0, EventKind::Output(Stream::Stdout, b"hello from the sandbox\n".to_vec())));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("summary (live)"), "{s}");
    insta::assert_snapshot!(s);
}

#[sandbench_testkit::test]
fn help() {
    let mut app = app(&["process"]);
    app.update(ready("process"));
    app.update(key(KeyCode::F(1)));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("run the code on the selected tier"));
    insta::assert_snapshot!(s);
}

#[sandbench_testkit::test]
fn unavailable_tier() {
    let mut app = app(&["process", "e2b"]);
    app.update(ready("process"));
    app.update(Msg::Probed(Availability {
        tier: "e2b".into(),
        available: false,
        summary: "no E2B_API_KEY".into(),
        checks: vec![Check::fail("api key", "E2B_API_KEY is not set", "export E2B_API_KEY=... (from e2b.dev)")],
    }));
    app.update(key(KeyCode::F(4)));
    app.update(key(KeyCode::F(5)));
    assert!(started(&mut app).is_empty(), "an unavailable tier never runs");
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("e2b is unavailable"), "{s}");
    insta::assert_snapshot!(s);
}

#[sandbench_testkit::test]
fn limits_form_refuses_bad_input() {
    let mut app = app(&["process"]);
    app.update(key(KeyCode::F(3)));
    app.update(key(KeyCode::Down));
    app.update(key(KeyCode::Down));
    for _ in 0..4 {
        app.update(key(KeyCode::Backspace));
    }
    sandbench::tui::headless::type_text(&mut app, "12Q");
    app.update(key(KeyCode::Enter));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("memory: invalid size '12Q'"), "{s}");
    insta::assert_snapshot!(s);
}
