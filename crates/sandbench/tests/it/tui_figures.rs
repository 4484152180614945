//! The workbench's figures are honest (issue 26): peak memory never reads
//! below what its own scale shows, unknown figures are `—` and not 0.

use ratatui::crossterm::event::KeyCode;
use sandbench::event::{EventKind, Phase, RunEvent, UsageSample};
use sandbench::report::{Outcome, Usage};
use sandbench::spec::Limits;
use sandbench::tier::Availability;
use sandbench::tui::app::{App, Effect, Msg};
use sandbench::tui::headless::{key, report, screen};
use sandbench::tui::theme::Theme;

fn app(tier: &str) -> App {
    let mut app = App::new(Theme::dark(), &[tier], tier, Limits::default());
    app.live_clock = false;
    app.update(Msg::Probed(Availability {
        tier: tier.into(),
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
        [Effect::Start { id, .. }] => *id,
        other => panic!("expected one start, got {other:?}"),
    }
}

fn ev(app: &mut App, id: u64, at_ms: f64, kind: EventKind) {
    app.update(Msg::Run(id, RunEvent { at_ms, kind }));
}

/// The resources pane's lines (the right-hand column of the screen).
fn resources(s: &str) -> String {
    let start = s.lines().position(|l| l.contains("resources")).unwrap_or(0);
    s.lines().skip(start).map(|l| l.chars().skip(82).collect::<String>()).collect::<Vec<_>>().join("\n")
}

#[sandbench_testkit::test]
fn the_memory_scale_is_never_below_the_peak_in_its_label() {
    let mut app = app("docker");
    let id = started(&mut app);
    ev(&mut app, id, 0.0, EventKind::Phase(Phase::Running));
    // The samples saw at most 2.5M; the cgroup's high-water mark was 10M
    // (the spike fell between two samples).
    for (i, mb) in [1u64, 2, 2].iter().enumerate() {
        let mem = (mb << 20) + (512 << 10) * u64::from(i == 2);
        let u = UsageSample { cpu_ms: Some(10 * i as u64), memory_bytes: Some(mem), pids: Some(1) };
        ev(&mut app, id, 10.0 + 10.0 * i as f64, EventKind::Usage(u));
    }
    let mut r = report("docker", Outcome::Ok);
    r.usage = Usage { cpu_ms: Some(30), peak_memory_bytes: Some(10 << 20), peak_pids: Some(1) };
    app.update(Msg::Finished(id, Box::new(r)));
    let s = resources(&screen(&mut app, 120, 36));
    assert!(s.contains("peak 10.0M"), "{s}");
    assert!(s.contains("▕10.0M") && !s.contains("▕2.50M"), "the scale's top is the peak shown:\n{s}");
    assert!(s.contains("mem  10.0M/256M"), "{s}");
}

#[sandbench_testkit::test]
fn a_guest_still_booting_has_no_memory_figure_yet_not_zero() {
    let mut app = app("microvm");
    let id = started(&mut app);
    ev(&mut app, id, 0.0, EventKind::Phase(Phase::Booting));
    let s = resources(&screen(&mut app, 120, 36));
    assert!(s.contains("mem  —/256M"), "{s}");
    assert!(s.contains("pids —/64"), "{s}");
    assert!(!s.contains("0B"), "an unknown figure reads as a measurement of zero:\n{s}");
}
