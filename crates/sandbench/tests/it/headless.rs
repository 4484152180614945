//! The headless commands in a pipe (issue 26): progress only on a terminal,
//! plain lines otherwise (no `\r`, no escape sequence, no blank line after a
//! `sandbench:` message); `compare` picks its tiers by the workbench's rule;
//! every run is logged with its own time, the soak's too; `doctor` says a
//! working fallback is a warning.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::common::{self, bin, samples_dir, OuterNet};
use serde_json::Value;

fn sandbench(state: &Path, args: &[&str], secs: u64) -> Output {
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(args).env("SANDBENCH_STATE_DIR", state);
    net.output(&mut cmd, Duration::from_secs(secs))
}

/// What a pipe must never get: carriage returns (a progress line redrawn),
/// escape sequences, blank lines.
fn assert_plain(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!text.contains('\r'), "{what}: a \\r in a pipe:\n{text:?}");
    assert!(!text.contains('\x1b'), "{what}: an escape sequence in a pipe:\n{text:?}");
    assert!(!text.contains("\n\n") && !text.starts_with('\n'), "{what}: a blank line:\n{text}");
}

fn log(state: &Path) -> Vec<Value> {
    let out = sandbench(state, &["log", "--format", "json"], 60);
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[sandbench_testkit::test(needs = ["process"])]
fn compare_in_a_pipe_prints_plain_progress_and_logs_each_run_at_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("p.py");
    std::fs::write(&prog, "print(1)\n").unwrap();
    let out = sandbench(dir.path(), &["compare", "--tiers", "process", "--repeat", "4", prog.to_str().unwrap()], 120);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_plain("compare's stderr", &out.stderr);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().filter(|l| l.starts_with("process: ok · ")).count(), 4, "a line per run:\n{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains('\r') && !stdout.contains('\x1b'), "{stdout}");
    let runs: Vec<Value> = log(dir.path()).into_iter().filter(|e| e["front_end"] == "compare").collect();
    assert_eq!(runs.len(), 4, "{runs:?}");
    let times: Vec<i64> = runs.iter().map(|e| e["unix_ms"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "each run its own time, not the compare's: {times:?}");
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn run_in_a_pipe_puts_no_blank_line_after_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("bomb.py");
    // A partial line, then the bomb: sandbench's message starts on a line of its own.
    std::fs::write(&prog, "import sys\nsys.stdout.write('partial')\nsys.stdout.flush()\nx = bytearray(64 << 20)\n")
        .unwrap();
    let net = OuterNet::new();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("'{}' run --memory 16M '{}' 2>&1 | cat", bin().display(), prog.display()))
        .env("SANDBENCH_STATE_DIR", dir.path());
    let out = net.output(&mut cmd, Duration::from_secs(60));
    assert_plain("run 2>&1", &out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("partial\nsandbench: memory — memory limit 16M hit"), "{text}");
    assert!(text.contains("\n── sandbench · process · bomb.py ──\n"), "{text}");
    assert!(text.contains("peak memory 16.0 MiB"), "the peak of a limit that bit is the limit: {text}");
}

#[sandbench_testkit::test(needs = ["process"])]
fn a_soak_in_a_pipe_prints_plain_lines_and_its_runs_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["bench", "--soak", "--duration", "2s", "--concurrency", "1", "--tiers", "process", "--samples"];
    let mut all: Vec<&str> = args.to_vec();
    let samples = samples_dir();
    all.push(samples.to_str().unwrap());
    let out = sandbench(dir.path(), &all, 180);
    assert_plain("the soak's stderr", &out.stderr);
    let runs = log(dir.path()).into_iter().filter(|e| e["front_end"] == "soak").count();
    assert!(runs >= 1, "the soak's runs are in the run log (README: every run is logged)");
}

#[sandbench_testkit::test(needs = ["process"])]
fn compare_without_tiers_runs_what_f6_runs_every_available_tier() {
    let dir = tempfile::tempdir().unwrap();
    let doctor = sandbench(dir.path(), &["doctor", "--format", "json"], 300);
    let probed: Vec<Value> = serde_json::from_slice(&doctor.stdout).unwrap();
    let ready: Vec<String> =
        probed.iter().filter(|t| t["available"] == true).map(|t| t["tier"].as_str().unwrap().to_string()).collect();
    let prog = dir.path().join("p.sh");
    std::fs::write(&prog, "echo hi\n").unwrap();
    let out = sandbench(dir.path(), &["compare", "--format", "json", prog.to_str().unwrap()], 600);
    assert_plain("compare --format json's stderr", &out.stderr);
    let r: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let ran: Vec<String> =
        r["summary"]["tiers"].as_array().unwrap().iter().map(|t| t["tier"].as_str().unwrap().into()).collect();
    // Peers included, as in the workbench's tier list (a tier can stop being
    // ready between the two probes; none may be added).
    assert!(ran.iter().all(|t| ready.contains(t)), "ran {ran:?}, ready {ready:?}");
    assert!(ready.len() - ran.len() <= 1, "ran {ran:?}, ready {ready:?}");
    let help = Command::new(bin()).args(["compare", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("sandbench's own and the installed peers"));
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn doctor_says_emulation_instead_of_kvm_is_a_warning_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = sandbench(dir.path(), &["doctor", "--format", "json"], 300);
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let vm = all.iter().find(|t| t["tier"] == "microvm").expect("microvm probed");
    let accel = vm["checks"].as_array().unwrap().iter().find(|c| c["name"] == "accel").expect("an accel check");
    let detail = accel["detail"].as_str().unwrap();
    let fallback = detail.starts_with("TCG (software emulation, slow)");
    assert_eq!(accel["level"], if fallback { "warn" } else { "ok" }, "{accel}");
    assert_eq!(accel["ok"], true, "it works: {accel}");
    if fallback {
        let text = sandbench(dir.path(), &["doctor"], 300);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("⚠ accel       TCG (software emulation, slow)"), "{text}");
        if common::required("microvm") {
            assert!(text.lines().any(|l| l.starts_with("microvm   ⚠ ready")), "{text}");
        }
    }
}
