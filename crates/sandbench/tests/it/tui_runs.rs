//! The runs view (F11) headless: runs made by separate `sandbench run`
//! processes, read from their log the way the workbench's follower reads it,
//! appear as rows; Enter opens one; filters narrow the table; `e` loads a
//! run's code into the editor on its tier.

use crate::support::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bin, OuterNet};
use ratatui::crossterm::event::KeyCode;
use sandbench::runlog::RunLog;
use sandbench::spec::{Language, Limits};
use sandbench::tier::{Availability, Check};
use sandbench::tui::app::{App, Msg, View};
use sandbench::tui::headless::{key, screen};
use sandbench::tui::theme::Theme;

#[sandbench_testkit::test(needs = ["process"])]
fn runs_of_another_process_show_up_open_and_load_into_the_editor() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ok = dir.path().join("greet.py");
    std::fs::write(&ok, "print('from another process')\n").unwrap();
    let spin = dir.path().join("spin.sh");
    std::fs::write(&spin, "while :; do :; done\n").unwrap();
    let net = OuterNet::new();
    for (file, extra) in [(&ok, vec![]), (&spin, vec!["--timeout", "300ms"])] {
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--tier", "process"]).args(extra).arg(file).env("SANDBENCH_STATE_DIR", &state);
        let out = net.output(cmd.stdin(Stdio::null()), Duration::from_secs(60));
        if !out.status.success() {
            assert!(!common::required("process"), "run failed: {}", String::from_utf8_lossy(&out.stderr));
            panic!(
                "cannot run although its needs hold: process tier unavailable: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    // What the workbench's log follower does: read the file from an offset.
    let (entries, offset) = RunLog::new(&state).read_from(0).unwrap();
    assert_eq!(entries.len(), 2);
    assert!(offset > 0);
    assert!(RunLog::new(&state).read_from(offset).unwrap().0.is_empty());

    let mut app = App::new(Theme::dark(), &["process", "docker"], "docker", Limits::default());
    app.live_clock = false;
    app.update(Msg::Probed(Availability {
        tier: "process".into(),
        available: true,
        summary: "ready".into(),
        checks: vec![Check::ok("all", "fine")],
    }));
    app.update(key(KeyCode::F(11)));
    assert_eq!(app.view, View::Runs);
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("no runs yet"), "{s}");

    app.update(Msg::LogEntries(entries));
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("runs · 2 of 2"), "{s}");
    let row = s.lines().find(|l| l.contains("print('from another process')")).unwrap_or_else(|| panic!("{s}"));
    assert!(row.contains(" run ") && row.contains("process") && row.contains("ok"), "{row}");
    let row = s.lines().find(|l| l.contains("while :; do :; done")).unwrap_or_else(|| panic!("{s}"));
    assert!(
        row.contains("violation") && row.contains("wall_timeout") && row.contains('▶'),
        "new runs are followed: {row}"
    );

    // At 80 columns an ok row's total ends where a violation row's does
    // (the outcome column holds the longest outcome name).
    let s = screen(&mut app, 80, 24);
    let chars = |needle: &str| -> Vec<char> {
        s.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{s}")).chars().collect()
    };
    let head = chars(" violations ");
    let end = head.windows(5).position(|w| w.iter().collect::<String>() == "total").unwrap() + 5;
    for row in [chars("print('"), chars("while :")] {
        let row_s: String = row.iter().collect();
        assert!(row[end - 1] != ' ' && row[end] == ' ', "the total ends under its heading:\n{s}\n{row_s}");
    }

    // Only violations, then Enter opens the selected one.
    app.update(key(KeyCode::Char('o')));
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("runs · 1 of 2 · outcome violation"), "{s}");
    app.update(key(KeyCode::Enter));
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("violation wall_timeout at"), "{s}");
    assert!(s.contains("spin.sh") && s.contains("code (20 bytes"), "{s}");
    app.update(key(KeyCode::Esc));
    app.update(key(KeyCode::Char('o'))); // incomplete
    app.update(key(KeyCode::Char('o'))); // error
    app.update(key(KeyCode::Char('o'))); // ok
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("runs · 1 of 2 · outcome ok"), "{s}");
    app.update(key(KeyCode::Enter));
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("stdout") && s.contains("  from another process"), "{s}");

    // e: the code goes to the editor, on the tier it ran on.
    app.update(key(KeyCode::Char('e')));
    assert_eq!(app.view, View::Single);
    assert_eq!(app.editor.text(), "print('from another process')\n");
    assert_eq!(app.language, Language::Python);
    assert_eq!(app.selected_tier().name, "process");
    assert_eq!(app.label, "greet.py");
}

#[sandbench_testkit::test]
fn a_sessions_calls_say_which_session_and_call_they_were() {
    let mut spec = sandbench::spec::RunSpec::new(Language::Python, "print(open('notes.txt').read())\n");
    spec.label = "mcp".into();
    let mut report = sandbench::report::RunReport {
        outcome: sandbench::report::Outcome::Ok,
        error: None,
        ..sandbench::report::RunReport::failed("docker", "python", "mcp", "")
    };
    report.session = Some(sandbench::session::SessionRef { id: "s-0a1b2c3d4e5f".into(), call: 2 });
    let entry = sandbench::runlog::Entry::new("mcp", Some("claude-code"), &spec, &report);
    assert_eq!(entry.session.as_deref(), Some("s-0a1b2c3d4e5f"));
    let mut app = App::new(Theme::dark(), &["process", "docker"], "docker", Limits::default());
    app.live_clock = false;
    app.update(key(KeyCode::F(11)));
    app.update(Msg::LogEntries(vec![entry]));
    let s = screen(&mut app, 140, 30);
    let row = s.lines().find(|l| l.contains("notes.txt")).unwrap_or_else(|| panic!("{s}"));
    assert!(row.contains("[s-0a1b2c #2]") && row.contains("docker"), "{row}");
    app.update(key(KeyCode::Enter));
    let s = screen(&mut app, 140, 30);
    assert!(s.contains("session s-0a1b2c3d4e5f · call 2"), "{s}");
}
