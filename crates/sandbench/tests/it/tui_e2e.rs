//! End to end: the built binary in a real terminal (tmux), a sample loaded
//! from the picker, run on the process tier, output and outcome read off the
//! screen, then quit. Skipped (with the reason) when tmux or the process tier
//! is missing, unless `SANDBENCH_REQUIRE_TIERS` names `process`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn required() -> bool {
    std::env::var("SANDBENCH_REQUIRE_TIERS").is_ok_and(|v| v.split(',').any(|t| t.trim() == "process"))
}

fn skip(why: &str) {
    if required() {
        panic!("process tier required by SANDBENCH_REQUIRE_TIERS, but: {why}");
    }
    panic!("cannot run although its needs hold: {why}");
}

/// A tmux server on its own socket, killed on drop whatever happens.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "e2e"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "e2e"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    fn wait_for(&self, what: &str, timeout: Duration) -> String {
        self.wait_for_any(&[what], timeout)
    }

    fn wait_for_any(&self, any: &[&str], timeout: Duration) -> String {
        let what = any.join("' or '");
        let start = Instant::now();
        loop {
            let s = self.screen();
            if any.iter().any(|w| s.contains(w)) {
                return s;
            }
            if start.elapsed() > timeout {
                panic!("'{what}' did not appear within {timeout:?}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn alive(&self) -> bool {
        self.cmd(&["has-session", "-t", "e2e"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn process_tier_available() -> Result<(), String> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let t = sandbench::tier::by_name("process", &crate::support::common::config()).map_err(|e| e.to_string())?;
        let a = t.probe().await;
        if a.available {
            Ok(())
        } else {
            Err(format!("process tier unavailable: {}", a.summary))
        }
    })
}

fn write_sample(dir: &Path) {
    std::fs::create_dir_all(dir.join("benign")).unwrap();
    std::fs::create_dir_all(dir.join("hostile")).unwrap();
    // The marker is computed, so it appears on screen only if the program ran.
    std::fs::write(
        dir.join("benign/e2e-hello.py"),
        "# name: e2e-hello\n# tries: print a computed marker\n# must: finish ok\n# expect: *=ok\nprint('e2e-marker-' + str(6 * 7))\n",
    )
    .unwrap();
}

#[sandbench_testkit::test(needs = ["process", "cmd:tmux"])]
fn workbench_runs_a_sample_on_the_process_tier_in_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        return skip("tmux is not installed (apt-get install tmux)");
    }
    if let Err(why) = process_tier_available() {
        return skip(&why);
    }
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("samples");
    write_sample(&samples);
    let bin = env!("CARGO_BIN_EXE_sandbench");
    let cmd = format!(
        "env SANDBENCH_SAMPLES={} SANDBENCH_CONFIG={} XDG_STATE_HOME={} {bin}",
        samples.display(),
        dir.path().join("no-config.toml").display(),
        dir.path().join("state").display(),
    );
    let tmux = Tmux { socket: format!("sandbench-e2e-{}", std::process::id()) };
    let out = tmux.cmd(&["-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-x", "100", "-y", "30", &cmd]);
    assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));

    // The process tier's own line: another tier (a peer, the microVM) can
    // be ready first, and F5 on a tier still being probed is refused.
    tmux.wait_for_any(&["process  ✔ ready", "process  ⚠ ready"], Duration::from_secs(30));
    tmux.keys(&["F2"]);
    tmux.wait_for("print a computed marker", Duration::from_secs(10));
    tmux.keys(&["Enter"]);
    tmux.wait_for("loaded sample e2e-hello", Duration::from_secs(10));
    tmux.keys(&["F5"]);
    tmux.wait_for("══ ok", Duration::from_secs(60));
    // A capture can fall between the bytes of one frame (the output pane
    // drawn, the resources pane not yet): wait for the pane's outcome too.
    // (the pane's width may cut the line after "exit")
    let s = tmux.wait_for("✔ ok · exit", Duration::from_secs(10));
    assert!(s.contains("e2e-marker-42"), "the program's output is on screen:\n{s}");
    assert!(s.contains("── exit code 0"), "{s}");

    tmux.keys(&["C-q"]);
    let start = Instant::now();
    while tmux.alive() {
        assert!(start.elapsed() < Duration::from_secs(15), "sandbench did not quit on ^Q:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[sandbench_testkit::test(needs = ["process", "cmd:tmux"])]
fn the_runs_view_follows_a_run_made_by_a_separate_process_in_tmux() {
    if Command::new("tmux").arg("-V").output().is_err() {
        return skip("tmux is not installed (apt-get install tmux)");
    }
    if let Err(why) = process_tier_available() {
        return skip(&why);
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("no-config.toml");
    let bin = env!("CARGO_BIN_EXE_sandbench");
    let cmd = format!("env SANDBENCH_CONFIG={} SANDBENCH_STATE_DIR={} {bin}", config.display(), state.display());
    let tmux = Tmux { socket: format!("sandbench-e2e-runs-{}", std::process::id()) };
    let out = tmux.cmd(&["-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-x", "120", "-y", "30", &cmd]);
    assert!(out.status.success(), "tmux new-session: {}", String::from_utf8_lossy(&out.stderr));
    tmux.wait_for_any(&["✔ ready", "⚠ ready"], Duration::from_secs(30));
    tmux.keys(&["F11"]);
    tmux.wait_for("no runs yet", Duration::from_secs(10));

    // Another process runs a program; its marker is computed, so it shows
    // only if the workbench read that run from the log.
    let prog = dir.path().join("elsewhere.py");
    std::fs::write(&prog, "print('from-elsewhere-' + str(6 * 7))\n").unwrap();
    let run = Command::new(bin)
        .args(["run", "--tier", "process"])
        .arg(&prog)
        .env("SANDBENCH_CONFIG", &config)
        .env("SANDBENCH_STATE_DIR", &state)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let s = tmux.wait_for("runs · 1 of 1", Duration::from_secs(15));
    let row = s.lines().find(|l| l.contains("from-elsewhere-")).unwrap_or_else(|| panic!("no row:\n{s}"));
    assert!(row.contains("run") && row.contains("process") && row.contains("ok"), "{row}");
    tmux.keys(&["Enter"]);
    let s = tmux.wait_for("from-elsewhere-42", Duration::from_secs(10));
    assert!(s.contains("stdout"), "the run's output is in its details:\n{s}");

    tmux.keys(&["C-q"]);
    let start = Instant::now();
    while tmux.alive() {
        assert!(start.elapsed() < Duration::from_secs(15), "sandbench did not quit on ^Q:\n{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
}
