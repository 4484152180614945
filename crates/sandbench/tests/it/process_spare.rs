//! The process tier's spare sandbox: the run after a run starts warm, a spare
//! is used once, and dropping the tier leaves no helper or cgroup behind.

use crate::support::common;

use std::sync::Arc;
use std::time::Duration;

use sandbench::event::{EventKind, Phase, RunEvent};
use sandbench::internals::process::ProcessTier;
use sandbench::report::Outcome;
use sandbench::runner::{self, Update};
use sandbench::session::{Session, SessionSpec};
use sandbench::spec::{Language, Limits, RunSpec};
use sandbench::tier::Tier;

/// Until the tier says a spare is ready (what a warm start takes).
async fn spare_ready(tier: &Arc<dyn Tier>) {
    let t = std::time::Instant::now();
    while !tier.warm().is_some_and(|w| w.contains("ready ·")) {
        assert!(t.elapsed() < Duration::from_secs(10), "no spare became ready: {:?}", tier.warm());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn second_run_is_warm_and_spares_are_single_use_and_cleaned() {
    let process = Arc::new(ProcessTier::new(&common::config()));
    let tier: Arc<dyn Tier> = process.clone();
    let a = tier.probe().await;
    if !a.available {
        assert!(!common::required("process"), "process tier unavailable: {}", a.summary);
        panic!("cannot run although its needs hold: process tier unavailable: {}", a.summary);
    }
    let spec = |code: &str| RunSpec::new(Language::Python, code);
    let first = runner::run(tier.clone(), spec("import os; print(os.getpid())")).await;
    assert_eq!(first.outcome, Outcome::Ok, "{}", first.summary_line());
    assert_eq!(first.details["start"], "cold");
    // The spare is made in the background after the first run.
    spare_ready(&tier).await;
    let second = runner::run(tier.clone(), spec("open('mark', 'w').write('x'); print('ok')")).await;
    assert_eq!(second.outcome, Outcome::Ok, "{}", second.summary_line());
    assert_eq!(second.details["start"], "warm");
    spare_ready(&tier).await;
    // A warm sandbox is a fresh one: nothing of the previous program is there.
    let third = runner::run(tier.clone(), spec("import os; print(os.path.exists('mark'))")).await;
    assert_eq!(third.details["start"], "warm");
    assert_eq!(third.stdout.trim(), "False");
    // Other tests of this process make cgroups with the same prefix: what
    // must go is this tier's spare's own.
    spare_ready(&tier).await;
    let spare = process.spare_cgroups();
    if common::is_root() {
        assert!(!spare.is_empty() && spare.iter().all(|d| d.is_dir()), "a spare should be waiting in its cgroup");
    }
    drop(tier);
    drop(process);
    let left = || spare.iter().filter(|d| d.exists()).cloned().collect::<Vec<_>>();
    let t = std::time::Instant::now();
    while !left().is_empty() && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(left().is_empty(), "spare left behind: {:?}", left());
}

/// What a program sees of its sandbox, printed as JSON from its first line
/// on (so: before any of its own work, every limit must already hold).
const FACTS: &str = r#"
import json, os, socket, resource, ctypes, errno
facts = {}
facts["ns"] = {n: os.readlink(f"/proc/self/ns/{n}") for n in sorted(os.listdir("/proc/self/ns"))}
facts["uid"] = [os.getuid(), os.geteuid(), os.getgid()]
facts["groups"] = os.getgroups()
facts["cgroup"] = open("/proc/self/cgroup").read().splitlines()
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
facts["seccomp"] = [status.get("Seccomp"), status.get("NoNewPrivs"), status.get("CapEff")]
s = socket.socket()
try:
    s.connect(("127.0.0.1", 9))
    facts["tcp"] = "connected"
except OSError as e:
    facts["tcp"] = errno.errorcode.get(e.errno, str(e.errno))
s.close()
try:
    open("/etc/sandbench-probe", "w")
    facts["write_etc"] = "written"
except OSError as e:
    facts["write_etc"] = errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
facts["unshare"] = [libc.unshare(0x10000000), errno.errorcode.get(ctypes.get_errno())]
facts["rlimits"] = {n: resource.getrlimit(getattr(resource, n)) for n in
    ["RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_MEMLOCK"]}
facts["fds"] = sorted(os.listdir("/proc/self/fd"))
facts["env"] = dict(os.environ)
facts["work"] = sorted(os.listdir("/work"))
facts["ppid"] = os.getppid()
print(json.dumps(facts))
"#;

fn facts(r: &sandbench::report::RunReport) -> serde_json::Value {
    assert_eq!(r.outcome, Outcome::Ok, "{}\n{}", r.summary_line(), r.stderr);
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn cold_and_warm_runs_get_the_same_isolation() {
    let tier = Arc::new(ProcessTier::new(&common::config()));
    let a = tier.probe().await;
    if !a.available {
        assert!(!common::required("process"), "process tier unavailable: {}", a.summary);
        panic!("cannot run although its needs hold: process tier unavailable: {}", a.summary);
    }
    let dyn_tier: Arc<dyn Tier> = tier.clone();
    let cold = runner::run(dyn_tier.clone(), RunSpec::new(Language::Python, FACTS)).await;
    assert_eq!(cold.details["start"], "cold");
    dyn_tier.prewarm().await;
    let warm = runner::run(dyn_tier.clone(), RunSpec::new(Language::Python, FACTS)).await;
    assert_eq!(warm.details["start"], "warm", "{}", warm.summary_line());
    let (c, w) = (facts(&cold), facts(&warm));
    // What the host reports of each sandbox is the same.
    for k in ["landlock", "seccomp", "namespaces", "cgroup", "user_ns", "degraded"] {
        assert_eq!(cold.details[k], warm.details[k], "details.{k}");
    }
    // Each run has namespaces of its own: none is the host's. (Two runs'
    // numbers may match: the kernel reuses a freed namespace's inode number,
    // and the cold run's are gone before the spare is made.)
    let host: std::collections::BTreeMap<String, String> = std::fs::read_dir("/proc/self/ns")
        .unwrap()
        .flatten()
        .map(|e| {
            (e.file_name().to_string_lossy().into_owned(), std::fs::read_link(e.path()).unwrap().display().to_string())
        })
        .collect();
    let fresh = |f: &serde_json::Value| -> Vec<String> {
        f["ns"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(n, v)| host.get(*n) != v.as_str().map(String::from).as_ref())
            .map(|(n, _)| n.clone())
            .collect()
    };
    assert_eq!(fresh(&c), fresh(&w), "the same namespaces are new on both");
    for n in ["pid", "net", "mnt", "ipc", "uts", "cgroup"] {
        assert!(fresh(&c).iter().any(|f| f == n), "{n} namespace not new: {c}");
    }
    // Its own uid (as root: from the dedicated range; never 0), no groups.
    for f in [&c, &w] {
        let uid = f["uid"][0].as_u64().unwrap();
        assert_ne!(uid, 0);
        if common::is_root() {
            assert!(uid >= 2_000_000_000, "{uid}");
            assert_eq!(f["groups"], serde_json::json!([]));
        }
    }
    // In its own cgroup, seen through the cgroup namespace: no host path, no owner token.
    let shape = |f: &serde_json::Value| -> Vec<String> {
        f["cgroup"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let l = l.as_str().unwrap();
                let (head, path) = l.rsplit_once(':').unwrap();
                if path == "/" {
                    l.to_string()
                } else {
                    assert!(path.starts_with("/sandbench/sb-"), "{l}");
                    let m = sandbench::owner::machine().unwrap();
                    assert!(!path.contains(&m.host), "the machine id shows: {l}");
                    format!("{head}:<run>")
                }
            })
            .collect()
    };
    assert_eq!(shape(&c), shape(&w));
    if common::is_root() {
        assert!(shape(&c).iter().any(|l| l.ends_with(":<run>")), "not in a run cgroup: {c}");
    }
    // seccomp filter, no_new_privs, no capabilities; Landlock refuses TCP and
    // writes outside the scratch space; namespaces cannot be made.
    for k in ["seccomp", "tcp", "write_etc", "unshare", "rlimits", "fds", "env", "work", "ppid"] {
        assert_eq!(c[k], w[k], "{k}: cold {} warm {}", c[k], w[k]);
    }
    assert_eq!(c["seccomp"], serde_json::json!(["2", "1", "0000000000000000"]));
    assert_eq!(c["tcp"], "EACCES", "Landlock's TCP rule");
    assert_eq!(c["unshare"][0], -1);
    assert_eq!(c["work"], serde_json::json!(["main.py"]));
    assert_eq!(c["fds"], serde_json::json!(["0", "1", "2", "3"]), "stdio and the listing's own descriptor only");
    // init's child, or the zygote's (outside the pid namespace: 0).
    let parent = if cold.details["interpreter"] == "zygote fork" { 0 } else { 1 };
    assert_eq!(c["ppid"], parent, "{}", cold.details["interpreter"]);
}

/// The waiting interpreter runs a program as `python3 -u main.py` would:
/// compared, warm both times, with a run in an environment the spare's
/// interpreter was not started with (so the waiter execs a fresh one).
#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn the_waiting_interpreter_is_indistinguishable_from_a_fresh_one() {
    let tier: Arc<dyn Tier> = Arc::new(ProcessTier::new(&common::config()));
    if !tier.probe().await.available {
        assert!(!common::required("process"));
        panic!("cannot run although its needs hold: process tier unavailable");
    }
    const SEES: &str = r#"
import sys, os
g = sys.modules["__main__"].__dict__
print(sorted(sys.modules))
print(sorted(k for k in g), g["__file__"], type(g["__loader__"]).__name__, g["__spec__"], g["__package__"], g["__name__"])
print(sys.argv, sys.orig_argv, sys.path[0], sys.flags)
print(sys._getframe().f_code.co_filename, open("/proc/self/cmdline", "rb").read())
print(sorted(os.listdir("/proc/self/fd")), sorted(os.listdir("/work")))
import atexit
atexit.register(lambda: print("atexit", "__file__" in g))
"#;
    let run = |code: &'static str, env: bool| {
        let tier = tier.clone();
        async move {
            tier.prewarm().await;
            let mut s = RunSpec::new(Language::Python, code);
            if env {
                s.env.insert("SANDBENCH_TEST_FRESH".into(), "1".into());
            }
            let r = runner::run(tier, s).await;
            assert_eq!(r.details["start"], "warm", "{}", r.summary_line());
            r
        }
    };
    for code in [
        SEES,
        "def f():\n    1/0\nf()\n",
        "x = (\n",
        "import sys\nsys.exit('bye')\n",
        "import sys\nprint('out'); sys.stdout.flush(); sys.exit(3)\n",
        "raise SystemExit\n",
    ] {
        let (inline, fresh) = (run(code, false).await, run(code, true).await);
        assert_eq!(inline.exit, fresh.exit, "{code}");
        assert_eq!(inline.outcome, fresh.outcome, "{code}");
        assert_eq!(inline.stdout, fresh.stdout, "{code}");
        assert_eq!(inline.stderr, fresh.stderr, "{code}");
    }
}

/// After a JavaScript run the spare is a started Node: the next CommonJS run
/// takes it (warm) and sees what a run built for itself sees; a Python or an
/// ES module run meeting that spare is built cold and still right, and the
/// spare after a Python run is Python's again.
#[sandbench_testkit::test(needs = ["process", "cmd:node"], flavor = "multi_thread")]
async fn a_javascript_run_leaves_a_started_node_for_the_next() {
    let tier: Arc<dyn Tier> = Arc::new(ProcessTier::new(&common::config()));
    if !tier.probe().await.available {
        assert!(!common::required("process"));
        panic!("cannot run although its needs hold: process tier unavailable");
    }
    const SEES: &str = "console.log(process.argv.slice(1).join(' '), __filename, require.main === module, \
                        typeof require('fs').readFileSync, process.execArgv.length, require('fs').readdirSync('/work').join(','))";
    let js = |code: &str| RunSpec::new(Language::Javascript, code);
    let started =
        |tier: &Arc<dyn Tier>, lang: &str| tier.warm().is_some_and(|w| w.contains(&format!("{lang} started")));
    let wait_for = |lang: &'static str| {
        let tier = tier.clone();
        async move {
            let t = std::time::Instant::now();
            while !started(&tier, lang) {
                assert!(t.elapsed() < Duration::from_secs(20), "no {lang} spare became ready: {:?}", tier.warm());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    // The reference: a run that found no spare, or the Python spare the
    // probe left (its waiter execs node). A spare being made meanwhile is
    // made in the language asked for before: a second run asks again.
    let first = runner::run(tier.clone(), js(SEES)).await;
    assert_eq!(first.outcome, Outcome::Ok, "{}", first.summary_line());
    tier.prewarm().await;
    let again = runner::run(tier.clone(), js(SEES)).await;
    assert_eq!(again.stdout, first.stdout);
    wait_for("javascript").await;
    let warm = runner::run(tier.clone(), js(SEES)).await;
    assert_eq!(warm.outcome, Outcome::Ok, "{}", warm.summary_line());
    assert_eq!(warm.details["start"], "warm", "{}", warm.summary_line());
    assert_eq!(warm.stdout, first.stdout, "a started Node runs the program as a fresh one does");
    wait_for("javascript").await;
    // Variables of its own: not the environment that Node started with.
    let mut own = js("console.log(process.env.SANDBENCH_TEST_OWN)");
    own.env.insert("SANDBENCH_TEST_OWN".into(), "mine".into());
    let own = runner::run(tier.clone(), own).await;
    assert_eq!(own.outcome, Outcome::Ok, "{}", own.summary_line());
    assert_eq!(own.details["start"], "cold", "{}", own.summary_line());
    assert_eq!(own.stdout.trim(), "mine");
    wait_for("javascript").await;
    // An ES module cannot run in it: built cold, right.
    let esm = runner::run(tier.clone(), js("import fs from 'fs';\nconsole.log(typeof fs.readFileSync)")).await;
    assert_eq!(esm.outcome, Outcome::Ok, "{}", esm.summary_line());
    assert_eq!(esm.details["start"], "cold", "{}", esm.summary_line());
    assert_eq!(esm.stdout.trim(), "function");
    // Python takes the Python spare; a JavaScript run takes it too (its
    // waiter execs node), and leaves a Node spare behind.
    wait_for("python").await;
    let py = runner::run(tier.clone(), RunSpec::new(Language::Python, "print(6 * 7)")).await;
    assert_eq!(py.details["start"], "warm", "{}", py.summary_line());
    assert_eq!(py.stdout.trim(), "42");
    wait_for("python").await;
    let js_warm = runner::run(tier.clone(), js("console.log(1)")).await;
    assert_eq!(js_warm.details["start"], "warm", "{}", js_warm.summary_line());
    wait_for("javascript").await;
    let py = runner::run(tier.clone(), RunSpec::new(Language::Python, "print(6 * 7)")).await;
    assert_eq!(py.outcome, Outcome::Ok, "{}", py.summary_line());
    assert_eq!(py.details["start"], "cold", "a Node spare cannot run Python: {}", py.summary_line());
    assert_eq!(py.stdout.trim(), "42");
    wait_for("python").await;
}

/// Which of "running" and output a run's events show first.
async fn first_of_running_and_output(mut h: runner::RunHandle) -> &'static str {
    let mut seen = vec![];
    while let Some(u) = h.events.recv().await {
        match u {
            Update::Event(RunEvent { kind: EventKind::Phase(Phase::Running), .. }) => seen.push("running"),
            Update::Event(RunEvent { kind: EventKind::Output(..), .. }) => seen.push("output"),
            Update::Event(_) => {}
            Update::Finished(r) => {
                assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
                break;
            }
        }
    }
    seen.first().copied().unwrap_or("neither")
}

/// A run's "running" comes before its first output, cold, warm or a
/// session's call: init says Started before it lets the program go, and the
/// host sends init's statuses before the output (the workbench once showed
/// a warm run's first line above its "running").
#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn a_runs_output_never_precedes_its_running_phase() {
    let tier: Arc<dyn Tier> = Arc::new(ProcessTier::new(&common::config()));
    let a = tier.probe().await;
    if !a.available {
        assert!(!common::required("process"), "process tier unavailable: {}", a.summary);
        panic!("cannot run although its needs hold: process tier unavailable: {}", a.summary);
    }
    let spec = || RunSpec::new(Language::Python, "print(1)");
    for i in 0..12 {
        if i > 0 {
            spare_ready(&tier).await;
        }
        assert_eq!(first_of_running_and_output(runner::start(tier.clone(), spec())).await, "running", "run {i}");
    }
    let s = Session::open(tier.clone(), SessionSpec::new(Limits::default())).await.unwrap();
    for i in 0..8 {
        let h = s.start(spec()).unwrap();
        assert_eq!(first_of_running_and_output(h).await, "running", "session call {i}");
    }
    s.close().await;
}

/// Whether the run's cgroup holds `want` as its memory limit at some moment
/// while its program runs (read on the host, every 20 ms, until the run ends:
/// a loaded machine may take a while to hand the run its spare).
async fn sees_memory_limit(tier: &Arc<dyn Tier>, dirs: &[std::path::PathBuf], limits: Limits, want: u64) -> bool {
    let mut spec = RunSpec::new(Language::Python, "import time; time.sleep(1.5)");
    spec.limits = limits;
    let run = tokio::spawn(runner::run(tier.clone(), spec));
    let read = || {
        dirs.iter().find_map(|d| {
            ["memory.limit_in_bytes", "memory.max"]
                .iter()
                .find_map(|f| std::fs::read_to_string(d.join(f)).ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
        })
    };
    let mut seen = false;
    while !run.is_finished() && !seen {
        seen = read() == Some(want);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = run.await.unwrap();
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert_eq!(r.details["start"], "warm");
    seen
}

/// A spare is built with the config's limits; a run that asks for others
/// gets them in its cgroup before its program starts, and the next spare
/// (made with the config's again) does not keep the last run's.
#[sandbench_testkit::test(needs = ["process", "root"], flavor = "multi_thread")]
async fn a_warm_run_gets_its_own_limits_in_the_spares_cgroup() {
    let config = common::config();
    let process = Arc::new(ProcessTier::new(&config));
    let tier: Arc<dyn Tier> = process.clone();
    let first = runner::run(tier.clone(), RunSpec::new(Language::Python, "print(1)")).await;
    assert_eq!(first.outcome, Outcome::Ok, "{}", first.summary_line());
    spare_ready(&tier).await;
    let mut small = config.limits.clone();
    small.memory_bytes = 96 << 20;
    assert_ne!(small.memory_bytes, config.limits.memory_bytes);
    assert!(sees_memory_limit(&tier, &process.spare_cgroups(), small, 96 << 20).await, "the run's limit never held");
    spare_ready(&tier).await;
    let dirs = process.spare_cgroups();
    let config_limit = config.limits.memory_bytes;
    assert!(
        sees_memory_limit(&tier, &dirs, config.limits.clone(), config_limit).await,
        "the config's limit never held"
    );
}
