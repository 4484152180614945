//! Every sample on the docker and gvisor tiers, through the real binary,
//! judged by the host-side canaries (the gauntlet's judge), and nothing of a
//! run left behind: no container labelled with the run's sandbench pid.

use crate::support::common;
use crate::support::docker_common;

use std::process::Command;
use std::time::Duration;

use common::{bin, samples_dir, OuterNet};
use docker_common::{containers_of, tier_ready};
use sandbench::gauntlet::{self, canary::Canaries};
use sandbench::samples;

const SECRET: &str = "sk-ant-test-canary-docker-0123456789";

fn every_sample_on(tier: &str) {
    if !tier_ready(tier) {
        return;
    }
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
        cmd.args(["run", "--tier", tier, "--format", "json", "--cpu", "2s", "--timeout", "5s", "--memory", "128M"])
            .env(gauntlet::canary::SECRET_VAR, SECRET);
        for (k, v) in c.env() {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        cmd.arg(&s.path);
        c.start_probe();
        let (out, child_pid) = {
            // OuterNet::output hides the pid; spawn ourselves to learn it.
            use std::io::Read;
            cmd.stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = net.spawn(&mut cmd);
            let pid = child.id();
            let mut so = child.stdout.take().unwrap();
            let mut se = child.stderr.take().unwrap();
            let t_out = std::thread::spawn(move || {
                let mut v = vec![];
                let _ = so.read_to_end(&mut v);
                v
            });
            let t_err = std::thread::spawn(move || {
                let mut v = vec![];
                let _ = se.read_to_end(&mut v);
                v
            });
            let start = std::time::Instant::now();
            let status = loop {
                if let Some(st) = child.try_wait().unwrap() {
                    break st;
                }
                if start.elapsed() > Duration::from_secs(90) {
                    let _ = child.kill();
                    panic!("{}: sandbench did not finish within 90 s on {tier}", s.name);
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            (std::process::Output { status, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() }, pid)
        };
        let r = common::report(&out);
        assert!(out.status.success(), "{}: exit {:?}", s.name, out.status);
        assert!(!r.stdout.contains(SECRET) && !r.stderr.contains(SECRET), "{}: the secret reached the sandbox", s.name);
        let findings = c.check(&r, &s.escaped_if);
        let cell = gauntlet::judge(s, tier, r, findings);
        if !cell.as_expected {
            failures.push(format!("{}: {}", s.name, cell.mismatch.clone().unwrap_or_default()));
        }
        let left = containers_of(child_pid);
        if !left.is_empty() {
            failures.push(format!("{}: containers left behind: {left:?}", s.name));
        }
        eprintln!("{:<18} {}", s.name, cell.verdict.short());
    }
    assert!(failures.is_empty(), "{} on {tier}:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_sample_behaves_as_declared_on_docker() {
    every_sample_on("docker");
}

#[test]
fn every_sample_behaves_as_declared_on_gvisor() {
    every_sample_on("gvisor");
}
