//! The `run` command end to end on the process tier: bad input, streaming,
//! environment scrubbing, cancel, a killed sandbench, unprivileged use.

use crate::support::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, samples_dir, OuterNet};
use sandbench::internals::processes_with;
use sandbench::report::Outcome;

fn run_err(args: &[&str]) -> (i32, String) {
    let (code, _, err) = run_out(args);
    (code, err)
}

/// Exit code, stdout and stderr.
fn run_out(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).stdin(Stdio::null()).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[sandbench_testkit::test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.py");
    std::fs::write(&empty, "  \n").unwrap();
    let ruby = dir.path().join("x.rb");
    std::fs::write(&ruby, "puts 1").unwrap();
    let hello = samples_dir().join("benign/hello.py");
    let hello = hello.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "/nonexistent/prog.py"], "cannot read /nonexistent/prog.py"),
        (vec!["run", empty.to_str().unwrap()], "is empty"),
        (vec!["run", "--memory", "256Q", hello], "unknown unit"),
        (vec!["run", "--tier", "nope", hello], "unknown tier 'nope' (known: process"),
        (vec!["run", "--lang", "ruby", hello], "unknown language 'ruby'"),
        (vec!["run", ruby.to_str().unwrap()], "pass --lang"),
        (vec!["run", "--timeout=-3s", hello], "invalid duration"),
        (vec!["run", "--env", "NOEQUALS", hello], "KEY=VALUE"),
    ];
    for (args, want) in cases {
        let (code, err) = run_err(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: wanted {want:?} in {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err:?}");
        assert!(!err.contains("panicked"), "{err}");
        // Asked for JSON (either spelling of the flag, before or after the
        // bad argument): one JSON error object on stdout, the same line on
        // stderr, the same exit code.
        for format in [&["--format", "json"][..], &["--format=json"][..]] {
            let mut with = args.clone();
            with.splice(1..1, format.iter().copied());
            let (code, out, err) = run_out(&with);
            assert_eq!(code, 2, "{with:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{with:?}: not one line: {err:?}");
            let v: serde_json::Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("{with:?}: stdout is not one JSON value ({e}): {out:?}"));
            assert_eq!(v["outcome"], "error", "{with:?}: {v}");
            assert_eq!(v["exit_code"], 2, "{with:?}: {v}");
            assert_eq!(v["schema_version"], sandbench::report::SCHEMA_VERSION, "{with:?}: {v}");
            assert!(v["error"].as_str().is_some_and(|e| e.contains(want)), "{with:?}: wanted {want:?} in {v}");
        }
    }
    // Text (the default) prints nothing on stdout.
    let (_, out, _) = run_out(&["run", "/nonexistent/prog.py"]);
    assert_eq!(out, "");
}

/// `setup`'s targets are the kinds table's tiers with something to build,
/// then the peers: a tier with nothing to build is bad input, named so.
#[sandbench_testkit::test]
fn setup_of_a_tier_with_nothing_to_build_is_bad_input() {
    for target in ["process", "e2b", "nope"] {
        let (code, err) = run_err(&["setup", target]);
        assert_eq!(code, 2, "{target}: {err}");
        let want = format!("nothing to set up for '{target}' (known: docker, gvisor, microvm, peers)");
        assert!(err.contains(&want), "{target}: wanted {want:?} in {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{target}: not one line: {err:?}");
    }
}

#[sandbench_testkit::test]
fn program_from_stdin_with_user_env_only() {
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--lang", "sh", "--format", "json", "--env", "GREETING=hi", "-"])
        .env("ANTHROPIC_API_KEY", "sk-should-not-leak")
        .env("HOST_ONLY", "x")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = net.spawn(&mut cmd);
    child.stdin.take().unwrap().write_all(b"env | sort\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    let names: Vec<&str> = r.stdout.lines().filter_map(|l| l.split('=').next()).collect();
    for n in &names {
        assert!(
            ["GREETING", "HOME", "LANG", "PATH", "PWD", "TMPDIR", "SHLVL", "OLDPWD", "_"].contains(n),
            "unexpected variable {n}"
        );
    }
    assert!(r.stdout.contains("GREETING=hi"));
    assert!(r.stdout.contains("HOME=/work"));
    assert!(!r.stdout.contains("sk-should-not-leak"));
}

#[sandbench_testkit::test]
fn output_streams_live_and_summary_follows() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("slow.py");
    std::fs::write(&p, "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')\n").unwrap();
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", p.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
    let t0 = Instant::now();
    let mut child = net.spawn(&mut cmd);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "first");
    let first_at = t0.elapsed();
    assert_eq!(lines.next().unwrap().unwrap(), "second");
    let second_at = t0.elapsed();
    // Ordering, not timing: "first" arrived while the program still slept.
    assert!(first_at + Duration::from_millis(1000) < second_at, "first {first_at:?}, second {second_at:?}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("outcome   ok"), "{err}");
    assert!(out.status.success());
}

#[sandbench_testkit::test]
fn violations_are_announced_in_text_mode() {
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin()).args(["run", "--memory", "64M"]).arg(samples_dir().join("hostile/memory_bomb.py")),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sandbench: memory — memory limit 64M hit"), "{err}");
    assert!(err.contains("outcome   violation"), "{err}");
    assert_eq!(out.status.code(), Some(0), "a program that hit a limit still ran: exit 0");
}

fn wait_for<F: FnMut() -> bool>(mut f: F, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[sandbench_testkit::test]
fn ctrl_c_cancels_and_cleans_up() {
    let net = OuterNet::new();
    let marker = format!("sandbench-cancel-{}", std::process::id());
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--format", "json", "--timeout", "60s", "--env", &format!("CANARY_MARK={marker}")])
        .arg(samples_dir().join("hostile/daemon.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    // daemon.py's parent exits after 0.3 s; use sleep_forever for a long run.
    let mut cmd2 = Command::new(bin());
    cmd2.args(["run", "--format", "json", "--timeout", "60s", "--env", &format!("CANARY_MARK={marker}")])
        .arg(samples_dir().join("hostile/sleep_forever.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    drop(cmd);
    let child = net.spawn(&mut cmd2);
    assert!(wait_for(|| !processes_with(&marker).is_empty(), Duration::from_secs(20)), "the program never started");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "an interrupted run exits 130, as shells expect");
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Cancelled, "{}", r.summary_line());
    assert!(r.violations.is_empty(), "a user cancel is nobody's violation: {:?}", r.violations);
    assert!(processes_with(&marker).is_empty());
    assert!(net.leftover_cgroups().is_empty(), "{:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test]
fn killed_sandbench_takes_its_sandbox_along_and_is_reaped_next_start() {
    let net = OuterNet::new();
    let marker = format!("sandbench-kill9-{}", std::process::id());
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--timeout", "60s", "--env", &format!("CANARY_MARK={marker}")])
        .arg(samples_dir().join("hostile/sleep_forever.py"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let mut child = net.spawn(&mut cmd);
    assert!(wait_for(|| !processes_with(&marker).is_empty(), Duration::from_secs(20)), "the program never started");
    child.kill().unwrap(); // SIGKILL: no cleanup code of sandbench runs
    child.wait().unwrap();
    assert!(
        wait_for(|| processes_with(&marker).is_empty(), Duration::from_secs(5)),
        "sandbox processes outlived sandbench: {:?}",
        processes_with(&marker)
    );
    if common::is_root() {
        assert!(!net.leftover_cgroups().is_empty(), "expected the dead run's cgroup to be left for reaping");
        // The next start reaps what the dead process left.
        let out = net.output(
            Command::new(bin()).args(["run"]).arg(samples_dir().join("benign/hello.sh")),
            Duration::from_secs(30),
        );
        assert!(out.status.success());
        assert!(net.leftover_cgroups().is_empty(), "not reaped: {:?}", net.leftover_cgroups());
    }
}

#[sandbench_testkit::test(needs = ["root", "cmd:setpriv"])]
fn unprivileged_user_gets_namespaces_and_says_what_is_weaker() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to switch to an unprivileged user");
    }
    let Ok(_) = Command::new("setpriv").arg("--version").output() else {
        panic!("cannot run although its needs hold: setpriv (util-linux) is not installed");
    };
    let net = OuterNet::new();
    let out = net.output(
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
            .arg(bin())
            .args(["run", "--format", "json"])
            .arg(samples_dir().join("hostile/secrets_env.py"))
            .env("ANTHROPIC_API_KEY", "sk-unpriv-canary")
            .env("HOME", "/nonexistent")
            .env("XDG_STATE_HOME", std::env::temp_dir()),
        Duration::from_secs(60),
    );
    if String::from_utf8_lossy(&out.stderr).contains("Permission denied") && out.stdout.is_empty() {
        panic!("cannot run although its needs hold: the test binary is not reachable by uid 65534");
    }
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Ok, "{} / {}", r.summary_line(), String::from_utf8_lossy(&out.stderr));
    assert!(r.stdout.contains("found: nothing"), "{}", r.stdout);
    assert_eq!(r.details["user_ns"], true);
    assert!(r.details["namespaces"].as_array().unwrap().iter().any(|n| n == "user"));
    if r.details["cgroup"].is_null() {
        let w = r.details["warnings"].to_string();
        assert!(w.contains("no cgroup"), "{w}");
    }
}

#[sandbench_testkit::test]
fn doctor_reports_the_process_tier() {
    let out = Command::new(bin()).args(["doctor", "--format", "json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = v.as_array().unwrap().iter().find(|t| t["tier"] == "process").unwrap();
    assert_eq!(p["available"], true, "{p}");
    let names: Vec<&str> = p["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in ["cgroup", "namespaces", "landlock", "seccomp"] {
        assert!(names.contains(&n), "doctor lacks {n}: {names:?}");
    }
    let text = Command::new(bin()).arg("doctor").output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("process"));
}

#[sandbench_testkit::test]
fn compare_runs_every_available_tier_and_reports_json() {
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin()).args(["compare", "--format", "json"]).arg(samples_dir().join("benign/hello.py")),
        Duration::from_secs(600),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = v["reports"].as_array().unwrap();
    let p = reports.iter().find(|r| r["tier"] == "process").expect("process tier in compare");
    assert_eq!(p["outcome"], "ok");
    assert_eq!(p["stdout"], "hello from the sandbox\n");
    for r in reports {
        assert_eq!(r["outcome"], "ok", "{r}");
    }
    let s = &v["summary"]["tiers"];
    let ps = s.as_array().unwrap().iter().find(|t| t["tier"] == "process").unwrap();
    assert_eq!(ps["runs"], 1);
    assert_eq!(v["summary"]["mode"], "sequential");
    let text = net.output(
        Command::new(bin()).args(["compare", "--tiers", "process"]).arg(samples_dir().join("benign/hello.py")),
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("one tier at a time"), "{text}");
    // The verdict comes right after the time to exit and the ratio.
    assert!(text.lines().any(|l| l.starts_with("process") && l.split("  ").any(|c| c.trim() == "ok")), "{text}");
}

#[sandbench_testkit::test]
fn compare_repeats_in_rounds_and_writes_every_format() {
    let net = OuterNet::new();
    let hello = samples_dir().join("benign/hello.py");
    let run = |args: &[&str]| {
        let out = net.output(
            Command::new(bin()).args(["compare", "--tiers", "process", "--repeat", "3"]).args(args).arg(&hello),
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v: serde_json::Value = serde_json::from_str(&run(&["--format", "json"])).unwrap();
    let p = &v["summary"]["tiers"][0];
    assert_eq!(p["runs"], 3);
    assert_eq!(p["exit_samples_ms"].as_array().unwrap().len(), 3);
    let e = &p["exit_ms"];
    assert!(e["min"].as_f64() <= e["p50"].as_f64() && e["p50"].as_f64() <= e["max"].as_f64(), "{e}");
    assert_eq!(p["ratio_to_fastest"], 1.0);
    let csv = run(&["--format", "csv", "--concurrent"]);
    assert!(csv.lines().nth(1).unwrap().starts_with("process,concurrent,3,"), "{csv}");
    let md = run(&["--format", "markdown"]);
    assert!(md.contains("| process | 3 |"), "{md}");
    let bad = Command::new(bin()).args(["compare", "--repeat", "0"]).arg(&hello).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[sandbench_testkit::test]
fn a_closed_stdout_ends_quietly() {
    // `sandbench run --format json | head -0`: the reader is gone before
    // the report is written.
    let net = OuterNet::new();
    for args in [&["run", "--format", "json"][..], &["doctor", "--format", "json"][..]] {
        let mut cmd = Command::new(bin());
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        if args[0] == "run" {
            cmd.arg(samples_dir().join("benign/hello.py"));
        }
        let mut child = net.spawn(&mut cmd);
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[sandbench_testkit::test(needs = ["root"])]
fn a_run_stopped_at_the_output_limit_reports_what_it_used_not_zeros() {
    // output_flood is killed by the runner at the output limit, so it never
    // reports an exit: its usage must still be the cgroup's counters.
    if !common::is_root() {
        panic!("cannot run although its needs hold: without root the process tier has no cgroup to count with on cgroup v1");
    }
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin()).args(["run", "--format", "json"]).arg(samples_dir().join("hostile/output_flood.py")),
        Duration::from_secs(60),
    );
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Violation, "{r:?}");
    assert!(r.usage.cpu_ms.is_some_and(|c| c > 0), "cpu {:?}: python cannot start in 0 ms", r.usage.cpu_ms);
    // Not a zero, but not Python's whole footprint either: the interpreter
    // starts before the program's process joins the run cgroup, and this
    // kernel does not move charges on a join (tier/process/cgroup.rs), so
    // the cgroup's high-water mark holds what came after (0.4-2 MiB here).
    assert!(r.usage.peak_memory_bytes.is_some_and(|m| m > 100 << 10), "peak memory {:?}", r.usage.peak_memory_bytes);
}

/// tokio reads `TOKIO_WORKER_THREADS` and panics on a bad value: sandbench
/// says what to do instead and exits 2; a good value is used.
#[sandbench_testkit::test]
fn a_bad_tokio_worker_threads_is_a_usage_error_not_a_panic() {
    let state = tempfile::tempdir().unwrap();
    let log = |threads: &str| {
        let net = OuterNet::new();
        let mut cmd = Command::new(bin());
        cmd.arg("log").env("TOKIO_WORKER_THREADS", threads).env("SANDBENCH_STATE_DIR", state.path());
        net.output(&mut cmd, Duration::from_secs(60))
    };
    for bad in ["", "0", "two", "-1"] {
        let out = log(bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.starts_with("sandbench: TOKIO_WORKER_THREADS is") && err.lines().count() == 1, "{bad:?}: {err}");
    }
    let out = log("1");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
