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
use sandbench::report::{Outcome, RunReport};
use sandbench::tier::process::sandbox::HOST_BINDS;

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

#[test]
fn process_tier_shows_no_planted_host_file_or_socket() {
    if !common::is_root() {
        assert!(!common::required("process"), "planting host files needs root");
        eprintln!("skipped: planting files in host system directories needs root");
        return;
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
    dirs.extend(["/etc", "/opt", "/etc/ssl/certs", "/etc/python3"].map(PathBuf::from));
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
