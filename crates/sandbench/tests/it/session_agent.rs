//! The docker and gVisor session agent (PID 1 of a session container; one
//! stream attached for the whole session carries every call) as a hostile
//! call sees it: it cannot write the stream or read it, forge a frame on
//! it, signal or read PID 1 or its call's loader, or learn the session's
//! ids from their environment; its output arrives whole and framed; and the
//! next calls run as if nothing had happened (issue 24).

use crate::support::docker_common::{block_on, tier_ready};

use std::time::Duration;

use sandbench::config::Config;
use sandbench::report::{Outcome, RunReport};
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};

const HOSTILE: &str = r#"
import json, os, signal
def frame(k, d):
    return k + len(d).to_bytes(4, "big") + d
# What would end the call, fail it, kill the next one or fake a verdict,
# were it on the stream: an exit frame, a failure, a kill and an
# acknowledgement, a status at every limit.
forged = frame(b"x", b"code 0 out=0 err=0") + frame(b"f", b"forged") + b"k\n" + frame(b"s", b"pids=999 disk=2f776f726b fsize=2f776f726b2f78")
for fd in range(64):
    try:
        os.write(fd, forged)
    except OSError:
        pass
out = {"opened": [], "signalled": [], "environ": {}, "parent": os.getppid(), "uid": os.getuid(),
       "own": sorted(k for k in os.environ if k.startswith("SANDBENCH"))}
for pid in (1, os.getppid()):
    for n in (0, 1, 2):
        p = "/proc/%d/fd/%d" % (pid, n)
        for mode in ("rb", "wb"):
            try:
                with open(p, mode, buffering=0) as fh:
                    fh.write(forged) if mode == "wb" else fh.read(1)
                out["opened"].append(p + " " + mode)
            except OSError:
                pass
    try:
        out["environ"][str(pid)] = open("/proc/%d/environ" % pid, "rb").read().decode("latin-1")
    except OSError as e:
        out["environ"][str(pid)] = "denied %d" % e.errno
    for sig in (signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            out["signalled"].append([pid, int(sig)])
        except OSError:
            pass
# Everything this uid may signal: its own processes only.
try:
    os.kill(-1, signal.SIGCONT)
except OSError:
    pass
print(json.dumps(out))
"#;

fn py(code: &str) -> RunSpec {
    RunSpec::new(Language::Python, code)
}

fn clean(r: &RunReport) {
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!((r.exit.code, r.exit.signal), (Some(0), None), "{r:#?}");
    assert!(r.violations.is_empty(), "{r:#?}");
    assert_eq!(r.details["output"]["complete"], true, "{}", r.details);
}

async fn hostile_calls_on(name: &str) {
    let t = sandbench::tier::by_name(name, &Config::load().unwrap()).unwrap();
    let limits = Limits { wall_time: Duration::from_secs(30), output_bytes: 8 << 20, ..Limits::default() };
    let s = Session::open(t, SessionSpec::new(limits)).await.unwrap();

    let r = s.run(py(HOSTILE)).await.unwrap();
    clean(&r);
    // The forgeries the program wrote to its own stdout are its output, as data.
    assert!(r.stdout.contains("code 0 out=0 err=0"), "{}", r.stdout);
    let json = r.stdout.rfind("{\"opened\"").map(|i| r.stdout[i..].trim()).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(v["opened"], serde_json::json!([]), "the program opened PID 1's or its loader's stdio: {v}");
    assert_eq!(v["signalled"], serde_json::json!([]), "a signal reached PID 1 or the loader: {v}");
    assert_ne!(v["uid"], 0);
    assert_eq!(v["own"], serde_json::json!([]), "sandbench's own variables reached the program: {v}");
    for (pid, env) in v["environ"].as_object().unwrap() {
        let env = env.as_str().unwrap();
        // Denied (runc: not dumpable), or blanked (gVisor shows the block).
        assert!(env.starts_with("denied") || !env.contains('='), "{name}: /proc/{pid}/environ = {env:?}");
        assert!(!env.contains("SANDBENCH_SESSION_IDS"), "{name}: {env:?}");
    }

    // The next call: as if nothing had happened, its output whole.
    let big = "import sys\nsys.stdout.write('o' * 300000)\nsys.stderr.write('e' * 100000)\nprint('after')\n";
    let r = s.run(py(big)).await.unwrap();
    clean(&r);
    assert_eq!(r.stdout.len(), 300_000 + "after\n".len(), "{}", r.summary_line());
    assert!(r.stdout.ends_with("after\n"));
    assert_eq!(r.stderr.len(), 100_000);

    // A call that kills its whole process group (only itself: the loader
    // is another uid), then one more.
    let r = s.run(py("import os, signal\nprint('x', flush=True)\nos.killpg(0, signal.SIGKILL)\n")).await.unwrap();
    assert_eq!(r.exit.signal, Some(libc::SIGKILL), "{r:#?}");
    assert_eq!(r.stdout, "x\n");
    let r = s.run(py("print(sum(range(10)))\n")).await.unwrap();
    clean(&r);
    assert_eq!(r.stdout, "45\n");
    assert_eq!(s.info().calls, 4);
    s.close().await;
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_hostile_call_cannot_reach_the_docker_session_agent_or_its_stream() {
    if !tier_ready("docker") {
        return;
    }
    block_on(hostile_calls_on("docker"));
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn a_hostile_call_cannot_reach_the_gvisor_session_agent_or_its_stream() {
    if !tier_ready("gvisor") {
        return;
    }
    block_on(hostile_calls_on("gvisor"));
}

/// Ways a Python program ends, each with what the interpreter does at its
/// exit: a session's call must end them exactly as a one-shot run does.
const ENDINGS: [&str; 4] = [
    r#"
import atexit, sys, threading, time
class Witness:
    def __del__(self):
        print("del", flush=True)
w = Witness()
atexit.register(lambda: print("atexit", flush=True))
def late():
    time.sleep(0.2)
    print("thread", flush=True)
threading.Thread(target=late).start()
print("main", flush=True)
sys.exit("bye")
"#,
    "import sys\nprint('three')\nsys.exit(3)\n",
    "print('before')\nraise ValueError('boom')\n",
    "import sys\nsys.stdout.write('no newline, never flushed by hand')\nsys.exit(None)\n",
];

async fn endings_on(name: &str) {
    // No warm pool: its containers would outlive this test (they are
    // drained only at shutdown).
    let mut config = Config::load().unwrap();
    config.docker.pool_size = 0;
    let t = sandbench::tier::by_name(name, &config).unwrap();
    let limits = Limits { wall_time: Duration::from_secs(30), ..Limits::default() };
    let s = Session::open(t.clone(), SessionSpec::new(limits.clone())).await.unwrap();
    for (i, code) in ENDINGS.iter().enumerate() {
        let mut spec = py(code);
        spec.limits = limits.clone();
        let run = sandbench::runner::run(t.clone(), spec.clone()).await;
        let call = s.run(spec).await.unwrap();
        assert_eq!(run.outcome, Outcome::Ok, "{run:#?}");
        if i == 0 {
            // What is compared: every step of the interpreter's exit, in order.
            assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("main\nthread\natexit\ndel\n", "bye\n"));
        }
        assert_eq!(
            (&call.stdout, &call.stderr, call.exit.code, call.exit.signal),
            (&run.stdout, &run.stderr, run.exit.code, run.exit.signal),
            "{name}: a session's call ended otherwise than a run of\n{code}"
        );
    }
    // A file left open at the end of one call was flushed and closed by it.
    let r = s.run(py("f = open('/work/left-open.txt', 'w')\nf.write('kept')\n")).await.unwrap();
    clean(&r);
    let r = s.run(py("print(open('/work/left-open.txt').read())\n")).await.unwrap();
    clean(&r);
    assert_eq!(r.stdout, "kept\n");
    s.close().await;
}

#[sandbench_testkit::test(needs = ["docker"])]
fn a_session_call_ends_as_a_run_does_on_docker() {
    if !tier_ready("docker") {
        return;
    }
    block_on(endings_on("docker"));
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn a_session_call_ends_as_a_run_does_on_gvisor() {
    if !tier_ready("gvisor") {
        return;
    }
    block_on(endings_on("gvisor"));
}
