//! The built binary with the e2b tier: the missing-key message, a run against
//! the local fake E2B through the SDKs' environment variables, and the
//! sandbox being killed when sandbench is told to exit (SIGTERM) mid-run.

use crate::support::fake_e2b;

use std::process::Stdio;
use std::time::Duration;

use fake_e2b::FakeE2b;

const KEY: &str = "e2b_feedfacecafebeef";
const BIN: &str = env!("CARGO_BIN_EXE_sandbench");

fn program(dir: &tempfile::TempDir, name: &str, code: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, code).unwrap();
    p
}

/// sandbench with a clean environment: no real E2B or Anthropic settings
/// leak in from the developer's shell, config and logs go to a temp dir.
pub(crate) fn sandbench(dir: &tempfile::TempDir) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(BIN);
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("SANDBENCH_CONFIG", dir.path().join("config.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

#[sandbench_testkit::test]
async fn run_without_a_key_exits_non_zero_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "a.py", "print(1)\n");
    let out = sandbench(&dir).args(["run", "--tier", "e2b"]).arg(&p).output().await.unwrap();
    assert_ne!(out.status.code(), Some(0));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.contains("E2B_API_KEY"), "{all}");
}

#[sandbench_testkit::test]
async fn doctor_without_a_key_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandbench(&dir).args(["doctor", "--format", "json"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e2b = v.as_array().unwrap().iter().find(|a| a["tier"] == "e2b").expect("e2b in doctor");
    assert_eq!(e2b["available"], false);
    assert!(e2b["summary"].as_str().unwrap().contains("E2B_API_KEY"));
}

#[sandbench_testkit::test]
async fn run_through_the_sdk_variables_against_the_fake() {
    let fake = FakeE2b::start(KEY).await;
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "a.py", "print('from e2b')\n");
    let out = sandbench(&dir)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", fake.url())
        .env("E2B_SANDBOX_URL", fake.url())
        .args(["run", "--tier", "e2b", "--format", "json"])
        .arg(&p)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["tier"], "e2b");
    assert_eq!(r["outcome"], "ok");
    assert_eq!(r["stdout"], "from e2b\n");
    assert!(r["details"]["limits"]["memory"].as_str().unwrap().starts_with("not enforced"));
    assert_eq!(fake.created().len(), 1);
    assert_eq!(fake.live_count(), 0, "sandbox left running");
}

#[sandbench_testkit::test]
async fn sigterm_mid_run_still_kills_the_sandbox() {
    let fake = FakeE2b::start(KEY).await;
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "a.py", "import time\nprint('up', flush=True)\ntime.sleep(60)\n");
    let mut child = sandbench(&dir)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", fake.url())
        .env("E2B_SANDBOX_URL", fake.url())
        .args(["run", "--tier", "e2b", "--timeout", "50s"])
        .arg(&p)
        .spawn()
        .unwrap();
    // Wait until the program runs in the fake sandbox.
    let up = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if fake.live_count() == 1 && !fake.state.lock().unwrap().running.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(up.is_ok(), "the sandbox never started");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id().unwrap() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("sandbench did not exit").unwrap();
    // It dies of the signal it got, after the cleanup.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status:?}");
    assert_eq!(fake.live_count(), 0, "SIGTERM left the sandbox running");
    assert_eq!(fake.killed().len(), 1);
    assert!(fake.wait_programs_gone(Duration::from_secs(5)).await);
}

#[sandbench_testkit::test]
async fn a_sandbox_whose_kill_failed_is_killed_when_sandbench_exits() {
    let fake = FakeE2b::start(KEY).await;
    // The run's own kill makes 4 attempts; all fail. The exit hook's works.
    fake.knobs(fake_e2b::Knobs { kill_failures: 4, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let p = program(&dir, "a.sh", "echo hi\n");
    let out = sandbench(&dir)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", fake.url())
        .env("E2B_SANDBOX_URL", fake.url())
        .args(["run", "--tier", "e2b", "--format", "json"])
        .arg(&p)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["details"]["sandbox_killed"], false);
    assert_eq!(fake.live_count(), 0, "the exit hook did not kill the sandbox");
    assert_eq!(fake.killed().len(), 1);
}

#[sandbench_testkit::test]
async fn kill_live_kills_what_a_run_could_not() {
    use sandbench::event::{EventKind, RunEvent};
    use sandbench::runner::Update;
    // shutdown kills every live sandbox of this process: no other test's.
    let _alone = fake_e2b::exclusive().await;
    let fake = FakeE2b::start_alone(KEY).await;
    fake.knobs(fake_e2b::Knobs { kill_failures: 4, ..Default::default() });
    let tier: std::sync::Arc<dyn sandbench::tier::Tier> =
        std::sync::Arc::new(sandbench::internals::e2b::E2bTier::with_settings(fake.settings(KEY)));
    let mut h =
        sandbench::runner::start(tier, sandbench::spec::RunSpec::new(sandbench::spec::Language::Sh, "echo hi\n"));
    let mut warned = false;
    let mut report = None;
    while let Some(u) = h.events.recv().await {
        match u {
            Update::Event(RunEvent { kind: EventKind::Note(n), .. }) if n.contains("could not kill") => warned = true,
            Update::Finished(r) => report = Some(r),
            Update::Event(_) => {}
        }
    }
    let r = report.unwrap();
    assert!(warned);
    assert_eq!(r.details["sandbox_killed"], false);
    let id = fake.created()[0].clone();
    assert_eq!(fake.live_count(), 1);
    assert!(sandbench::internals::e2b::live_sandboxes().contains(&id));
    sandbench::tier::shutdown().await;
    assert_eq!(fake.live_count(), 0);
    assert!(sandbench::internals::e2b::live_sandboxes().is_empty());
}

#[sandbench_testkit::test]
async fn orphans_of_dead_sandbench_processes_on_this_host_are_reaped_and_nothing_else() {
    let fake = FakeE2b::start(KEY).await;
    // Owners stand in for other sandbench processes: one dropped (dead), one
    // held (alive, as a sandbench in another pid namespace would be).
    let dir = sandbench::owner::dir();
    let dead = sandbench::owner::Owner::acquire_in(&dir).unwrap();
    let dead_token = dead.token().to_string();
    drop(dead);
    let live = sandbench::owner::Owner::acquire_in(&dir).unwrap();
    let m = sandbench::owner::machine().unwrap();
    let other_host =
        format!("{}-{}-1-00000000", if m.host == "ffffffffffff" { "eeeeeeeeeeee" } else { "ffffffffffff" }, m.boot);
    let md =
        |by: &str, owner: &str| serde_json::json!({"created_by": by, "sandbench_owner": owner, "sandbench_pid": "1"});
    fake.insert_foreign("orphan", md("sandbench", &dead_token));
    fake.insert_foreign("ours-alive", md("sandbench", sandbench::owner::token().unwrap()));
    fake.insert_foreign("live-elsewhere", md("sandbench", live.token()));
    fake.insert_foreign("other-host", md("sandbench", &other_host));
    fake.insert_foreign("not-sandbench", md("someone", &dead_token));
    let api = sandbench::internals::e2b::Api::new(&fake.settings(KEY), KEY).unwrap();
    let n = sandbench::internals::e2b::reap_orphans(&api).await;
    assert_eq!(n, 1);
    assert_eq!(fake.killed(), ["orphan"]);
    assert_eq!(fake.live_ids(), ["live-elsewhere", "not-sandbench", "other-host", "ours-alive"]);
    let _ = std::fs::remove_file(dir.join(format!("{dead_token}.lock")));
    let _ = std::fs::remove_file(live.lock_path());
}

#[sandbench_testkit::test(needs = ["process"])]
async fn bench_runs_against_the_fake_and_leaves_nothing() {
    let fake = FakeE2b::start(KEY).await;
    let dir = tempfile::tempdir().unwrap();
    let out = sandbench(&dir)
        .env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", fake.url())
        .env("E2B_SANDBOX_URL", fake.url())
        .args(["bench", "--tier", "e2b", "--runs", "2", "--format", "json"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("process") && out.status.code() != Some(0) {
        // The baseline is the local process tier; without it there is no bench.
        panic!("cannot run although its needs hold: {stderr}");
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["contenders"][0]["name"], "sandbench e2b");
    assert_eq!(v["contenders"][0]["runs"], 2);
    // One warm-up, then two rounds of print(1) and the stdlib control:
    // each run its own sandbox, all killed.
    assert_eq!(fake.created().len(), 1 + 2 * 2, "{:?}", fake.created());
    assert_eq!(fake.live_count(), 0);
}
