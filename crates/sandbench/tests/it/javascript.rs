//! JavaScript (Node.js) on every tier: a program runs as `node main.js` (an
//! ES module as `main.mjs`), as the main module, with the same limits as
//! Python — the memory limit is resident memory, so V8's large address-space
//! reservations start under a small limit, while touched memory past it is a
//! memory violation; the pids limit leaves room for Node's threads. The
//! process tier's cold run starts node ahead of the program (`waiter.js`)
//! and hands it nothing of init's; sessions run JavaScript calls; the
//! JavaScript gauntlet samples are judged as they declare. A tier this
//! machine cannot run is skipped with the reason (required on CI).

use crate::support::common;
use crate::support::docker_common::block_on;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{bin, samples_dir, OuterNet};
use sandbench::config::Config;
use sandbench::report::{Outcome, RunReport};
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};

/// What `node main.js` shows a program about itself, and a line to stderr.
const WHOAMI: &str = "const fs = require('fs');\n\
console.log('main', require.main === module, module.id, __filename, process.argv.length);\n\
console.error('to stderr');\n";

fn run(tier: &str, args: &[&str], file: &str, code: &str) -> RunReport {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join(file);
    std::fs::write(&prog, code).unwrap();
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin())
            .args(["run", "--tier", tier, "--format", "json"])
            .args(args)
            .arg(&prog)
            .stdin(Stdio::null()),
        Duration::from_secs(300),
    );
    common::report(&out)
}

fn runs_as_node_main(tier: &str) {
    let r = run(tier, &[], "who.js", WHOAMI);
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    assert_eq!(r.language, "javascript");
    assert_eq!(r.stdout, "main true . /work/main.js 2\n", "{tier}");
    assert_eq!(r.stderr, "to stderr\n", "{tier}");
    // An ES module, by extension and by its syntax.
    let esm = "import os from 'node:os';\nexport const x = 1;\nconsole.log('esm', os.platform(), import.meta.url);\n";
    let r = run(tier, &["--language", "js"], "m.mjs", esm);
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    assert_eq!(r.stdout, "esm linux file:///work/main.mjs\n", "{tier}");
}

/// Resident memory is what the limit means: Node starts under 64M (V8
/// reserves far more address space than that), 24 MiB touched off-heap is
/// fine, 200 MiB touched is a memory violation.
fn memory_limit_is_resident(tier: &str) {
    let touch =
        |mib: u32| format!("const b = Buffer.alloc({mib} << 20, 1);\nconsole.log('touched', b.length >> 20);\n");
    let r = run(tier, &["--memory", "64M"], "small.js", &touch(24));
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    assert_eq!(r.stdout, "touched 24\n");
    let r = run(tier, &["--memory", "64M"], "big.js", &touch(200));
    assert_eq!(r.outcome, Outcome::Violation, "{}", r.summary_line());
    assert!(r.has_violation(sandbench::event::ViolationKind::Memory), "{}", r.summary_line());
}

#[sandbench_testkit::test(needs = ["process"])]
fn process_runs_javascript_as_node_main() {
    runs_as_node_main("process");
}

#[sandbench_testkit::test(needs = ["process"])]
fn process_memory_limit_is_resident_memory_for_node() {
    memory_limit_is_resident("process");
}

/// Node starts 7 tasks (main, 4 V8 platform workers, the inspector's and
/// the signal watchdog's threads) and 4 more when its libuv pool first
/// works: the default pids limit leaves room; a limit below that is an
/// honest pids violation, never a hang.
#[sandbench_testkit::test(needs = ["process"])]
fn process_pids_limit_and_node_threads() {
    let prog = "const fs = require('fs');\nconst n = () => fs.readdirSync('/proc/self/task').length;\nconst a = n();\nrequire('crypto').pbkdf2('a', 'b', 1, 32, 'sha256', () => console.log('tasks', a, n()));\n";
    let r = run("process", &[], "threads.js", prog);
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    let counts: Vec<u64> = r.stdout.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    assert_eq!(counts.len(), 2, "{}", r.stdout);
    assert!(counts[0] >= 2 && counts[1] >= counts[0], "{counts:?}");
    assert!(counts[1] < Limits::default().pids, "{counts:?}");
    // Below what node needs: it fails or hangs starting its threads; either
    // way a pids violation, within the wall time (never the setup grace).
    let r = run("process", &["--pids", "4", "--timeout", "5s"], "threads.js", prog);
    assert_eq!(r.outcome, Outcome::Violation, "{}", r.summary_line());
    assert!(r.timings_ms.total < 30_000.0, "{}", r.summary_line());
    assert!(r.has_violation(sandbench::event::ViolationKind::Pids), "{}", r.summary_line());
}

/// The cold run's pre-started node hands the program nothing of init's:
/// fds 3 and 4 (init's word and the ready byte) are closed before the
/// program runs (libuv made its own pipes at start-up, above them; what
/// reuses 3 or 4 later is a file node opened), stdin is /dev/null; an
/// exception's exit status is node's own.
#[sandbench_testkit::test(needs = ["process"])]
fn process_warm_node_leaks_no_descriptor_and_keeps_exit_codes() {
    let prog = "const fs = require('fs');\nconst what = (f) => { try { return fs.readlinkSync('/proc/self/fd/' + f); } catch (e) { return e.code; } };\nconsole.log('stdin', what(0), 'fd3', what(3).startsWith('pipe:') ? 'pipe' : 'no pipe', 'fd4', what(4).startsWith('pipe:') ? 'pipe' : 'no pipe');\n";
    let r = run("process", &[], "fds.js", prog);
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    assert_eq!(r.stdout, "stdin /dev/null fd3 no pipe fd4 no pipe\n");
    let r = run("process", &[], "throw.js", "process.exitCode = 3;\nthrow new Error('boom');\n");
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(1)), "{}", r.summary_line());
    assert!(r.stderr.contains("Error: boom"), "{}", r.stderr);
    let r = run("process", &[], "exit.js", "process.exit(7);\n");
    assert_eq!(r.exit.code, Some(7), "{}", r.summary_line());
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_runs_javascript_as_node_main() {
    runs_as_node_main("docker");
    memory_limit_is_resident("docker");
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_runs_javascript_as_node_main() {
    runs_as_node_main("gvisor");
    memory_limit_is_resident("gvisor");
}

/// Under TCG node takes seconds of CPU to start: one short program, with
/// the limits that allows.
#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_runs_javascript_in_the_guest() {
    let r = run("microvm", &["--cpu", "60s", "--timeout", "120s"], "who.js", WHOAMI);
    assert_eq!((r.outcome, r.exit.code), (Outcome::Ok, Some(0)), "{}: {r:#?}", r.summary_line());
    assert_eq!(r.stdout, "main true . /work/main.js 2\n");
    // The guest's node (Debian's), not the host's.
    assert_eq!(r.stderr, "to stderr\n");
}

/// A session keeps /work between JavaScript calls; each call is its own node.
#[sandbench_testkit::test(needs = ["process"])]
fn process_session_runs_javascript_calls() {
    std::env::set_var("SANDBENCH_HELPER", env!("CARGO_BIN_EXE_sandbench"));
    let tier = sandbench::tier::by_name("process", &Config::load().unwrap()).unwrap();
    block_on(async move {
        let limits = Limits { wall_time: Duration::from_secs(30), ..Limits::default() };
        let s = Session::open(Arc::clone(&tier), SessionSpec::new(limits)).await.unwrap();
        let js = |c: &str| RunSpec::new(Language::Javascript, c);
        let a =
            s.run(js("require('fs').writeFileSync('kept.txt', 'from call one'); globalThis.x = 1;\n")).await.unwrap();
        assert_eq!((a.outcome, a.exit.code), (Outcome::Ok, Some(0)), "{a:#?}");
        let b = s
            .run(js("console.log(require('fs').readFileSync('kept.txt', 'utf8'), typeof globalThis.x);\n"))
            .await
            .unwrap();
        assert_eq!((b.outcome, b.exit.code), (Outcome::Ok, Some(0)), "{b:#?}");
        assert_eq!(b.stdout, "from call one undefined\n");
        // Python and JavaScript calls share the session's files.
        let c = s.run(RunSpec::new(Language::Python, "print(open('kept.txt').read())\n")).await.unwrap();
        assert_eq!(c.stdout, "from call one\n");
        s.close().await;
    });
}

/// Every JavaScript sample as it declares on the process tier (the full
/// gauntlet test runs them on every tier).
#[sandbench_testkit::test(needs = ["process"])]
fn javascript_samples_as_declared_on_process() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["benign", "hostile"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        for e in std::fs::read_dir(samples_dir().join(sub)).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "js") {
                std::fs::copy(e.path(), dir.path().join(sub).join(e.file_name())).unwrap();
            }
        }
    }
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin())
            .args(["gauntlet", "--tiers", "process", "--repeat", "1", "--format", "markdown", "--samples"])
            .arg(dir.path())
            .stdin(Stdio::null()),
        Duration::from_secs(600),
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{md}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(md.contains("js-memory-bomb") && md.contains("js-network") && md.contains("cells as declared"), "{md}");
    assert!(!md.contains("ESCAPED") && !md.contains("n/a"), "{md}");
}

#[sandbench_testkit::test]
fn javascript_names_on_the_command_line() {
    for bad in [vec!["run", "--language", "rubyscript", "x.js"], vec!["run", "--lang", "ecmascript", "x.js"]] {
        let out = Command::new(bin()).args(&bad).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("javascript"), "the known languages are named: {err}");
    }
}
