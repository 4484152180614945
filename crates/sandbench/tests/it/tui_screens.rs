//! Screens that used to break (issue 26), with all ten tiers (sandbench's
//! five and five peers) at 80×24, 120×36 and 200×50: the compare view (live
//! and as histograms), the tier list, the gauntlet matrix and the frontier,
//! and the dialogs that hid a warning or kept a stale one. Each screen is
//! checked for what broke and kept as an insta snapshot.

use ratatui::crossterm::event::KeyCode;
use sandbench::event::{Violation, ViolationKind};
use sandbench::gauntlet::Findings;
use sandbench::gauntlet::{self, GauntletEvent, Latency, Matrix};
use sandbench::report::{Outcome, RunReport, Timings, Usage};
use sandbench::samples::Sample;
use sandbench::spec::Limits;
use sandbench::tier::{Availability, Check};
use sandbench::tui::app::{App, Effect, Msg, View};
use sandbench::tui::headless::{ctrl, key, screen};
use sandbench::tui::theme::Theme;

const TIERS: [&str; 10] =
    ["process", "docker", "gvisor", "microvm", "e2b", "bwrap", "firejail", "nsjail", "srt", "codex"];
const SIZES: [(u16, u16); 3] = [(80, 24), (120, 36), (200, 50)];

/// A p50 of each tier, in ms (the shape of what was measured here).
fn base_ms(tier: &str) -> f64 {
    match tier {
        "process" => 12.8,
        "docker" => 93.0,
        "gvisor" => 160.0,
        "microvm" => 2400.0,
        "e2b" => 810.0,
        "bwrap" => 120.0,
        "firejail" => 300.0,
        "nsjail" => 150.0,
        "srt" => 1040.0,
        _ => 450.0,
    }
}

fn app(samples: Option<&std::path::Path>) -> App {
    let mut app = App::new(Theme::dark(), &TIERS, "process", Limits::default());
    app.live_clock = false;
    if let Some(d) = samples {
        app.samples_dirs = vec![d.to_path_buf()];
    }
    for t in TIERS {
        app.update(Msg::Probed(Availability {
            tier: t.into(),
            available: true,
            summary: format!("ready ({t}, synthetic)"),
            checks: vec![Check::ok("all", "fine")],
        }));
    }
    app.take_effects();
    app
}

fn report(tier: &str, exit_ms: f64, start: &str) -> RunReport {
    RunReport {
        outcome: Outcome::Ok,
        error: None,
        timings_ms: Timings {
            setup: exit_ms * 0.8,
            first_output: Some(exit_ms * 0.9),
            run: exit_ms * 0.2,
            teardown: 2.0,
            total: exit_ms + 2.0,
        },
        usage: Usage { cpu_ms: Some((exit_ms / 3.0) as u64), peak_memory_bytes: Some(5 << 20), peak_pids: Some(1) },
        details: serde_json::json!({ "start": start }),
        ..RunReport::failed(tier, "python", "untitled.py", "")
    }
}

/// F6 with `rounds` rounds, every run fed a synthetic report.
fn compare(app: &mut App, rounds: usize) {
    app.compare_view.repeat = rounds;
    app.update(key(KeyCode::F(6)));
    let mut n = 0usize;
    loop {
        let started: Vec<(u64, String)> = app
            .take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Start { id, tier, .. } => Some((id, tier)),
                _ => None,
            })
            .collect();
        if started.is_empty() {
            break;
        }
        for (id, tier) in started {
            n += 1;
            // Spread within a tier: a few per cent, like a quiet machine.
            let ms = base_ms(&tier) * (1.0 + 0.037 * (n % 7) as f64);
            let start = if n > TIERS.len() && ["process", "docker", "gvisor"].contains(&tier.as_str()) {
                "warm"
            } else if tier == "microvm" {
                "snapshot"
            } else {
                "cold"
            };
            app.update(Msg::Finished(id, Box::new(report(&tier, ms, start))));
        }
    }
    assert_eq!(n, rounds * TIERS.len());
    app.status = None;
}

const HELLO: &str = "# name: hello\n# tries: print a greeting\n# must: run\n# expect: *=ok\nprint('hi')\n";
const HOSTILE: [(&str, &str); 5] = [
    ("fork-bomb", "pids|cpu_time|wall_timeout"),
    ("memory-bomb", "memory"),
    ("cpu-spin-multi", "cpu_time|wall_timeout"),
    ("disk-filler", "disk"),
    ("write-outside", ""),
];

fn samples_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("benign")).unwrap();
    std::fs::create_dir_all(d.path().join("hostile")).unwrap();
    std::fs::write(d.path().join("benign/hello.py"), HELLO).unwrap();
    for (name, kinds) in HOSTILE {
        let expect = if kinds.is_empty() { "*=ok".to_string() } else { format!("*=violation:{kinds}") };
        let text = format!("# name: {name}\n# tries: {name}\n# must: hold\n# expect: {expect}\nprint(1)\n");
        std::fs::write(d.path().join(format!("hostile/{}.py", name.replace('-', "_"))), text).unwrap();
    }
    d
}

fn sample(dir: &std::path::Path, name: &str) -> Sample {
    let (group, file) =
        if name == "hello" { ("benign", "hello".to_string()) } else { ("hostile", name.replace('-', "_")) };
    let p = dir.join(group).join(format!("{file}.py"));
    Sample::parse(&p, std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// A whole gauntlet on every tier, the peers letting bombs through, one cell
/// stopped by a cancel and one sandbench failed to judge.
fn gauntlet(app: &mut App, dir: &std::path::Path) {
    app.update(key(KeyCode::F(9)));
    app.update(key(KeyCode::Char('r')));
    // Every tier, not only sandbench's own (the default).
    app.update(key(KeyCode::Char('a')));
    app.update(key(KeyCode::Enter));
    let id = match app.take_effects().as_slice() {
        [Effect::Gauntlet { id, tiers, .. }] => {
            assert_eq!(tiers.len(), 10);
            *id
        }
        other => panic!("one gauntlet expected, got {other:?}"),
    };
    let mut latency = vec![];
    for name in std::iter::once("hello").chain(HOSTILE.iter().map(|(n, _)| *n)) {
        let s = sample(dir, name);
        for tier in TIERS {
            app.update(Msg::Gauntlet(id, GauntletEvent::CellStarted { sample: name.into(), tier: tier.into() }));
            let peer = ["bwrap", "srt", "codex"].contains(&tier);
            let mut r = report(tier, base_ms(tier), if tier == "process" { "warm" } else { "cold" });
            // As a real cell: the limits it ran under, the gauntlet's.
            r.limits = gauntlet::default_limits();
            let mut f = Findings::default();
            match name {
                "hello" => {}
                _ if tier == "srt" && name == "disk-filler" => {
                    r.outcome = Outcome::Error;
                    r.error = Some("srt exited (exit code 1) before it started the program".into());
                }
                _ if tier == "gvisor" && name == "cpu-spin-multi" => {
                    r.outcome = Outcome::Cancelled;
                    r.usage.cpu_ms = Some(4860);
                    let d = "CPU time limit 2s hit — killed".into();
                    r.violations = vec![Violation { kind: ViolationKind::CpuTime, at_ms: 2510.0, detail: d }];
                }
                "write-outside" => {}
                _ if peer => f.escapes = vec![format!("{name} got past {tier}: sandbench's outer cgroup stopped it")],
                _ => {
                    r.outcome = Outcome::Violation;
                    let kind = match name {
                        "fork-bomb" => ViolationKind::Pids,
                        "memory-bomb" => ViolationKind::Memory,
                        "disk-filler" => ViolationKind::Disk,
                        _ => ViolationKind::WallTimeout,
                    };
                    r.violations = vec![Violation { kind, at_ms: 900.0, detail: "limit hit".into() }];
                }
            }
            let c = gauntlet::judge(&s, tier, r, f);
            app.update(Msg::Gauntlet(id, GauntletEvent::CellDone(Box::new(c))));
        }
    }
    for tier in TIERS {
        let ms = base_ms(tier);
        let start = if tier == "process" { "warm" } else { "cold" };
        latency.push(Latency { tier: tier.into(), start: start.into(), runs: 1, p50_ms: ms, p95_ms: ms });
    }
    let m = Matrix {
        tiers: TIERS.map(String::from).to_vec(),
        skipped_tiers: vec![],
        samples: vec![],
        cells: vec![],
        latency,
        mismatches: 0,
        cancelled: false,
        scales: vec![],
    };
    app.update(Msg::Gauntlet(id, GauntletEvent::Finished(Box::new(m))));
    app.status = None;
}

/// The rows of the screen from the line holding `from` to the one holding `to`.
fn between<'a>(s: &'a str, from: &str, to: &str) -> Vec<&'a str> {
    s.lines().skip_while(|l| !l.contains(from)).take_while(|l| !l.contains(to)).collect()
}

#[sandbench_testkit::test]
fn the_compare_view_shows_every_tier_at_every_size() {
    let mut app = app(None);
    compare(&mut app, 1);
    for (w, h) in SIZES {
        let s = screen(&mut app, w, h);
        // The summary is whole: a row per tier (it used to lose a row at 80×24).
        let summary = between(&s, "summary ·", "└");
        for t in TIERS {
            assert_eq!(summary.iter().filter(|l| l.starts_with(&format!("│{t} "))).count(), 1, "{w}×{h}: {t}\n{s}");
        }
        // No column narrower than its figures (`│setup ││cpu  t││mem  9│` at 120×36).
        assert!(!s.contains("││cpu  "), "{w}×{h}: columns too narrow\n{s}");
        assert!(!s.lines().any(|l| l.matches("┐┌").count() > 6), "{w}×{h}: ten narrow columns\n{s}");
        insta::assert_snapshot!(format!("compare_ten_tiers_{w}x{h}"), s);
    }
}

#[sandbench_testkit::test]
fn the_compare_histograms_never_draw_an_empty_box_or_repeat_an_edge() {
    let mut app = app(None);
    compare(&mut app, 6);
    for (w, h) in SIZES {
        let s = screen(&mut app, w, h);
        assert!(app.compare_run.as_ref().unwrap().show_dist(false), "{w}×{h}");
        let upper: Vec<&str> = s.lines().take_while(|l| !l.contains("summary ·")).collect();
        // Every tier has bins, a line of bars, or is named among those left out.
        for t in TIERS {
            assert!(upper.iter().any(|l| l.contains(t)), "{w}×{h}: {t} has no histogram\n{s}");
        }
        // An empty box is a top border right above a bottom one.
        for pair in upper.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            for (i, c) in a.chars().enumerate() {
                if c == '┌' {
                    assert_ne!(b.chars().nth(i), Some('└'), "{w}×{h}: an empty histogram box\n{s}");
                }
            }
        }
        // Bin edges, panel by panel: never the same label twice (`14 ms [0]` / `14 ms [1]`).
        let edges: Vec<String> = upper
            .iter()
            .flat_map(|l| l.split('│'))
            .filter_map(|cell| cell.split_once(" [").map(|(e, _)| e.trim().to_string()))
            .collect();
        for pair in edges.windows(2) {
            assert_ne!(pair[0], pair[1], "{w}×{h}: a repeated bin edge\n{s}");
        }
        insta::assert_snapshot!(format!("compare_histograms_ten_tiers_{w}x{h}"), s);
    }
}

#[sandbench_testkit::test]
fn the_tier_list_keeps_the_selected_tier_in_view() {
    let mut app = app(None);
    for (w, h) in SIZES {
        for (i, tier) in TIERS.iter().enumerate() {
            app.tier = i;
            let s = screen(&mut app, w, h);
            let marked = format!("▶ {tier:<9}");
            assert!(s.contains(&marked), "{w}×{h}: {tier} selected, its ▶ is off screen\n{s}");
        }
        app.tier = TIERS.len() - 1;
        insta::assert_snapshot!(format!("tier_list_last_selected_{w}x{h}"), screen(&mut app, w, h));
    }
}

/// Cell texts as the matrix writes them, whole.
const WHOLE: [&str; 12] = [
    "✓ ran",
    "✓ contained (",
    "✓ blocked",
    "✓ pids",
    "✓ mem",
    "✓ disk",
    "✓ wall",
    "✗ ESCAPED",
    "✗ error",
    "■ cancelled",
    "✓ memory",
    "✓ cpu",
];

#[sandbench_testkit::test]
fn the_gauntlet_matrix_never_cuts_a_cell_and_its_frontier_names_every_tier() {
    let dir = samples_dir();
    let mut app = app(Some(dir.path()));
    gauntlet(&mut app, dir.path());
    assert_eq!(app.view, View::Gauntlet);
    for (w, h) in SIZES {
        let s = screen(&mut app, w, h);
        let matrix = between(&s, "program", "└");
        for row in matrix.iter().skip(1) {
            for cell in row.split("  ").map(str::trim).filter(|c| c.starts_with(['✓', '✗', '■', '–'])) {
                assert!(
                    WHOLE.iter().any(|w| cell.starts_with(w)) || cell == "– not run",
                    "{w}×{h}: a cut cell {cell:?}\n{s}"
                );
            }
        }
        // The cancelled cell says so (and is no error); the title counts it.
        assert!(s.contains("1 stopped without a verdict"), "{w}×{h}\n{s}");
        insta::assert_snapshot!(format!("gauntlet_ten_tiers_{w}x{h}"), s);
    }
    // Beside the details once wide enough: every tier a labelled point.
    let s = screen(&mut app, 200, 50);
    assert!(s.contains("y: hostile samples contained, this session's gauntlet: 60 of 60 cells"), "{s}");
    assert!(s.contains("x: p50 start→exit (log) of the gauntlet's benign controls"), "{s}");
    for (i, t) in TIERS.iter().enumerate() {
        let key = sandbench::tui::widgets::frontier::key(i);
        let named = s.lines().any(|l| l.contains(&format!("│{key} {t:<8}")));
        let more = s.lines().any(|l| l.contains("+") && l.contains("more:") && l.contains(t));
        assert!(named || more, "{t} is neither in the legend nor in its +N more\n{s}");
    }
    // The cancel (gvisor) and the error (srt) are left out and said.
    assert!(s.contains("gvisor   160 ms cold×1 gnt · 4/4 (1 out)"), "{s}");
    assert!(s.contains("srt      1.04 s cold×1 gnt · 1/4 (1 out)"), "{s}");
}

#[sandbench_testkit::test]
fn the_frontier_beside_a_compare_says_where_each_latency_comes_from() {
    let dir = samples_dir();
    let mut app = app(Some(dir.path()));
    gauntlet(&mut app, dir.path());
    app.update(key(KeyCode::Esc));
    compare(&mut app, 2);
    for (w, h) in [(120, 36), (200, 50)] {
        let s = screen(&mut app, w, h);
        assert!(s.contains("safety × latency"), "{w}×{h}\n{s}");
        assert!(s.contains("of the compare of"), "{w}×{h}\n{s}");
        assert!(s.contains("1 process  ") && s.contains("warm×1 cmp"), "{w}×{h}\n{s}");
        // Nine points at 120×36 do not all fit: the legend says how many it leaves out.
        let named = s.lines().filter(|l| l.contains(" cmp · ")).count();
        if named < TIERS.len() {
            assert!(s.contains(&format!("+{} more:", TIERS.len() - named)), "{w}×{h}\n{s}");
        }
        insta::assert_snapshot!(format!("frontier_beside_compare_{w}x{h}"), s);
    }
}

#[sandbench_testkit::test]
fn a_warning_is_never_hidden_under_a_dialog_nor_left_stale_under_another() {
    let dir = samples_dir();
    let mut app = app(Some(dir.path()));
    // An edit, then F2 and Enter: the picker asks about the edit, and it shows.
    app.update(key(KeyCode::Char('x')));
    app.update(key(KeyCode::F(2)));
    app.update(key(KeyCode::Enter));
    for (w, h) in SIZES {
        let s = screen(&mut app, w, h);
        let status = s.lines().nth(h as usize - 2).unwrap();
        assert!(status.contains("unsaved changes: Enter again replaces them"), "{w}×{h}: {status:?}\n{s}");
        assert!(s.contains("unsaved changes in the editor"), "{w}×{h}: the picker says it too\n{s}");
    }
    app.update(key(KeyCode::Esc));
    // ^Q warns; ^S's dialog then is about saving, not about quitting.
    app.update(ctrl('q'));
    assert!(app.status.as_ref().unwrap().text.contains("^Q again quits"));
    app.update(ctrl('s'));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("save as"), "{s}");
    assert!(!s.contains("^Q again quits"), "a stale warning under the save dialog:\n{s}");
    app.update(key(KeyCode::Esc));
    // Undo back to the text as it was: no [+].
    assert!(screen(&mut app, 80, 24).contains("[+]"));
    app.update(ctrl('z'));
    let s = screen(&mut app, 80, 24);
    assert!(!s.contains("[+]"), "undo back to the saved text still shows [+]:\n{s}");
}

#[sandbench_testkit::test]
fn while_a_gauntlet_runs_the_key_bar_says_f8_cancels_it() {
    let dir = samples_dir();
    let mut app = app(Some(dir.path()));
    app.update(key(KeyCode::F(9)));
    app.update(key(KeyCode::Char('r')));
    let s = screen(&mut app, 80, 24);
    assert!(s.contains("gauntlet: 5 tier(s) × 6 sample(s) = 30 runs"), "own tiers by default:\n{s}");
    app.update(key(KeyCode::Enter));
    assert!(app.busy());
    for (w, h) in SIZES {
        let bar = screen(&mut app, w, h).lines().last().unwrap().to_string();
        assert!(bar.contains("F8 cancel"), "{w}×{h}: {bar:?}");
    }
}
