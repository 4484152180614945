//! Host-side canaries: the gauntlet judges a run by what the host saw, never
//! by what the program says. Each canary is set up before a run and read
//! after it. Every run plants its own fake secrets (an API key in the
//! launcher's environment, secret files in the host home), so a gauntlet
//! tests for secret leaks whatever the user's environment holds.

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

/// How long processes a run's teardown killed get to disappear before
/// any left counts as a survivor.
const SURVIVOR_SETTLE: Duration = Duration::from_secs(3);

/// The variable name of the fake API key in the launcher's environment.
pub(crate) const SECRET_VAR: &str = "ANTHROPIC_API_KEY";

/// Random hex; a canary that is not random could be guessed, and one that is
/// all zeros would match another run's (no silent fallback).
fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn token(tag: &str) -> std::io::Result<String> {
    Ok(format!("sandbench-canary-{tag}-{}", random_hex(12)?))
}

/// What the listeners keep of what was sent to them (to look for secrets).
const RECEIVED_MAX: usize = 256 << 10;
/// Per connection: how much is read, and for how long.
const READ_MAX: usize = 64 << 10;
const READ_FOR: Duration = Duration::from_millis(100);

/// A connection a listener accepted, ready to be read with a timeout.
type Accepted = Box<dyn Read + Send>;

/// A listener that counts connection attempts that got through and keeps
/// (bounded) what they sent.
struct Listener {
    what: String,
    hits: Arc<AtomicU64>,
    /// Dropped to stop the thread: its end of the pipe sees EOF at once.
    stop: Option<std::os::fd::OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// A thread that sleeps in poll(2) until `listener` has a connection or
    /// the listener is dropped (a cell plants about eleven of these; waking
    /// each every few ms to look cost a soak thousands of wakeups a second),
    /// and takes every pending connection once more before it ends.
    fn spawn<L, F>(what: String, received: Arc<Mutex<Vec<u8>>>, listener: L, accept: F) -> std::io::Result<Listener>
    where
        L: std::os::fd::AsFd + Send + 'static,
        F: Fn(&L) -> std::io::Result<Option<Accepted>> + Send + 'static,
    {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let hits = Arc::new(AtomicU64::new(0));
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let h = hits.clone();
        let thread = std::thread::spawn(move || {
            let take = |conn: Accepted| {
                h.fetch_add(1, Ordering::Relaxed);
                let mut got = vec![];
                let _ = conn.take(READ_MAX as u64).read_to_end(&mut got);
                if let Ok(mut r) = received.lock() {
                    let room = RECEIVED_MAX.saturating_sub(r.len());
                    r.extend_from_slice(&got[..got.len().min(room)]);
                }
            };
            loop {
                loop {
                    match accept(&listener) {
                        Ok(Some(conn)) => take(conn),
                        Ok(None) => break,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(20));
                            break;
                        }
                    }
                }
                let mut fds =
                    [PollFd::new(listener.as_fd(), PollFlags::POLLIN), PollFd::new(stop_r.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) if fds[1].revents().is_some_and(|r| !r.is_empty()) => break,
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            // Stopped: whatever connected before the end still counts.
            while let Ok(Some(conn)) = accept(&listener) {
                take(conn);
            }
        });
        Ok(Listener { what, hits, stop: Some(stop_w), thread: Some(thread) })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn nonblocking_accept<T, A>(r: std::io::Result<(T, A)>) -> std::io::Result<Option<Accepted>>
where
    T: Read + Send + 'static + Timed,
{
    match r {
        Ok((conn, _)) => {
            conn.blocking_with_timeout(READ_FOR)?;
            Ok(Some(Box::new(conn)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// A connection that can be read with a timeout.
trait Timed {
    fn blocking_with_timeout(&self, t: Duration) -> std::io::Result<()>;
}

impl Timed for std::net::TcpStream {
    fn blocking_with_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(t))
    }
}

impl Timed for std::os::unix::net::UnixStream {
    fn blocking_with_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_nonblocking(false)?;
        self.set_read_timeout(Some(t))
    }
}

/// Everything planted for one run.
pub(crate) struct Canaries {
    /// The fake API key: the gauntlet puts it in the launcher's environment
    /// (`RunSpec::launcher_env`, as `SECRET_VAR`), never the program's.
    pub api_key: String,
    /// A secret of the caller's to look for too (e.g. a value it put in a
    /// sandbench's own exec-time environment).
    pub also: Option<String>,
    pub home: tempfile::TempDir,
    /// The content of every planted secret file.
    pub file_secret: String,
    /// Secret files planted in host locations (removed when dropped): the
    /// temporary home's, and one in the real home of the user running sandbench.
    pub secret_files: Vec<PathBuf>,
    pub outside: PathBuf,
    pub port4: u16,
    pub port6: Option<u16>,
    pub unix_name: String,
    /// Listening pathname unix sockets planted where host services keep
    /// theirs (removed on drop).
    pub sockets: Vec<PathBuf>,
    /// Put in every sandboxed process's environment; found later = a survivor.
    pub marker: String,
    listeners: Vec<Listener>,
    received: Arc<Mutex<Vec<u8>>>,
    victim: Option<std::process::Child>,
    probe: Option<HostProbe>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Findings {
    /// What got out. Empty: the canaries saw nothing.
    pub escapes: Vec<String>,
    /// The secrets this run planted (what the escapes would have found).
    #[serde(default)]
    pub planted: Vec<String>,
    /// Host responsiveness during the run: latency of spawning `/bin/true`.
    pub host_latency_ms_p50: Option<f64>,
    pub host_latency_ms_max: Option<f64>,
    /// How the cell differed from the sample's declaration (a network limit
    /// the tier could not enforce, run with none instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Canaries {
    /// Plant the canaries in the real home of the user running sandbench.
    /// `also`: a secret of the caller's to look for too.
    pub(crate) fn plant(also: Option<String>) -> std::io::Result<Canaries> {
        Canaries::plant_in(also, dirs::home_dir())
    }

    /// Plant the canaries; `host_home` gets a secret file (a sandbox that
    /// shows the host's home gives it away).
    pub(crate) fn plant_in(also: Option<String>, host_home: Option<PathBuf>) -> std::io::Result<Canaries> {
        let home = tempfile::Builder::new().prefix("sandbench-canary-home-").tempdir()?;
        let file_secret = token("file")?;
        // Looks like a real key, so a program hunting for keys by shape finds it.
        let api_key = format!("sk-ant-api03-sandbench-canary-{}", random_hex(16)?);
        let mut secret_files = vec![home.path().join("canary-secret.txt")];
        if let Some(h) = host_home.filter(|h| h.is_dir()) {
            secret_files.push(h.join(format!(".sandbench-canary-{}.secret", random_hex(6)?)));
        }
        for f in &secret_files {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            // Readable by anyone: the canary is about what a sandbox can see,
            // not about file modes. create_new: never overwrite a user's file.
            let mut w = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(f)?;
            w.write_all(format!("{file_secret}\n").as_bytes())?;
        }
        let outside = home.path().join("outside-written");
        let mut listeners = vec![];
        let received = Arc::new(Mutex::new(vec![]));

        let l4 = TcpListener::bind("127.0.0.1:0")?;
        l4.set_nonblocking(true)?;
        let port4 = l4.local_addr()?.port();
        listeners.push(Listener::spawn(format!("TCP 127.0.0.1:{port4}"), received.clone(), l4, |l| {
            nonblocking_accept(l.accept())
        })?);

        let port6 = match TcpListener::bind("[::1]:0") {
            Ok(l6) => {
                l6.set_nonblocking(true)?;
                let p = l6.local_addr()?.port();
                listeners.push(Listener::spawn(format!("TCP [::1]:{p}"), received.clone(), l6, |l| {
                    nonblocking_accept(l.accept())
                })?);
                Some(p)
            }
            Err(_) => None,
        };

        let unix_name = token("unix")?;
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(unix_name.as_bytes())?;
            let lu = UnixListener::bind_addr(&addr)?;
            lu.set_nonblocking(true)?;
            listeners.push(Listener::spawn(format!("abstract unix @{unix_name}"), received.clone(), lu, |l| {
                nonblocking_accept(l.accept())
            })?);
        }

        let marker = token("mark")?;
        let sockets = plant_sockets(home.path(), &token("sock")?, &marker, &received, &mut listeners);

        // A host process of the uid sandboxes used to share (65534): a
        // sandbox that can signal the host's processes would kill it, and
        // one that shares its per-uid quotas would make it fail to get an
        // inotify instance (it checks every 50 ms and exits 3 if refused).
        let victim = if nix::unistd::geteuid().is_root() {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("/usr/bin/python3")
                .args(["-S", "-c", VICTIM])
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
            api_key,
            also: also.filter(|s| !s.is_empty()),
            home,
            file_secret,
            secret_files,
            outside,
            port4,
            port6,
            unix_name,
            sockets,
            marker,
            listeners,
            received,
            victim,
            probe: None,
        })
    }

    /// What was planted, for the report (no secret values).
    pub(crate) fn planted(&self) -> Vec<String> {
        let mut v = vec![format!("a fake {SECRET_VAR} in the launcher's environment")];
        v.extend(self.secret_files.iter().map(|f| format!("secret file {}", f.display())));
        v
    }

    /// The variables a hostile sample reads to find its targets.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("CANARY_PORT".to_string(), self.port4.to_string()),
            ("CANARY_UNIX".to_string(), self.unix_name.clone()),
            ("CANARY_HOME".to_string(), self.home.path().display().to_string()),
            ("CANARY_OUTSIDE".to_string(), self.outside.display().to_string()),
            (
                "CANARY_SECRET_FILES".to_string(),
                self.secret_files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(":"),
            ),
            ("CANARY_MARK".to_string(), self.marker.clone()),
        ];
        if let Some(p) = self.port6 {
            v.push(("CANARY_PORT6".to_string(), p.to_string()));
        }
        v
    }

    /// Start measuring host responsiveness (call when the run starts).
    pub(crate) fn start_probe(&mut self) {
        self.probe = Some(HostProbe::start());
    }

    /// Read every canary after the run. `report` is the run's report.
    pub(crate) fn check(&mut self, report: &RunReport, escaped_if: &[String]) -> Findings {
        let mut f = Findings::default();
        if let Some(p) = self.probe.take() {
            let (p50, max) = p.finish();
            f.host_latency_ms_p50 = p50;
            f.host_latency_ms_max = max;
        }
        f.planted = self.planted();
        let output = [report.stdout.as_str(), report.stderr.as_str()];
        if output.iter().any(|o| o.contains(&self.api_key)) {
            f.escapes
                .push(format!("the fake {SECRET_VAR} planted in the launcher's environment appeared in the output"));
        }
        if let Some(s) = self.also.as_deref() {
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
        let sent = self.received.lock().map(|r| r.clone()).unwrap_or_default();
        let has = |needle: &str| !needle.is_empty() && sent.windows(needle.len()).any(|w| w == needle.as_bytes());
        if has(&self.api_key) || self.also.as_deref().is_some_and(has) {
            f.escapes.push(format!("{SECRET_VAR} was sent to a host listener"));
        }
        if has(&self.file_secret) {
            f.escapes.push("the host secret file's content was sent to a host listener".into());
        }
        for p in self.outside_paths() {
            if std::fs::symlink_metadata(&p).is_ok() {
                f.escapes.push(format!("created {} outside the sandbox", p.display()));
                let _ = std::fs::remove_file(&p);
            }
        }
        // A process the run's teardown has already killed may still be on
        // its way out (a container's pid namespace is emptied by the kernel
        // after its init is gone): only one still there after a short
        // settle is a survivor. A real daemon stays for good.
        let mut survivors = processes_with(&self.marker);
        let settle = Instant::now();
        while !survivors.is_empty() && settle.elapsed() < SURVIVOR_SETTLE {
            std::thread::sleep(Duration::from_millis(100));
            survivors = processes_with(&self.marker);
        }
        if !survivors.is_empty() {
            f.escapes.push(format!("{} process(es) of the run still alive: {:?}", survivors.len(), survivors));
            for p in survivors {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            }
        }
        if let Some(v) = self.victim.as_mut() {
            match v.try_wait() {
                Ok(Some(st)) if st.code() == Some(3) => f.escapes.push(
                    "a host process of uid 65534 was refused an inotify instance: the per-uid quota was shared".into(),
                ),
                Ok(Some(st)) => f.escapes.push(format!("a host process of uid 65534 was killed ({st})")),
                _ => {}
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

/// Directories where host services leave unix sockets, or that a sandbox
/// might show: the canary plants a listening socket in each it can write to.
pub(crate) const SOCKET_DIRS: &[&str] = &["/etc", "/opt", "/usr", "/run", "/tmp", "/var/tmp", "/dev/shm"];

/// Did this connection come from the run carrying `marker`? The sockets sit
/// in directories every concurrent sandbox (and every other gauntlet on the
/// host) may see, so a connection counts only if its peer holds this run's
/// marker, or has vanished before it could be asked (counted: fail toward
/// reporting).
fn from_this_run(s: &std::os::unix::net::UnixStream, marker: &str) -> bool {
    let Ok(cred) = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials) else { return true };
    match std::fs::read(format!("/proc/{}/environ", cred.pid())) {
        Ok(env) => env.windows(marker.len()).any(|w| w == marker.as_bytes()),
        Err(_) => true,
    }
}

/// The uid-65534 canary: holds one inotify instance at a time, for 600 s.
const VICTIM: &str = "import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\nfor _ in range(12000):\n    fd = libc.inotify_init1(0)\n    if fd < 0:\n        os._exit(3)\n    os.close(fd)\n    time.sleep(0.05)\n";

fn plant_sockets(
    home: &Path,
    token: &str,
    marker: &str,
    received: &Arc<Mutex<Vec<u8>>>,
    listeners: &mut Vec<Listener>,
) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let name = format!("{token}.sock");
    let mut planted = vec![];
    let dirs = SOCKET_DIRS.iter().map(PathBuf::from).chain(std::iter::once(home.to_path_buf()));
    for d in dirs.filter(|d| d.is_dir()) {
        let p = d.join(&name);
        let Ok(l) = UnixListener::bind(&p) else { continue };
        // Anyone may connect: only the sandbox's walls keep a program out.
        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777));
        if l.set_nonblocking(true).is_err() {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        let marker = marker.to_string();
        let spawned = Listener::spawn(format!("unix socket {}", p.display()), received.clone(), l, move |l| loop {
            match l.accept() {
                Ok((s, a)) if from_this_run(&s, &marker) => return nonblocking_accept(Ok((s, a))),
                // Another run's: not ours to count; the next one may be.
                Ok(_) => continue,
                Err(e) => {
                    return nonblocking_accept::<std::os::unix::net::UnixStream, std::os::unix::net::SocketAddr>(Err(e))
                }
            }
        });
        let Ok(spawned) = spawned else {
            let _ = std::fs::remove_file(&p);
            continue;
        };
        listeners.push(spawned);
        planted.push(p);
    }
    planted
}

impl Drop for Canaries {
    fn drop(&mut self) {
        for p in &self.sockets {
            let _ = std::fs::remove_file(p);
        }
        for f in &self.secret_files {
            let _ = std::fs::remove_file(f);
        }
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
/// Host responsiveness while something runs: the time to spawn `/bin/true`,
/// every 50 ms, on a thread of its own (the gauntlet's canary, the report's
/// latency benchmark).
pub(crate) struct HostProbe {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<f64>>>,
    thread: JoinHandle<()>,
}

impl HostProbe {
    pub(crate) fn start() -> HostProbe {
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

    /// Stop; every spawn time measured (ms), in order.
    pub(crate) fn samples(self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn finish(self) -> (Option<f64>, Option<f64>) {
        let mut v = self.samples();
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

    fn plant() -> (Canaries, tempfile::TempDir) {
        let host_home = tempfile::tempdir().unwrap();
        (Canaries::plant_in(Some("sk-test-secret".into()), Some(host_home.path().to_path_buf())).unwrap(), host_home)
    }

    #[test]
    fn quiet_run_finds_nothing() {
        let (mut c, _h) = plant();
        c.start_probe();
        std::thread::sleep(Duration::from_millis(120));
        let f = c.check(&report("hello"), &[]);
        assert!(f.escapes.is_empty(), "{:?}", f.escapes);
        assert!(f.host_latency_ms_max.is_some());
    }

    #[test]
    fn fake_secrets_are_planted_every_time_and_removed_after() {
        let (c, h) = plant();
        let (d, _h2) = plant();
        assert!(c.api_key.starts_with("sk-ant-") && c.api_key != d.api_key, "a fresh key each run");
        assert_eq!(c.secret_files.len(), 2, "{:?}", c.secret_files);
        assert!(c.secret_files[1].starts_with(h.path()), "one in the host home");
        for f in &c.secret_files {
            assert_eq!(std::fs::read_to_string(f).unwrap().trim(), c.file_secret);
        }
        let env: std::collections::HashMap<_, _> = c.env().into_iter().collect();
        assert!(!env.values().any(|v| v.contains(&c.api_key)), "the key is never given to the program");
        assert_eq!(env["CANARY_SECRET_FILES"].split(':').count(), 2);
        let planted = c.planted().join("\n");
        assert!(planted.contains("fake ANTHROPIC_API_KEY") && !planted.contains(&c.api_key), "{planted}");
        let files = c.secret_files.clone();
        drop(c);
        assert!(files.iter().all(|f| !f.exists()), "secret files left behind");
    }

    #[test]
    fn each_canary_can_fire() {
        let (mut c, _h) = plant();
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
        assert!(!c.sockets.is_empty(), "no socket canary planted");
        // Only a process of the run (it carries the marker) counts.
        let _mine = std::os::unix::net::UnixStream::connect(&c.sockets[0]).unwrap();
        let st = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(0.3)",
            ])
            .arg(&c.sockets[0])
            .env("CANARY_MARK", &c.marker)
            .status()
            .unwrap();
        assert!(st.success());
        let out = format!("key sk-test-secret and {} and ATTACHED", c.file_secret);
        std::thread::sleep(Duration::from_millis(100));
        let f = c.check(&report(&out), &["ATTACHED".to_string()]);
        let all = f.escapes.join("\n");
        assert!(all.contains("ANTHROPIC_API_KEY"), "{all}");
        assert!(all.contains("secret file"), "{all}");
        assert!(all.contains("breach"), "{all}");
        assert!(all.contains("127.0.0.1"), "{all}");
        assert!(all.contains("abstract unix"), "{all}");
        assert!(
            all.contains(&format!("1 connection(s) reached the host's unix socket {}", c.sockets[0].display())),
            "{all}"
        );
        assert!(all.contains("outside the sandbox"), "{all}");
        assert!(!c.outside.exists());
        let planted = c.sockets.clone();
        drop(c);
        assert!(planted.iter().all(|p| !p.exists()), "socket canaries left behind");
    }

    #[test]
    fn the_fake_key_in_the_output_or_sent_to_a_listener_is_a_leak() {
        let (mut c, _h) = plant();
        let f = c.check(&report(&format!("found: env: {}", c.api_key)), &[]);
        assert!(f.escapes.iter().any(|e| e.contains("fake ANTHROPIC_API_KEY")), "{:?}", f.escapes);

        let (mut c, _h) = plant();
        {
            use std::io::Write;
            let mut s = TcpStream::connect(("127.0.0.1", c.port4)).unwrap();
            s.write_all(format!("POST /steal {} {}", c.api_key, c.file_secret).as_bytes()).unwrap();
        }
        // The listener reads what was sent until the peer closes (done above).
        let t = Instant::now();
        let mut f = c.check(&report(""), &[]);
        while !f.escapes.iter().any(|e| e.contains("sent to a host listener")) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
            f = c.check(&report(""), &[]);
        }
        let all = f.escapes.join("\n");
        assert!(all.contains("ANTHROPIC_API_KEY was sent to a host listener"), "{all}");
        assert!(all.contains("secret file's content was sent"), "{all}");
    }

    #[test]
    fn survivors_are_found_by_marker() {
        let (c, _h) = plant();
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
