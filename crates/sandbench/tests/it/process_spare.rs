//! The process tier's spare sandbox: the run after a run starts warm, a spare
//! is used once, and dropping the tier leaves no helper or cgroup behind.

use crate::support::common;

use std::sync::Arc;
use std::time::Duration;

use sandbench::report::Outcome;
use sandbench::runner;
use sandbench::spec::{Language, RunSpec};
use sandbench::tier::{process::ProcessTier, Tier};

fn my_cgroups() -> Vec<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let rel = own.lines().find_map(|l| l.split_once(":pids:").map(|(_, p)| p.to_string()));
    let Some(rel) = rel else { return vec![] };
    let dir = std::path::Path::new("/sys/fs/cgroup/pids").join(rel.trim_start_matches('/')).join("sandbench");
    // Run cgroups are named by this process's owner token (see `owner`).
    let Ok(token) = sandbench::owner::token() else { return vec![] };
    let prefix = format!("{}-", sandbench::owner::opaque(token));
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_is_warm_and_spares_are_single_use_and_cleaned() {
    let tier: Arc<dyn Tier> = Arc::new(ProcessTier::new(&common::config()));
    let a = tier.probe().await;
    if !a.available {
        assert!(!common::required("process"), "process tier unavailable: {}", a.summary);
        eprintln!("skipped: process tier unavailable: {}", a.summary);
        return;
    }
    let spec = |code: &str| RunSpec::new(Language::Python, code);
    let first = runner::run(tier.clone(), spec("import os; print(os.getpid())")).await;
    assert_eq!(first.outcome, Outcome::Ok, "{}", first.summary_line());
    assert_eq!(first.details["start"], "cold");
    // The spare is made in the background after the first run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = runner::run(tier.clone(), spec("open('mark', 'w').write('x'); print('ok')")).await;
    assert_eq!(second.outcome, Outcome::Ok, "{}", second.summary_line());
    assert_eq!(second.details["start"], "warm");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A warm sandbox is a fresh one: nothing of the previous program is there.
    let third = runner::run(tier.clone(), spec("import os; print(os.path.exists('mark'))")).await;
    assert_eq!(third.details["start"], "warm");
    assert_eq!(third.stdout.trim(), "False");
    if common::is_root() {
        let t = std::time::Instant::now();
        while my_cgroups().is_empty() && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!my_cgroups().is_empty(), "a spare should be waiting in its cgroup");
    }
    drop(tier);
    let t = std::time::Instant::now();
    while !my_cgroups().is_empty() && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(my_cgroups().is_empty(), "spare left behind: {:?}", my_cgroups());
}
