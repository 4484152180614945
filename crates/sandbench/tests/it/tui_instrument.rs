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

#[test]
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

#[test]
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

#[test]
fn sparklines_scale_to_the_run_have_a_time_axis_or_say_there_is_too_little() {
    let mut app = ready_app();
    let id = started(&mut app);
    usage(&mut app, id, 5.0, 0, 4 << 20);
    let s = screen(&mut app, 120, 40);
    assert!(s.contains("too few to draw: 1") && s.contains("in 5 ms"), "{s}");
    // A 50 ms program sampled every 10 ms: a curve, its scale and its time axis.
    for i in 1..6u64 {
        usage(&mut app, id, 5.0 + 10.0 * i as f64, 8 * i, (4 + 2 * i) << 20);
    }
    let s = screen(&mut app, 120, 40);
    assert!(!s.contains("too few"), "{s}");
    assert!(s.contains("▕80%"), "the cpu scale is the largest value shown:\n{s}");
    assert!(s.contains("▕14M"), "the memory scale is the run's peak, not the 256M limit:\n{s}");
    assert!(s.contains("5 ms ─") && s.contains("55 ms · 6 samples"), "the time axis:\n{s}");
    // CPU above what the sandbox has is sampling jitter: capped at its CPUs.
    usage(&mut app, id, 60.0, 8 * 5 + 50, 14 << 20);
    assert_eq!(app.runs[&id].cpu_pct(), Some(100));
}
