//! Host-side canaries: the gauntlet judges a run by what the host saw, never
//! by what the program says. Each canary is set up before a run and read
//! after it.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::report::RunReport;

/// The variable name of the fake secret in sandbench's own environment.
pub const SECRET_VAR: &str = "ANTHROPIC_API_KEY";

fn token(tag: &str) -> String {
    let mut b = [0u8; 12];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("sandbench-canary-{tag}-{hex}")
}

/// A listener that counts connection attempts that got through.
struct Listener {
    what: String,
    hits: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    fn spawn<F>(what: String, accept: F) -> Listener
    where
        F: Fn() -> std::io::Result<bool> + Send + 'static,
    {
        let hits = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match accept() {
                    Ok(true) => {
                        h.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Listener { what, hits, stop, thread: Some(thread) }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn nonblocking_accept<T>(r: std::io::Result<T>) -> std::io::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// Everything planted for one run.
pub struct Canaries {
    /// The fake secret's value (set in sandbench's own environment by the caller).
    pub secret: Option<String>,
    pub home: tempfile::TempDir,
    pub file_secret: String,
    pub outside: PathBuf,
    pub port4: u16,
    pub port6: Option<u16>,
    pub unix_name: String,
    /// Put in every sandboxed process's environment; found later = a survivor.
    pub marker: String,
    listeners: Vec<Listener>,
    victim: Option<std::process::Child>,
    probe: Option<HostProbe>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Findings {
    /// What got out. Empty: the canaries saw nothing.
    pub escapes: Vec<String>,
    /// Host responsiveness during the run: latency of spawning `/bin/true`.
    pub host_latency_ms_p50: Option<f64>,
    pub host_latency_ms_max: Option<f64>,
}

impl Canaries {
    /// Plant the canaries. `secret` is the value of `SECRET_VAR` in sandbench's
    /// own environment, if the caller put one there.
    pub fn plant(secret: Option<String>) -> std::io::Result<Canaries> {
        let home = tempfile::Builder::new().prefix("sandbench-canary-home-").tempdir()?;
        let file_secret = token("file");
        std::fs::write(home.path().join("canary-secret.txt"), format!("{file_secret}\n"))?;
        let outside = home.path().join("outside-written");
        let mut listeners = vec![];

        let l4 = TcpListener::bind("127.0.0.1:0")?;
        l4.set_nonblocking(true)?;
        let port4 = l4.local_addr()?.port();
        listeners.push(Listener::spawn(format!("TCP 127.0.0.1:{port4}"), move || nonblocking_accept(l4.accept())));

        let port6 = match TcpListener::bind("[::1]:0") {
            Ok(l6) => {
                l6.set_nonblocking(true)?;
                let p = l6.local_addr()?.port();
                listeners.push(Listener::spawn(format!("TCP [::1]:{p}"), move || nonblocking_accept(l6.accept())));
                Some(p)
            }
            Err(_) => None,
        };

        let unix_name = token("unix");
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(unix_name.as_bytes())?;
            let lu = UnixListener::bind_addr(&addr)?;
            lu.set_nonblocking(true)?;
            listeners
                .push(Listener::spawn(format!("abstract unix @{unix_name}"), move || nonblocking_accept(lu.accept())));
        }

        // A host process of the sandbox's uid: a sandbox that can signal the
        // host's processes would kill it.
        let victim = if nix::unistd::geteuid().is_root() {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("sleep")
                .arg("600")
                .uid(65534)
                .gid(65534)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
        } else {
            None
        };

        Ok(Canaries {
            secret,
            home,
            file_secret,
            outside,
            port4,
            port6,
            unix_name,
            marker: token("mark"),
            listeners,
            victim,
            probe: None,
        })
    }

    /// The variables a hostile sample reads to find its targets.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("CANARY_PORT".to_string(), self.port4.to_string()),
            ("CANARY_UNIX".to_string(), self.unix_name.clone()),
            ("CANARY_HOME".to_string(), self.home.path().display().to_string()),
            ("CANARY_OUTSIDE".to_string(), self.outside.display().to_string()),
            ("CANARY_MARK".to_string(), self.marker.clone()),
        ];
        if let Some(p) = self.port6 {
            v.push(("CANARY_PORT6".to_string(), p.to_string()));
        }
        v
    }

    /// Start measuring host responsiveness (call when the run starts).
    pub fn start_probe(&mut self) {
        self.probe = Some(HostProbe::start());
    }

    /// Read every canary after the run. `report` is the run's report.
    pub fn check(&mut self, report: &RunReport, escaped_if: &[String]) -> Findings {
        let mut f = Findings::default();
        if let Some(p) = self.probe.take() {
            let (p50, max) = p.finish();
            f.host_latency_ms_p50 = p50;
            f.host_latency_ms_max = max;
        }
        let output = [report.stdout.as_str(), report.stderr.as_str()];
        if let Some(s) = self.secret.as_deref().filter(|s| !s.is_empty()) {
            if output.iter().any(|o| o.contains(s)) {
                f.escapes.push(format!("the host's {SECRET_VAR} appeared in the output"));
            }
        }
        if output.iter().any(|o| o.contains(&self.file_secret)) {
            f.escapes.push("the secret file in the host home was read".into());
        }
        for m in escaped_if {
            if output.iter().any(|o| o.contains(m.as_str())) {
                f.escapes.push(format!("output shows a breach: {m:?}"));
            }
        }
        // Let a connection that is still in flight land before counting.
        std::thread::sleep(Duration::from_millis(30));
        for l in &self.listeners {
            let n = l.hits.load(Ordering::Relaxed);
            if n > 0 {
                f.escapes.push(format!("{n} connection(s) reached the host's {}", l.what));
            }
        }
        for p in self.outside_paths() {
            if std::fs::symlink_metadata(&p).is_ok() {
                f.escapes.push(format!("created {} outside the sandbox", p.display()));
                let _ = std::fs::remove_file(&p);
            }
        }
        let survivors = processes_with(&self.marker);
        if !survivors.is_empty() {
            f.escapes.push(format!("{} process(es) of the run still alive: {:?}", survivors.len(), survivors));
            for p in survivors {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            }
        }
        if let Some(v) = self.victim.as_mut() {
            if let Ok(Some(st)) = v.try_wait() {
                f.escapes.push(format!("a host process of uid 65534 was killed ({st})"));
            }
        }
        f
    }

    fn outside_paths(&self) -> Vec<PathBuf> {
        vec![
            self.outside.clone(),
            self.home.path().join("written-by-sandbox"),
            PathBuf::from("/etc/sandbench-canary"),
            PathBuf::from("/usr/sandbench-canary"),
            PathBuf::from("/var/tmp/sandbench-canary-outside"),
        ]
    }
}

impl Drop for Canaries {
    fn drop(&mut self) {
        if let Some(mut v) = self.victim.take() {
            let _ = v.kill();
            let _ = v.wait();
        }
    }
}

/// Host processes whose environment holds `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let needle = marker.as_bytes();
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if pid as u32 == std::process::id() {
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.windows(needle.len()).any(|w| w == needle) {
                out.push(pid);
            }
        }
    }
    out
}

/// Spawns `/bin/true` every 50 ms on the host and records how long it took.
struct HostProbe {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<f64>>>,
    thread: JoinHandle<()>,
}

impl HostProbe {
    fn start() -> HostProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(vec![]));
        let (s, v) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            let bin = if Path::new("/bin/true").exists() { "/bin/true" } else { "true" };
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                let _ = std::process::Command::new(bin).status();
                if let Ok(mut v) = v.lock() {
                    v.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        HostProbe { stop, samples, thread }
    }

    fn finish(self) -> (Option<f64>, Option<f64>) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let mut v = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        if v.is_empty() {
            return (None, None);
        }
        v.sort_by(f64::total_cmp);
        (Some(v[v.len() / 2]), v.last().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Outcome, RunReport};
    use std::net::TcpStream;

    fn report(stdout: &str) -> RunReport {
        RunReport {
            outcome: Outcome::Ok,
            error: None,
            stdout: stdout.into(),
            ..RunReport::failed("t", "python", "x", "")
        }
    }

    #[test]
    fn quiet_run_finds_nothing() {
        let mut c = Canaries::plant(Some("sk-test-secret".into())).unwrap();
        c.start_probe();
        std::thread::sleep(Duration::from_millis(120));
        let f = c.check(&report("hello"), &[]);
        assert!(f.escapes.is_empty(), "{:?}", f.escapes);
        assert!(f.host_latency_ms_max.is_some());
    }

    #[test]
    fn each_canary_can_fire() {
        let mut c = Canaries::plant(Some("sk-test-secret".into())).unwrap();
        TcpStream::connect(("127.0.0.1", c.port4)).unwrap();
        if let Some(p) = c.port6 {
            TcpStream::connect(("::1", p)).unwrap();
        }
        {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(c.unix_name.as_bytes()).unwrap();
            std::os::unix::net::UnixStream::connect_addr(&a).unwrap();
        }
        std::fs::write(&c.outside, "x").unwrap();
        let out = format!("key sk-test-secret and {} and ATTACHED", c.file_secret);
        std::thread::sleep(Duration::from_millis(100));
        let f = c.check(&report(&out), &["ATTACHED".to_string()]);
        let all = f.escapes.join("\n");
        assert!(all.contains("ANTHROPIC_API_KEY"), "{all}");
        assert!(all.contains("secret file"), "{all}");
        assert!(all.contains("breach"), "{all}");
        assert!(all.contains("127.0.0.1"), "{all}");
        assert!(all.contains("abstract unix"), "{all}");
        assert!(all.contains("outside the sandbox"), "{all}");
        assert!(!c.outside.exists());
    }

    #[test]
    fn survivors_are_found_by_marker() {
        let c = Canaries::plant(None).unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").env("CANARY_MARK", &c.marker).spawn().unwrap();
        // /proc/<pid>/environ is readable once exec is done.
        std::thread::sleep(Duration::from_millis(100));
        let found = processes_with(&c.marker);
        assert_eq!(found, vec![child.id() as i32]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(processes_with(&c.marker).is_empty());
    }
}
