//! One definition of peak memory on every tier (issue 26): the sandbox's own
//! accounting, its cgroup's high-water mark. It is known for a program that
//! ran, never above a limit that held, and at the limit when the limit bit
//! (the process tier used to say `peak 24M` under a 16M limit that held, the
//! docker tier `peak 2.7M` beside `memory limit 16M hit`). Peak pids count the
//! program's processes, not the sandbox's own (docker said 65 under 64).

use std::process::Command;
use std::time::Duration;

use crate::support::common::{self, bin, samples_dir, OuterNet};
use sandbench::event::ViolationKind;
use sandbench::report::{Outcome, RunReport};

const LIMIT: u64 = 16 << 20;

fn run(tier: &str, program: &str, extra: &[&str]) -> RunReport {
    run_in(tier, "16M", program, extra)
}

fn run_in(tier: &str, memory: &str, program: &str, extra: &[&str]) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prog.py");
    std::fs::write(&path, program).unwrap();
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--format", "json", "--tier", tier, "--memory", memory]).args(extra).arg(&path);
    common::report(&net.output(&mut cmd, Duration::from_secs(120)))
}

fn check_memory(tier: &str) {
    let hello = run(tier, "print('hello')\n", &[]);
    assert_eq!(hello.outcome, Outcome::Ok, "{}", hello.summary_line());
    let peak = hello.usage.peak_memory_bytes.expect("a program that ran has a known peak");
    assert!(peak > 0 && peak <= LIMIT, "{tier}: peak {peak} B under a 16M limit that held");
    let bomb = run(tier, "x = bytearray(64 << 20)\nprint(len(x))\n", &[]);
    assert!(bomb.has_violation(ViolationKind::Memory), "{tier}: {}", bomb.summary_line());
    assert_eq!(bomb.usage.peak_memory_bytes, Some(LIMIT), "{tier}: the limit bit, so the peak is the limit");
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_peak_memory_is_the_cgroups_and_within_the_limit() {
    check_memory("process");
    let r = run("process", "print(1)\n", &[]);
    assert_eq!(r.details["memory_accounting"], "cgroup peak", "{}", r.details);
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_peak_memory_is_the_cgroups_and_peak_pids_are_the_programs() {
    check_memory("docker");
    let bomb = std::fs::read_to_string(samples_dir().join("hostile/fork_bomb.py")).unwrap();
    // Room enough that the pids limit, not memory, is what stops 32 forked
    // interpreters (at 16M the memory limit may come first: contained too,
    // but not what this counts).
    let r = run_in("docker", "128M", &bomb, &["--pids", "32", "--timeout", "5s"]);
    assert!(r.has_violation(ViolationKind::Pids), "{}", r.summary_line());
    assert_eq!(r.usage.peak_pids, Some(32), "the loader is not one of the program's processes");
}
