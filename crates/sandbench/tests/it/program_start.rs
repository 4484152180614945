//! A program starts as it would from a terminal, on every tier and on a
//! one-shot run and a session's call alike (issue 46, fidelity): every
//! signal at its default and none blocked. The processes that start it are
//! Rust (which ignores SIGPIPE) and Python (SIGPIPE and SIGXFSZ), and an
//! exec keeps an ignored signal ignored: `yes | head -n 1` then said
//! "Broken pipe", and a write past the file-size limit read as EFBIG where
//! a terminal's shell sees its command killed by SIGXFSZ. A Python program
//! sees what `python3 prog.py` sees (Python's own choices, its subprocesses
//! the defaults again). A shell program's `#!` line picks bash (or sh's
//! option word) as a terminal would, and its report says which shell ran.

use crate::support::docker_common::{block_on, tier_available};

use std::sync::Arc;
use std::time::Duration;

use sandbench::config::Config;
use sandbench::report::RunReport;
use sandbench::runner;
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

fn limits() -> Limits {
    Limits { wall_time: Duration::from_secs(30), file_size_bytes: 1 << 20, ..Limits::default() }
}

/// (what, language, code, what its output must hold, what it must not).
const ROWS: &[(&str, Language, &str, &str, &str)] = &[
    (
        "a shell pipeline's writer ends by SIGPIPE",
        Language::Sh,
        "yes | head -n 1\necho done\n",
        "y\ndone\n",
        "Broken pipe",
    ),
    (
        "a write past the file-size limit ends by SIGXFSZ",
        Language::Sh,
        "head -c 2097152 /dev/zero > big\necho \"rc=$?\"\nrm -f big\n",
        "rc=153",
        "File too large",
    ),
    (
        "no signal ignored or blocked where /proc says",
        Language::Sh,
        "grep -E '^Sig(Ign|Blk)' /proc/self/status | grep -v ':\t0000000000000000$' || echo clean\n",
        "clean",
        "Sig",
    ),
    (
        "a #!/bin/bash program runs under bash (arrays, [[ ]], process substitution)",
        Language::Sh,
        "#!/bin/bash\na=(x y)\n[[ ${a[1]} == y ]] && echo arrays\ncat <(echo procsub)\necho \"$BASH_VERSINFO\" | grep -q '^[0-9]' && echo bash\n",
        "arrays\nprocsub\nbash\n",
        "not found",
    ),
    (
        "a #!/bin/sh -e program stops at its first failure",
        Language::Sh,
        "#!/bin/sh -e\necho before\nfalse\necho unreached\n",
        "before\n",
        "unreached",
    ),
    (
        "Python keeps its own choices, its subprocess the defaults",
        Language::Python,
        "import signal, subprocess\nprint(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, signal.getsignal(signal.SIGINT) is signal.default_int_handler)\nsubprocess.run(['sh', '-c', 'yes | head -n 1'])\n",
        "True True\ny\n",
        "Broken pipe",
    ),
];

fn check(what: &str, r: &RunReport, want: &str, never: &str) -> Option<String> {
    let all = format!("{}{}", r.stdout, r.stderr);
    // A shell program's report says which shell ran it.
    let shell = r.details["shell"].as_str().unwrap_or("");
    let said = match r.language.as_str() {
        "sh" if what.contains("bash") => shell.starts_with("bash"),
        "sh" => shell.starts_with("sh (dash)"),
        _ => shell.is_empty(),
    };
    (!r.stdout.contains(want) || all.contains(never) || !said).then(|| {
        format!(
            "{what}: wanted {want:?}, never {never:?}; got {}\nstdout {:?}\nstderr {:?}",
            r.summary_line(),
            r.stdout,
            r.stderr
        )
    })
}

async fn rows_on(name: &str) -> Vec<String> {
    std::env::set_var("SANDBENCH_HELPER", env!("CARGO_BIN_EXE_sandbench"));
    // No warm pool: its containers and guests would outlive this test (a
    // pool is drained only at a front end's shutdown).
    let mut config = Config::load().unwrap();
    config.docker.pool_size = 0;
    config.microvm.pool_size = 0;
    let t: Arc<dyn Tier> = sandbench::tier::by_name(name, &config).unwrap();
    let mut wrong = vec![];
    for (what, lang, code, want, never) in ROWS {
        let r = runner::run(t.clone(), RunSpec { limits: limits(), ..RunSpec::new(*lang, *code) }).await;
        wrong.extend(check(&format!("{name}, one run: {what}"), &r, want, never));
    }
    if t.sessions().is_ok() {
        let s = Session::open(t.clone(), SessionSpec::new(limits())).await.unwrap();
        for (what, lang, code, want, never) in ROWS {
            let r = s.run(RunSpec::new(*lang, *code)).await.unwrap();
            wrong.extend(check(&format!("{name}, a session's call: {what}"), &r, want, never));
        }
        s.close().await;
    }
    wrong
}

fn on(name: &str) {
    if let Err(why) = tier_available(name) {
        assert!(!crate::support::common::required(name), "{name} required: {why}");
        return;
    }
    let wrong = block_on(rows_on(name));
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_programs_start_with_default_signals() {
    on("process");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_programs_start_with_default_signals() {
    on("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_programs_start_with_default_signals() {
    on("gvisor");
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_programs_start_with_default_signals() {
    on("microvm");
}

/// A peer's wrapper, and the program through it, start with the defaults
/// too, whatever sandbench inherited: sandbench is started here with SIGINT
/// and SIGHUP ignored, as a background job under nohup is.
#[sandbench_testkit::test(needs = ["bwrap", "root"])]
fn peer_programs_start_with_default_signals() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("sig.sh");
    std::fs::write(&prog, ROWS[2].2).unwrap();
    let net = crate::support::common::OuterNet::new();
    // The shell's `trap ''` ignores them, and its exec keeps them ignored.
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("trap '' INT HUP; exec \"$0\" run --format json --tier bwrap \"$1\"")
        .arg(crate::support::common::bin())
        .arg(&prog);
    let r = crate::support::common::report(&net.output(&mut cmd, Duration::from_secs(60)));
    assert!(r.stdout.contains("clean"), "{}\nstdout {:?}\nstderr {:?}", r.summary_line(), r.stdout, r.stderr);
}
