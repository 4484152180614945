//! The gauntlet as a regression check: the full matrix on every available
//! tier passes, and flipping one declared expectation makes it fail.

use crate::support::common;

use std::process::Command;
use std::time::Duration;

use crate::support::docker_common::{containers_of, eventually, tier_available};
use common::{bin, samples_dir, OuterNet};

fn copy_samples(names: &[&str], dir: &std::path::Path) {
    for sub in ["benign", "hostile"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for n in names {
        let src = samples_dir().join(n);
        std::fs::copy(&src, dir.join(n)).unwrap();
    }
}

#[sandbench_testkit::test]
fn flipped_expectation_fails_the_gauntlet() {
    let dir = tempfile::tempdir().unwrap();
    copy_samples(&["benign/hello.py", "hostile/fork_bomb.py", "hostile/net_loopback.py"], dir.path());
    let net = OuterNet::new();
    let state = tempfile::tempdir().unwrap();
    let ok = net.output(
        Command::new(bin())
            .env("SANDBENCH_STATE_DIR", state.path())
            .args(["gauntlet", "--tiers", "process", "--repeat", "1", "--format", "json", "--samples"])
            .arg(dir.path()),
        Duration::from_secs(120),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&ok.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ok.stderr)));
    assert_eq!(ok.status.code(), Some(0), "{m:#}");
    assert_eq!(m["cells"].as_array().unwrap().len(), 3);
    assert_eq!(m["mismatches"], 0);
    let fork = m["cells"].as_array().unwrap().iter().find(|c| c["sample"] == "fork-bomb").unwrap();
    assert_eq!(fork["verdict"], "contained");
    assert!(fork["by"].as_str().unwrap().contains("pids"), "{fork}");
    assert!(fork["findings"]["host_latency_ms_max"].is_number(), "host responsiveness is measured");
    // Kept for `sandbench report --reuse`: the same matrix.
    let saved = sandbench::state::load_gauntlet_in(state.path()).unwrap().expect("the gauntlet is saved");
    assert_eq!(saved.data.cells.len(), 3);
    assert_eq!(serde_json::to_value(&saved.data.cells[1].verdict).unwrap()["verdict"], m["cells"][1]["verdict"]);

    // Declare that the fork bomb should run unhindered: the judge must object.
    let p = dir.path().join("hostile/fork_bomb.py");
    let flipped = std::fs::read_to_string(&p).unwrap().replace("# expect: *=violation:pids", "# expect: *=ok");
    std::fs::write(&p, flipped).unwrap();
    let bad = net.output(
        Command::new(bin())
            .args(["gauntlet", "--tiers", "process", "--repeat", "1", "--format", "markdown", "--samples"])
            .arg(dir.path()),
        Duration::from_secs(120),
    );
    let md = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{md}");
    assert!(md.starts_with("| program | process |"), "{md}");
    assert!(md.contains("✗ fork-bomb on process: expected outcome ok, got violation"), "{md}");
}

/// The gauntlet on every available tier, `repeat` times each cell, inside
/// an outer net; afterwards nothing of it is left: no process, no run
/// cgroup, no container carrying its pid. This is where every hostile
/// sample runs on every tier, once per CI run.
fn gauntlet_everywhere(repeat: &str) {
    let net = OuterNet::new();
    let (out, pid) = net.output_pid(
        Command::new(bin()).args(["gauntlet", "--repeat", repeat, "--format", "markdown"]),
        Duration::from_secs(3000),
    );
    let md = String::from_utf8_lossy(&out.stdout);
    eprintln!("{md}");
    assert_eq!(out.status.code(), Some(0), "{md}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(md.contains("all ") && md.contains("cells as declared"), "{md}");
    // A peer may show a hole its sample declares (socket-families on bwrap);
    // nothing ever escapes one of sandbench's own tiers.
    let escaped = escaped_columns(&md);
    let own: Vec<&String> = escaped.iter().filter(|t| sandbench::tier::KNOWN.contains(&t.as_str())).collect();
    assert!(own.is_empty(), "escaped on {own:?}:\n{md}");
    assert!(eventually(10, || net.remaining().is_empty()), "processes left behind: {:?}", net.remaining());
    assert!(net.leftover_cgroups().is_empty(), "run cgroups left behind: {:?}", net.leftover_cgroups());
    if tier_available("docker").is_ok() {
        assert!(eventually(20, || containers_of(pid).is_empty()), "containers left: {:?}", containers_of(pid));
    }
}

/// The tiers (columns) of a markdown matrix that have an ESCAPED cell.
fn escaped_columns(md: &str) -> Vec<String> {
    let mut rows = md.lines().filter(|l| l.starts_with("| "));
    let Some(head) = rows.next() else { return vec![] };
    let tiers: Vec<String> = head.split('|').map(|c| c.trim().to_string()).collect();
    let mut out = vec![];
    for row in rows {
        for (i, cell) in row.split('|').enumerate() {
            if cell.contains("ESCAPED") && !out.contains(&tiers[i.min(tiers.len() - 1)]) {
                out.push(tiers[i.min(tiers.len() - 1)].clone());
            }
        }
    }
    out
}

#[sandbench_testkit::test]
fn full_gauntlet_on_every_available_tier() {
    gauntlet_everywhere("1");
}

/// The slow profile: the whole matrix three times over, each benign control
/// three times a round (flaky verdicts show up here). SANDBENCH_SLOW_TESTS=1.
#[sandbench_testkit::test(needs = ["slow"])]
fn full_gauntlet_repeated_on_every_available_tier() {
    for _ in 0..3 {
        gauntlet_everywhere("3");
    }
}

/// The data corpus (`samples/data`: numpy, pandas from a CSV in /work,
/// matplotlib's savefig under Agg, awk/sed/grep/ps/which in sh) as the
/// gauntlet's benign controls on one tier: every cell runs and delivers its
/// output. (Not in `samples/benign` yet: the microVM guest has no data
/// libraries, and the full gauntlet runs every sample there.)
fn data_corpus_on(tier: &str) {
    let net = OuterNet::new();
    let state = tempfile::tempdir().unwrap();
    let out = net.output(
        Command::new(bin())
            .env("SANDBENCH_STATE_DIR", state.path())
            // matplotlib builds its font cache in each fresh HOME (/work):
            // 2.5 s of CPU on gVisor on a quiet machine, near the default
            // 5 s beside other tests. The corpus checks what works, not limits.
            .args([
                "gauntlet",
                "--tiers",
                tier,
                "--repeat",
                "1",
                "--format",
                "json",
                "--cpu",
                "20s",
                "--timeout",
                "60s",
            ])
            .arg("--samples")
            .arg(samples_dir().join("data")),
        Duration::from_secs(600),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cells = m["cells"].as_array().unwrap();
    let names: Vec<&str> = cells.iter().map(|c| c["sample"].as_str().unwrap()).collect();
    assert_eq!(names, ["matplotlib-savefig", "numpy-math", "pandas-csv", "shell-tools"], "{m:#}");
    for c in cells {
        assert_eq!(c["verdict"], "ran", "{} on {tier}: {c:#}", c["sample"]);
        assert_eq!(c["as_expected"], true, "{} on {tier}: {c:#}", c["sample"]);
    }
    assert_eq!(m["mismatches"], 0, "{m:#}");
    assert_eq!(out.status.code(), Some(0), "{m:#}");
}

#[sandbench_testkit::test]
fn data_corpus_runs_on_process() {
    data_corpus_on("process");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn data_corpus_runs_on_docker() {
    data_corpus_on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn data_corpus_runs_on_gvisor() {
    data_corpus_on("gvisor");
}
