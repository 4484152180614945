//! `sandbench bench --path session` end to end on the process tier: the
//! report's shape and that its figures are real measurements (positive,
//! ordered, one per run, ratios computed from the figures shown). Never a
//! timed assertion: speed is what the bench reports, not what a test
//! checks.

use crate::support::common::bin;

use std::process::{Command, Stdio};

use serde_json::Value;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(bin()).arg("bench").args(args).stdin(Stdio::null()).output().unwrap()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

/// Every contender measured `runs` times, with figures that are times.
fn check_contenders(list: &Value, names: &[&str], runs: u64) {
    let got: Vec<&str> = list.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(got, names);
    for c in list.as_array().unwrap() {
        assert_eq!(c["runs"], runs, "{c}");
        let (p50, p90, p95, mean) = (num(c, "p50_ms"), num(c, "p90_ms"), num(c, "p95_ms"), num(c, "mean_ms"));
        assert!(p50 > 0.0 && p50.is_finite() && mean > 0.0, "{c}");
        assert!(p50 <= p90 && p90 <= p95, "percentiles in order: {c}");
        // Each tier run and the bare interpreter print 1 before they exit.
        let first = num(c, "first_byte_p50_ms");
        assert!(first > 0.0 && first <= p95, "{c}");
    }
}

/// The ratio of `what` against `against`, checked against the stats shown.
fn check_ratio(r: &Value, what: &str, against: &str) {
    let ratio = r["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["what"] == what && x["against"] == against)
        .unwrap_or_else(|| panic!("no ratio {what} / {against} in {}", r["ratios"]));
    let find = |n: &str| r["contenders"].as_array().unwrap().iter().find(|c| c["name"] == n).unwrap().clone();
    let (a, b) = (find(what), find(against));
    for (k, q) in [("p50_ratio", "p50_ms"), ("p90_ratio", "p90_ms")] {
        let want = num(&a, q) / num(&b, q);
        assert!((num(ratio, k) - want).abs() < 1e-9 * want.max(1.0), "{k}: {ratio} vs {want}");
    }
}

#[sandbench_testkit::test(needs = ["process"])]
fn session_path_times_a_kept_session_against_fresh_warm_and_bare_python() {
    let out = bench(&["--tier", "process", "--path", "session", "--runs", "3", "--format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(r["tier"], "process");
    assert_eq!(r["path"], "session");
    assert_eq!(r["program"], "print(1)");
    let names = ["sandbench process fresh warm", "sandbench process session call", "bare python3"];
    check_contenders(&r["contenders"], &names, 3);
    check_ratio(&r, names[1], names[0]);
    check_ratio(&r, names[1], names[2]);
    // The stdlib control, timed in the same rounds.
    assert_eq!(r["controls"].as_array().unwrap().len(), 1);
    check_contenders(&r["controls"][0]["contenders"], &names, 3);
    assert!(r["load_before"].as_array().is_some_and(|l| l.len() == 3), "{r}");
    // The text form says which path it timed and gives the ratios.
    let text = bench(&["--tier", "process", "--path", "session", "--runs", "1"]);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(
        t.contains("bench process --path session")
            && t.contains("session call / sandbench process fresh warm: exit p50"),
        "{t}"
    );
}

#[sandbench_testkit::test(needs = ["process", "cmd:node"])]
fn session_path_in_javascript_times_node_against_bare_node() {
    let out = bench(&[
        "--tier",
        "process",
        "--path",
        "session",
        "--language",
        "javascript",
        "--runs",
        "2",
        "--format",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(r["program"], "console.log(1)");
    let names = ["sandbench process fresh warm", "sandbench process session call", "bare node -e"];
    check_contenders(&r["contenders"], &names, 2);
    check_ratio(&r, names[1], names[2]);
}

#[sandbench_testkit::test]
fn session_path_refuses_throughput_flags_in_one_line() {
    for extra in [&["--concurrency", "2"][..], &["--soak"][..], &["--duration", "1s"][..]] {
        let out = bench(&[&["--tier", "process", "--path", "session"][..], extra].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("--path session times single calls"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// `bench --all-tiers` on the process tier: one row whose figures are the
/// p50s of its report's contenders (cold, fresh warm, session call, bare
/// python3, measured in the same rounds) and each × the bare interpreter.
#[sandbench_testkit::test(needs = ["process"])]
fn all_tiers_prints_one_row_per_tier_from_one_interleaved_run() {
    let out = bench(&["--all-tiers", "--tiers", "process", "--runs", "3", "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["measured_at"].as_str().unwrap().ends_with('Z'), "{v}");
    let row = &v["rows"][0];
    assert_eq!(row["tier"], "process");
    let report = &v["reports"][0];
    check_contenders(
        &report["contenders"],
        &["sandbench process cold", "sandbench process fresh warm", "sandbench process session call", "bare python3"],
        3,
    );
    let p50 = |name: &str| {
        report["contenders"].as_array().unwrap().iter().find(|c| c["name"] == name).map(|c| num(c, "p50_ms")).unwrap()
    };
    let bare = p50("bare python3");
    assert_eq!(num(row, "bare_python_ms"), bare);
    for (ms, x, name) in [
        ("cold_ms", "cold_x", "sandbench process cold"),
        ("fresh_warm_ms", "fresh_warm_x", "sandbench process fresh warm"),
        ("session_call_ms", "session_call_x", "sandbench process session call"),
    ] {
        assert_eq!(num(row, ms), p50(name), "{row}");
        assert!((num(row, x) - p50(name) / bare).abs() < 1e-9, "{row}");
    }
    let text = bench(&["--all-tiers", "--tiers", "process", "--runs", "1"]);
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.contains("| process |") && t.contains("sandbench bench --all-tiers"), "{t}");
    // Not a tier of the table: one line saying which are, exit 2.
    let e = bench(&["--all-tiers", "--tiers", "bwrap"]);
    assert_eq!(e.status.code(), Some(2), "{}", String::from_utf8_lossy(&e.stderr));
}
