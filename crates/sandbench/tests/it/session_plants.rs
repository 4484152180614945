//! Plants in a session's scratch space (issue 21, breach 1): between two
//! calls of a session, privileged code (the process tier's init, the docker
//! loader, the microVM agent) writes the next call's files in `/work`. A
//! program that replaced those names with a symlink (to a host device node,
//! into `/proc/sys` or the guest's cgroup files), a hard link, a FIFO, a
//! socket node or a directory must not steer that code: the host's inodes
//! stay as they were, the next call runs (never hangs on a FIFO), and the
//! session's limits still hold in the call after.
//!
//! Each row is a fresh session: call 1 plants, call 2 makes the privileged
//! step use the planted name, call 3 checks that the limits still hold (20
//! children under a pids limit of 8 is a pids violation, not ok). Every call
//! runs under a deadline (the outer net: a hang fails the test, it does not
//! stall the suite), and whatever a row changed on the host is put back
//! before the test fails, so a regression cannot leave `/dev/zero` or a
//! sysctl altered for the rest of the machine.

use crate::support::docker_common::{block_on, tier_ready};

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sandbench::config::Config;
use sandbench::event::ViolationKind;
use sandbench::report::{Outcome, RunReport};
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

fn limits() -> Limits {
    Limits {
        // Room for gVisor: its sandbox's cgroup holds the Sentry too (a cold
        // run of FORK_20 peaks at ~81 MB there), and at 96M a session's
        // forks met the memory limit before the pids limit this checks.
        memory_bytes: 256 << 20,
        wall_time: Duration::from_secs(20),
        file_size_bytes: 1 << 20,
        disk_bytes: 8 << 20,
        pids: 8,
        ..Limits::default()
    }
}

/// One host inode as a row must leave it.
#[derive(Debug, Clone, PartialEq)]
struct Snap {
    uid: u32,
    gid: u32,
    mode: u32,
    rdev: u64,
    content: Option<Vec<u8>>,
}

fn snap(p: &PathBuf) -> Snap {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // Small regular files and sysctls by content; device nodes by owner,
    // mode and number.
    let content = (m.is_file() && m.len() < 64 << 10 || p.starts_with("/proc/sys")).then(|| std::fs::read(p).unwrap());
    Snap { uid: m.uid(), gid: m.gid(), mode: m.mode(), rdev: m.rdev(), content }
}

/// Host inodes a row watches; whatever changed is put back on drop.
struct HostInodes(Vec<(PathBuf, Snap)>);

impl HostInodes {
    fn of(paths: &[&str]) -> HostInodes {
        HostInodes(paths.iter().map(|p| (PathBuf::from(p), snap(&PathBuf::from(p)))).collect())
    }

    fn changed(&self) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|(p, before)| {
                let now = snap(p);
                (now != *before).then(|| format!("{}: {before:?} -> {now:?}", p.display()))
            })
            .collect()
    }

    fn restore(&self) {
        use std::os::unix::fs::PermissionsExt;
        for (p, before) in &self.0 {
            if snap(p) == *before {
                continue;
            }
            if p.starts_with("/proc/sys") {
                let _ = std::fs::write(p, before.content.as_deref().unwrap_or_default());
                continue;
            }
            let _ = std::os::unix::fs::lchown(p, Some(before.uid), Some(before.gid));
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(before.mode & 0o7777));
        }
    }
}

impl Drop for HostInodes {
    fn drop(&mut self) {
        self.restore();
    }
}

/// A row of the table.
struct Row {
    what: &'static str,
    /// Call 1: makes the plant (Python, in `/work`).
    plant: String,
    /// Call 2: runs after the privileged step used the planted name; its
    /// code is what that step writes through the plant.
    trigger: String,
    /// What call 2 must print (it ran, and saw what it should).
    expect: &'static str,
    /// Host inodes that must not change.
    host: &'static [&'static str],
}

fn row(what: &'static str, plant: &str, trigger: &str, expect: &'static str, host: &'static [&'static str]) -> Row {
    Row { what, plant: format!("import os, stat\n{plant}\nprint('planted')\n"), trigger: trigger.into(), expect, host }
}

/// 20 children under a pids limit of 8 (after trying to raise the limit
/// through the cgroup files the tier's agent writes).
const FORK_20: &str = "import os, time\nfor f in ('/sys/fs/cgroup/run/pids.max', '/sys/fs/cgroup/pids.max'):\n    try:\n        open(f, 'w').write('max')\n        print('raised', f)\n    except OSError:\n        pass\nkids = []\ntry:\n    for i in range(20):\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(1)\n            os._exit(0)\n        kids.append(pid)\nexcept OSError as e:\n    print('refused', e)\nfor k in kids:\n    os.waitpid(k, 0)\nprint('forked', len(kids))\n";

/// A call under the outer net's deadline.
async fn call(s: &Session, code: &str, what: &str, n: u32) -> Result<RunReport, String> {
    match tokio::time::timeout(Duration::from_secs(90), s.run(py(code))).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!("{what}: call {n} could not start: {e}")),
        Err(_) => Err(format!("{what}: call {n} hung (a privileged step blocked on the plant?)")),
    }
}

/// Run every row in a session of its own on `tier_name` (one runtime for
/// all: a tier may keep guests made ahead on the runtime that made them).
fn exercise(tier_name: &str, rows: Vec<Row>, extra_host: &'static [&'static str]) {
    let t = tier(tier_name);
    let failures = block_on(async {
        let mut failures = vec![];
        for r in rows {
            let mut watched: Vec<&str> = r.host.to_vec();
            watched.extend_from_slice(extra_host);
            let host = HostInodes::of(&watched);
            if let Err(e) = row_in_a_session(&t, &r, &host).await {
                failures.push(e);
            }
            let changed = host.changed();
            if !changed.is_empty() {
                failures.push(format!("{}: host inodes changed by the end of the row: {changed:?}", r.what));
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{} row(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}

async fn row_in_a_session(t: &Arc<dyn Tier>, r: &Row, host: &HostInodes) -> Result<(), String> {
    let what = r.what;
    let s = tokio::time::timeout(Duration::from_secs(120), Session::open(t.clone(), SessionSpec::new(limits())))
        .await
        .map_err(|_| format!("{what}: the session did not open"))?
        .map_err(|e| format!("{what}: {e:#}"))?;
    let out = async {
        let r1 = call(&s, &r.plant, what, 1).await?;
        // A plant the judge cannot read through (a locked directory) reads
        // `incomplete` (scratch_walk_unreadable), never ok: the plant is made.
        if !matches!(r1.outcome, Outcome::Ok | Outcome::Incomplete) || !r1.stdout.contains("planted") {
            return Err(format!(
                "{what}: the plant itself failed: {:?} {:?} error {:?} stdout {:?} stderr {:?} details {}",
                r1.outcome, r1.violations, r1.error, r1.stdout, r1.stderr, r1.details["notes"]
            ));
        }
        let r2 = call(&s, &r.trigger, what, 2).await?;
        let changed = host.changed();
        if !changed.is_empty() {
            return Err(format!("{what}: host inodes changed: {changed:?}"));
        }
        if r2.outcome != Outcome::Ok || r2.exit.code != Some(0) || !r2.stdout.contains(r.expect) {
            return Err(format!(
                "{what}: call 2 did not run as it should: {:?} exit {:?} error {:?}\nstdout {:?}\nstderr {:?}",
                r2.outcome, r2.exit, r2.error, r2.stdout, r2.stderr
            ));
        }
        let r3 = call(&s, FORK_20, what, 3).await?;
        if r3.outcome != Outcome::Violation || !r3.has_violation(ViolationKind::Pids) {
            return Err(format!(
                "{what}: the pids limit no longer holds: {:?} {:?} stdout {:?}",
                r3.outcome, r3.violations, r3.stdout
            ));
        }
        Ok(())
    }
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(60), s.close()).await;
    out
}

/// A root-only sysctl whose value is harmless to change for a moment (it
/// is put back), as a number one higher than now: valid Python too.
const SYSCTL: &str = "/proc/sys/fs/lease-break-time";

fn sysctl_plus_one() -> String {
    let v: u64 = std::fs::read_to_string(SYSCTL).unwrap().trim().parse().unwrap();
    format!("{}\nprint('ran')\n", v + 1)
}

/// The rows of the process tier: the waiter's file (`main.py`, rewritten by
/// init after every call) and the next program's temporary name.
fn process_rows() -> Vec<Row> {
    vec![
        row(
            "a symlink to the host's /dev/zero at the waiter's name",
            "os.remove('/work/main.py')\nos.symlink('/dev/zero', '/work/main.py')",
            "print('ran')",
            "ran",
            &["/dev/zero"],
        ),
        row(
            "a symlink into /proc/sys at the waiter's name",
            &format!("os.remove('/work/main.py')\nos.symlink('{SYSCTL}', '/work/main.py')"),
            "print('ran')",
            "ran",
            &[SYSCTL],
        ),
        row(
            "a symlink into /proc/sys at the next program's temporary name",
            &format!("os.symlink('{SYSCTL}', '/work/.main.py.sandbench')"),
            &sysctl_plus_one(),
            "ran",
            &[SYSCTL],
        ),
        row(
            "a symlink to the host's /dev/full at the next program's temporary name",
            "os.symlink('/dev/full', '/work/.main.py.sandbench')",
            "print('ran')",
            "ran",
            &["/dev/full"],
        ),
        row(
            "a hard link to the program's own file at the waiter's name",
            "open('/work/keep', 'w').write('KEEP')\nos.remove('/work/main.py')\nos.link('/work/keep', '/work/main.py')",
            "print(open('/work/keep').read())",
            "KEEP",
            &[],
        ),
        row(
            "a FIFO at the waiter's name",
            "os.remove('/work/main.py')\nos.mkfifo('/work/main.py')",
            "print('ran')",
            "ran",
            &[],
        ),
        row(
            "a FIFO at the next program's temporary name",
            "os.mkfifo('/work/.main.py.sandbench')",
            "print('ran')",
            "ran",
            &[],
        ),
        row(
            "a socket node at the waiter's name",
            "os.remove('/work/main.py')\nos.mknod('/work/main.py', stat.S_IFSOCK | 0o600)",
            "print('ran')",
            "ran",
            &[],
        ),
        row(
            "a locked directory at the waiter's name",
            "os.remove('/work/main.py')\nos.makedirs('/work/main.py/d')\nopen('/work/main.py/d/f', 'w').write('x')\nos.chmod('/work/main.py/d', 0)\nos.chmod('/work/main.py', 0)",
            // Removed, not only moved out of the way.
            "import os\nprint('ran', [n for n in os.listdir('/work') if n.startswith('.sandbench-removed')])",
            "ran []",
            &[],
        ),
        row(
            "scratch directories replaced by links out of the scratch",
            "os.symlink('/usr/lib', '/work/libs')\nos.symlink('/proc/sys', '/tmp/sys')\nos.symlink('/dev', '/dev/shm/dev')",
            "print('ran')",
            "ran",
            &[],
        ),
    ]
}

/// Start-up hooks the interpreter runs (issue 42, item 7a): a `.pth` file,
/// `usercustomize` and `sitecustomize` in the user site (`HOME` is /work),
/// and the two modules in /work and /tmp. Each records whether it ran
/// between calls (the waiter's own file still at /work/main.py: the
/// session's next process starting ahead of its call) or in the call.
const START_HOOKS: &str = r#"import site
hook = """import os
when = 'between' if '__sandbench_waiter' in open('/work/main.py').read() else 'in-call'
with open('/dev/shm/hooks', 'a') as f:
    f.write('%s %s\\n' % (WHERE, when))
"""
user = site.getusersitepackages()
os.makedirs(user)
with open(user + '/hook.pth', 'w') as f:
    f.write('import os; exec(%r)\n' % hook.replace('WHERE', repr('pth')))
for d in (user, '/work', '/tmp'):
    for m in ('usercustomize', 'sitecustomize'):
        with open('%s/%s.py' % (d, m), 'w') as f:
            f.write(hook.replace('WHERE', repr(m if d == user else d + '/' + m)))
"#;

/// What a session's next call shows of the hooks: none ran between calls,
/// and the user site's ran in the call, as `python3 -u main.py` runs them
/// (a `sitecustomize` of the system's shadows the user site's).
const HOOKS_SEEN: &str = r#"import os
lines = open('/dev/shm/hooks').read().split('\n') if os.path.exists('/dev/shm/hooks') else []
print('between', sorted(l.split()[0] for l in lines if l.endswith(' between')))
print('in-call', sorted(l.split()[0] for l in lines if l.endswith(' in-call')))
"#;

/// The row of the pre-started interpreter: no code of the session's files
/// runs before its call (there it has no CPU limit, is charged to no call,
/// and can keep the session's next process from ever saying it is ready).
fn start_hook_row() -> Row {
    row(
        "start-up hooks planted for the next call's pre-started interpreter",
        START_HOOKS,
        HOOKS_SEEN,
        "between []\nin-call ['pth', 'usercustomize']",
        &[],
    )
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_session_start_hooks_run_only_in_their_call() {
    exercise("process", vec![start_hook_row()], &[]);
}

#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_session_plants_steer_no_privileged_step() {
    // The host's device nodes are what a sandbox binds; all are watched.
    exercise("process", process_rows(), &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]);
}

/// The docker and gVisor rows: the loader writes each call's program file
/// into `/work` (as the program's uid) before the program runs, and it runs
/// as root (SETUID/SETGID) next to a `/work` the program filled.
fn container_rows() -> Vec<Row> {
    vec![
        row(
            "a FIFO at the program's name",
            "os.remove('/work/main.py') if os.path.lexists('/work/main.py') else None\nos.mkfifo('/work/main.py')",
            "print('ran')",
            "ran",
            &[],
        ),
        row(
            "a symlink to another file of the program at the program's name",
            "open('/tmp/victim', 'w').write('VICTIM')\nos.remove('/work/main.py') if os.path.lexists('/work/main.py') else None\nos.symlink('/tmp/victim', '/work/main.py')",
            "print(open('/tmp/victim').read())",
            "VICTIM",
            &[],
        ),
        row(
            "a hard link at the program's name",
            "open('/work/keep', 'w').write('KEEP')\nos.remove('/work/main.py') if os.path.lexists('/work/main.py') else None\nos.link('/work/keep', '/work/main.py')",
            "print(open('/work/keep').read())",
            "KEEP",
            &[],
        ),
        row(
            "a directory at the program's name",
            "os.remove('/work/main.py') if os.path.lexists('/work/main.py') else None\nos.makedirs('/work/main.py/d')",
            "print('ran')",
            "ran",
            &[],
        ),
        row(
            "modules and start-up hooks planted for the loader's interpreter",
            "for m in ('struct', 'types', 'threading', 'traceback', 'select', 'ctypes', 'sitecustomize', 'usercustomize', 'encodings', 'json', 'socket'):\n    for d in ('/work', '/tmp'):\n        open('%s/%s.py' % (d, m), 'w').write(\"import os\\nopen('/dev/shm/imported-by-%d' % os.getuid(), 'w').write('x')\\n\")",
            "import os\nprint('ran', sorted(f for f in os.listdir('/dev/shm') if f.startswith('imported-by-')))",
            "ran []",
            &[],
        ),
    ]
}

#[sandbench_testkit::test(needs = ["docker"])]
fn docker_session_plants_steer_no_privileged_step() {
    if !tier_ready("docker") {
        return;
    }
    exercise("docker", container_rows(), &["/dev/null", "/dev/zero"]);
}

#[sandbench_testkit::test(needs = ["gvisor"])]
fn gvisor_session_plants_steer_no_privileged_step() {
    if !tier_ready("gvisor") {
        return;
    }
    exercise("gvisor", container_rows(), &["/dev/null", "/dev/zero"]);
}

/// The microVM's rows, few (TCG): the agent is guest root and writes each
/// call's program file, and the run cgroup's files, itself.
fn microvm_rows() -> Vec<Row> {
    vec![
        row(
            "a symlink to the call cgroup's pids.max at the program's name",
            "os.remove('/work/main.py')\nos.symlink('/sys/fs/cgroup/run/pids.max', '/work/main.py')\nos.symlink('/sys/fs/cgroup/run/memory.max', '/work/main.sh')",
            // Valid Python, and a valid pids.max value.
            "max\nimport os\nst = os.stat('/sys/fs/cgroup/run/pids.max')\nprint('owner', st.st_uid)\ntry:\n    open('/sys/fs/cgroup/run/pids.max', 'w').write('max')\n    print('raised')\nexcept OSError:\n    print('refused')",
            "owner 0\nrefused",
            &[],
        ),
        row("a FIFO at the program's name", "os.remove('/work/main.py')\nos.mkfifo('/work/main.py')", "print('ran')", "ran", &[]),
        row(
            "a locked folder holding a link at the program's name",
            "os.remove('/work/main.py')\nos.makedirs('/work/main.py/d')\nos.symlink('/sys/fs/cgroup/run/pids.max', '/work/main.py/d/l')\nos.chmod('/work/main.py/d', 0)\nos.chmod('/work/main.py', 0)",
            "import os\nprint('ran', os.stat('/sys/fs/cgroup/run/pids.max').st_uid)",
            "ran 0",
            &[],
        ),
    ]
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_session_plants_steer_no_privileged_step() {
    let t = tier("microvm");
    let a = block_on(t.probe());
    if !a.available {
        assert!(!crate::support::common::required("microvm"), "microvm required: {}", a.summary);
        panic!("cannot run although its needs hold: microvm unavailable: {}", a.summary);
    }
    exercise("microvm", microvm_rows(), &[]);
}

/// Call 1 removes the program file and fills `/work` to the last page, so
/// that the privileged step cannot write the next call's program there.
const FILL_WORK: &str = "import os\ntry:\n    os.remove('/work/main.py')\nexcept OSError:\n    pass\ni = 0\nwhile True:\n    try:\n        with open('/work/fill%d' % i, 'wb') as f:\n            f.write(b'x' * (512 << 10))\n    except OSError:\n        break\n    i += 1\nprint('filled', i)\n";
const FREE_WORK: &str = "import os\nfor n in os.listdir('/work'):\n    if n.startswith('fill'):\n        os.remove('/work/' + n)\nprint('freed')\n";

/// A session whose `/work` a call filled: the next call runs, or fails
/// with a message (never hangs, never ends the session), and once a call
/// freed the space the session works as before.
fn full_work_keeps_the_session(tier_name: &str) {
    let t = tier(tier_name);
    // Probed on the runtime the session uses: a guest the tier boots ahead
    // belongs to the runtime it was made on.
    let out: Result<(), String> = block_on(async {
        let a = t.probe().await;
        if !a.available {
            assert!(!crate::support::common::required(tier_name), "{tier_name} required: {}", a.summary);
            panic!("cannot run although its needs hold: {tier_name} unavailable: {}", a.summary);
        }
        let what = "a full /work";
        let s = tokio::time::timeout(Duration::from_secs(120), Session::open(t.clone(), SessionSpec::new(limits())))
            .await
            .map_err(|_| "the session did not open".to_string())?
            .map_err(|e| format!("{e:#}"))?;
        let out = async {
            let r1 = call(&s, FILL_WORK, what, 1).await?;
            if !r1.stdout.contains("filled") {
                return Err(format!("the fill did not run: {:?} {:?} {:?}", r1.outcome, r1.error, r1.stderr));
            }
            // The call after: it may run (Python from memory) or fail with
            // a message that says why; either way it ends.
            let r2 = call(&s, "print('ran')", what, 2).await?;
            if !r2.stdout.contains("ran") && r2.error.as_deref().is_none_or(str::is_empty) {
                return Err(format!("call 2 neither ran nor said why: {:?} {:?} {:?}", r2.outcome, r2.exit, r2.stderr));
            }
            let r3 = call(&s, FREE_WORK, what, 3).await?;
            if !r3.stdout.contains("freed") {
                return Err(format!(
                    "the session could not free its own space: {:?} error {:?} stderr {:?}",
                    r3.outcome, r3.error, r3.stderr
                ));
            }
            let r4 = call(&s, "print(open(__file__).read().count('MARK' + 'ER'))  # MARKER", what, 4).await?;
            if r4.outcome != Outcome::Ok || r4.stdout.trim() != "1" {
                return Err(format!(
                    "the session did not work as before: {:?} error {:?} stdout {:?} stderr {:?}",
                    r4.outcome, r4.error, r4.stdout, r4.stderr
                ));
            }
            Ok(())
        }
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(60), s.close()).await;
        out
    });
    if let Err(e) = out {
        panic!("{tier_name}: {e}");
    }
}

/// The process tier's program file lives in `/work` (the interpreter is
/// exec'd on it): a session whose `/work` is full runs nothing more, and
/// each call says so and what to do, without hanging or ending the session.
#[sandbench_testkit::test(needs = ["process", "root"])]
fn process_session_with_a_full_work_says_so() {
    let t = tier("process");
    let out: Result<(), String> = block_on(async {
        let what = "a full /work";
        let s = tokio::time::timeout(Duration::from_secs(120), Session::open(t.clone(), SessionSpec::new(limits())))
            .await
            .map_err(|_| "the session did not open".to_string())?
            .map_err(|e| format!("{e:#}"))?;
        let out = async {
            let r1 = call(&s, FILL_WORK, what, 1).await?;
            if !r1.stdout.contains("filled") {
                return Err(format!("the fill did not run: {:?} {:?} {:?}", r1.outcome, r1.error, r1.stderr));
            }
            for n in [2, 3] {
                let r = call(&s, "print('ran')", what, n).await?;
                let e = r.error.clone().unwrap_or_default();
                let said_why = e.contains("/work is full") && e.contains("open a new one");
                if !r.stdout.contains("ran") && !said_why {
                    return Err(format!("call {n} neither ran nor said why: {:?} error {e:?}", r.outcome));
                }
            }
            Ok(())
        }
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(60), s.close()).await;
        out
    });
    if let Err(e) = out {
        panic!("process: {e}");
    }
}

#[sandbench_testkit::test(needs = ["microvm"])]
fn microvm_session_survives_a_full_work() {
    full_work_keeps_the_session("microvm");
}
