//! Shared by the docker/gvisor integration tests: is the tier usable here
//! (skip with a reason, or fail when CI requires it), and which containers
//! a given sandbench process left.
#![allow(dead_code)]

use std::collections::HashMap;
use std::process::{Command, Stdio};

use bollard::query_parameters::ListContainersOptions;
use sandbench::internals::docker::Engine;

/// Pools are process-wide (`tier::shutdown` drains them all): one warm-pool
/// test at a time.
pub static WARM_POOLS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when `tier` can run here; a test that uses it names the tier in its
/// needs, so the harness has already checked: unavailable is a failure.
pub fn tier_ready(tier: &str) -> bool {
    if let Err(why) = tier_available(tier) {
        panic!("cannot run although its needs hold: {why}");
    }
    true
}

/// Whether `tier` can run here, for tests that use it only when it does.
pub fn tier_available(tier: &str) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_sandbench"))
        .args(["doctor", "--format", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("run sandbench doctor");
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor prints JSON");
    let me = all.as_array().and_then(|a| a.iter().find(|t| t["tier"] == tier)).cloned().unwrap_or_default();
    if me["available"] == true {
        return Ok(());
    }
    let why = format!("{tier} tier unavailable: {} {}", me["summary"], me["checks"]);
    let required = std::env::var("SANDBENCH_REQUIRE_TIERS").unwrap_or_default().split(',').any(|t| t.trim() == tier);
    if required {
        panic!("SANDBENCH_REQUIRE_TIERS names {tier}, but {why}");
    }
    Err(why)
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// Containers (any state) labelled as owned by sandbench process `pid`.
pub fn containers_of(pid: u32) -> Vec<String> {
    block_on(async {
        let at = sandbench::internals::docker::Endpoint::of(&sandbench::config::HostEnv::from_process());
        let engine = Engine::connect(&at).await.expect("docker answers");
        let filters = HashMap::from([("label".to_string(), vec![format!("sandbench.pid={pid}")])]);
        engine
            .docker
            .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
            .await
            .expect("list containers")
            .into_iter()
            .filter_map(|c| c.id)
            .collect()
    })
}

/// Session containers (any state) of sandbench process `pid` (its pool's
/// containers left out).
pub fn session_containers_of(pid: u32) -> Vec<String> {
    block_on(async {
        let at = sandbench::internals::docker::Endpoint::of(&sandbench::config::HostEnv::from_process());
        let engine = Engine::connect(&at).await.expect("docker answers");
        let filters = HashMap::from([("label".to_string(), vec![format!("sandbench.pid={pid}")])]);
        engine
            .docker
            .list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
            .await
            .expect("list containers")
            .into_iter()
            .filter(|c| c.labels.as_ref().and_then(|l| l.get("sandbench")).is_some_and(|r| r.starts_with("session-")))
            .filter_map(|c| c.id)
            .collect()
    })
}

/// Wait up to `secs` for `f` to hold.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    f()
}
