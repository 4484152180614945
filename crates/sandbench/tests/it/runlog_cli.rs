//! The run log end to end: runs made by separate `sandbench run` processes
//! are appended to `$SANDBENCH_STATE_DIR/runs.jsonl`, and `sandbench log`
//! prints and filters them.

use crate::support::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{bin, OuterNet};
use serde_json::Value;

fn sandbench(state: &Path, args: &[&str]) -> Output {
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(args).env("SANDBENCH_STATE_DIR", state);
    net.output(&mut cmd, Duration::from_secs(60))
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON entry per line"))
        .collect()
}

#[sandbench_testkit::test(needs = ["process"])]
fn runs_of_other_processes_are_logged_and_filtered() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ok = dir.path().join("ok.py");
    std::fs::write(&ok, "print('logged')\n").unwrap();
    let spin = dir.path().join("spin.sh");
    std::fs::write(&spin, "while :; do :; done\n").unwrap();
    let a = sandbench(&state, &["run", "--tier", "process", ok.to_str().unwrap()]);
    if !a.status.success() {
        assert!(!common::required("process"), "run failed: {}", String::from_utf8_lossy(&a.stderr));
        panic!("cannot run although its needs hold: process tier unavailable: {}", String::from_utf8_lossy(&a.stderr));
    }
    sandbench(&state, &["run", "--tier", "process", "--timeout", "300ms", spin.to_str().unwrap()]);

    let all = json_lines(&sandbench(&state, &["log", "--format", "json"]));
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0]["front_end"], "run");
    assert_eq!(all[0]["tier"], "process");
    assert_eq!(all[0]["label"], "ok.py");
    assert_eq!(all[0]["code"], "print('logged')\n");
    assert_eq!(all[0]["code_sha256"].as_str().unwrap().len(), 64);
    assert_eq!(all[0]["report"]["outcome"], "ok");
    assert_eq!(all[0]["report"]["stdout"], "logged\n");
    assert!(all[0]["report"]["timings_ms"]["total"].as_f64().unwrap() > 0.0);
    assert_eq!(all[1]["report"]["outcome"], "violation");
    assert!(all[0]["unix_ms"].as_i64() <= all[1]["unix_ms"].as_i64());

    let v = json_lines(&sandbench(&state, &["log", "--format", "json", "--outcome", "violation"]));
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["label"], "spin.sh");
    assert_eq!(json_lines(&sandbench(&state, &["log", "--format", "json", "--since", "1h"])).len(), 2);
    assert_eq!(
        json_lines(&sandbench(&state, &["log", "--format", "json", "--since", "2999-01-01T00:00:00Z"])).len(),
        0
    );
    assert_eq!(json_lines(&sandbench(&state, &["log", "--format", "json", "--last", "1"]))[0]["label"], "spin.sh");
    let none = sandbench(&state, &["log", "--tier", "docker"]);
    assert!(none.status.success() && none.stdout.is_empty());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no runs match"));

    let text = String::from_utf8_lossy(&sandbench(&state, &["log"]).stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("run") && lines[0].contains("process") && lines[0].contains("ok"), "{text}");
    assert!(lines[1].contains("violation") && lines[1].contains("wall_timeout"), "{text}");

    for bad in [["log", "--since", "yesterday"], ["log", "--outcome", "fine"]] {
        let out = sandbench(&state, &bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("invalid --"), "{err}");
    }
}
