//! Shared by the integration tests: the built binary, an outer safety net
//! around everything a test starts, and tier requirements.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandbench"))
}

/// The built sandbox helper (`sandbench-sandbox`): what the process tier
/// starts for each sandbox when sandbench's binary has it beside it.
pub fn helper_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandbench-sandbox"))
}

/// The default config, with the process tier's helper set to the built
/// small helper (in-process tiers must not re-execute the test binary; the
/// tests that set `SANDBENCH_HELPER` to `sandbench` itself keep its
/// `__sandbox` entry, the fallback, covered).
pub fn config() -> sandbench::config::Config {
    let mut c = sandbench::config::Config::default();
    c.host.helper = Some(helper_bin());
    c
}

pub fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples")
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The Python that has the `mcp` SDK: `$SANDBENCH_MCP_PYTHON`, else the venv
/// `.ci/setup-mcp.sh` makes; None when neither imports `mcp`.
pub fn mcp_python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("SANDBENCH_MCP_PYTHON").map(PathBuf::from),
        Some(PathBuf::from("/opt/sandbench-mcp-venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", "import mcp"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The directory where `.ci/setup-mcp.sh` installed the TypeScript MCP SDK
/// (`$SANDBENCH_MCP_NODE`, else /opt/sandbench-mcp-node), when it and `node`
/// are there.
pub fn mcp_node() -> Option<PathBuf> {
    let dir = std::env::var_os("SANDBENCH_MCP_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/sandbench-mcp-node"));
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    (sdk.is_file() && sandbench::host::which("node").is_some()).then_some(dir)
}

/// Is `tier` required by CI (`SANDBENCH_REQUIRE_TIERS`)?
pub fn required(tier: &str) -> bool {
    std::env::var("SANDBENCH_REQUIRE_TIERS").unwrap_or_default().split(',').any(|t| t.trim() == tier)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A cgroup around a test's processes (pids and memory capped far below
/// what would hurt the machine) plus a hard deadline: if the sandbox under
/// test fails to contain a bomb, the test fails instead of the machine.
pub struct OuterNet {
    dirs: Vec<PathBuf>,
}

impl OuterNet {
    pub fn new() -> OuterNet {
        let mut dirs = vec![];
        if is_root() {
            let name = format!("sandbench-test-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
            let v1 = [("pids", "pids.max", "2048"), ("memory", "memory.limit_in_bytes", "4294967296")];
            if Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists() {
                for (ctrl, file, val) in v1 {
                    let d = Path::new("/sys/fs/cgroup").join(ctrl).join(&name);
                    if std::fs::create_dir(&d).is_ok() {
                        let _ = std::fs::write(d.join(file), val);
                        dirs.push(d);
                    }
                }
            } else if Path::new("/sys/fs/cgroup/cgroup.subtree_control").exists() {
                let d = Path::new("/sys/fs/cgroup").join(&name);
                let _ = std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+pids +memory");
                if std::fs::create_dir(&d).is_ok() {
                    let _ = std::fs::write(d.join("pids.max"), "2048");
                    let _ = std::fs::write(d.join("memory.max"), "4294967296");
                    dirs.push(d);
                }
            }
        }
        OuterNet { dirs }
    }

    /// Start `cmd` inside the net (it fails to start rather than run outside).
    #[allow(unsafe_code)]
    pub fn spawn(&self, cmd: &mut Command) -> Child {
        use std::os::unix::process::CommandExt;
        let files: Vec<std::ffi::CString> = self
            .dirs
            .iter()
            .map(|d| std::ffi::CString::new(d.join("cgroup.procs").to_string_lossy().as_bytes()).unwrap())
            .collect();
        // SAFETY: between fork and exec only async-signal-safe calls (open,
        // write, close) on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    let fd = libc::open(f.as_ptr(), libc::O_WRONLY);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                Ok(())
            });
        }
        cmd.spawn().expect("spawn sandbench")
    }

    /// Run to the end with a deadline; on timeout everything is killed and the test fails.
    pub fn output(&self, cmd: &mut Command, deadline: Duration) -> Output {
        self.output_pid(cmd, deadline).0
    }

    /// [`OuterNet::output`], with the pid sandbench ran as (its containers' label).
    pub fn output_pid(&self, cmd: &mut Command, deadline: Duration) -> (Output, u32) {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self.spawn(cmd);
        let pid = child.id();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut v = vec![];
            let _ = out.read_to_end(&mut v);
            v
        });
        let t_err = std::thread::spawn(move || {
            let mut v = vec![];
            let _ = err.read_to_end(&mut v);
            v
        });
        let start = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > deadline {
                self.kill_all();
                let _ = child.kill();
                let _ = child.wait();
                panic!("sandbench did not finish within {deadline:?}: containment or cleanup is broken");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (Output { status, stdout: t_out.join().unwrap(), stderr: t_err.join().unwrap() }, pid)
    }

    pub fn kill_all(&self) {
        for d in &self.dirs {
            for _ in 0..100 {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                if procs.trim().is_empty() {
                    break;
                }
                for p in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Processes still inside the net (a test expects none after a run).
    pub fn remaining(&self) -> Vec<i32> {
        self.dirs
            .iter()
            .flat_map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    }

    /// Where sandbench makes run cgroups under the net (one per hierarchy).
    pub fn run_parents(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("sandbench")).filter(|d| d.is_dir()).collect()
    }

    /// Run cgroups sandbench created under the net that still exist.
    pub fn leftover_cgroups(&self) -> Vec<PathBuf> {
        let mut v = vec![];
        for d in &self.dirs {
            if let Ok(rd) = std::fs::read_dir(d.join("sandbench")) {
                v.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
            }
        }
        v
    }
}

impl Drop for OuterNet {
    fn drop(&mut self) {
        self.kill_all();
        for d in &self.dirs {
            // Nested run cgroups first, then the net itself.
            if let Ok(rd) = std::fs::read_dir(d.join("sandbench")) {
                for e in rd.flatten() {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(d.join("sandbench"));
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Parse the one JSON report `run --format json` printed.
pub fn report(out: &Output) -> sandbench::report::RunReport {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); status {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
