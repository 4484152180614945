//! What the process tier's sandbox holds once it is built, seen from inside
//! a run and a session call (issue 21, item 2): no process the program can
//! see has a capability, init is the sandbox's own uid, and the program can
//! neither trace nor signal nor read init. And two of its verdicts, checked
//! the way a flaky one was caught: no process of a run is alive when its
//! verdict is final (item 11), and a run stopped from outside reports the
//! resident memory its program had, interpreter included (item 12).

use crate::support::common::{self, bin, samples_dir, OuterNet};
use crate::support::docker_common::block_on;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use sandbench::internals::processes_with;
use sandbench::report::Outcome;
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

/// Python: every process this sandbox shows, with its uid and capability
/// sets, and what the program could do to pid 1 (init). One JSON line.
const LOOK_AT_INIT: &str = r#"import ctypes, json, os, signal
procs = {}
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            st = dict(l.split(':', 1) for l in open('/proc/%s/status' % p).read().splitlines() if ':' in l)
        except OSError:
            continue
        procs[p] = {k: st[k].split()[0] for k in ('Uid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs') if k in st}
tries = {}
for what, f in (('mem', '/proc/1/mem'), ('environ', '/proc/1/environ'), ('fd', '/proc/1/fd')):
    try:
        if what == 'fd':
            os.listdir(f)
        else:
            open(f, 'rb').read(1)
        tries[what] = 'opened'
    except OSError as e:
        tries[what] = 'refused'
for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGSTOP):
    try:
        os.kill(1, sig)
        tries['kill%d' % sig] = 'sent'
    except OSError:
        tries['kill%d' % sig] = 'refused'
libc = ctypes.CDLL(None, use_errno=True)
tries['ptrace'] = 'refused' if libc.ptrace(16, 1, None, None) != 0 else 'attached'
print(json.dumps({'me': os.getuid(), 'procs': procs, 'tries': tries}))
"#;

fn check_init(what: &str, stdout: &str) {
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"));
    let me = v["me"].as_u64().unwrap();
    assert_ne!(me, 0, "{what}: the program runs as root");
    let procs = v["procs"].as_object().unwrap();
    let init = &procs["1"];
    assert_eq!(init["Uid"].as_str().unwrap().parse::<u64>().unwrap(), me, "{what}: init is not the sandbox's uid: {v}");
    assert_eq!(init["NoNewPrivs"], "1", "{what}: init may gain privileges again: {v}");
    for (pid, p) in procs {
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(p[set], "0000000000000000", "{what}: pid {pid} holds {set} {}: {v}", p[set]);
        }
    }
    for (t, r) in v["tries"].as_object().unwrap() {
        assert_eq!(r, "refused", "{what}: the program could {t} init: {v}");
    }
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_init_holds_nothing_the_program_could_use() {
    // A one-shot run, through the binary inside the outer net.
    let net = OuterNet::new();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("look.py");
    std::fs::write(&p, LOOK_AT_INIT).unwrap();
    let out = net.output(
        Command::new(bin()).args(["run", "--tier", "process", "--format", "json"]).arg(&p),
        Duration::from_secs(120),
    );
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    check_init("one-shot run", &r.stdout);
    // Two calls of a session: init stays, and still holds nothing.
    std::env::set_var("SANDBENCH_HELPER", bin());
    let t: Arc<dyn Tier> = sandbench::tier::by_name("process", &common::config()).unwrap();
    block_on(async {
        let s = Session::open(t, SessionSpec::new(Limits::default())).await.unwrap();
        for n in 1..=2 {
            let r = tokio::time::timeout(Duration::from_secs(60), s.run(RunSpec::new(Language::Python, LOOK_AT_INIT)))
                .await
                .expect("the call ended")
                .unwrap();
            assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
            check_init(&format!("session call {n}"), &r.stdout);
        }
        s.close().await;
    });
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_daemon_is_gone_before_its_verdict() {
    // The soak once judged the daemon sample "escaped": a process of the
    // run was alive when the report was final. Run it enough times to meet
    // that window, and look the moment each report is out.
    std::env::set_var("SANDBENCH_HELPER", bin());
    let t: Arc<dyn Tier> = sandbench::tier::by_name("process", &common::config()).unwrap();
    let code = std::fs::read_to_string(samples_dir().join("hostile/daemon.py")).unwrap();
    let mut alive = vec![];
    block_on(async {
        for i in 0..40 {
            let marker = format!("SANDBENCH_DAEMON_MARK_{}_{i}", std::process::id());
            let mut spec = RunSpec::new(Language::Python, &code);
            spec.env.insert("DAEMON_MARK".into(), marker.clone());
            let r = sandbench::runner::run(t.clone(), spec).await;
            assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
            let left = processes_with(&marker);
            if !left.is_empty() {
                for p in &left {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL);
                }
                alive.push((i, left));
            }
        }
    });
    assert!(alive.is_empty(), "processes of a run alive after its verdict (run, pids): {alive:?}");
}

/// Children of `pid` (from /proc; the sandbox helper's cmdline names `__sandbox`).
fn children(pid: u32) -> Vec<(u32, String)> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            v.push((p, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    v
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().next()?.chars().next()
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_sandbox_dies_with_its_helper_once_dropped() {
    // init is another uid than the helper once both dropped: the kernel
    // checks the dying helper's right to signal it before it delivers
    // init's parent-death signal. Kill the helper with sandbench stopped
    // (so that nothing else cleans up): init must die with it.
    let net = OuterNet::new();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sleep.py");
    std::fs::write(&p, "import time\nprint('up', flush=True)\ntime.sleep(60)\n").unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--format", "json", "--timeout", "50s"])
        .arg(&p)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut sb = net.spawn(&mut cmd);
    let pid = sb.id();
    let found = || {
        let helper = children(pid).into_iter().find(|(_, c)| c.contains("__sandbox"))?.0;
        let init = children(helper).first()?.0;
        let program = children(init).first()?.0;
        Some((helper, init, program))
    };
    let mut ids = None;
    for _ in 0..300 {
        ids = found();
        if ids.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (helper, init, program) = ids.expect("the run's helper, init and program appeared");
    // Past the drop: the program runs.
    std::thread::sleep(Duration::from_millis(500));
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
    kill(Pid::from_raw(helper as i32), Signal::SIGKILL).unwrap();
    let gone = |p: u32| matches!(state(p), None | Some('Z') | Some('X'));
    let mut dead = false;
    for _ in 0..100 {
        if gone(init) && gone(program) {
            dead = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (si, sp) = (state(init), state(program));
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    let _ = sb.wait();
    assert!(dead, "init ({si:?}) and the program ({sp:?}) outlived their helper");
}
