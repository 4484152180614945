//! An agent session through the workbench: the real event loop and engine on
//! a `TestBackend`, against a local fake that speaks the Messages API's
//! shapes (loopback only), the model's code run for real on the process
//! tier. Skipped (with the reason) when the process tier is unavailable,
//! unless `SANDBENCH_REQUIRE_TIERS` names `process`.

use crate::support::common;
use crate::support::fake_anthropic;

use std::time::Duration;

use fake_anthropic::{final_text, step, tool_use, FakeAnthropic};
use ratatui::crossterm::event::KeyCode;
use sandbench::agent::EndReason;
use sandbench::config::Config;
use sandbench::spec::Limits;
use sandbench::tui::app::{App, Msg, View};
use sandbench::tui::headless::{key, screen, type_text};
use sandbench::tui::theme::Theme;

const KEY: &str = "sk-ant-tui-agent-test-key-0123456789";

#[sandbench_testkit::test(needs = ["process"])]
fn agent_session_through_the_workbench() {
    // One thread until the environment is set.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let fake = FakeAnthropic::start(vec![
            step(|_| tool_use("toolu_01", "python", "import os\nprint(6 * 7, os.environ.get('ANTHROPIC_API_KEY'))")),
            step(|_| final_text("The answer is 42.")),
        ])
        .await;
        // The engine takes key and base URL from the config, which reads
        // them from the environment in Config::load.
        let env = sandbench::config::RemoteEnv {
            anthropic_api_key: Some(KEY.into()),
            anthropic_base_url: Some(fake.url()),
            ..Default::default()
        };
        let config = Config { env, ..common::config() };
        let tier = sandbench::tier::by_name("process", &config).unwrap();
        let avail = tier.probe().await;
        if !avail.available {
            if common::required("process") {
                panic!("process tier required by SANDBENCH_REQUIRE_TIERS, but: {}", avail.summary);
            }
            panic!("cannot run although its needs hold: process tier unavailable: {}", avail.summary);
        }
        let mut app = App::new(Theme::dark(), &["process"], "process", Limits::default());
        app.live_clock = false;
        app.api_key_set = config.env.anthropic_api_key.is_some();
        app.update(Msg::Probed(avail));
        app.update(key(KeyCode::F(10)));
        assert_eq!(app.view, View::Agent);
        type_text(&mut app, "What is 6 times 7? Compute it.");
        app.update(key(KeyCode::Enter));
        assert!(app.agent.running);

        let run =
            sandbench::tui::event_loop::run_headless(&config, &mut app, 100, 30, |app: &mut App| !app.agent.running);
        tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the session did not end within 120 s")
            .expect("the loop runs");

        assert_eq!(app.agent.end, Some(EndReason::FinalAnswer));
        assert_eq!(app.agent.turns, 2);
        app.status = None;
        let s = screen(&mut app, 100, 30);
        assert!(s.contains("[turn 1] run_code · python · toolu_01"), "{s}");
        assert!(s.contains("│ print(6 * 7, os.environ.get('ANTHROPIC_API_KEY'))"), "{s}");
        // The program ran for real, and the key never reached its sandbox.
        assert!(s.contains("  42 None"), "{s}");
        assert!(s.contains("── verdict: ok · exit code 0"), "{s}");
        assert!(s.contains("The answer is 42."), "{s}");
        assert!(s.contains("── final answer after 2 turn(s) ──"), "{s}");
        assert!(!s.contains(KEY), "{s}");
        // The task's runs shared one session, named in the transcript.
        let id = app.agent.session.clone().expect("the task had a session");
        assert!(s.contains(&format!("sandbox: session {id} on process")), "{s}");
        let reqs = fake.requests.lock().unwrap().clone();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].header("x-api-key"), Some(KEY));
    });
}
