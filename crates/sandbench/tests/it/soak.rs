//! `sandbench bench --soak`: a short soak on the process tier completes runs,
//! judges each against its sample's declaration under limits scaled by the
//! tier's measured slowdown, delivers every byte the output programs
//! produced, measures the host, and leaves nothing behind.

use crate::support::common::{self, bin, samples_dir, OuterNet};

use std::process::Command;
use std::time::Duration;

#[sandbench_testkit::test]
fn a_short_soak_on_the_process_tier_leaves_nothing_and_loses_no_output() {
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin())
            .args([
                "bench",
                "--soak",
                "--duration",
                "3s",
                "--concurrency",
                "2",
                "--tiers",
                "process",
                "--format",
                "json",
                "--sessions",
            ])
            .arg("--samples")
            .arg(samples_dir()),
        Duration::from_secs(180),
    );
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r["tiers"], serde_json::json!(["process"]), "{r:#}");
    let runs = r["runs"].as_u64().unwrap();
    assert!(runs >= 1, "{r:#}");
    assert_eq!(r["per_tier"][0]["runs"].as_u64(), Some(runs), "{r:#}");
    // The tier's slowdown against the host was measured and its limits
    // follow from it: as written below 1.5x, multiplied from there on.
    let d = &r["per_tier"][0]["slowdown"];
    assert!(d["error"].is_null() && d["rounds"].as_u64() >= Some(3), "{r:#}");
    assert!(d["factor"].as_f64().is_some_and(|f| f > 0.0) && d["host_cpu_ms"].as_f64() > Some(0.0), "{r:#}");
    let declared = sandbench::gauntlet::default_limits();
    let cpu = d["cpu_scale"].as_f64().unwrap();
    let want = if cpu > 1.0 {
        (declared.cpu_time.as_secs_f64() * cpu * 10.0).ceil() * 100.0
    } else {
        declared.cpu_time.as_millis() as f64
    };
    assert_eq!(r["per_tier"][0]["cpu_time_ms"][1].as_f64(), Some(want), "{r:#}");
    // The output programs come first in the mix, so a short soak has some.
    let o = &r["output"];
    assert!(o["runs"].as_u64().unwrap() >= 1, "{r:#}");
    assert!(o["bytes_produced"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(o["bytes_delivered"], o["bytes_produced"], "{r:#}");
    assert_eq!(o["lost_runs"], 0, "{r:#}");
    assert!(r["host_true"]["samples"].as_u64().unwrap() >= 1, "{r:#}");
    assert!(r["host_true"]["p99_ms"].is_number(), "{r:#}");
    assert_eq!(r["leftovers"]["total"], 0, "{r:#}");
    // sandbench's own descriptors and memory were sampled (start and end at least).
    assert!(r["sandbench"]["samples"].as_array().unwrap().len() >= 2, "{r:#}");
    assert!(r["sandbench"]["fds_max"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["sandbench"]["rss_max_bytes"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(r["per_tier"][0]["not_applicable"], serde_json::json!([]), "the process tier runs every language");
    // The session stream beside the runs: calls that kept each other's files.
    let ss = &r["sessions"][0];
    assert_eq!(ss["tier"], "process", "{r:#}");
    assert!(ss["calls"].as_u64().unwrap() >= 1, "{r:#}");
    assert_eq!(ss["failures"], 0, "{r:#}");
    assert!(ss["p99_ms"].is_number(), "{r:#}");
    assert_eq!(r["processes"]["zombies"], 0, "{r:#}");
    assert_eq!(r["processes"]["run_uid_processes"], 0, "{r:#}");
    if common::is_root() {
        assert!(net.leftover_cgroups().is_empty(), "{:?}", net.leftover_cgroups());
    }
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
    let passed = r["mismatches"] == 0
        && r["leftovers"]["total"] == 0
        && r["processes"]["zombies"] == 0
        && r["processes"]["run_uid_processes"] == 0
        && o["lost_runs"] == 0;
    assert_eq!(out.status.code(), Some(if passed { 0 } else { 1 }), "{r:#}");
}

#[sandbench_testkit::test]
fn soak_arguments_are_checked() {
    let out = Command::new(bin()).args(["bench", "--soak", "--concurrency", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--concurrency"), "{}", String::from_utf8_lossy(&out.stderr));
    // Without --soak the same flags ask for the throughput run: checked alike.
    let out = Command::new(bin()).args(["bench", "--duration", "0s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a zero --duration is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(bin()).args(["bench", "--concurrency", "65"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "too many in flight is refused");
}
