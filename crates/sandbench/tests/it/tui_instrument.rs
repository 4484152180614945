//! The workbench as a measuring instrument (issue 13): the screen saved as
//! SVG, the key bar at 80 columns, latency histograms and sparklines.

use std::time::Duration;

use ratatui::crossterm::event::KeyCode;
use sandbench::config::Config;
use sandbench::spec::Limits;
use sandbench::tui::app::{App, Msg};
use sandbench::tui::headless::{ctrl, key, screen};
use sandbench::tui::theme::Theme;

fn app() -> App {
    let mut app = App::new(Theme::dark(), &["process", "docker"], "process", Limits::default());
    app.live_clock = false;
    app
}

#[sandbench_testkit::test]
fn ctrl_p_saves_the_screen_as_svg_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app();
    app.export_dir = dir.path().to_path_buf();
    app.update(Msg::Paste("print('<svg onload=alert(1)>')".into()));
    app.update(ctrl('p'));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = Config::default();
    rt.block_on(async {
        let run = sandbench::tui::event_loop::run_headless(&config, &mut app, 100, 30, |app: &mut App| {
            !app.screenshot_wanted
        });
        tokio::time::timeout(Duration::from_secs(60), run).await.expect("the loop ends").expect("the loop runs");
    });
    let status = app.status.clone().expect("a message").text;
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(status.contains(&files[0].display().to_string()), "the message names the file: {status}");
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{}", &svg[..80]);
    assert!(svg.contains("code · untitled.py"), "the editor's title is in the picture");
    assert!(svg.contains("&lt;svg onload=alert(1)&gt;") && !svg.contains("<svg onload"), "text is escaped");
    assert_eq!(svg.matches("<svg").count(), 1);
}

#[sandbench_testkit::test]
fn the_key_bar_keeps_every_key_at_80_columns() {
    let mut app = app();
    let s = screen(&mut app, 80, 24);
    let bar = s.lines().last().unwrap();
    for k in ["F1 help", "F5", "F8", "F9", "F10", "F11", "^Q quit"] {
        assert!(bar.contains(k), "{k} missing from the key bar: {bar:?}");
    }
    app.update(key(KeyCode::F(11)));
    let s = screen(&mut app, 80, 24);
    let bar = s.lines().last().unwrap();
    for k in ["Esc back", "F9", "F11", "^Q quit"] {
        assert!(bar.contains(k), "{k} missing from the runs view's key bar: {bar:?}");
    }
}

fn ready_app() -> App {
    let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
    app.live_clock = false;
    app.update(Msg::Probed(sandbench::tier::Availability {
        tier: "process".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![],
    }));
    app.take_effects();
    app
}

fn started(app: &mut App) -> u64 {
    app.update(key(KeyCode::F(5)));
    match app.take_effects().as_slice() {
        [sandbench::tui::app::Effect::Start { id, .. }] => *id,
        other => panic!("expected one start, got {other:?}"),
    }
}

fn usage(app: &mut App, id: u64, at_ms: f64, cpu_ms: u64, mem: u64) {
    use sandbench::event::{EventKind, RunEvent, UsageSample};
    let u = UsageSample { cpu_ms: Some(cpu_ms), memory_bytes: Some(mem), pids: Some(1) };
    app.update(Msg::Run(id, RunEvent { at_ms, kind: EventKind::Usage(u) }));
}

#[sandbench_testkit::test]
fn sparklines_scale_to_the_run_have_a_time_axis_or_say_there_is_too_little() {
    let mut app = ready_app();
    let id = started(&mut app);
    usage(&mut app, id, 5.0, 0, 4 << 20);
    let s = screen(&mut app, 120, 40);
    assert!(s.contains("too few to draw: 1") && s.contains("in 5.00 ms"), "{s}");
    // A 50 ms program sampled every 10 ms: a curve, its scale and its time axis.
    for i in 1..6u64 {
        usage(&mut app, id, 5.0 + 10.0 * i as f64, 8 * i, (4 + 2 * i) << 20);
    }
    let s = screen(&mut app, 120, 40);
    assert!(!s.contains("too few"), "{s}");
    assert!(s.contains("▕80%"), "the cpu scale is the largest value shown:\n{s}");
    assert!(s.contains("▕14.0M"), "the memory scale is the run's peak, not the 256M limit:\n{s}");
    assert!(s.contains("5.00 ms ─") && s.contains("55.0 ms"), "the time axis:\n{s}");
    // CPU above what the sandbox has is sampling jitter: capped at its CPUs.
    usage(&mut app, id, 60.0, 8 * 5 + 50, 14 << 20);
    assert_eq!(app.runs[&id].cpu_pct(), Some(100));
}

fn samples(dir: &std::path::Path) {
    for (rel, name, tries) in [
        ("benign/hello.py", "hello", "print a greeting"),
        ("hostile/fork_bomb.py", "fork-bomb", "fork without end"),
        ("hostile/memory_bomb.py", "memory-bomb", "allocate without end"),
        ("hostile/net_loopback.py", "net-loopback", "connect to the host's loopback"),
    ] {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("# name: {name}\n# tries: {tries}\n# must: x\n# expect: *=ok\nprint(1)\n")).unwrap();
    }
}

#[sandbench_testkit::test]
fn the_samples_picker_filters_as_you_type_and_reopens_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    samples(dir.path());
    let mut app = ready_app();
    app.samples_dirs = vec![dir.path().to_path_buf()];
    app.update(key(KeyCode::F(2)));
    sandbench::tui::headless::type_text(&mut app, "bomb");
    let s = screen(&mut app, 100, 30);
    assert!(s.contains("filter: bomb_"), "{s}");
    assert!(s.contains("fork-bomb") && s.contains("memory-bomb") && !s.contains("net-loopback"), "{s}");
    app.update(key(KeyCode::Down));
    // Backspace widens the filter again and keeps the selection.
    for _ in 0..4 {
        app.update(key(KeyCode::Backspace));
    }
    let s = screen(&mut app, 100, 30);
    assert!(s.contains("net-loopback") && s.contains("allocate without end"), "memory-bomb stays selected:\n{s}");
    app.update(key(KeyCode::Esc));
    // Reopened: on the same sample, not the first.
    app.update(key(KeyCode::F(2)));
    assert!(screen(&mut app, 100, 30).contains("allocate without end"));
    app.update(key(KeyCode::Enter));
    assert_eq!(app.label, "memory-bomb");
    app.update(key(KeyCode::F(2)));
    assert!(screen(&mut app, 100, 30).contains("allocate without end"), "after loading it too");
    sandbench::tui::headless::type_text(&mut app, "zzz");
    assert!(screen(&mut app, 100, 30).contains("no sample matches 'zzz'"));
}

/// What is typed in F2 loads the sample it names: exact and prefix matches
/// of the name rank before names that merely contain it and before matches
/// in what a sample tries, whatever was selected before.
#[sandbench_testkit::test]
fn the_samples_picker_loads_the_sample_a_typed_name_says() {
    let dir = tempfile::tempdir().unwrap();
    for (rel, name, tries) in [
        ("hostile/daemon.py", "daemon", "fork a daemon that outlives the program"),
        ("hostile/js_memory_bomb.js", "js-memory-bomb", "allocate without end in node"),
        ("hostile/memory_bomb.py", "memory-bomb", "allocate without end"),
        ("hostile/fork_bomb.py", "fork-bomb", "fork without end"),
    ] {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = if rel.ends_with(".js") { "//" } else { "#" };
        let body = if rel.ends_with(".js") { "console.log(1)" } else { "print(1)" };
        std::fs::write(p, format!("{c} name: {name}\n{c} tries: {tries}\n{c} must: x\n{c} expect: *=ok\n{body}\n"))
            .unwrap();
    }
    // Each row: what is typed (after selecting another sample first), the sample Enter loads.
    for (typed, loads) in
        [("memory-b", "memory-bomb"), ("fork", "fork-bomb"), ("daemon", "daemon"), ("js-m", "js-memory-bomb")]
    {
        let mut app = ready_app();
        app.samples_dirs = vec![dir.path().to_path_buf()];
        app.update(key(KeyCode::F(2)));
        // Something else selected first: the list's last sample.
        for _ in 0..4 {
            app.update(key(KeyCode::Down));
        }
        sandbench::tui::headless::type_text(&mut app, typed);
        app.update(key(KeyCode::Enter));
        assert_eq!(app.label, loads, "typed {typed:?}");
    }
}

#[sandbench_testkit::test]
fn output_search_highlights_the_matches_and_marks_the_current_one() {
    let mut app = ready_app();
    let id = started(&mut app);
    let text = b"alpha\nbeta needle here\ngamma\n".to_vec();
    app.update(Msg::Run(
        id,
        sandbench::event::RunEvent {
            at_ms: 1.0,
            kind: sandbench::event::EventKind::Output(sandbench::event::Stream::Stdout, text.clone()),
        },
    ));
    app.update(ctrl('w'));
    app.update(key(KeyCode::Char('/')));
    sandbench::tui::headless::type_text(&mut app, "NEEDLE");
    app.update(key(KeyCode::Enter));
    let buf = sandbench::tui::headless::render(&mut app, 100, 30);
    let text = sandbench::tui::headless::text(&buf);
    let (y, row) = text.lines().enumerate().find(|(_, l)| l.contains("beta needle here")).expect("the line is shown");
    let x = row.chars().position(|c| c == 'n').unwrap() as u16;
    let cell = &buf[(x, y as u16)];
    assert_eq!(cell.symbol(), "n");
    assert_eq!(cell.bg, app.theme.ui.warn, "the match is highlighted");
    assert_ne!(buf[(x - 2, y as u16)].bg, app.theme.ui.warn, "the rest of the line is not");
    assert!(row.contains("▶beta") || row.contains("▶ beta"), "the current match is marked: {row:?}");
}

#[sandbench_testkit::test]
fn a_status_message_stays_with_its_view_and_the_save_prompt_names_the_directory() {
    let mut app = ready_app();
    app.update(key(KeyCode::F(9)));
    assert!(app.status.as_ref().is_some_and(|s| s.text.contains("r sets up a gauntlet")));
    app.update(key(KeyCode::Esc));
    assert!(app.status.is_none(), "the gauntlet's hint does not follow into the editor: {:?}", app.status);
    app.update(ctrl('s'));
    let s = screen(&mut app, 120, 30);
    let cwd = std::env::current_dir().unwrap().display().to_string();
    assert!(s.contains(&format!("relative to {cwd}")), "{s}");
    // Help says what Enter really does after a ':'.
    app.update(key(KeyCode::Esc));
    let help = sandbench::tui::keymap::help_sections();
    let enter = help.iter().flat_map(|(_, v)| v).find(|(k, h)| *k == "Enter" && h.contains("new line")).unwrap();
    assert!(enter.1.contains("one level more after a line ending in ':'"), "{enter:?}");
    app.editor = sandbench::tui::editor::Editor::new("if x:");
    app.update(key(KeyCode::End));
    app.update(key(KeyCode::Enter));
    assert_eq!(app.editor.text(), "if x:\n    ");
}

#[sandbench_testkit::test]
fn a_pids_violation_shows_the_pids_gauge_at_its_limit() {
    use sandbench::event::{EventKind, RunEvent, Violation, ViolationKind};
    let mut app = ready_app();
    let id = started(&mut app);
    // gVisor: the host sees one process, the loader inside saw the limit.
    usage(&mut app, id, 5.0, 1, 4 << 20);
    let v = Violation { kind: ViolationKind::Pids, at_ms: 30.0, detail: "pids limit 64 reached".into() };
    app.update(Msg::Run(id, RunEvent { at_ms: 30.0, kind: EventKind::Violation(v) }));
    let s = screen(&mut app, 120, 40);
    assert!(s.contains("pids 64/64") && !s.contains("pids 1/64"), "{s}");
}

#[sandbench_testkit::test(needs = ["process"])]
fn the_workbench_keeps_one_tier_instance_so_later_runs_are_warm() {
    if !crate::support::docker_common::tier_ready("process") {
        return;
    }
    let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
    app.live_clock = false;
    let mut starts: Vec<String> = vec![];
    let mut asked = 0;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let config = crate::support::common::config();
    rt.block_on(async {
        // run_headless does not probe: the test does, as the loop would.
        let a = sandbench::tier::by_name("process", &config).unwrap().probe().await;
        app.update(Msg::Probed(a));
        let run = sandbench::tui::event_loop::run_headless(&config, &mut app, 100, 30, |app: &mut App| {
            let ready = app.tiers[0].avail.as_ref().is_some_and(|a| a.available);
            if let Some(r) = app.current_run().and_then(|r| r.report.as_ref()) {
                if starts.len() < asked {
                    starts.push(r.details["start"].as_str().unwrap_or("?").to_string());
                }
            }
            if ready && !app.busy() && starts.len() == asked && asked < 6 {
                asked += 1;
                app.update(key(KeyCode::F(5)));
            }
            starts.len() == 6 || starts.iter().skip(1).any(|s| s == "warm")
        });
        tokio::time::timeout(Duration::from_secs(120), run).await.expect("three runs end").expect("the loop runs");
    });
    // The first is cold; once the spare sandbox made after it is ready, a
    // run takes it (a fresh tier per run made every run cold).
    assert!(starts.iter().skip(1).any(|s| s == "warm"), "{starts:?}");
    // The tier pane says what the tier holds warm.
    let warm = app.tiers[0].warm.clone().unwrap_or_default();
    assert!(warm.contains("spare sandbox"), "{warm:?}");
    app.status = None;
    let s = screen(&mut app, 120, 40);
    assert!(s.contains(&format!("warm: {}", &warm[..warm.len().min(20)])), "{s}");
}
