//! The leftover reapers judge owners by their owner lock, not by pids: a run
//! in progress survives a second sandbench started in its own pid namespace
//! (which sees no other sandbench's pid), leftovers labelled with another
//! host's id are never touched, and a provably dead owner's leftovers go.

use crate::support::common::{self, bin, samples_dir, OuterNet};
use crate::support::docker_common::{containers_of, eventually, tier_ready};

use std::process::{Command, Stdio};
use std::time::Duration;

use sandbench::internals::processes_with;
use sandbench::owner;
use sandbench::report::Outcome;

/// `unshare --pid --fork --mount-proc` works here (root, or user namespaces).
fn pidns_ok() -> bool {
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(!common::required("process"), "unshare --pid --fork --mount-proc fails here");
        panic!("cannot run although its needs hold: unshare --pid --fork --mount-proc does not work here");
    }
    ok
}

/// A sandbench in a fresh pid namespace: it sees no other sandbench's pid.
fn in_pid_namespace(args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--"]).arg(bin()).args(args);
    c
}

fn another_host_token() -> String {
    let m = owner::machine().unwrap();
    let host = if m.host == "ffffffffffff" { "eeeeeeeeeeee" } else { "ffffffffffff" };
    format!("{host}-{}-1-00000000", m.boot)
}

fn dead_owner_token() -> String {
    let o = owner::Owner::acquire_in(&owner::dir()).unwrap();
    let t = o.token().to_string();
    drop(o); // its lock is free now: exactly what a dead process leaves
    t
}

fn forget_lock(token: &str) {
    let _ = std::fs::remove_file(owner::dir().join(format!("{token}.lock")));
}

#[sandbench_testkit::test(needs = ["pidns", "root"])]
fn reap_a_process_run_survives_a_sandbench_in_another_pid_namespace() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: per-run cgroups (what the reaper removes) need root here");
    }
    if !pidns_ok() {
        return;
    }
    let net = OuterNet::new();
    let marker = format!("sandbench-reap-pidns-{}", std::process::id());
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--format", "json", "--timeout", "120s", "--env", &format!("CANARY_MARK={marker}")])
        .arg(samples_dir().join("hostile/sleep_forever.py"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = net.spawn(&mut cmd);
    assert!(eventually(30, || !processes_with(&marker).is_empty()), "the program never started");
    let cgroups = net.leftover_cgroups();
    assert!(!cgroups.is_empty(), "the run has no cgroup to protect");
    // A cgroup named by another host's token sits beside it (as on a shared
    // cgroupfs): never ours to judge.
    let foreign: Vec<_> =
        cgroups.iter().filter_map(|c| c.parent()).map(|p| p.join(format!("{}-0", another_host_token()))).collect();
    for f in &foreign {
        std::fs::create_dir(f).unwrap();
    }

    // The second sandbench's reaper runs at its start (doctor runs no program
    // of ours; the run runs one and reaps first).
    for args in [&["doctor"][..], &["run", "--timeout", "30s", samples_dir().join("benign/hello.sh").to_str().unwrap()]]
    {
        let out = net.output(&mut in_pid_namespace(args), Duration::from_secs(120));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(!processes_with(&marker).is_empty(), "the reaper in a pid namespace killed a live run");
    for c in &cgroups {
        assert!(c.exists(), "the reaper in a pid namespace removed the live run's cgroup {}", c.display());
    }
    for f in &foreign {
        assert!(f.exists(), "another host's cgroup was removed: {}", f.display());
        std::fs::remove_dir(f).unwrap();
    }

    // The live run ends as the user asked, not as a reaper did.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Cancelled, "{}", r.summary_line());
    assert!(net.leftover_cgroups().is_empty(), "{:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["pidns", "root"])]
fn reap_a_dead_owners_cgroup_goes_even_from_another_pid_namespace() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: per-run cgroups need root here");
    }
    if !pidns_ok() {
        return;
    }
    let net = OuterNet::new();
    // Where this net's run cgroups live: let a run make the parents.
    let out =
        net.output(Command::new(bin()).arg("run").arg(samples_dir().join("benign/hello.sh")), Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dead = dead_owner_token();
    let parents = net.run_parents();
    assert!(!parents.is_empty(), "no run cgroup parent under the net");
    let left: Vec<_> = parents.iter().map(|p| p.join(format!("{dead}-0"))).collect();
    for d in &left {
        std::fs::create_dir(d).unwrap();
    }
    let out = net.output(&mut in_pid_namespace(&["doctor"]), Duration::from_secs(120));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for d in &left {
        assert!(!d.exists(), "a dead owner's cgroup was not reaped: {}", d.display());
    }
    forget_lock(&dead);
}

fn docker_image() -> String {
    let out = Command::new(bin()).args(["doctor", "--format", "json"]).stdin(Stdio::null()).output().unwrap();
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = all.as_array().and_then(|a| a.iter().find(|t| t["tier"] == "docker")).cloned().unwrap_or_default();
    let checks = d["checks"].as_array().cloned().unwrap_or_default();
    let image = checks.iter().find(|c| c["name"] == "image").and_then(|c| c["detail"].as_str()).unwrap_or("");
    image.split_whitespace().next().unwrap_or("").to_string()
}

/// A stopped container carrying sandbench's labels with `owner`, and a test
/// label so that this test removes only what it made.
fn container_owned_by(image: &str, owner: &str, test_label: &str) -> String {
    let out = Command::new("docker")
        .args(["create", "--network", "none", "--label", "sandbench=reaper-test", "--label"])
        .arg(format!("sandbench.owner={owner}:owner-lock:v2"))
        .args(["--label", "sandbench.pid=1", "--label"])
        .arg(format!("sandbench.reaper-test={test_label}"))
        .args([image, "true"])
        .output()
        .expect("docker create");
    assert!(out.status.success(), "docker create: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn container_exists(id: &str) -> bool {
    Command::new("docker").args(["inspect", "--format", "{{.Id}}", id]).output().is_ok_and(|o| o.status.success())
}

fn remove_test_containers(test_label: &str) {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=sandbench.reaper-test={test_label}"))
        .output()
        .unwrap();
    for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
}

#[sandbench_testkit::test(needs = ["docker", "pidns"])]
fn reap_docker_spares_live_runs_and_other_hosts_and_takes_the_dead() {
    if !tier_ready("docker") {
        return;
    }
    if !pidns_ok() {
        return;
    }
    let image = docker_image();
    assert!(!image.is_empty(), "doctor names no docker image");
    let test_label = format!("{}-{}", std::process::id(), dead_owner_token());
    let foreign = container_owned_by(&image, &another_host_token(), &test_label);
    let dead = dead_owner_token();
    let orphan = container_owned_by(&image, &dead, &test_label);

    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("sleep.py");
    std::fs::write(&prog, "import time\ntime.sleep(1000)\n").unwrap();
    let child = Command::new(bin())
        .args(["run", "--tier", "docker", "--format", "json", "--timeout", "120s"])
        .arg(&prog)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(eventually(60, || !containers_of(pid).is_empty()), "no container appeared");
    let live = containers_of(pid);

    let out = in_pid_namespace(&["doctor"]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for id in &live {
        assert!(container_exists(id), "the reaper in a pid namespace removed a live run's container");
    }
    assert!(container_exists(&foreign), "another host's container was removed");
    // (Other tests' sandbench processes reap too; any of them may have taken it.)
    assert!(eventually(10, || !container_exists(&orphan)), "a dead owner's container was not reaped");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Cancelled, "{}", r.summary_line());
    remove_test_containers(&test_label);
    forget_lock(&dead);
}

/// Tries, as `nobody`, to open every lock file in `dir` for reading and take
/// a shared lock on it (all `flock` needs), to list the folder and to plant a
/// lock file and a link in it; then holds whatever it got for 30 s.
const ANOTHER_USER: &str = r#"import fcntl, os, sys, time
d = sys.argv[1]
held = []
got = []
try:
    names = os.listdir(d)
    got.append('listed')
except OSError:
    names = sys.argv[2:]
for n in names:
    try:
        f = open(os.path.join(d, n), 'rb')
        fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        held.append(f)
        got.append('locked ' + n)
    except OSError:
        pass
for n, how in (('planted.lock', 'file'), ('linked.lock', 'link')):
    try:
        if how == 'file':
            open(os.path.join(d, n), 'w').close()
        else:
            os.symlink('/etc/passwd', os.path.join(d, n))
        got.append('planted ' + n)
    except OSError:
        pass
print('got', got, flush=True)
time.sleep(30)
"#;

#[sandbench_testkit::test(needs = ["root", "cmd:setpriv"])]
fn owner_locks_are_out_of_another_users_reach() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    // Laid out as /run/sandbench/owners is: a traversable parent.
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = base.path().join("owners");
    let live = owner::Owner::acquire_in(&dir).unwrap();
    let dead = owner::Owner::acquire_in(&dir).unwrap();
    let dead_token = dead.token().to_string();
    drop(dead);
    let names = [format!("{}.lock", live.token()), format!("{dead_token}.lock")];
    let mut nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", ANOTHER_USER])
        .arg(&dir)
        .args(&names)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(nobody.stdout.take().unwrap()).read_line(&mut line).unwrap();
    // While it holds whatever it could get, the reaper judges.
    let mut sweep = owner::Sweep::in_dir(dir.clone());
    let dead_judged = sweep.judge(&dead_token);
    let live_judged = sweep.judge(live.token());
    let _ = nobody.kill();
    let _ = nobody.wait();
    assert_eq!(line.trim(), "got []", "another user reached the owner locks");
    assert_eq!(dead_judged, owner::Judgement::Dead, "another user kept a dead owner's leftovers from being reaped");
    assert_eq!(live_judged, owner::Judgement::Alive);
    // A lock file another uid owns proves nothing, whoever put it there.
    let m = owner::machine().unwrap();
    let planted = format!("{}-{}-1-0badf00d", m.host, m.boot);
    let p = dir.join(format!("{planted}.lock"));
    std::fs::write(&p, "").unwrap();
    std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(owner::Sweep::in_dir(dir.clone()).judge(&planted), owner::Judgement::Unknown);
}
