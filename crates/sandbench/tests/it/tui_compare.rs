//! The workbench's compare driven headless: F6 starts one run at a time in
//! interleaved rounds (the engine's schedule), the summary is the engine's,
//! and m/j/v export it to files whose numbers equal the summary's.

use ratatui::crossterm::event::KeyCode;
use sandbench::compare::Mode;
use sandbench::report::{Outcome, RunReport, Timings, Usage};
use sandbench::spec::Limits;
use sandbench::tier::{Availability, Check};
use sandbench::tui::app::{App, Effect, Msg, View};
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

fn app(dir: &std::path::Path) -> App {
    let mut app = App::new(Theme::dark(), &["process", "docker"], "process", Limits::default());
    app.live_clock = false;
    app.export_dir = dir.to_path_buf();
    app.update(ready("process"));
    app.update(ready("docker"));
    app
}

fn started(app: &mut App) -> Vec<(u64, String)> {
    app.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Start { id, tier, .. } => Some((id, tier)),
            _ => None,
        })
        .collect()
}

/// A finished run: `exit_ms` to the program's exit, warm or cold.
fn done(tier: &str, exit_ms: f64, start: &str) -> RunReport {
    RunReport {
        outcome: Outcome::Ok,
        error: None,
        timings_ms: Timings {
            setup: exit_ms / 2.0,
            first_output: Some(exit_ms / 2.0 + 1.0),
            run: exit_ms / 2.0,
            teardown: 2.0,
            total: exit_ms + 2.0,
        },
        usage: Usage { cpu_ms: None, peak_memory_bytes: Some(8 << 20), peak_pids: None },
        details: serde_json::json!({ "start": start }),
        ..RunReport::failed(tier, "python", "untitled.py", "")
    }
}

#[sandbench_testkit::test]
fn compare_runs_tiers_one_at_a_time_in_rounds_and_exports_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(dir.path());
    app.update(key(KeyCode::F(6)));
    // One round by default; + adds one for the next compare, r starts it.
    let first = started(&mut app);
    assert_eq!(first.len(), 1);
    app.update(Msg::Finished(first[0].0, Box::new(done(&first[0].1, 40.0, "cold"))));
    let second = started(&mut app);
    app.update(Msg::Finished(second[0].0, Box::new(done(&second[0].1, 300.0, "cold"))));
    assert!(started(&mut app).is_empty(), "one round, two tiers: done");
    app.update(key(KeyCode::Char('+')));
    app.update(key(KeyCode::Char('r')));
    let mut order = vec![];
    let times = [("process", [20.0, 22.0]), ("docker", [200.0, 260.0])];
    let mut seen = std::collections::HashMap::<String, usize>::new();
    loop {
        let s = started(&mut app);
        if s.is_empty() {
            break;
        }
        assert_eq!(s.len(), 1, "sequential: one run at a time");
        let (id, tier) = s[0].clone();
        assert!(app.busy());
        order.push(tier.clone());
        let n = seen.entry(tier.clone()).or_default();
        let t = times.iter().find(|(x, _)| *x == tier).unwrap().1[*n];
        *n += 1;
        app.update(Msg::Finished(id, Box::new(done(&tier, t, if *n == 1 { "cold" } else { "warm" }))));
    }
    // Interleaved round by round, each round starting one tier later.
    assert_eq!(order, ["process", "docker", "docker", "process"]);
    assert_eq!(app.view, View::Compare);
    let s = app.compare_run.as_ref().unwrap().summary();
    assert_eq!(s.mode, Mode::Sequential);
    let docker = s.tiers.iter().find(|t| t.tier == "docker").unwrap();
    assert_eq!(docker.exit_ms.as_ref().unwrap().p50, 260.0);
    assert_eq!(docker.ratio_to_fastest, Some(260.0 / 22.0));
    assert_eq!(docker.starts.get("warm"), Some(&1));

    let screen = screen(&mut app, 160, 30);
    assert!(screen.contains("summary · 4/4 runs · one tier at a time"), "{screen}");
    assert!(screen.contains("11.82×"), "{screen}");

    for (k, ext) in [('m', "md"), ('j', "json"), ('v', "csv")] {
        app.update(key(KeyCode::Char(k)));
        let path = dir.path().join(format!("sandbench-compare.{ext}"));
        let status = app.status.as_ref().unwrap().text.clone();
        assert_eq!(status, format!("exported {}", path.display()));
        let text = std::fs::read_to_string(&path).unwrap();
        // The files carry the figures: with their unit in markdown, raw in JSON and CSV.
        let want = if ext == "md" { "260 ms" } else { "260.0" };
        assert!(text.contains(want), "{ext}: {text}");
    }
    let back: sandbench::compare::Summary =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sandbench-compare.json")).unwrap()).unwrap();
    assert_eq!(back, s);
    let csv = std::fs::read_to_string(dir.path().join("sandbench-compare.csv")).unwrap();
    assert!(csv.lines().any(|l| l.starts_with("docker,sequential,2,") && l.contains(",1,1,0,11.818,")), "{csv}");
}

#[sandbench_testkit::test]
fn concurrent_rounds_are_labelled_and_a_cancel_stops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(dir.path());
    app.compare_view.repeat = 3;
    app.update(key(KeyCode::F(6)));
    app.update(key(KeyCode::Esc));
    app.update(key(KeyCode::F(7)));
    app.update(key(KeyCode::Char('c')));
    assert_eq!(app.compare_view.mode, Mode::Concurrent);
    // The sequential compare in progress: F8 cancels it, nothing else starts.
    let s = started(&mut app);
    assert_eq!(s.len(), 1);
    app.update(key(KeyCode::F(8)));
    assert!(app.take_effects().iter().any(|e| matches!(e, Effect::Cancel(id) if *id == s[0].0)));
    let mut r = done(&s[0].1, 10.0, "cold");
    r.outcome = Outcome::Cancelled;
    app.update(Msg::Finished(s[0].0, Box::new(r)));
    assert!(started(&mut app).is_empty(), "cancelled: the queue is dropped");
    assert!(app.status.as_ref().unwrap().text.contains("cancelled after 1/6"));

    app.update(key(KeyCode::Char('r')));
    let round = started(&mut app);
    assert_eq!(round.len(), 2, "concurrent: a whole round at once");
    let sc = screen(&mut app, 160, 30);
    assert!(sc.contains("CONCURRENT"), "{sc}");
    for (id, tier) in round {
        app.update(Msg::Finished(id, Box::new(done(&tier, 50.0, "cold"))));
    }
    assert_eq!(started(&mut app).len(), 2, "the next round starts when the whole round is done");
}

#[sandbench_testkit::test]
fn repeated_compare_shows_a_histogram_per_tier_and_d_toggles_the_columns() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(dir.path());
    app.update(key(KeyCode::F(6)));
    for (id, tier) in started(&mut app) {
        app.update(Msg::Finished(id, Box::new(done(&tier, 30.0, "cold"))));
    }
    for (id, tier) in started(&mut app) {
        app.update(Msg::Finished(id, Box::new(done(&tier, 30.0, "cold"))));
    }
    // One round: nothing to draw a distribution of; the columns stay.
    assert!(!screen(&mut app, 120, 40).contains("■"));
    for _ in 0..4 {
        app.update(key(KeyCode::Char('+')));
    }
    app.update(key(KeyCode::Char('r')));
    let mut n = 0;
    loop {
        let s = started(&mut app);
        if s.is_empty() {
            break;
        }
        for (id, tier) in s {
            n += 1;
            let ms = if tier == "process" { [20.0, 21.0, 22.0, 24.0, 60.0][n % 5] } else { 200.0 + n as f64 };
            app.update(Msg::Finished(id, Box::new(done(&tier, ms, "warm"))));
        }
    }
    assert_eq!(n, 10);
    app.status = None;
    let s = screen(&mut app, 120, 40);
    assert!(s.contains("process · 5 runs · p50"), "{s}");
    assert!(s.contains("docker · 5 runs · p50"), "{s}");
    assert!(s.contains("■"), "bars are drawn:\n{s}");
    assert!(s.contains(" 20.0 ms ["), "bins start at the fastest run:\n{s}");
    // d: back to the live columns, and again to the histograms.
    app.update(key(KeyCode::Char('d')));
    let cols = screen(&mut app, 120, 40);
    assert!(!cols.contains("■") && cols.contains("docker · ok"), "{cols}");
    app.update(key(KeyCode::Char('d')));
    assert!(screen(&mut app, 120, 40).contains("■"));
}
