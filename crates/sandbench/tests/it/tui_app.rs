//! The workbench driven headless: keys and run events in, effects and
//! screens out, no terminal.

use ratatui::crossterm::event::KeyCode;
use sandbench::event::{EventKind, Phase, RunEvent, Stream};
use sandbench::report::Outcome;
use sandbench::spec::Limits;
use sandbench::tier::Availability;
use sandbench::tui::app::{App, Effect, Focus, Msg, Overlay, View};
use sandbench::tui::headless::{ctrl, key, render, screen, type_text};
use sandbench::tui::overlays::{Prompt, PromptKind};
use sandbench::tui::theme::Theme;

fn app() -> App {
    let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
    app.live_clock = false;
    app.update(Msg::Probed(Availability {
        tier: "process".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![],
    }));
    // The selected tier is ready: the app asks to warm it, once.
    assert!(matches!(app.take_effects().as_slice(), [Effect::Prewarm(t)] if t == "process"));
    app
}

fn start(app: &mut App) -> u64 {
    app.update(key(KeyCode::F(5)));
    let effects = app.take_effects();
    match effects.as_slice() {
        [Effect::Start { id, spec, .. }] => {
            assert_eq!(spec.code, app.editor.text());
            *id
        }
        other => panic!("expected one start, got {other:?}"),
    }
}

fn out(app: &mut App, id: u64, bytes: &[u8]) {
    app.update(Msg::Run(id, RunEvent { at_ms: 1.0, kind: EventKind::Output(Stream::Stdout, bytes.to_vec()) }));
}

fn finish(app: &mut App, id: u64, outcome: Outcome) {
    let r = sandbench::tui::headless::report("process", outcome);
    app.update(Msg::Finished(id, Box::new(r)));
}

#[sandbench_testkit::test]
fn typing_undo_and_the_run_gets_the_edited_code() {
    let mut app = app();
    app.update(ctrl('a'));
    type_text(&mut app, "import os\nif True:\nprint(os.getpid())");
    assert_eq!(app.editor.text(), "import os\nif True:\n    print(os.getpid())");
    app.update(ctrl('z'));
    assert_eq!(app.editor.text(), "import os\nif True:\n    ");
    app.update(ctrl('y'));
    let id = start(&mut app);
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("print(os.getpid())"), "{s}");
    assert!(app.runs.contains_key(&id));
}

#[sandbench_testkit::test]
fn copy_paste_and_selection() {
    let mut app = app();
    app.update(ctrl('a'));
    type_text(&mut app, "abc");
    app.update(sandbench::tui::app::Msg::Key(ratatui::crossterm::event::KeyEvent::new(
        KeyCode::Left,
        ratatui::crossterm::event::KeyModifiers::SHIFT,
    )));
    app.update(ctrl('c'));
    app.update(key(KeyCode::End));
    app.update(ctrl('v'));
    app.update(ctrl('v'));
    assert_eq!(app.editor.text(), "abccc");
    // Terminal (bracketed) paste goes to the editor as one undo step.
    app.update(Msg::Paste("\nx = 1\r\n".into()));
    assert_eq!(app.editor.text(), "abccc\nx = 1\n");
    app.update(ctrl('z'));
    assert_eq!(app.editor.text(), "abccc");
}

#[sandbench_testkit::test]
fn one_run_at_a_time_cancel_and_quit_clean_up() {
    let mut app = app();
    let id = start(&mut app);
    app.update(key(KeyCode::F(5)));
    assert!(app.take_effects().is_empty(), "a second run waits");
    app.update(key(KeyCode::F(8)));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Cancel(c)] if *c == id));
    // Quit while the run is still stopping: the loop must wait for it.
    app.update(ctrl('q'));
    assert!(app.quitting);
    assert!(!app.should_exit());
    finish(&mut app, id, Outcome::Cancelled);
    assert!(app.should_exit());
}

#[sandbench_testkit::test]
fn ctrl_c_copies_cancels_or_quits() {
    let mut app = app();
    let id = start(&mut app);
    app.update(ctrl('c'));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Cancel(c)] if *c == id));
    finish(&mut app, id, Outcome::Cancelled);
    app.editor.mark_saved();
    app.update(ctrl('c'));
    assert!(app.should_exit());
}

#[sandbench_testkit::test]
fn unsaved_changes_ask_before_quitting() {
    let mut app = app();
    type_text(&mut app, "x");
    app.update(ctrl('q'));
    assert!(!app.quitting);
    assert!(app.status.as_ref().unwrap().text.contains("unsaved"));
    app.update(ctrl('q'));
    assert!(app.should_exit());
}

#[sandbench_testkit::test]
fn terminate_quits_even_with_unsaved_changes() {
    let mut app = app();
    type_text(&mut app, "x");
    let id = start(&mut app);
    app.update(Msg::Terminate);
    assert!(matches!(app.take_effects().as_slice(), [Effect::Cancel(c)] if *c == id));
    assert!(app.quitting && !app.should_exit());
    finish(&mut app, id, Outcome::Cancelled);
    assert!(app.should_exit());
}

#[sandbench_testkit::test]
fn hostile_output_never_reaches_the_screen_buffer() {
    let mut app = app();
    let id = start(&mut app);
    app.update(Msg::Run(id, RunEvent { at_ms: 0.0, kind: EventKind::Phase(Phase::Running) }));
    let nasty: &[&[u8]] = &[
        b"\x1b]52;c;ZXZpbA==",
        b"\x07\x1b]0;PWNED\x07\x1b[?1049h\x1b[2J\x1b",
        b"[Hmoved\x1bP+q\x1b\\\x9b31m\r\n\xe2",
        b"\x80\xaebidi\x07\x00\n",
    ];
    for chunk in nasty {
        out(&mut app, id, chunk);
    }
    let buf = render(&mut app, 100, 30);
    for cell in buf.content() {
        for c in cell.symbol().chars() {
            assert!(!c.is_control(), "control {c:?} in the screen buffer");
        }
    }
    let s = sandbench::tui::headless::text(&buf);
    assert!(s.contains("moved"), "{s}");
    assert!(s.contains("^G^@"), "{s}");
    assert!(!s.contains("ZXZpbA"), "the clipboard payload is not shown: {s}");
    assert!(!s.contains("PWNED"), "the title payload is not shown: {s}");
}

/// The gauntlet's invisible forgery, its real output fed to the output pane:
/// every invisible, bidi and tag character is a visible marker on screen.
#[sandbench_testkit::test]
fn invisible_and_bidi_characters_reach_the_pane_by_name() {
    let sample = crate::support::common::samples_dir().join("hostile/invisible_forgery.py");
    let printed = std::process::Command::new("/usr/bin/python3").arg(&sample).output().unwrap();
    assert!(printed.status.success());
    assert!(String::from_utf8_lossy(&printed.stdout).contains('\u{202E}'), "the sample prints what it should");
    let mut app = app();
    let id = start(&mut app);
    app.update(Msg::Run(id, RunEvent { at_ms: 0.0, kind: EventKind::Phase(Phase::Running) }));
    // Cut inside a multi-byte character: the pane holds it whole.
    let (a, b) = printed.stdout.split_at(printed.stdout.len() / 2 + 1);
    out(&mut app, id, a);
    out(&mut app, id, b);
    let buf = render(&mut app, 200, 40);
    for cell in buf.content() {
        for c in cell.symbol().chars() {
            assert!(!sandbench::sanitize::is_hidden(c), "U+{:04X} in the screen buffer", c as u32);
        }
    }
    let s = sandbench::tui::headless::text(&buf);
    for shown in
        ["<U+2028>", "<U+2029>", "<U+2066>", "<U+202E>", "<U+2069>", "<U+200B>", "<U+FEFF>", "<U+E0020>", "<U+E0155>"]
    {
        assert!(s.contains(shown), "{shown} is not on the screen:\n{s}");
    }
}

#[sandbench_testkit::test]
fn flood_is_bounded_and_scrolling_stops_following() {
    let mut app = app();
    let id = start(&mut app);
    let chunk: Vec<u8> = (0..1000).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
    for _ in 0..20 {
        out(&mut app, id, &chunk);
    }
    // 20 MB without a newline.
    let long = vec![b'y'; 1 << 20];
    for _ in 0..20 {
        out(&mut app, id, &long);
    }
    let run = &app.runs[&id];
    assert_eq!(run.lines.len(), sandbench::tui::run_view::MAX_LINES);
    assert!(run.lines.dropped > 0);
    let partial = run.partials().next().unwrap();
    assert_eq!(partial.line.width, sandbench::tui::run_view::MAX_LINE_COLS);
    assert_eq!(partial.line.cut, 20 * (1 << 20) - sandbench::tui::run_view::MAX_LINE_COLS as u64);
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("following"), "{s}");
    assert!(s.contains("15000 dropped"), "{s}");
    assert!(s.contains("yyy …+20970496"), "{s}");
    app.update(ctrl('w'));
    assert_eq!(app.focus, Focus::Output);
    app.update(key(KeyCode::PageUp));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("scrolled"), "{s}");
    assert!(s.contains("line 99"), "{s}");
    app.update(key(KeyCode::End));
    assert!(app.output.scroll.follows());
}

#[sandbench_testkit::test]
fn limits_form_applies_valid_values() {
    let mut app = app();
    app.update(key(KeyCode::F(3)));
    for _ in 0..3 {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "500ms");
    app.update(key(KeyCode::Enter));
    assert!(app.overlay.is_none());
    assert_eq!(app.limits.cpu_time, std::time::Duration::from_millis(500));
    let id = start(&mut app);
    assert_eq!(app.runs[&id].limits.cpu_time, std::time::Duration::from_millis(500));
    // Esc discards.
    app.update(key(KeyCode::F(3)));
    type_text(&mut app, "999");
    app.update(key(KeyCode::Esc));
    assert_eq!(app.limits.cpu_time, std::time::Duration::from_millis(500));
}

#[sandbench_testkit::test]
fn the_network_limit_is_set_in_the_form_and_decisions_show_live() {
    let mut app = app();
    app.update(key(KeyCode::F(3)));
    // The field before the last (secrets): the network.
    app.update(key(KeyCode::Up));
    app.update(key(KeyCode::Up));
    for _ in 0.."none".len() {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "allow=pypi.test,files.pythonhosted.org:443");
    app.update(key(KeyCode::Enter));
    assert!(app.overlay.is_none());
    assert_eq!(app.limits.network.to_string(), "allow=pypi.test,files.pythonhosted.org:443");
    let id = start(&mut app);
    assert_eq!(app.runs[&id].limits.network, app.limits.network);
    let rec = |id: u64, decision, host: &str, open: bool, detail: &str| sandbench::egress::NetRecord {
        id,
        at_ms: 12.0,
        decision,
        method: "CONNECT".into(),
        host: host.into(),
        port: 443,
        address: Some("127.0.0.5".into()),
        detail: detail.into(),
        bytes_up: 517,
        bytes_down: 4096,
        duration_ms: 30.0,
        open,
        secrets: vec![],
        misdirected: None,
    };
    use sandbench::egress::Decision::{Allowed, Denied};
    for r in [
        rec(1, Allowed, "pypi.test", true, "connected to 127.0.0.5"),
        rec(2, Denied, "evil.test", false, "evil.test:443 is not in the allow list"),
    ] {
        app.update(Msg::Run(id, RunEvent { at_ms: 12.0, kind: EventKind::Network(r) }));
    }
    let s = screen(&mut app, 100, 30);
    assert!(s.contains("⇄ network") && s.contains("allowed CONNECT pypi.test:443"), "{s}");
    assert!(s.contains("✖ network") && s.contains("denied CONNECT evil.test:443"), "{s}");

    // A tier with no egress path refuses an allow list in the form itself.
    let mut app = App::new(Theme::dark(), &["bwrap"], "bwrap", Limits::default());
    app.update(key(KeyCode::F(3)));
    app.update(key(KeyCode::Up));
    app.update(key(KeyCode::Up));
    for _ in 0.."none".len() {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "allow=pypi.test");
    app.update(key(KeyCode::Enter));
    let Some(Overlay::Limits(f)) = &app.overlay else { panic!("the form closed") };
    assert!(f.error.as_deref().unwrap_or("").contains("cannot enforce a network allow list"), "{:?}", f.error);
    assert!(app.limits.network.is_none());
}

#[sandbench_testkit::test]
fn samples_picker_loads_a_sample() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("benign")).unwrap();
    std::fs::create_dir_all(dir.path().join("hostile")).unwrap();
    std::fs::write(
        dir.path().join("benign/hello.py"),
        "# name: hello\n# tries: print a line\n# must: finish ok\n# expect: *=ok\nprint('hi')\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hostile/bomb.sh"),
        "# name: fork-bomb\n# tries: fork forever\n# must: stop at the pids limit\n# expect: *=violation:pids|cpu_time\n:(){ :|:& };:\n",
    )
    .unwrap();
    let mut app = app();
    app.samples_dirs = vec![dir.path().to_path_buf()];
    app.update(key(KeyCode::F(2)));
    assert!(matches!(app.overlay, Some(Overlay::Samples(_))));
    app.update(key(KeyCode::Down));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("fork forever"), "{s}");
    assert!(s.contains("*=violation:pids|cpu_time"), "{s}");
    insta::assert_snapshot!(s);
    app.update(key(KeyCode::Enter));
    assert!(app.overlay.is_none());
    assert_eq!(app.language, sandbench::spec::Language::Sh);
    assert!(app.editor.text().ends_with(":(){ :|:& };:"));
    assert_eq!(app.label, "fork-bomb");

    // Unsaved edits are not replaced by a sample without asking, and undo
    // brings back the text together with its name and language.
    type_text(&mut app, "echo mine");
    app.update(key(KeyCode::F(2)));
    app.update(key(KeyCode::Up));
    app.update(key(KeyCode::Enter));
    assert!(matches!(app.overlay, Some(Overlay::Samples(_))), "the first Enter only warns");
    assert!(app.status.as_ref().unwrap().text.contains("unsaved changes"), "{:?}", app.status);
    app.update(key(KeyCode::Enter));
    assert!(app.overlay.is_none());
    assert_eq!(app.label, "hello");
    assert_eq!(app.language, sandbench::spec::Language::Python);
    app.update(ctrl('z'));
    assert!(app.editor.text().contains("echo mine"), "{}", app.editor.text());
    assert_eq!(app.label, "fork-bomb");
    assert_eq!(app.language, sandbench::spec::Language::Sh);
    app.update(ctrl('y'));
    assert_eq!(app.label, "hello");
    assert!(app.editor.text().ends_with("print('hi')"), "{}", app.editor.text());
}

#[sandbench_testkit::test]
fn save_as_then_save() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app();
    app.update(ctrl('s'));
    let Some(Overlay::Prompt(Prompt { kind: PromptKind::SaveAs, input })) = &app.overlay else {
        panic!("save-as prompt expected")
    };
    assert_eq!(input, "untitled.py");
    let target = dir.path().join("prog.sh");
    for _ in 0..20 {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, target.to_str().unwrap());
    app.update(key(KeyCode::Enter));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "print(\"hello from the sandbox\")\n");
    assert_eq!(app.language, sandbench::spec::Language::Sh);
    type_text(&mut app, "x");
    app.update(ctrl('s'));
    assert!(std::fs::read_to_string(&target).unwrap().starts_with('x'));
    assert!(!app.editor.modified());
}

#[sandbench_testkit::test]
fn compare_view_toggles_and_only_runs_ready_tiers() {
    let mut app = App::new(Theme::light(), &["process", "docker"], "process", Limits::default());
    app.update(Msg::Probed(Availability {
        tier: "process".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![],
    }));
    app.take_effects();
    app.update(key(KeyCode::F(6)));
    let n = app.take_effects().len();
    assert_eq!(n, 1, "docker is still being probed: not started");
    assert_eq!(app.view, View::Compare);
    app.update(key(KeyCode::Esc));
    assert_eq!(app.view, View::Single);
    app.update(key(KeyCode::F(7)));
    assert_eq!(app.view, View::Compare);
}

#[sandbench_testkit::test]
fn small_and_tiny_terminals_do_not_panic() {
    let mut app = app();
    let id = start(&mut app);
    out(&mut app, id, b"some output\n");
    for (w, h) in [(80, 24), (40, 10), (20, 5), (1, 1), (200, 60)] {
        for overlay in [KeyCode::F(1), KeyCode::F(2), KeyCode::F(3)] {
            app.update(key(overlay));
            render(&mut app, w, h);
            app.update(key(KeyCode::Esc));
        }
        app.update(key(KeyCode::F(7)));
        render(&mut app, w, h);
        app.update(key(KeyCode::F(7)));
    }
}

#[sandbench_testkit::test]
fn output_search_finds_newest_first_then_steps() {
    let mut app = app();
    let id = start(&mut app);
    let text: String =
        (0..300).map(|i| if i % 100 == 7 { format!("needle {i}\n") } else { format!("hay {i}\n") }).collect();
    out(&mut app, id, text.as_bytes());
    render(&mut app, 80, 24);
    app.update(ctrl('w'));
    app.update(key(KeyCode::Char('/')));
    assert!(
        matches!(app.overlay, Some(Overlay::Prompt(Prompt { kind: PromptKind::Search, .. }))),
        "search prompt open"
    );
    type_text(&mut app, "NEEDLE");
    app.update(key(KeyCode::Enter));
    assert!(app.overlay.is_none());
    assert_eq!(app.output.search.as_deref(), Some("NEEDLE"));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("needle 207"), "newest match shown first:\n{s}");
    assert!(!app.output.scroll.follows());
    app.update(key(KeyCode::Char('N')));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("needle 107") && !s.contains("needle 207"), "{s}");
    app.update(key(KeyCode::Char('n')));
    assert!(screen(&mut app, 80, 24).contains("needle 207"));
    app.update(key(KeyCode::Char('n')));
    assert!(app.status.as_ref().unwrap().text.contains("no newer match"));
}

#[sandbench_testkit::test]
fn only_the_selected_ready_tier_is_warmed() {
    let mut app = App::new(Theme::dark(), &["process", "microvm"], "process", Limits::default());
    let probed = |tier: &str| {
        Msg::Probed(Availability { tier: tier.into(), available: true, summary: "ready".into(), checks: vec![] })
    };
    // A ready tier nobody selected holds no warm guest.
    app.update(probed("microvm"));
    assert!(app.take_effects().is_empty());
    app.update(probed("process"));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Prewarm(t)] if t == "process"));
    // Selecting microvm warms it; going back and forth asks no more.
    app.update(key(KeyCode::F(4)));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Prewarm(t)] if t == "microvm"));
    app.update(key(KeyCode::F(4)));
    app.update(key(KeyCode::F(4)));
    assert!(app.take_effects().is_empty());
}

/// The tier pane marks a tier that works through a fallback as doctor does
/// (⚠, never ✔), and names the interpreters programs get there (issue 46:
/// the pane said `microvm ✔ ready` where doctor said ⚠ under TCG).
#[sandbench_testkit::test]
fn the_tier_pane_says_what_doctor_says_and_names_the_interpreters() {
    use sandbench::tier::Check;
    let mut app = App::new(Theme::dark(), &["process", "microvm"], "microvm", Limits::default());
    app.live_clock = false;
    app.update(Msg::Probed(Availability {
        tier: "process".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![Check::ok("python", "/usr/bin/python3 3.11.2"), Check::ok("javascript", "/usr/bin/node v20.19.2")],
    }));
    app.update(Msg::Probed(Availability {
        tier: "microvm".into(),
        available: true,
        summary: "ready (tcg)".into(),
        checks: vec![
            Check::ok("python", "python3 3.11.2-1+b1 in the guest's root disk"),
            Check::warn("accel", "KVM guests hang here: software emulation", "give the host working KVM"),
        ],
    }));
    let s = screen(&mut app, 120, 36);
    assert!(s.contains("process  ✔ ready"), "{s}");
    assert!(s.contains("microvm  ⚠ ready"), "{s}");
    assert!(s.contains("runs: python3 3.11.2-1+b1"), "{s}");
    assert!(s.contains("⚠ accel: KVM guests hang"), "{s}");
}

/// A tier that was unavailable is not written off for the session: F5 on it
/// says why and asks for a new probe, and once a probe finds it ready (a
/// daemon started, a runtime registered since) the list and a message say
/// so and a run goes ahead.
#[sandbench_testkit::test]
fn an_unavailable_tier_is_probed_again_and_found_when_it_recovers() {
    let mut app = App::new(Theme::dark(), &["gvisor"], "gvisor", Limits::default());
    let down = |summary: &str| Availability {
        tier: "gvisor".into(),
        available: false,
        summary: summary.into(),
        checks: vec![],
    };
    app.update(Msg::Probed(down("unavailable: no Docker daemon answers")));
    assert!(app.take_effects().is_empty(), "an unavailable tier is not warmed");
    app.update(key(KeyCode::F(5)));
    let said = app.status.as_ref().unwrap().text.clone();
    assert!(said.contains("gvisor is unavailable") && said.contains("probing it again"), "{said}");
    assert!(matches!(app.take_effects().as_slice(), [Effect::Probe(t)] if t == "gvisor"));
    app.update(Msg::Probed(Availability {
        tier: "gvisor".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![],
    }));
    let said = app.status.as_ref().unwrap().text.clone();
    assert!(said.contains("gvisor is available now"), "{said}");
    assert!(matches!(app.take_effects().as_slice(), [Effect::Prewarm(t)] if t == "gvisor"));
    app.update(key(KeyCode::F(5)));
    assert!(matches!(app.take_effects().as_slice(), [Effect::Start { tier, .. }] if tier == "gvisor"));
}

/// A run that could not build its sandbox probes its tier again (once in a
/// while), so the tier list follows a tier that went away in use.
#[sandbench_testkit::test]
fn a_run_that_could_not_be_made_probes_its_tier_again_once_in_a_while() {
    let mut app = app();
    let failed = |app: &mut App| {
        let id = start(app);
        let r = sandbench::report::RunReport::failed("process", "python", "-", "cannot reach the helper");
        app.update(Msg::Finished(id, Box::new(r)));
        app.take_effects()
    };
    assert!(matches!(failed(&mut app).as_slice(), [Effect::Probe(t)] if t == "process"));
    assert!(failed(&mut app).is_empty(), "probed again at most once in a while");
}
