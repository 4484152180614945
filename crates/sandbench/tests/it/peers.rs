//! Peer tiers: a user's own wrapper added from a config file, bad profiles,
//! and the gauntlet through every shipped peer that is installed (skipped
//! with a printed reason otherwise; required when SANDBENCH_REQUIRE_TIERS
//! names it, as CI does). Every run happens under the test's outer net.

use crate::support::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{bin, is_root, required, samples_dir, OuterNet};

/// A wrapper with no isolation at all: `env -i` with the program's variables.
const ENV_I: &str = r#"
name = "envi"
describe = "env -i: a clean environment and nothing else"
tool = "env"
version = ["{tool}", "--version"]
install = "apt-get install -y coreutils"
argv = ["{tool}", "-i", "{env...}", "{command...}"]
env_flag = ["{name}={value}"]
"#;

/// A config dir holding `peers/<name>.toml` files.
fn config_with(profiles: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "").unwrap();
    std::fs::create_dir(dir.path().join("peers")).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.path().join("peers").join(name), text).unwrap();
    }
    dir
}

fn sandbench(config: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env("SANDBENCH_CONFIG", config.join("config.toml"));
    c
}

/// Peers run as root (outer cgroup, peer account): says why it skips.
fn can_run_peers() -> bool {
    if !is_root() {
        panic!("cannot run although its needs hold: peers need root here (outer cgroup, the sandbench-peer account)");
    }
    if Command::new("id").arg("sandbench-peer").output().map(|o| !o.status.success()).unwrap_or(true) {
        panic!("cannot run although its needs hold: no sandbench-peer account (sandbench setup peers)");
    }
    true
}

#[sandbench_testkit::test(needs = ["root"])]
fn a_users_own_wrapper_from_the_config_dir_runs_samples() {
    if !can_run_peers() {
        return;
    }
    let cfg = config_with(&[("envi.toml", ENV_I)]);
    let net = OuterNet::new();
    let out = net.output(
        sandbench(cfg.path())
            .args(["run", "--tier", "envi", "--format", "json"])
            .arg(samples_dir().join("benign/hello.py")),
        Duration::from_secs(60),
    );
    let r = common::report(&out);
    assert_eq!(r.outcome, sandbench::report::Outcome::Ok, "{}", r.summary_line());
    assert_eq!(r.stdout.trim(), "hello from the sandbox");
    assert_eq!(r.details["peer"], "envi");
    assert!(r.details["profile"].as_str().unwrap().ends_with("peers/envi.toml"), "{}", r.details);
    let not = r.details["limits"]["not_enforced"].as_array().unwrap();
    assert!(not.iter().any(|l| l == "memory") && not.iter().any(|l| l == "network"), "{}", r.details);
    assert_eq!(r.details["run_as"]["user"], "sandbench-peer");

    // A wrapper that contains nothing: a fork bomb is stopped by sandbench's
    // outer cgroup, and the gauntlet calls that an escape, not containment.
    let samples = tempfile::tempdir().unwrap();
    std::fs::create_dir(samples.path().join("hostile")).unwrap();
    std::fs::copy(samples_dir().join("hostile/fork_bomb.py"), samples.path().join("hostile/fork_bomb.py")).unwrap();
    let out = net.output(
        sandbench(cfg.path())
            .args(["gauntlet", "--tiers", "envi", "--repeat", "1", "--format", "json", "--samples"])
            .arg(samples.path()),
        Duration::from_secs(120),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cell = |name: &str| m["cells"].as_array().unwrap().iter().find(|c| c["sample"] == name).unwrap().clone();
    let fork = cell("fork-bomb");
    assert_eq!(fork["verdict"], "escaped", "{fork:#}");
    assert!(fork["what"].to_string().contains("outer cgroup"), "{fork:#}");
    assert!(fork["report"]["violations"].to_string().contains("pids"), "{fork:#}");
    assert_eq!(out.status.code(), Some(1), "the escape is a mismatch");
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
}

#[sandbench_testkit::test]
fn a_bad_profile_is_one_line_naming_file_and_key() {
    let bad = ENV_I.replace("env_flag", "env_flags");
    let cfg = config_with(&[("typo.toml", &bad)]);
    let out = sandbench(cfg.path())
        .args(["run", "--tier", "envi", "--format", "json"])
        .arg(samples_dir().join("benign/hello.py"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("typo.toml") && err.contains("env_flags"), "{err}");
    // The tiers of sandbench's own still work with a broken peer profile.
    let out = sandbench(cfg.path()).args(["gauntlet", "--tiers", "nope"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("typo.toml"));
}

/// The whole gauntlet through one shipped peer: every cell judged (the
/// wrapper built its sandbox every time), the benign controls ran, the
/// limits sandbench enforces from outside held, and whatever got past the
/// peer was stopped by the outer net and reported as an escape.
fn gauntlet_on(peer: &str) {
    if !can_run_peers() {
        assert!(!required(peer), "the {peer} peer is required but cannot run here");
        return;
    }
    let probe = Command::new(bin())
        .args(["run", "--tier", peer, "--format", "json"])
        .arg(samples_dir().join("benign/hello.py"))
        .output()
        .unwrap();
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr).trim().to_string();
        assert!(!required(peer), "the {peer} peer is required but does not run: {why}");
        panic!("cannot run although its needs hold: the {peer} peer does not run here: {why} (sandbench setup peers)");
    }
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin()).args(["gauntlet", "--tiers", peer, "--repeat", "1", "--format", "json"]),
        Duration::from_secs(900),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cells = m["cells"].as_array().unwrap();
    assert!(cells.len() >= 20, "{m:#}");
    let cell = |name: &str| cells.iter().find(|c| c["sample"] == name).unwrap_or_else(|| panic!("no {name} cell"));
    for c in cells {
        assert_ne!(c["verdict"], "error", "{peer} failed to judge {}: {c:#}", c["sample"]);
        if c["hostile"] == false {
            assert_eq!(c["verdict"], "ran", "{c:#}");
        }
        assert_eq!(c["report"]["details"]["peer"], peer);
        assert!(c["report"]["details"]["version"].as_str().is_some_and(|v| v.chars().any(|c| c.is_ascii_digit())));
        if c["verdict"] == "escaped" {
            eprintln!("{peer} {}: escaped: {}", c["sample"], c["what"]);
        }
    }
    // Every shipped peer is configured with the network off.
    assert_eq!(cell("net-loopback")["verdict"], "contained", "{:#}", cell("net-loopback"));
    // sandbench's own limits, enforced from outside, hold on every peer.
    assert!(cell("output-flood")["by"].as_str().unwrap_or("").contains("output_limit"), "{:#}", cell("output-flood"));
    assert!(cell("sleep-forever")["by"].as_str().unwrap_or("").contains("wall_timeout"), "{:#}", cell("sleep-forever"));
    // Bombs are stopped: by the peer, or (an escape) by the outer net.
    for bomb in ["memory-bomb", "fork-bomb"] {
        let c = cell(bomb);
        match c["verdict"].as_str().unwrap() {
            "contained" => {}
            "escaped" => assert!(c["what"].to_string().contains("outer cgroup"), "{c:#}"),
            v => panic!("{bomb} on {peer}: {v}: {c:#}"),
        }
    }
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
    assert!(net.leftover_cgroups().is_empty(), "cgroups left behind: {:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["bwrap", "root"])]
fn gauntlet_on_bwrap() {
    gauntlet_on("bwrap");
}

#[sandbench_testkit::test(needs = ["firejail", "root"])]
fn gauntlet_on_firejail() {
    gauntlet_on("firejail");
}

#[sandbench_testkit::test(needs = ["nsjail", "root"])]
fn gauntlet_on_nsjail() {
    gauntlet_on("nsjail");
}

#[sandbench_testkit::test(needs = ["srt", "root"])]
fn gauntlet_on_srt() {
    gauntlet_on("srt");
}

#[sandbench_testkit::test(needs = ["codex", "root"])]
fn gauntlet_on_codex() {
    gauntlet_on("codex");
}
