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
