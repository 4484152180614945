//! The process tier's zygote (`tier/process/zygote.rs`): a program's process
//! forked from one warm interpreter holds exactly what one forked by the
//! sandbox's init holds, keeps nothing of an earlier run, ends as the
//! interpreter would, and the zygote does not outlive its sandbench.

use crate::support::common;

use std::sync::Arc;
use std::time::Duration;

use sandbench::internals::process::ProcessTier;
use sandbench::report::{Outcome, RunReport};
use sandbench::runner;
use sandbench::spec::{Language, RunSpec};
use sandbench::tier::Tier;

fn tier(zygote: bool) -> Arc<dyn Tier> {
    let mut c = common::config();
    c.process.zygote = zygote;
    // Every run cold: each gets its process the way the config says, not from
    // a spare made before the test looked.
    c.process.spare = false;
    Arc::new(ProcessTier::new(&c))
}

pub(crate) async fn available(t: &Arc<dyn Tier>) -> bool {
    let a = t.probe().await;
    if !a.available {
        assert!(!common::required("process"), "process tier unavailable: {}", a.summary);
        return false;
    }
    // The zygote serves root's sandboxes only (each run has a uid of its own).
    common::is_root()
}

async fn run(t: &Arc<dyn Tier>, code: &str) -> RunReport {
    runner::run(t.clone(), RunSpec::new(Language::Python, code)).await
}

#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn a_zygote_run_keeps_nothing_of_the_run_before_it() {
    let t = tier(true);
    if !available(&t).await {
        return;
    }
    let plant = "import builtins, sys, os, json, gc\n\
                 builtins.planted = 1\nsys.planted = 2\nos.environ['PLANTED'] = '3'\n\
                 gc.freeze()\nopen('/tmp/planted', 'w').write('x')\nprint(os.getuid())\n";
    let a = run(&t, plant).await;
    assert_eq!(a.outcome, Outcome::Ok, "{}\n{}", a.summary_line(), a.stderr);
    assert_eq!(a.details["interpreter"], "zygote fork", "{}", a.details);
    let look = "import builtins, sys, os\n\
                print(hasattr(builtins, 'planted'), hasattr(sys, 'planted'), 'PLANTED' in os.environ,\n\
                      os.path.exists('/tmp/planted'),\n\
                      sorted(m for m in ('ctypes', '_ctypes', 'json', 'select', '_socket', 'gc') if m in sys.modules),\n\
                      sys.argv, sys.path[0], __file__, os.getuid())\n";
    let b = run(&t, look).await;
    assert_eq!(b.outcome, Outcome::Ok, "{}\n{}", b.summary_line(), b.stderr);
    assert_eq!(b.details["interpreter"], "zygote fork");
    let uid_a: u64 = a.stdout.trim().parse().unwrap();
    let out = b.stdout.trim();
    assert!(
        out.starts_with("False False False False [] ['main.py'] /work /work/main.py "),
        "the second run saw the first's state or the zygote's imports: {out}"
    );
    let uid_b: u64 = out.rsplit(' ').next().unwrap().parse().unwrap();
    assert_ne!(uid_a, uid_b, "each run has a uid of its own");
}

/// What a program sees of its sandbox from its first line, printed as JSON.
const FACTS: &str = r#"
import json, os, socket, resource, ctypes, errno
facts = {}
facts["uid"] = os.getuid() >= 2_000_000_000 and os.getuid() == os.geteuid() == os.getgid()
facts["groups"] = os.getgroups()
facts["cgroup"] = [l.rsplit(":", 1)[1].startswith("/sandbench/sb-") for l in open("/proc/self/cgroup").read().splitlines() if not l.endswith(":/")]
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
facts["status"] = {k: status.get(k) for k in ["Seccomp", "Seccomp_filters", "NoNewPrivs", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]}
s = socket.socket()
try:
    s.connect(("127.0.0.1", 9))
    facts["tcp"] = "connected"
except OSError as e:
    facts["tcp"] = errno.errorcode.get(e.errno, str(e.errno))
s.close()
for path in ["/etc/sandbench-probe", "/usr/sandbench-probe", "/work/ok", "/tmp/ok"]:
    try:
        open(path, "w").close()
        facts[path] = "written"
    except OSError as e:
        facts[path] = errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
facts["unshare"] = [libc.unshare(0x10000000), errno.errorcode.get(ctypes.get_errno())]
facts["rlimits"] = {n: resource.getrlimit(getattr(resource, n)) for n in
    ["RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_MEMLOCK", "RLIMIT_NPROC", "RLIMIT_DATA"]}
facts["fds"] = sorted(os.listdir("/proc/self/fd"))
facts["env"] = dict(os.environ)
facts["cwd"] = os.getcwd()
facts["sid"] = os.getsid(0) == os.getpid()
facts["pid"] = os.getpid() < 10
facts["procs"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
facts["modules"] = sorted(sys.modules) if (sys := __import__("sys")) else []
import signal
facts["sigchld"] = str(signal.getsignal(signal.SIGCHLD))
facts["sigmask"] = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
facts["wakeup_fd"] = signal.set_wakeup_fd(-1)
print(json.dumps(facts))
"#;

#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn a_zygote_fork_holds_what_a_fork_of_init_holds() {
    let (z, plain) = (tier(true), tier(false));
    if !available(&z).await {
        return;
    }
    let a = run(&z, FACTS).await;
    let b = run(&plain, FACTS).await;
    for r in [&a, &b] {
        assert_eq!(r.outcome, Outcome::Ok, "{}\n{}", r.summary_line(), r.stderr);
    }
    assert_eq!(a.details["interpreter"], "zygote fork");
    assert_eq!(b.details["interpreter"], "fresh");
    for k in ["landlock", "seccomp", "namespaces", "cgroup", "user_ns", "degraded"] {
        assert_eq!(a.details[k], b.details[k], "details.{k}");
    }
    let f = |r: &RunReport| -> serde_json::Value {
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
    };
    let (fa, fb) = (f(&a), f(&b));
    assert_eq!(fa, fb, "a zygote's process and init's differ");
    assert_eq!(fa["status"]["Seccomp_filters"], "4");
    assert_eq!(fa["status"]["CapEff"], "0000000000000000");
    assert_eq!(fa["tcp"], "EACCES");
    for p in ["/etc/sandbench-probe", "/usr/sandbench-probe"] {
        assert_ne!(fa[p], "written", "{p}");
    }
    assert_eq!(fa["/work/ok"], "written");
    assert_eq!(fa["fds"], serde_json::json!(["0", "1", "2", "3"]));
    // The zygote's own SIGCHLD handler and wakeup pipe stay the zygote's
    // (its disposition is compared with a fresh interpreter's above).
    assert_eq!((&fa["sigmask"], &fa["wakeup_fd"]), (&serde_json::json!([]), &serde_json::json!(-1)));
    assert_eq!(fa["uid"], true);
    assert_eq!(fa["cgroup"].as_array().map(|c| !c.is_empty() && c.iter().all(|x| x == true)), Some(true), "{fa}");
}

#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn a_zygote_run_ends_as_the_interpreter_would() {
    let t = tier(true);
    if !available(&t).await {
        return;
    }
    // (program, exit code, signal, stdout, in stderr)
    type Case = (&'static str, Option<i32>, Option<i32>, &'static str, &'static str);
    let cases: &[Case] = &[
        ("import sys\nsys.exit(3)\n", Some(3), None, "", ""),
        ("raise SystemExit('bye')\n", Some(1), None, "", "bye"),
        ("def f():\n    raise ValueError('boom')\nf()\n", Some(1), None, "", "ValueError: boom"),
        ("print('partial'\n", Some(1), None, "", "SyntaxError"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", None, Some(9), "", ""),
        (
            "import atexit, threading, time\natexit.register(lambda: print('atexit ran'))\n\
             threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\nprint('main done')\n",
            Some(0),
            None,
            "main done\nthread done\natexit ran",
            "",
        ),
    ];
    for (code, exit, signal, out, err) in cases {
        let r = run(&t, code).await;
        assert_eq!(r.details["interpreter"], "zygote fork", "{code}");
        assert_eq!((r.exit.code, r.exit.signal), (*exit, *signal), "{code}: {}\n{}", r.summary_line(), r.stderr);
        assert_eq!(r.stdout.trim(), *out, "{code}");
        assert!(r.stderr.contains(err), "{code}: {}", r.stderr);
        assert!(!r.stderr.contains("sandbench"), "the zygote shows in a traceback: {}", r.stderr);
    }
}

/// The zygote's process id among `pid`'s children, if it has started.
fn zygote_of(pid: u32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let p: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        let ppid: u32 = stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
        // sandbench's only child that is an interpreter (bwrap's are bwrap's).
        (ppid == pid && cmd == b"python3\0-u\0main.py\0").then_some(p)
    })
}

#[sandbench_testkit::test(needs = ["process"])]
fn the_zygote_ends_with_its_sandbench() {
    if !common::is_root() {
        return;
    }
    // A long-lived front end whose runs use the zygote.
    let mut bench = std::process::Command::new(common::bin())
        .args(["bench", "--tier", "process", "--concurrency", "1", "--duration", "60s"])
        .env("SANDBENCH_HELPER", common::helper_bin())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let zygote = loop {
        if let Some(z) = zygote_of(bench.id()) {
            break z;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = bench.kill();
            let _ = bench.wait();
            panic!("no zygote started under the bench");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // What it was started with: nothing of the host's environment, from its
    // own read-only /tmp (its file alone), an empty read-only tmpfs where a
    // host user could have left Python files.
    let environ = std::fs::read(format!("/proc/{zygote}/environ")).unwrap_or_default();
    let mut keys: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| String::from_utf8_lossy(kv).split('=').next().unwrap_or("").to_string())
        .collect();
    keys.sort();
    let cwd = std::fs::read_link(format!("/proc/{zygote}/cwd")).ok();
    let mounts = std::fs::read_to_string(format!("/proc/{zygote}/mountinfo")).unwrap_or_default();
    let tmp_ro = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 5 && f[4] == "/tmp" && f[5].split(',').any(|o| o == "ro") && l.contains(" - tmpfs ")
    });
    bench.kill().unwrap();
    bench.wait().unwrap();
    assert_eq!(keys, ["HOME", "LANG", "PATH", "TMPDIR"], "the zygote's environment");
    assert_eq!(cwd.as_deref(), Some(std::path::Path::new("/tmp")));
    assert!(tmp_ro, "no empty read-only /tmp in the zygote's view:\n{mounts}");
    let t = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{zygote}")).exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reaped pid could be reused meanwhile: a live one must not still be the zygote.
    let cmd = std::fs::read(format!("/proc/{zygote}/cmdline")).unwrap_or_default();
    assert_ne!(cmd, b"python3\0-u\0main.py\0", "the zygote outlived its sandbench");
}

/// Hostile samples that try things and say what happened (no resource bomb:
/// these run in this test's own process, with the sandbox as their only
/// bound), each in the zygote's fork — the gauntlet's cells, which carry
/// their canaries' variables, get a fresh interpreter exec'd by it instead —
/// and judged by the gauntlet's own rules against what the sample declares.
#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn hostile_samples_in_a_zygote_fork_are_contained_as_declared() {
    let t = tier(true);
    if !available(&t).await {
        return;
    }
    let samples = sandbench::samples::load_dir(&common::samples_dir()).unwrap();
    let names = [
        "inherited-memory",
        "kill-all",
        "kill-parent",
        "ptrace-parent",
        "kernel-module",
        "mount",
        "socket-families",
        "host-socket",
        "secrets-env",
        "zygote-parent",
    ];
    for name in names {
        let s = samples.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no sample {name}"));
        let mut spec = RunSpec::new(s.language, s.code.clone());
        spec.limits = sandbench::gauntlet::default_limits();
        let r = runner::run(t.clone(), spec).await;
        assert_eq!(r.details["interpreter"], "zygote fork", "{name}: {}", r.summary_line());
        let out = r.stdout.clone();
        let cell = sandbench::gauntlet::judge(s, "process", r, Default::default());
        assert!(cell.as_expected, "{name}: {:?} ({:?}), stdout: {out}", cell.mismatch, cell.expected);
    }
}

/// The zygote's process never runs degraded: where degraded runs are allowed
/// (a kernel without Landlock ABI 6 would give one), sandboxes start their
/// own interpreter, and so does a run with variables of its own (built for
/// itself; one that meets a spare made by the zygote gets a fresh
/// interpreter exec'd by the zygote's process, as the waiter does).
#[sandbench_testkit::test(needs = ["process"], flavor = "multi_thread")]
async fn the_zygote_serves_only_what_it_was_started_for() {
    if !available(&tier(true)).await {
        return;
    }
    let mut c = common::config();
    c.process.spare = false;
    c.process.allow_degraded = true;
    let degraded_ok: Arc<dyn Tier> = Arc::new(ProcessTier::new(&c));
    let r = run(&degraded_ok, "print(1)").await;
    assert_eq!((r.outcome, r.details["interpreter"].as_str()), (Outcome::Ok, Some("fresh")), "{}", r.summary_line());
    let t = tier(true);
    let mut spec = RunSpec::new(Language::Python, "import os\nprint(os.environ['OWN'])\n");
    spec.env.insert("OWN".into(), "variable".into());
    let r = runner::run(t.clone(), spec).await;
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert_eq!(r.details["interpreter"], "fresh");
    assert_eq!(r.stdout.trim(), "variable");
}
