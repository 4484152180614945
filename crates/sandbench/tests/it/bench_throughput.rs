//! `sandbench bench --concurrency N --duration S` end to end on the process
//! tier: both sides measured, every figure a real measurement that agrees
//! with the others shown (runs per second from runs and seconds, the ratio
//! from the two rates, the machine's CPU holding at least what the meters
//! hold, a failed run counted with its reason), nothing left. Never a timed
//! assertion.

use crate::support::common::bin;

use std::process::{Command, Stdio};

use serde_json::Value;

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// One side's figures. A failed run of sandbench's side is a failure here;
/// one of the baseline's (bwrap can fail on a machine busy with other
/// tests' namespaces) is reported with its reason, never hidden.
fn check_side(s: &Value, own: bool) {
    let runs = s["runs"].as_u64().unwrap_or_else(|| panic!("no runs in {s}"));
    assert!(runs > 0, "{s}");
    let errors = s["errors"].as_u64().unwrap();
    if own {
        assert_eq!(errors, 0, "{s}");
    }
    assert_eq!(errors > 0, s["first_error"].as_str().is_some_and(|e| !e.is_empty()), "{s}");
    let want = runs as f64 / num(s, "seconds");
    assert!((num(s, "runs_per_s") - want).abs() < 1e-9 * want, "{s}");
    assert!(num(s, "p50_ms") > 0.0 && num(s, "p50_ms") <= num(s, "p99_ms"), "{s}");
    let (own, machine) = (num(s, "cpu_ms_per_run"), num(s, "machine_cpu_ms_per_run"));
    assert!(own > 0.0 && machine > 0.0, "{s}");
    // The machine's busy time holds everything the meters hold (its ticks
    // are sampled, so only the order of magnitude is checked).
    assert!(machine >= own / 2.0, "machine {machine} ms against the meters' {own} ms: {s}");
}

#[sandbench_testkit::test(needs = ["process"])]
fn throughput_measures_both_sides_with_the_machines_cpu_and_leaves_nothing() {
    let out = Command::new(bin())
        .args(["bench", "--tier", "process", "--concurrency", "2", "--duration", "2s", "--format", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(r["tier"], "process");
    assert_eq!(r["concurrency"], 2);
    check_side(&r["sandbench"], true);
    assert_eq!(r["leftovers"]["total"], 0, "{r}");
    if r["bare"].is_null() {
        // No bwrap here: said so, never a made-up side.
        assert!(r["skipped"].as_array().is_some_and(|s| !s.is_empty()), "{r}");
        return;
    }
    check_side(&r["bare"], false);
    let want = num(&r["sandbench"], "runs_per_s") / num(&r["bare"], "runs_per_s");
    assert!((num(&r, "ratio") - want).abs() < 1e-9 * want, "{r}");
    assert_eq!(r["target"], 1.0);
    assert_eq!(r["met"], num(&r, "ratio") >= 1.0);
}
