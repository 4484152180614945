//! Every sample on the process tier, through the real binary, judged by the
//! host-side canaries (the same judge the gauntlet uses).

use crate::support::common;

use std::process::Command;
use std::time::Duration;

use common::{bin, samples_dir, OuterNet};
use sandbench::gauntlet::{self, canary::Canaries};
use sandbench::samples;

const SECRET: &str = "sk-ant-test-canary-0123456789";

#[test]
fn every_sample_behaves_as_declared_on_the_process_tier() {
    let all = samples::load_dir(&samples_dir()).unwrap();
    assert!(all.len() >= 25);
    // Samples with a network limit need the gauntlet's loopback internet:
    // the gauntlet (and tests/it/egress.rs) runs those.
    let all: Vec<_> = all.into_iter().filter(|s| s.network.is_none()).collect();
    let mut failures = vec![];
    for s in &all {
        let net = OuterNet::new();
        let mut c = Canaries::plant(Some(SECRET.into())).unwrap();
        let mut cmd = Command::new(bin());
        cmd.args([
            "run",
            "--tier",
            "process",
            "--format",
            "json",
            "--cpu",
            "2s",
            "--timeout",
            "5s",
            "--memory",
            "128M",
        ])
        .env(gauntlet::canary::SECRET_VAR, SECRET);
        for (k, v) in c.env() {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        cmd.arg(&s.path);
        c.start_probe();
        let out = net.output(&mut cmd, Duration::from_secs(60));
        let r = common::report(&out);
        assert!(out.status.success(), "{}: exit {:?}", s.name, out.status);
        let findings = c.check(&r, &s.escaped_if);
        let cell = gauntlet::judge(s, "process", r, findings);
        if !cell.as_expected {
            failures.push(format!("{}: {}", s.name, cell.mismatch.clone().unwrap_or_default()));
        }
        // Nothing of the run is left: no process in the net, no run cgroup.
        std::thread::sleep(Duration::from_millis(50));
        let left = net.remaining();
        if !left.is_empty() {
            failures.push(format!("{}: processes left behind: {left:?}", s.name));
        }
        let cgs = net.leftover_cgroups();
        if !cgs.is_empty() {
            failures.push(format!("{}: run cgroups left behind: {cgs:?}", s.name));
        }
        eprintln!("{:<18} {}", s.name, cell.verdict.short());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
