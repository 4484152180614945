//! A real gauntlet through the workbench: the real event loop and engine on
//! a `TestBackend`, two samples on the process tier, to the end; then a
//! second gauntlet cancelled while its first cell runs (the cell is stopped,
//! judged and cleaned up; no further cell starts). Skipped (with the reason)
//! when the process tier is unavailable, unless `SANDBENCH_REQUIRE_TIERS`
//! names `process`.

use crate::support::common;

use std::path::Path;
use std::time::Duration;

use ratatui::crossterm::event::KeyCode;
use sandbench::config::Config;
use sandbench::gauntlet::Verdict;
use sandbench::spec::Limits;
use sandbench::tui::app::{App, Msg, View};
use sandbench::tui::gauntlet_view::GState;
use sandbench::tui::headless::{key, screen};
use sandbench::tui::theme::Theme;

/// The fake secret the secret-env canary looks for.
const SECRET: &str = "sk-ant-tui-gauntlet-test-not-a-real-key";

fn copy(names: &[&str], dir: &Path) {
    for n in names {
        let dst = dir.join(n);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(common::samples_dir().join(n), dst).unwrap();
    }
}

async fn drive(config: &Config, app: &mut App, mut step: impl FnMut(&mut App) -> bool) {
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        sandbench::tui::event_loop::run_headless(config, app, 100, 34, |app: &mut App| step(app)),
    )
    .await;
    match r {
        Ok(r) => r.expect("the loop runs"),
        Err(_) => panic!("the gauntlet did not end within 120 s: containment or cleanup is broken"),
    }
}

#[sandbench_testkit::test(needs = ["process"])]
fn real_gauntlet_through_the_workbench() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The user's own key, as Config::load would have read it: the
        // workbench keeps it off the screen.
        let mut config = common::config();
        config.env.anthropic_api_key = Some(SECRET.into());
        let tier = sandbench::tier::by_name("process", &config).unwrap();
        let avail = tier.probe().await;
        if !avail.available {
            if common::required("process") {
                panic!("process tier required by SANDBENCH_REQUIRE_TIERS, but: {}", avail.summary);
            }
            panic!("cannot run although its needs hold: process tier unavailable: {}", avail.summary);
        }
        let dir = tempfile::tempdir().unwrap();
        copy(&["benign/hello.py", "hostile/secrets_env.py"], dir.path());
        let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
        app.live_clock = false;
        app.samples_dirs = vec![dir.path().to_path_buf()];
        app.update(Msg::Probed(avail));

        // 1. To the end.
        app.update(key(KeyCode::F(9)));
        assert_eq!(app.view, View::Gauntlet);
        app.update(key(KeyCode::Char('r')));
        app.update(key(KeyCode::Enter));
        let mut saw_running = false;
        drive(&config, &mut app, |app| {
            let g = app.gauntlet.as_ref().expect("a gauntlet started");
            saw_running |= g.running.is_some();
            !g.active()
        })
        .await;
        let g = app.gauntlet.as_ref().unwrap();
        assert!(saw_running, "the running cell was shown");
        assert_eq!(g.state, GState::Finished);
        assert_eq!(g.done(), 2);
        assert_eq!(g.live_mismatches(), 0);
        assert_eq!(g.mismatches, Some(0));
        let hello = g.cells[0][0].as_ref().unwrap();
        assert_eq!(hello.cell.verdict, Verdict::Ran);
        assert_eq!(hello.stdout.lines, ["hello from the sandbox"]);
        let secrets = g.cells[1][0].as_ref().unwrap();
        assert!(secrets.cell.as_expected, "{:?}", secrets.cell.mismatch);
        assert!(secrets.cell.findings.escapes.is_empty(), "{:?}", secrets.cell.findings.escapes);
        assert_eq!(secrets.stdout.lines, ["found: nothing"]);
        assert!(secrets.cell.findings.host_latency_ms_max.is_some(), "host responsiveness is measured");
        assert_eq!(g.latency.len(), 1, "the benign control gives the tier's latency");

        app.update(key(KeyCode::Down));
        app.status = None;
        let s = screen(&mut app, 100, 34);
        assert!(s.contains("finished · 2/2 cells · 0 mismatches"), "{s}");
        assert!(s.contains("✓ ran"), "{s}");
        assert!(s.contains("✓ contained (blocked)"), "{s}");
        assert!(s.contains("secret canary: planted"), "{s}");
        assert!(s.contains("found: nothing"), "{s}");
        assert!(s.contains("benign latency process"), "{s}");
        assert!(!s.contains(SECRET), "{s}");

        // 2. Cancelled while its first cell runs: the next cell never starts.
        let dir2 = tempfile::tempdir().unwrap();
        copy(&["hostile/sleep_forever.py", "hostile/stdin_forever.py"], dir2.path());
        app.samples_dirs = vec![dir2.path().to_path_buf()];
        app.update(key(KeyCode::Char('r')));
        app.update(key(KeyCode::Enter));
        let mut cancelled = false;
        drive(&config, &mut app, |app| {
            let g = app.gauntlet.as_ref().unwrap();
            if !cancelled && g.running.is_some() {
                cancelled = true;
                // Let the program start, then cancel as a user would.
                std::thread::sleep(Duration::from_millis(500));
                app.update(key(KeyCode::F(8)));
            }
            !app.gauntlet.as_ref().unwrap().active()
        })
        .await;
        let g = app.gauntlet.as_ref().unwrap();
        assert!(cancelled);
        assert_eq!(g.state, GState::Cancelled);
        assert_eq!(g.rows[0].name, "sleep-forever");
        let sleep = g.cells[0][0].as_ref().expect("the cancelled cell is judged");
        assert_eq!(sleep.cell.verdict, Verdict::Cancelled);
        assert_eq!(sleep.cell.report.outcome, sandbench::report::Outcome::Cancelled);
        // The canaries looked after the cancel: nothing of the run was left.
        assert!(sleep.cell.findings.escapes.is_empty(), "{:?}", sleep.cell.findings.escapes);
        assert!(g.cells[1][0].is_none(), "no cell starts after a cancel");
        assert!(!app.busy());
        app.status = None;
        let s = screen(&mut app, 100, 34);
        assert!(s.contains("CANCELLED · 1 of 2 cells ran"), "{s}");
        assert!(s.contains("– not run"), "{s}");
    });
}
