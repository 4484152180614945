//! Peer tiers: a user's own wrapper added from a config file, bad profiles,
//! and the gauntlet through every shipped peer that is installed (skipped
//! with a printed reason otherwise; required when SANDBENCH_REQUIRE_TIERS
//! names it, as CI does). Every run happens under the test's outer net.

use crate::support::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{bin, is_root, required, samples_dir, OuterNet};

/// A wrapper with no isolation at all: `env -i` with the program's variables.
const ENV_I: &str = r#"
name = "envi"
describe = "env -i: a clean environment and nothing else"
tool = "env"
version = ["{tool}", "--version"]
install = "apt-get install -y coreutils"
argv = ["{tool}", "-i", "{env...}", "{command...}"]
env_flag = ["{name}={value}"]
"#;

/// A config dir holding `peers/<name>.toml` files.
fn config_with(profiles: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "").unwrap();
    std::fs::create_dir(dir.path().join("peers")).unwrap();
    for (name, text) in profiles {
        std::fs::write(dir.path().join("peers").join(name), text).unwrap();
    }
    dir
}

fn sandbench(config: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env("SANDBENCH_CONFIG", config.join("config.toml"));
    c
}

/// Peers run as root (outer cgroup, a uid per run): says why it skips.
fn can_run_peers() -> bool {
    if !is_root() {
        panic!("cannot run although its needs hold: peers need root here (outer cgroup, a uid per run)");
    }
    true
}

#[sandbench_testkit::test(needs = ["root"])]
fn a_users_own_wrapper_from_the_config_dir_runs_samples() {
    if !can_run_peers() {
        return;
    }
    let cfg = config_with(&[("envi.toml", ENV_I)]);
    let net = OuterNet::new();
    let out = net.output(
        sandbench(cfg.path())
            .args(["run", "--tier", "envi", "--format", "json"])
            .arg(samples_dir().join("benign/hello.py")),
        Duration::from_secs(60),
    );
    let r = common::report(&out);
    assert_eq!(r.outcome, sandbench::report::Outcome::Ok, "{}", r.summary_line());
    assert_eq!(r.stdout.trim(), "hello from the sandbox");
    assert_eq!(r.details["peer"], "envi");
    assert!(r.details["profile"].as_str().unwrap().ends_with("peers/envi.toml"), "{}", r.details);
    let not = r.details["limits"]["not_enforced"].as_array().unwrap();
    assert!(not.iter().any(|l| l == "memory") && not.iter().any(|l| l == "network"), "{}", r.details);
    // A uid of the run's own, from the process tier's range, named in the
    // wrapper's passwd.
    let uid = r.details["run_as"]["uid"].as_u64().unwrap();
    let c = sandbench::config::Config::default();
    assert!((c.process.uid_base as u64..(c.process.uid_base + c.process.uid_count) as u64).contains(&uid), "{uid}");
    assert_eq!(r.details["run_as"]["user"], format!("sandbench-peer-{uid}")); // NEW

    // A wrapper that contains nothing: a fork bomb is stopped by sandbench's
    // outer cgroup, and the gauntlet calls that an escape, not containment.
    let samples = tempfile::tempdir().unwrap();
    std::fs::create_dir(samples.path().join("hostile")).unwrap();
    std::fs::copy(samples_dir().join("hostile/fork_bomb.py"), samples.path().join("hostile/fork_bomb.py")).unwrap();
    let out = net.output(
        sandbench(cfg.path())
            .args(["gauntlet", "--tiers", "envi", "--repeat", "1", "--format", "json", "--samples"])
            .arg(samples.path()),
        Duration::from_secs(120),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cell = |name: &str| m["cells"].as_array().unwrap().iter().find(|c| c["sample"] == name).unwrap().clone();
    let fork = cell("fork-bomb");
    assert_eq!(fork["verdict"], "escaped", "{fork:#}");
    assert!(fork["what"].to_string().contains("outer cgroup"), "{fork:#}");
    assert!(fork["report"]["violations"].to_string().contains("pids"), "{fork:#}");
    assert_eq!(out.status.code(), Some(1), "the escape is a mismatch");
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
}

#[sandbench_testkit::test]
fn a_bad_profile_is_one_line_naming_file_and_key() {
    let bad = ENV_I.replace("env_flag", "env_flags");
    let cfg = config_with(&[("typo.toml", &bad)]);
    let out = sandbench(cfg.path())
        .args(["run", "--tier", "envi", "--format", "json"])
        .arg(samples_dir().join("benign/hello.py"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("typo.toml") && err.contains("env_flags"), "{err}");
    // The tiers of sandbench's own still work with a broken peer profile.
    let out = sandbench(cfg.path()).args(["gauntlet", "--tiers", "nope"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("typo.toml"));
}

/// The whole gauntlet through one shipped peer: every cell judged (the
/// wrapper built its sandbox every time), the benign controls ran, the
/// limits sandbench enforces from outside held, and whatever got past the
/// peer was stopped by the outer net and reported as an escape.
///
/// With a 3 s wall limit (the gauntlet's is 5 s): a peer enforces no CPU
/// limit, so every spinning sample (cpu spins, bombs) burns CPU until the
/// wall limit, stretched by the load; five peers at 5 s were ~8 CPU-minutes
/// of every CI run, slowing every other test. The slowest benign control
/// (srt's, ~2 s on a loaded machine) still fits, stretched by the load.
fn gauntlet_on(peer: &str) {
    if !can_run_peers() {
        assert!(!required(peer), "the {peer} peer is required but cannot run here");
        return;
    }
    let probe = Command::new(bin())
        .args(["run", "--tier", peer, "--format", "json"])
        .arg(samples_dir().join("benign/hello.py"))
        .output()
        .unwrap();
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr).trim().to_string();
        assert!(!required(peer), "the {peer} peer is required but does not run: {why}");
        panic!("cannot run although its needs hold: the {peer} peer does not run here: {why} (sandbench setup peers)");
    }
    let net = OuterNet::new();
    let out = net.output(
        Command::new(bin()).args(["gauntlet", "--tiers", peer, "--repeat", "1", "--timeout", "3s", "--format", "json"]),
        Duration::from_secs(900),
    );
    let m: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cells = m["cells"].as_array().unwrap();
    assert!(cells.len() >= 20, "{m:#}");
    let cell = |name: &str| cells.iter().find(|c| c["sample"] == name).unwrap_or_else(|| panic!("no {name} cell"));
    for c in cells {
        assert_ne!(c["verdict"], "error", "{peer} failed to judge {}: {c:#}", c["sample"]);
        // A benign program runs, unless the peer cannot start its language
        // here (node under an RLIMIT_AS memory limit): said, never a pass.
        if c["hostile"] == false {
            assert!(c["verdict"] == "ran" || c["verdict"] == "not_available", "{c:#}");
        }
        if c["verdict"] == "not_available" {
            // Never started: no run of the peer to describe.
            continue;
        }
        assert_eq!(c["report"]["details"]["peer"], peer);
        assert!(c["report"]["details"]["version"].as_str().is_some_and(|v| v.chars().any(|c| c.is_ascii_digit())));
        if c["verdict"] == "escaped" {
            eprintln!("{peer} {}: escaped: {}", c["sample"], c["what"]);
        }
    }
    // Every shipped peer is configured with the network off.
    assert_eq!(cell("net-loopback")["verdict"], "contained", "{:#}", cell("net-loopback"));
    // sandbench's own limits, enforced from outside, hold on every peer.
    assert!(cell("output-flood")["by"].as_str().unwrap_or("").contains("output_limit"), "{:#}", cell("output-flood"));
    assert!(cell("sleep-forever")["by"].as_str().unwrap_or("").contains("wall_timeout"), "{:#}", cell("sleep-forever"));
    // Bombs are stopped: by the peer, or (an escape) by the outer net.
    for bomb in ["memory-bomb", "fork-bomb"] {
        let c = cell(bomb);
        match c["verdict"].as_str().unwrap() {
            "contained" => {}
            "escaped" => assert!(c["what"].to_string().contains("outer cgroup"), "{c:#}"),
            v => panic!("{bomb} on {peer}: {v}: {c:#}"),
        }
    }
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
    assert!(net.leftover_cgroups().is_empty(), "cgroups left behind: {:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["bwrap", "root"])]
fn gauntlet_on_bwrap() {
    gauntlet_on("bwrap");
}

#[sandbench_testkit::test(needs = ["firejail", "root"])]
fn gauntlet_on_firejail() {
    gauntlet_on("firejail");
}

#[sandbench_testkit::test(needs = ["nsjail", "root"])]
fn gauntlet_on_nsjail() {
    gauntlet_on("nsjail");
}

#[sandbench_testkit::test(needs = ["srt", "root"])]
fn gauntlet_on_srt() {
    gauntlet_on("srt");
}

#[sandbench_testkit::test(needs = ["codex", "root"])]
fn gauntlet_on_codex() {
    gauntlet_on("codex");
}

/// A run that writes a secret in its scratch (its working directory on
/// every peer; srt points TMPDIR elsewhere), says so, and waits.
const VICTIM: &str = r#"
import time
with open("secret.txt", "w") as f:
    f.write("victim-secret-31337")
print("ready", flush=True)
time.sleep(60)
"#;

/// Another run of the same peer, told where the victim's folder is.
fn attacker(victim: &Path) -> String {
    format!(
        r#"
import os
A = {a:?}
def t(name, f):
    try:
        r = f()
        print(name, "REACHED", repr(r)[:120])
    except OSError as e:
        print(name, "refused", e.strerror)
t("list runs", lambda: os.listdir(os.path.dirname(A)))
t("list run", lambda: os.listdir(A))
t("list scratch", lambda: os.listdir(A + "/w"))
t("read secret", lambda: open(A + "/w/secret.txt").read())
t("read program", lambda: open(A + "/program/main.py").read())
t("write scratch", lambda: open(A + "/w/planted", "w").write("x"))
t("read home", lambda: os.listdir(A + "/home"))
print("attacker done")
"#,
        a = victim.display().to_string()
    )
}

/// The victim's run folder: the entry of /run/sbp made by the sandbench
/// process `pid` (its owner token names the pid).
fn run_folder_of(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_dir("/run/sbp").ok()?.flatten().map(|e| e.path()).find(|p| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.split('-').nth(2) == Some(pid.to_string().as_str())
    })
}

/// Two runs of one peer at once (the second told where the first's files
/// are) and another local user: none reaches a run's folder, scratch or
/// program. Every installed peer; the ones that show the program the host's
/// file system (firejail, srt, codex) are the ones this holds by the uids.
#[sandbench_testkit::test(needs = ["root"])]
fn concurrent_runs_and_other_users_cannot_reach_a_peer_runs_files() {
    use std::io::BufRead;
    if !can_run_peers() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let victim_py = dir.path().join("victim.py");
    std::fs::write(&victim_py, VICTIM).unwrap();
    let net = OuterNet::new();
    let mut ran = vec![];
    for peer in ["firejail", "srt", "codex", "bwrap", "nsjail"] {
        if crate::support::docker_common::tier_available(peer).is_err() {
            assert!(!required(peer), "{peer} is required but unavailable");
            continue;
        }
        ran.push(peer);
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--tier", peer, "--timeout", "90s"]).arg(&victim_py);
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
        let mut victim = net.spawn(&mut cmd);
        let mut lines = std::io::BufReader::new(victim.stdout.take().unwrap()).lines();
        let ready = lines.by_ref().map_while(Result::ok).any(|l| l.trim() == "ready");
        assert!(ready, "{peer}: the victim never got ready");
        let root = run_folder_of(victim.id()).unwrap_or_else(|| panic!("{peer}: no run folder of pid {}", victim.id()));

        // Another local user: cannot list the runs, enter this one or read its program.
        // (An older sandbench on the same host makes the shared /run/sbp 0755
        // at each of its runs; ours makes it 0711 again at the next.)
        let base_mode = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/run/sbp").unwrap().mode() & 0o777
        };
        for (what, args) in [
            ("list the run folders", vec!["ls", "/run/sbp"]),
            ("list the run", vec!["ls", root.to_str().unwrap()]),
            ("read the program", vec!["cat", &format!("{}/program/main.py", root.display())]),
            ("read the scratch", vec!["cat", &format!("{}/w/secret.txt", root.display())]),
        ] {
            let out = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .args(&args)
                .output()
                .unwrap();
            if what == "list the run folders" && base_mode != 0o711 {
                eprintln!(
                    "note: /run/sbp was {base_mode:o}, not 0711: another (older) sandbench made it so; not judged"
                );
                continue;
            }
            assert!(!out.status.success(), "{peer}: uid 65534 could {what}: {}", String::from_utf8_lossy(&out.stdout));
        }

        // Another run of the same peer, at the same time.
        let atk = dir.path().join("attacker.py");
        std::fs::write(&atk, attacker(&root)).unwrap();
        let out = net.output(
            Command::new(bin()).args(["run", "--tier", peer, "--format", "json"]).arg(&atk),
            Duration::from_secs(120),
        );
        let r = common::report(&out);
        assert!(r.stdout.contains("attacker done"), "{peer}: {}\n{}", r.summary_line(), r.stderr);
        assert!(!r.stdout.contains("REACHED"), "{peer}: one run reached another's files:\n{}", r.stdout);
        let scratch: Vec<String> = std::fs::read_dir(root.join("w"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!scratch.iter().any(|n| n == "planted"), "{peer}: the attacker wrote into the victim's scratch");
        assert_eq!(std::fs::read_to_string(root.join("w/secret.txt")).unwrap(), "victim-secret-31337");
        // Ended by the pid this test started: sandbench cleans up on SIGTERM.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim.id() as i32), nix::sys::signal::SIGTERM).unwrap();
        let _ = victim.wait();
        assert!(!root.exists(), "{peer}: the victim's folder outlived it");
    }
    if ran.is_empty() {
        panic!("cannot run although its needs hold: no peer is installed here (sandbench setup peers)");
    }
    assert!(net.remaining().is_empty(), "processes left behind: {:?}", net.remaining());
}

/// Where sandbench makes run folders, a link or a folder another user
/// planted is refused, never followed, and what it points at is untouched;
/// a run folder made for real has the owners and modes promised.
#[sandbench_testkit::test(needs = ["root"])]
fn planted_links_where_run_folders_go_are_refused_not_followed() {
    use sandbench::internals::peer::RunAs;
    use sandbench::internals::peer::RunDir;
    use sandbench::spec::{Language, RunSpec};
    use std::os::unix::fs::{lchown, symlink, MetadataExt, PermissionsExt};
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    let owner = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.uid(), m.gid())
    };
    let spec = RunSpec::new(Language::Python, "print(1)\n");
    let who = RunAs { user: "sandbench-peer-test".into(), uid: 2_000_099_999, gid: 2_000_099_999, switch: true };
    // A world-writable sticky folder, like /tmp (the `/tmp/sbp-UID` fallback
    // lives in one), and a folder of root's a link could point at.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::set_permissions(target.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(target.path().join("keep"), "keep").unwrap();
    let untouched = |what: &str| {
        assert_eq!(mode(target.path()), 0o755, "{what}: the link's target was chmodded");
        assert_eq!(owner(target.path()), (0, 0), "{what}: the link's target was chowned");
        let names: Vec<_> = std::fs::read_dir(target.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, ["keep"], "{what}: something was made through the link");
    };

    // The folder of run folders, planted as a link by uid 65534.
    let base = tmp.path().join("sbp");
    symlink(target.path(), &base).unwrap();
    lchown(&base, Some(65534), Some(65534)).unwrap();
    let e = RunDir::create(&base, "t", &spec, &who, None, 1 << 20).err().expect("a planted link is refused");
    assert!(format!("{e:#}").contains("not a plain folder"), "{e:#}");
    untouched("a link at the base");
    std::fs::remove_file(&base).unwrap();

    // A folder uid 65534 made there first.
    std::fs::create_dir(&base).unwrap();
    lchown(&base, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = RunDir::create(&base, "t", &spec, &who, None, 1 << 20).err().expect("another user's folder is refused");
    assert!(format!("{e:#}").contains("belongs to uid 65534"), "{e:#}");
    assert_eq!(mode(&base), 0o777, "another user's folder was chmodded");
    std::fs::remove_dir(&base).unwrap();

    // A link at a run folder's own name, in sandbench's own base.
    let mine = tempfile::tempdir().unwrap();
    let base = mine.path().join("sbp");
    std::fs::create_dir(&base).unwrap();
    symlink(target.path(), base.join("planted-0-t")).unwrap();
    let e = RunDir::create_named(&base, "planted-0-t", &spec, &who, None, 1 << 20)
        .err()
        .expect("an existing name is refused");
    assert!(format!("{e:#}").contains("already exists"), "{e:#}");
    untouched("a link at the run folder's name");

    // A run folder made for real: reachable by its uid alone.
    let rd = RunDir::create_named(&base, "real-0-t", &spec, &who, None, 1 << 20).unwrap();
    rd.write_file("settings.json", "{}").unwrap();
    let e = rd.write_file("../escape", "x").expect_err("a name with a slash is refused");
    assert!(format!("{e:#}").contains("not a file name"), "{e:#}");
    assert_eq!((mode(&base), owner(&base)), (0o711, (0, 0)), "the folder of run folders");
    assert_eq!((mode(&rd.root), owner(&rd.root)), (0o750, (0, who.gid)), "the run folder");
    assert_eq!((mode(&rd.program_dir), owner(&rd.program_dir)), (0o750, (0, who.gid)), "the program folder");
    let prog = rd.program_dir.join("main.py");
    assert_eq!((mode(&prog), owner(&prog)), (0o640, (0, who.gid)), "the program");
    let settings = rd.root.join("settings.json");
    assert_eq!((mode(&settings), owner(&settings)), (0o640, (0, who.gid)), "a settings file");
    assert_eq!((mode(&rd.scratch), owner(&rd.scratch)), (0o700, (who.uid, who.gid)), "the scratch");
    assert_eq!((mode(&rd.home), owner(&rd.home)), (0o700, (who.uid, who.gid)), "the home");
    let (passwd, _) = rd.etc_files().unwrap();
    let line = format!("sandbench-peer-test:x:{}:{}:", who.uid, who.gid);
    assert!(std::fs::read_to_string(passwd).unwrap().contains(&line));
    let root = rd.root.clone();
    drop(rd);
    assert!(!root.exists(), "the run folder outlived its RunDir");
    assert!(base.join("planted-0-t").exists(), "what was not sandbench's was removed");
    untouched("after the run");
}

/// A sandbench killed outright leaves a peer run's folder (and its scratch
/// mount) behind; the next command that uses peers removes it, and only it.
#[sandbench_testkit::test(needs = ["bwrap", "root"])]
fn a_killed_sandbenchs_peer_folder_is_reaped_by_the_next_start() {
    use std::io::BufRead;
    if !can_run_peers() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let victim_py = dir.path().join("victim.py");
    std::fs::write(&victim_py, VICTIM).unwrap();
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "bwrap", "--timeout", "90s"]).arg(&victim_py);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let mut victim = net.spawn(&mut cmd);
    let mut lines = std::io::BufReader::new(victim.stdout.take().unwrap()).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.trim() == "ready"), "the victim never got ready");
    let root = run_folder_of(victim.id()).expect("its run folder");
    let mounted =
        || std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(&format!("{}/w ", root.display()));
    assert!(mounted(), "the scratch tmpfs is mounted");
    // The pid this test started, killed outright: no clean-up of its own.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim.id() as i32), nix::sys::signal::SIGKILL).unwrap();
    let _ = victim.wait();
    assert!(root.exists(), "a SIGKILLed sandbench cannot clean up");
    let out = net.output(
        Command::new(bin())
            .args(["run", "--tier", "bwrap", "--format", "json"])
            .arg(samples_dir().join("benign/hello.py")),
        Duration::from_secs(120),
    );
    assert_eq!(common::report(&out).outcome, sandbench::report::Outcome::Ok);
    assert!(!root.exists(), "the dead sandbench's run folder was not reaped");
    assert!(!mounted(), "the dead sandbench's scratch mount was not reaped");
    net.kill_all();
}
