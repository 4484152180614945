//! The process tier's boundary, attacked the way a hostile program would:
//! host files and listening sockets planted where the sandbox's view comes
//! from, limits it cannot enforce, what leaks across exec, which uid it runs
//! as, and limit hits the program hides.

use crate::support::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{bin, OuterNet};
use sandbench::internals::process::HOST_BINDS;
use sandbench::report::{Outcome, RunReport};

fn token() -> String {
    let mut b = [0u8; 8];
    getrandom_fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn getrandom_fill(b: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(b)).expect("/dev/urandom");
}

/// Run `code` (Python) on the process tier with extra `run` arguments.
fn run_py(net: &OuterNet, code: &str, args: &[&str]) -> (std::process::Output, Option<RunReport>) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("prog.py");
    std::fs::write(&p, code).unwrap();
    let out = net.output(
        Command::new(bin()).args(["run", "--tier", "process", "--format", "json"]).args(args).arg(&p),
        Duration::from_secs(120),
    );
    let r = serde_json::from_slice(&out.stdout).ok();
    (out, r)
}

/// A planted host file and a listening socket anyone may connect to; both
/// removed on drop.
struct Plant {
    file: PathBuf,
    sock: PathBuf,
    listener: UnixListener,
    made_dir: Option<PathBuf>,
}

impl Plant {
    fn new(dir: &Path, tag: &str) -> Plant {
        let made_dir = (!dir.exists()).then(|| {
            std::fs::create_dir_all(dir).unwrap();
            dir.to_path_buf()
        });
        let file = dir.join(format!("sandbench-plant-{tag}.txt"));
        std::fs::write(&file, format!("planted-secret-{tag}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let sock = dir.join(format!("sandbench-plant-{tag}.sock"));
        let listener = UnixListener::bind(&sock).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        Plant { file, sock, listener, made_dir }
    }

    fn connections(&self) -> usize {
        std::iter::from_fn(|| self.listener.accept().ok()).count()
    }
}

impl Drop for Plant {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_file(&self.sock);
        if let Some(d) = &self.made_dir {
            let _ = std::fs::remove_dir(d);
        }
    }
}

const PROBE: &str = r#"
import os, socket, sys
for line in os.environ["PLANTED"].split(";"):
    f, s = line.split(",")
    try:
        print("READ", f, open(f).read().strip())
    except OSError as e:
        print("no read", f, e.strerror)
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(s)
        print("CONNECTED", s)
    except OSError as e:
        print("no connect", s, e.strerror)
print("listing /etc:", sorted(os.listdir("/etc")), "opt:", os.path.exists("/opt"))
import ssl, json, sqlite3, pwd, time
ctx = ssl.create_default_context()
print("ca certificates:", ctx.cert_store_stats()["x509_ca"])
print("user:", pwd.getpwuid(os.getuid()).pw_name, "zone:", time.tzname[0])
"#;

#[sandbench_testkit::test(needs = ["root"])]
fn process_tier_shows_no_planted_host_file_or_socket() {
    if !common::is_root() {
        assert!(!common::required("process"), "planting host files needs root");
        panic!("cannot run although its needs hold: planting files in host system directories needs root");
    }
    let tag = token();
    // Every real directory the tier binds (symlinks like /bin -> usr/bin
    // point into one of them), the two it used to bind, and the sources of
    // the files it copies into its own /etc.
    let mut dirs: Vec<PathBuf> = HOST_BINDS
        .iter()
        .map(|d| Path::new("/").join(d))
        .filter(|p| std::fs::symlink_metadata(p).map(|m| m.is_dir()).unwrap_or(false))
        .collect();
    assert!(!dirs.is_empty());
    let bound = dirs.len();
    // /etc/alternatives: its links are recreated, never a file or socket
    // someone put beside them.
    dirs.extend(["/etc", "/opt", "/etc/ssl/certs", "/etc/python3", "/etc/alternatives"].map(PathBuf::from));
    let plants: Vec<Plant> = dirs.iter().map(|d| Plant::new(d, &tag)).collect();
    let planted: Vec<String> = plants.iter().map(|p| format!("{},{}", p.file.display(), p.sock.display())).collect();
    let net = OuterNet::new();
    let env = format!("PLANTED={}", planted.join(";"));
    let (out, r) = run_py(&net, PROBE, &["--env", &env]);
    let r = r.unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r.outcome, Outcome::Ok, "{}\n{}", r.summary_line(), r.stderr);
    for (i, p) in plants.iter().enumerate() {
        assert_eq!(p.connections(), 0, "the sandbox connected to the host socket {}\n{}", p.sock.display(), r.stdout);
        assert!(!r.stdout.contains(&format!("CONNECTED {}", p.sock.display())), "{}", r.stdout);
        // The bound system directories are visible read-only by design;
        // nothing of /etc or /opt is.
        if i >= bound {
            let read = format!("READ {}", p.file.display());
            assert!(!r.stdout.contains(&read), "{} was readable:\n{}", p.file.display(), r.stdout);
        }
    }
    // The interpreter still has what it needs: certificates, its modules,
    // the sandbox's own user, the host's time zone.
    assert!(r.stdout.contains("opt: False"), "{}", r.stdout);
    let certs: u64 =
        r.stdout.split("ca certificates: ").nth(1).and_then(|s| s.lines().next()).unwrap().parse().unwrap();
    assert!(certs > 0, "{}", r.stdout);
    assert!(r.stdout.contains("user: sandbox"), "{}", r.stdout);
}

/// `cmd` started under a seccomp filter that makes the given syscalls fail
/// with `errno`, as on a kernel without them: the sandbox's own Landlock or
/// seccomp step then cannot take effect.
#[allow(unsafe_code)]
fn without_syscalls(cmd: &mut Command, syscalls: &[i64], errno: i32) {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    use std::os::unix::process::CommandExt;
    let rules = syscalls.iter().map(|n| (*n, vec![])).collect();
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch).unwrap();
    let prog: BpfProgram = f.try_into().unwrap();
    // SAFETY: between fork and exec only the prctl/seccomp system calls of
    // apply_filter run, on a program built before the fork.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&prog).map_err(|e| std::io::Error::other(e.to_string())));
    }
}

#[sandbench_testkit::test]
fn process_limits_beyond_the_tier_are_refused_before_any_sandbox_work() {
    let net = OuterNet::new();
    let hello = common::samples_dir().join("benign/hello.py");
    for (args, what) in [(["--pids", "5000000"], "pids 5000000"), (["--memory", "100000G"], "memory 100000G")] {
        for format in ["text", "json"] {
            let out = net.output(
                Command::new(bin()).args(["run", "--tier", "process", "--format", format]).args(args).arg(&hello),
                Duration::from_secs(30),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(what) && err.contains("at most"), "{args:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
            // Text: nothing on stdout; JSON: only the error object (never the program's output).
            let stdout = String::from_utf8_lossy(&out.stdout);
            if format == "text" {
                assert!(stdout.is_empty(), "the program ran: {stdout}");
            } else {
                let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON error object");
                assert_eq!(v["outcome"], "error", "the program ran: {stdout}");
                assert!(!stdout.contains("hello from"), "the program ran: {stdout}");
            }
        }
    }
    assert!(net.leftover_cgroups().is_empty(), "a cgroup was made for a refused run");
    // Every other front end goes through the runner, which refuses the same way.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tier = sandbench::tier::by_name("process", &crate::support::common::config()).unwrap();
    let mut spec = sandbench::spec::RunSpec::new(sandbench::spec::Language::Python, "print(1)\n");
    spec.limits.pids = 5_000_000;
    let r = rt.block_on(sandbench::runner::run(tier, spec));
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.error.as_deref().unwrap_or("").contains("at most"), "{:?}", r.error);
    assert!(r.stdout.is_empty());
}

#[sandbench_testkit::test]
fn process_limits_form_refuses_what_the_tier_cannot_enforce() {
    use ratatui::crossterm::event::KeyCode;
    use sandbench::tui::app::{App, Overlay};
    use sandbench::tui::headless::{key, screen, type_text};
    let mut app = App::new(sandbench::tui::theme::Theme::dark(), &["process"], "process", Default::default());
    app.live_clock = false;
    app.update(key(KeyCode::F(3)));
    for _ in 0..3 {
        app.update(key(KeyCode::Down));
    }
    for _ in 0..8 {
        app.update(key(KeyCode::Backspace));
    }
    type_text(&mut app, "99999999999");
    app.update(key(KeyCode::Enter));
    let Some(Overlay::Limits(form)) = &app.overlay else { panic!("the form closed: the limit was accepted") };
    let e = form.error.clone().unwrap_or_default();
    assert!(e.contains("pids 99999999999") && e.contains("at most"), "{e}");
    assert_eq!(app.limits.pids, sandbench::spec::Limits::default().pids);
    let s = screen(&mut app, 100, 30);
    assert!(s.contains("at most"), "{s}");
    assert!(!s.contains("✔ ok"), "{s}");
}

#[sandbench_testkit::test(needs = ["root"])]
fn process_sandbox_that_could_not_be_built_is_an_error() {
    if !common::is_root() {
        assert!(!common::required("process"), "needs root to filter sandbench's system calls");
        panic!("cannot run although its needs hold: installing a seccomp filter around sandbench needs root (or no_new_privs)");
    }
    // seccomp(2) and prctl(PR_SET_SECCOMP) refused: the sandbox's filter
    // cannot be installed, so the program must not run.
    let net = OuterNet::new();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--format", "json"]);
    cmd.arg(common::samples_dir().join("benign/hello.py"));
    without_syscalls(&mut cmd, &[libc::SYS_seccomp], libc::ENOSYS);
    let out = net.output(&mut cmd, Duration::from_secs(60));
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Error, "{}", r.summary_line());
    assert!(r.error.as_deref().unwrap_or("").contains("seccomp"), "{:?}", r.error);
    assert!(!r.stdout.contains("hello"), "the program ran: {}", r.stdout);
    assert_eq!(out.status.code(), Some(1));
}

#[sandbench_testkit::test]
fn process_program_starts_with_stdio_only() {
    // fd 3 is the status pipe in every supervisor: the program must not hold
    // it (or anything else of sandbench's), whatever it tries.
    let net = OuterNet::new();
    let code = r#"
import os
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
print("fds", fds)
for fd in range(3, 64):
    try:
        os.write(fd, b'{"t":"exit","code":0,"signal":null,"cpu_ms":0,"max_rss_kb":0,"fsize_hit":null,"disk_full":false}\n')
        print("WROTE", fd)
    except OSError:
        pass
"#;
    let (out, r) = run_py(&net, code, &[]);
    let r = r.unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    // os.listdir's own descriptor is the only one past stderr.
    assert!(r.stdout.contains("fds [0, 1, 2, 3]"), "{}", r.stdout);
    assert!(!r.stdout.contains("WROTE"), "{}", r.stdout);
}

#[sandbench_testkit::test(needs = ["root"])]
fn process_without_landlock_is_refused_or_marked_degraded() {
    if !common::is_root() {
        assert!(!common::required("process"), "needs root to filter sandbench's system calls");
        panic!("cannot run although its needs hold: installing a seccomp filter around sandbench needs root (or no_new_privs)");
    }
    let landlock = [libc::SYS_landlock_create_ruleset, libc::SYS_landlock_add_rule, libc::SYS_landlock_restrict_self];
    let hello = common::samples_dir().join("benign/hello.py");
    let net = OuterNet::new();
    // Refused by default: error, the reason, the way out.
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--format", "json"]).arg(&hello);
    without_syscalls(&mut cmd, &landlock, libc::ENOSYS);
    let out = net.output(&mut cmd, Duration::from_secs(60));
    let r = common::report(&out);
    assert_eq!(r.outcome, Outcome::Error, "{}", r.summary_line());
    let e = r.error.clone().unwrap_or_default();
    assert!(e.contains("Landlock") && e.contains("--allow-degraded"), "{e}");
    assert!(r.stdout.is_empty(), "the program ran: {}", r.stdout);
    assert_eq!(out.status.code(), Some(1));

    // Opted in: it runs, and every view says degraded.
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--allow-degraded", "--format", "json"]).arg(&hello);
    without_syscalls(&mut cmd, &landlock, libc::ENOSYS);
    let r = common::report(&net.output(&mut cmd, Duration::from_secs(60)));
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert!(r.stdout.contains("hello"), "{}", r.stdout);
    assert!(r.degraded.iter().any(|d| d.contains("Landlock not enforced")), "{:?}", r.degraded);
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--allow-degraded"]).arg(&hello);
    without_syscalls(&mut cmd, &landlock, libc::ENOSYS);
    let out = net.output(&mut cmd, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DEGRADED  the sandbox lacked: Landlock not enforced"), "{err}");

    // The same for seccomp.
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--tier", "process", "--allow-degraded", "--format", "json"]).arg(&hello);
    without_syscalls(&mut cmd, &[libc::SYS_seccomp], libc::ENOSYS);
    let r = common::report(&net.output(&mut cmd, Duration::from_secs(60)));
    assert_eq!(r.outcome, Outcome::Ok, "{}", r.summary_line());
    assert!(r.degraded.iter().any(|d| d.contains("seccomp")), "{:?}", r.degraded);
    assert_eq!(r.details["seccomp"], false);

    // The gauntlet matrix never shows such a cell as a plain pass.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("benign")).unwrap();
    std::fs::create_dir_all(dir.path().join("hostile")).unwrap();
    std::fs::copy(&hello, dir.path().join("benign/hello.py")).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args([
        "gauntlet",
        "--tiers",
        "process",
        "--repeat",
        "1",
        "--allow-degraded",
        "--format",
        "markdown",
        "--samples",
    ]);
    cmd.arg(dir.path());
    without_syscalls(&mut cmd, &landlock, libc::ENOSYS);
    let out = net.output(&mut cmd, Duration::from_secs(120));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("ran ⚠ DEGRADED"), "{md}");
    assert!(md.contains("⚠ hello on process: DEGRADED"), "{md}");
}

/// (real uid, pid namespace) of every host process.
fn host_processes() -> Vec<(i32, u32, String)> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else { continue };
        let Some(uid) = status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)) else {
            continue;
        };
        let ns = std::fs::read_link(e.path().join("ns/pid")).map(|p| p.display().to_string()).unwrap_or_default();
        v.push((pid, uid.parse().unwrap(), ns));
    }
    v
}

#[sandbench_testkit::test(needs = ["root"])]
fn process_runs_get_uids_no_host_process_has() {
    if !common::is_root() {
        assert!(!common::required("process"), "per-run uids are a root feature");
        panic!("cannot run although its needs hold: unprivileged runs keep the caller's uid inside a user namespace");
    }
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("uid.py");
    std::fs::write(&p, "import os, time\nprint(os.getuid(), os.getgid(), flush=True)\ntime.sleep(3)\n").unwrap();
    let net = OuterNet::new();
    let mut children = vec![];
    let mut ids = vec![];
    for _ in 0..2 {
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--tier", "process", "--format", "text"]).arg(&p);
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
        let mut c = net.spawn(&mut cmd);
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let f: Vec<u32> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(f.len(), 2, "{line:?}");
        ids.push(f[0]);
        children.push(c);
    }
    // Both programs are alive now (they sleep): look at the host.
    let host = host_processes();
    let my_ns = std::fs::read_link("/proc/self/ns/pid").unwrap().display().to_string();
    for c in &mut children {
        let _ = c.wait();
    }
    assert_ne!(ids[0], ids[1], "two concurrent runs share a uid");
    for uid in &ids {
        assert_ne!(*uid, 0);
        assert_ne!(*uid, 65534, "runs must not use the host's nobody");
        let holders: Vec<_> = host.iter().filter(|(_, u, _)| u == uid).collect();
        assert!(!holders.is_empty(), "the program of uid {uid} was not found alive");
        for (pid, _, ns) in holders {
            assert_ne!(ns, &my_ns, "host process {pid} (outside any sandbox) has the run's uid {uid}");
        }
    }
    // doctor and the report say which uid is used.
    let out = Command::new(bin()).args(["doctor", "--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = v.as_array().unwrap().iter().find(|t| t["tier"] == "process").unwrap();
    let uid = p["checks"].as_array().unwrap().iter().find(|c| c["name"] == "uid").unwrap();
    assert!(uid["detail"].as_str().unwrap().contains("its own uid from 2000000000.."), "{uid}");
    let (_, r) = run_py(&net, "import os\nprint(os.getuid())\n", &[]);
    let r = r.unwrap();
    assert_eq!(r.details["uid"].to_string(), r.stdout.trim());
    assert!(r.details["uid_policy"].as_str().unwrap().contains("no host process has it"), "{}", r.details);
}

#[sandbench_testkit::test]
fn process_hidden_limit_hits_are_reported_and_nothing_else_is() {
    use sandbench::event::ViolationKind;
    let net = OuterNet::new();
    for (sample, kind) in [
        ("hidden_deep_file.py", ViolationKind::FileSize),
        ("hidden_deleted_file.py", ViolationKind::FileSize),
        ("hidden_full_scratch.py", ViolationKind::Disk),
        ("blinded_scan.py", ViolationKind::FileSize),
    ] {
        let out = net.output(
            Command::new(bin())
                .args(["run", "--tier", "process", "--format", "json", "--memory", "256M"])
                .arg(common::samples_dir().join("hostile").join(sample)),
            Duration::from_secs(60),
        );
        let r = common::report(&out);
        assert_eq!(r.outcome, Outcome::Violation, "{sample}: {}\n{}", r.summary_line(), r.stdout);
        assert!(r.violations.iter().any(|v| v.kind == kind), "{sample}: {:?}", r.violations);
        assert_eq!(r.exit.code, Some(0), "{sample}: the program caught the error and exited 0");
    }
    // Much written over the run, never more than the limits at once: ok.
    let code = r#"
import os
for i in range(12):
    with open(f"f{i}.bin", "wb") as f:
        f.write(b"x" * (12 << 20))
    os.remove(f"f{i}.bin")
print("done")
"#;
    let (_, r) = run_py(&net, code, &["--memory", "256M"]);
    let r = r.unwrap();
    assert_eq!(r.outcome, Outcome::Ok, "{} {:?}", r.summary_line(), r.violations);
    assert!(r.stdout.contains("done"));
}

#[sandbench_testkit::test(needs = ["root"])]
fn process_every_way_of_hiding_a_limit_hit_is_seen() {
    if !common::is_root() {
        assert!(!common::required("process"), "the scratch watch needs root");
        panic!("cannot run although its needs hold: without root the process tier judges only the final state");
    }
    crate::support::hidden::check_tier("process", &[]);
}

#[sandbench_testkit::test]
fn process_memory_limit_is_resident_memory_where_a_cgroup_enforces_it() {
    crate::support::parity::memory_is_resident("process", |r| {
        if r.details["cgroup"].is_null() {
            assert!(!common::required("process") || !common::is_root(), "no cgroup as root");
            panic!("cannot run although its needs hold: no cgroup here, so the memory limit is RLIMIT_DATA (virtual)");
        }
    });
}

/// Socket families other than unix (socketpair), inet, inet6 and netlink
/// route are refused (issue 21, item 4: a "no network" program bound host
/// vsock ports).
#[sandbench_testkit::test]
fn process_refuses_socket_families_it_does_not_need() {
    crate::support::parity::socket_families("process");
}

/// Every call of the one table of refused calls is refused (issue 42, item
/// 8: the same table on every tier).
#[sandbench_testkit::test]
fn process_refuses_the_calls_every_tier_refuses() {
    crate::support::parity::refused_calls("process");
}
