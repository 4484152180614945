//! Sessions on every tier that keeps them: files a call writes in the work
//! directory are there for the next call; each call is a fresh process whose
//! leftovers die with it; a limit one call hits is in that call's report and
//! the session goes on; two sessions never see each other's files or
//! processes; closing leaves nothing of the sandbox. Driven in-process
//! through the engine's `Session` (the MCP tests drive the same through the
//! built binary). A tier this machine cannot run is skipped with the reason.

use crate::support::docker_common::{block_on, eventually, tier_ready};

use std::sync::Arc;
use std::time::Duration;

use sandbench::config::Config;
use sandbench::event::{EventKind, Phase, RunEvent, ViolationKind};
use sandbench::report::{Outcome, RunReport};
use sandbench::runner::Update;
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

fn tier(name: &str) -> Arc<dyn Tier> {
    // The process tier's helper is the sandbench binary, not this test binary.
    std::env::set_var("SANDBENCH_HELPER", env!("CARGO_BIN_EXE_sandbench"));
    sandbench::tier::by_name(name, &Config::load().unwrap()).unwrap()
}

fn py(code: &str) -> RunSpec {
    RunSpec::new(Language::Python, code)
}

fn ok(r: &RunReport) {
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.exit.code, Some(0), "{r:#?}");
}

fn session_limits() -> Limits {
    Limits {
        memory_bytes: 96 << 20,
        wall_time: Duration::from_secs(30),
        file_size_bytes: 1 << 20,
        disk_bytes: 8 << 20,
        ..Limits::default()
    }
}

/// Python that lists the pids whose command line is exactly `argv`.
fn find_procs(argv: &str) -> String {
    format!(
        "import os\nwant = {argv:?}.replace(' ', '\\0') + '\\0'\nhits = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n            c = open('/proc/%s/cmdline' % p, 'rb').read().decode('utf-8', 'replace')\n        except OSError:\n            continue\n        if c == want:\n            hits.append(p)\nprint('procs', hits)\n"
    )
}

/// Runs the calls; returns the details of a call in each session.
async fn exercise(name: &str) -> Vec<serde_json::Value> {
    let t = tier(name);
    let a = Session::open(t.clone(), SessionSpec::new(session_limits())).await.unwrap();
    let b = Session::open(t.clone(), SessionSpec::new(session_limits())).await.unwrap();

    // A file written by one call is there for the next; a daemon is not.
    let r = a
        .run(py("import subprocess\nopen('note.txt', 'w').write('kept-' + str(6 * 7))\nsubprocess.Popen(['sleep', '321'])\nprint('wrote')\n"))
        .await
        .unwrap();
    ok(&r);
    let mut seen = vec![r.details.clone()];
    assert_eq!(r.session.as_ref().map(|s| (s.id.as_str(), s.call)), Some((a.id(), 1)));
    assert_eq!(r.details["start"], "session", "{}", r.details);
    let r = a.run(py(&format!("print(open('/work/note.txt').read())\n{}", find_procs("sleep 321")))).await.unwrap();
    ok(&r);
    assert!(r.stdout.starts_with("kept-42\n"), "{}", r.stdout);
    assert!(r.stdout.contains("procs []"), "call 1's daemon outlived its call: {}", r.stdout);
    assert_eq!(r.session.as_ref().unwrap().call, 2);

    // The other session sees neither the file nor the processes of a call
    // running in the first one; that call, cancelled, leaves the session usable.
    let mut running = a.start(py("import subprocess\nsubprocess.run(['sleep', '20'])\n")).unwrap();
    while let Some(u) = running.events.recv().await {
        if let Update::Event(RunEvent { kind: EventKind::Phase(Phase::Running), .. }) = u {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = b
        .run(py(&format!(
            "import os\nprint('note', os.path.exists('/work/note.txt'), sorted(os.listdir('/work')))\n{}",
            find_procs("sleep 20")
        )))
        .await
        .unwrap();
    ok(&r);
    seen.push(r.details.clone());
    assert!(r.stdout.contains("note False"), "{}", r.stdout);
    assert!(r.stdout.contains("procs []"), "session b saw session a's process: {}", r.stdout);
    running.cancel();
    let r = running.report().await;
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:#?}");
    let r = a.run(py(&find_procs("sleep 20"))).await.unwrap();
    ok(&r);
    assert!(r.stdout.contains("procs []"), "the cancelled call's child outlived it: {}", r.stdout);

    // A limit hit is that call's; the session goes on, its files intact.
    let mut spin = py("while True:\n    pass\n");
    spin.limits = Limits { cpu_time: Duration::from_secs(1), ..session_limits() };
    let r = a.run(spin).await.unwrap();
    assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
    assert!(r.has_violation(ViolationKind::CpuTime), "{r:#?}");
    let r = a.run(py("print(open('note.txt').read())")).await.unwrap();
    ok(&r);
    assert!(r.violations.is_empty(), "the earlier call's CPU hit is not this one's: {r:#?}");
    assert_eq!(r.stdout, "kept-42\n");
    // A file at the size limit, and a full scratch space, are the calls'
    // that made them, not of every later call that finds them there.
    let r = a
        .run(py("try:\n    open('big', 'wb').write(b'x' * (2 << 20))\nexcept OSError as e:\n    print(e)\n"))
        .await
        .unwrap();
    assert!(r.has_violation(ViolationKind::FileSize), "{r:#?}");
    let fill = "n = 0\ntry:\n    while True:\n        open('/tmp/f%d' % n, 'wb').write(b'x' * (512 << 10))\n        n += 1\nexcept OSError as e:\n    print(n, e)\n";
    let r = a.run(py(fill)).await.unwrap();
    assert!(r.has_violation(ViolationKind::Disk), "{r:#?}");
    let r = a.run(py("import os\nprint(len(os.listdir('/tmp')))\n")).await.unwrap();
    ok(&r);
    assert!(r.violations.is_empty(), "an earlier call's file size and disk hits are not this one's: {r:#?}");
    let r = a
        .run(py("import os\nfor f in os.listdir('/tmp'):\n    os.remove('/tmp/' + f)\nos.remove('big')\n"))
        .await
        .unwrap();
    ok(&r);
    let bomb = py("chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n");
    let r = a.run(bomb).await.unwrap();
    assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
    assert!(r.has_violation(ViolationKind::Memory), "{r:#?}");
    assert_eq!(a.info().calls, 11);
    if name == "gvisor" {
        // gVisor's sandbox is one host process: the memory limit ends it, and
        // with it the session (said in the call's notes).
        tokio::time::timeout(Duration::from_secs(30), a.gone().cancelled()).await.expect("session closed");
        assert!(a.info().closed.unwrap().contains("sandbox died"));
    } else {
        let r = a.run(py("print(open('note.txt').read())")).await.unwrap();
        ok(&r);
        assert!(!r.has_violation(ViolationKind::Memory), "{r:#?}");
    }

    a.close().await;
    b.close().await;
    let e = a.start(py("print(1)")).err().unwrap();
    assert!(e.to_string().contains("closed"), "{e}");
    seen
}

#[sandbench_testkit::test(needs = ["process"])]
fn process_sessions_keep_files_and_nothing_else() {
    let t = tier("process");
    let a = block_on(t.probe());
    if !a.available {
        assert!(!crate::support::common::required("process"), "process required: {}", a.summary);
        panic!("cannot run although its needs hold: process tier unavailable: {}", a.summary);
    }
    // What is left after close is checked through the binary, inside an
    // outer net (mcp_stdio: a client that disconnects mid-session).
    block_on(exercise("process"));
}

/// Which of `made` (short container ids from the calls' details) are still
/// containers of this test process on `tier`. Only the test's own: other
/// modules' in-process sessions (session_plants, host_inodes) carry the same
/// process label and may be alive now.
fn left_of(tier: &str, made: &[String]) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptions;
    assert!(!made.is_empty(), "the calls name their containers");
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("sandbench.pid={}", std::process::id()), format!("sandbench.tier={tier}")],
    )]);
    block_on(async {
        let at = sandbench::internals::docker::Endpoint::of(&sandbench::config::HostEnv::from_process());
        let engine = sandbench::internals::docker::Engine::connect(&at).await.expect("docker answers");
        let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let all = engine.docker.list_containers(Some(opts)).await.expect("list");
        all.into_iter().filter_map(|c| c.id).filter(|id| made.iter().any(|m| id.starts_with(m.as_str()))).collect()
    })
}

/// The containers the calls of `details` ran in.
fn containers_of(details: &[serde_json::Value]) -> Vec<String> {
    details.iter().filter_map(|d| d["container"].as_str().map(String::from)).collect()
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_sessions_keep_files_and_nothing_else() {
    if !tier_ready("docker") {
        return;
    }
    let made = containers_of(&block_on(exercise("docker")));
    assert_eq!(made.len(), 2, "each session names its container");
    assert!(eventually(20, || left_of("docker", &made).is_empty()), "containers left: {:?}", left_of("docker", &made));
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_sessions_keep_files_and_nothing_else() {
    if !tier_ready("gvisor") {
        return;
    }
    let made = containers_of(&block_on(exercise("gvisor")));
    assert_eq!(made.len(), 2, "each session names its container");
    assert!(eventually(20, || left_of("gvisor", &made).is_empty()), "containers left: {:?}", left_of("gvisor", &made));
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_sessions_keep_files_and_nothing_else() {
    let t = tier("microvm");
    let a = block_on(t.probe());
    if !a.available {
        assert!(!crate::support::common::required("microvm"), "microvm required: {}", a.summary);
        panic!("cannot run although its needs hold: microvm unavailable: {}", a.summary);
    }
    let guests: Vec<String> =
        block_on(exercise("microvm")).iter().filter_map(|d| d["vm_name"].as_str().map(String::from)).collect();
    assert_eq!(guests.len(), 2, "each session names its guest");
    // The sessions' QEMU processes are gone (other tests' guests may run).
    let left = |name: &str| {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == name.as_bytes()))
        })
    };
    for g in &guests {
        assert!(!left(g), "the session's guest {g} is still running");
    }
}

/// A microVM call runs in a process the agent made ahead of it (the zygote,
/// forked after the previous call's exit): nothing of the previous call's
/// code may be reachable from the next program, through frames or objects.
#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_calls_see_nothing_of_an_earlier_call() {
    let t = tier("microvm");
    let a = block_on(t.probe());
    if !a.available {
        assert!(!crate::support::common::required("microvm"), "microvm required: {}", a.summary);
        panic!("cannot run although its needs hold: microvm unavailable: {}", a.summary);
    }
    block_on(async {
        let s = Session::open(t, SessionSpec::new(session_limits())).await.unwrap();
        ok(&s.run(py("kept = 'zz-earlier-call-zz'\nprint(1)\n")).await.unwrap());
        let look = r#"import gc, sys
needle = ''.join(['zz-earlier-', 'call-zz'])
seen = []
def look(x, where):
    if x is needle:
        return
    if isinstance(x, (bytes, bytearray)):
        x = bytes(x).decode('latin-1')
    if isinstance(x, str) and needle in x:
        seen.append(where)
f = sys._getframe()
while f is not None:
    for k, v in list(f.f_locals.items()):
        look(v, f.f_code.co_name + '.' + k)
    f = f.f_back
for o in gc.get_objects():
    for r in gc.get_referents(o):
        look(r, type(o).__name__)
print('seen', seen[:5])
"#;
        let r = s.run(py(look)).await.unwrap();
        ok(&r);
        assert_eq!(r.stdout.trim(), "seen []", "{r:#?}");
        s.close().await;
    });
}

#[sandbench_testkit::test]
fn tiers_without_sessions_say_so() {
    let t = tier("bwrap");
    let e = t.sessions().unwrap_err();
    assert!(e.contains("cannot keep a session"), "{e}");
    let e = block_on(Session::open(t, SessionSpec::new(Limits::default()))).err().unwrap().to_string();
    assert!(e.contains("bwrap tier cannot keep a session"), "{e}");
}

#[sandbench_testkit::test(needs = ["docker"])]
fn idle_and_capped_sessions_leave_no_container() {
    if !tier_ready("docker") {
        return;
    }
    let made = block_on(async {
        let t = tier("docker");
        let idle = SessionSpec { idle_timeout: Duration::from_secs(1), ..SessionSpec::new(session_limits()) };
        let a = Session::open(t.clone(), idle).await.unwrap();
        let first = a.run(py("print(1)")).await.unwrap();
        ok(&first);
        let capped = SessionSpec { max_life: Duration::from_secs(4), ..SessionSpec::new(session_limits()) };
        let b = Session::open(t, capped).await.unwrap();
        // A call running into the cap is cut to what is left of it.
        let r = b.run(py("import time\ntime.sleep(60)\n")).await.unwrap();
        assert!(r.has_violation(ViolationKind::WallTimeout), "{r:#?}");
        for s in [&a, &b] {
            tokio::time::timeout(Duration::from_secs(60), s.gone().cancelled()).await.expect("closed on its own");
        }
        assert!(a.info().closed.unwrap().contains("idle"));
        assert!(b.info().closed.unwrap().contains("lifetime cap"));
        containers_of(&[first.details, r.details])
    });
    assert_eq!(made.len(), 2, "each session names its container");
    assert!(eventually(20, || left_of("docker", &made).is_empty()), "containers left: {:?}", left_of("docker", &made));
}
