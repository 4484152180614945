//! The hardened container every run gets, cold or warm, and the way code goes
//! in: over the attached stdin, never through the host's filesystem.
//!
//! Each container starts a small resident Python loader (`LOADER`) that waits
//! on stdin for one payload — a JSON header line (language, file name, the
//! user's `--env`) followed by the program — writes the program into the
//! container's tmpfs working directory, detaches stdin, then runs Python code
//! in that same, already started interpreter (or execs `/bin/sh` for shell).
//! A warm container has paid for container creation and interpreter start
//! before the code exists; it still runs exactly one program.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use serde_json::json;

use crate::spec::{Limits, RunSpec};

pub const WORKDIR: &str = "/work";
pub const TMPDIR: &str = "/tmp";

/// Label keys. `sandbench` holds the run id (or `warm` for a pool container
/// not yet given a program); `sandbench.owner` identifies the sandbench
/// process that owns it, so a later start can tell whether that one is dead.
pub const LABEL_RUN: &str = "sandbench";
pub const LABEL_PID: &str = "sandbench.pid";
pub const LABEL_OWNER: &str = "sandbench.owner";
pub const LABEL_TIER: &str = "sandbench.tier";

/// The resident loader. It must stay importable by any Python 3.8+.
pub const LOADER: &str = include_str!("../../../../../guest/docker_loader.py");

/// Everything a container is created with. Two runs can share a warm
/// container only when their shapes are equal.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub image: String,
    /// None = the daemon's default (runc); Some("runsc") for gVisor.
    pub runtime: Option<String>,
    pub user: String,
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpus: f64,
    pub file_size_bytes: u64,
    pub disk_bytes: u64,
    pub open_files: u64,
    /// RLIMIT_CPU backstop in seconds (the CPU limit proper is judged from
    /// the engine's stats).
    pub cpu_secs: u64,
}

impl Shape {
    pub fn new(image: &str, runtime: Option<&str>, user: &str, l: &Limits) -> Shape {
        Shape {
            image: image.into(),
            runtime: runtime.map(String::from),
            user: user.into(),
            memory_bytes: l.memory_bytes,
            pids: l.pids,
            cpus: l.cpus,
            file_size_bytes: l.file_size_bytes,
            disk_bytes: l.disk_bytes,
            open_files: l.open_files,
            cpu_secs: l.cpu_time.as_secs_f64().ceil().max(1.0) as u64 + 1,
        }
    }

    /// Size- and inode-limited (one inode per 4 KiB of space, at least
    /// 1024), so neither big files nor millions of empty ones escape the quota.
    fn tmpfs_options(&self) -> String {
        format!(
            "rw,nosuid,nodev,noexec,size={},nr_inodes={},mode=1777",
            self.disk_bytes,
            (self.disk_bytes / 4096).max(1024)
        )
    }

    fn gvisor(&self) -> bool {
        self.runtime.as_deref() == Some("runsc")
    }

    /// The cgroup pids limit. Under runc it counts the program's processes.
    /// Under gVisor it counts the sandbox kernel's own host threads: the
    /// program's limit is RLIMIT_NPROC inside the sandbox (gVisor enforces it
    /// per sandbox), and the host limit only guards against a runaway
    /// sandbox — set as low, it kills the whole sandbox (FACTS: exit 2).
    fn host_pids_limit(&self) -> i64 {
        if self.gvisor() {
            (self.pids.saturating_mul(8)).max(1024) as i64
        } else {
            self.pids as i64
        }
    }

    fn ulimits(&self) -> Vec<ResourcesUlimits> {
        let ulimit = |name: &str, soft: u64, hard: u64| ResourcesUlimits {
            name: Some(name.into()),
            soft: Some(soft.min(i64::MAX as u64) as i64),
            hard: Some(hard.min(i64::MAX as u64) as i64),
        };
        let mut v = vec![
            ulimit("fsize", self.file_size_bytes, self.file_size_bytes),
            ulimit("nofile", self.open_files, self.open_files),
            ulimit("core", 0, 0),
            ulimit("cpu", self.cpu_secs, self.cpu_secs + 1),
        ];
        // Never under runc: there RLIMIT_NPROC counts every process of the
        // uid on the host kernel, across containers.
        if self.gvisor() {
            v.push(ulimit("nproc", self.pids, self.pids));
        }
        v
    }

    /// The hardening, as facts for the report.
    pub fn hardening(&self) -> serde_json::Value {
        json!({
            "network": "none",
            "rootfs": "read-only",
            "tmpfs": { WORKDIR: self.disk_bytes, TMPDIR: self.disk_bytes },
            "cap_drop": "ALL",
            "no_new_privileges": true,
            "user": self.user,
            "pids_limit": self.pids,
            "pids_enforced_by": if self.gvisor() { "RLIMIT_NPROC inside the gVisor kernel" } else { "cgroup pids.max" },
            "host_pids_limit": self.host_pids_limit(),
            "memory_bytes": self.memory_bytes,
            "memory_swap_bytes": self.memory_bytes,
            "cpus": self.cpus,
            "ulimits": { "fsize": self.file_size_bytes, "nofile": self.open_files, "core": 0, "cpu_secs": self.cpu_secs },
            "init": "sandbench loader as PID 1 (reaps orphans, not ptrace-able)",
            "mounts": [],
            "devices": [],
            "log_driver": "none",
        })
    }

    /// The create request. `labels` carry run id and owner.
    pub fn body(&self, labels: HashMap<String, String>) -> ContainerCreateBody {
        let base = RunSpec::new(crate::spec::Language::Python, "");
        let env = base.sandbox_env(WORKDIR, TMPDIR).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let tmpfs_opts = self.tmpfs_options();
        let mut tmpfs = HashMap::new();
        tmpfs.insert(WORKDIR.to_string(), tmpfs_opts.clone());
        tmpfs.insert(TMPDIR.to_string(), tmpfs_opts);
        let host = HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            privileged: Some(false),
            pids_limit: Some(self.host_pids_limit()),
            memory: Some(self.memory_bytes as i64),
            memory_swap: Some(self.memory_bytes as i64),
            nano_cpus: Some((self.cpus * 1e9) as i64),
            shm_size: Some(self.disk_bytes.min(64 << 20) as i64),
            ulimits: Some(self.ulimits()),
            // The loader is the init (PID 1): it reaps orphans like
            // docker-init would, and unlike it cannot be ptraced by the program.
            init: Some(false),
            runtime: self.runtime.clone(),
            binds: Some(vec![]),
            devices: Some(vec![]),
            // Output reaches sandbench over the attach stream; a log file
            // on the host would let an output flood fill the host's disk.
            log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
            auto_remove: Some(false),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            entrypoint: Some(vec!["python3".into(), "-u".into(), "-c".into(), LOADER.into()]),
            cmd: Some(vec![]),
            env: Some(env),
            user: Some(self.user.clone()),
            // Not `working_dir`: Docker then remakes the tmpfs mount point
            // 0755 root, unwritable for the program; the loader changes into it.
            hostname: Some("sandbox".into()),
            labels: Some(labels),
            network_disabled: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(host),
            ..Default::default()
        }
    }
}

impl Shape {
    /// The same container as `docker run` flags (the benchmark's baseline).
    pub fn cli_flags(&self) -> Vec<String> {
        let tmpfs = self.tmpfs_options();
        let mut f: Vec<String> = vec![
            "--network=none".into(),
            "--read-only".into(),
            format!("--tmpfs=/work:{tmpfs}"),
            format!("--tmpfs=/tmp:{tmpfs}"),
            "--cap-drop=ALL".into(),
            "--security-opt=no-new-privileges".into(),
            format!("--user={}", self.user),
            format!("--pids-limit={}", self.host_pids_limit()),
            format!("--memory={}", self.memory_bytes),
            format!("--memory-swap={}", self.memory_bytes),
            format!("--cpus={}", self.cpus),
            format!("--shm-size={}", self.disk_bytes.min(64 << 20)),
            "--log-driver=none".into(),
            "--hostname=sandbox".into(),
        ];
        for u in self.ulimits() {
            f.push(format!("--ulimit={}={}:{}", u.name.unwrap_or_default(), u.soft.unwrap_or(0), u.hard.unwrap_or(0)));
        }
        if let Some(rt) = &self.runtime {
            f.push(format!("--runtime={rt}"));
        }
        f
    }
}

/// The marker the loader's status line starts with on stderr.
pub fn status_marker(nonce: &str) -> Vec<u8> {
    format!("\0sandbench-status {nonce} ").into_bytes()
}

/// A fresh random nonce (so a status line cannot appear by accident).
pub fn new_nonce() -> String {
    let mut b = [0u8; 12];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `pids=N disk=HEX fsize=HEX ...` (paths hex-encoded: a hostile file name
/// cannot break the line) → {"pids": N, "disk": [..], "fsize": [..]}.
fn parse_status(line: &[u8]) -> serde_json::Value {
    let mut v = json!({});
    for tok in line.split(|&b| b == b' ') {
        let t = String::from_utf8_lossy(tok);
        let Some((k, val)) = t.split_once('=') else { continue };
        match k {
            "pids" | "oom" => {
                if let Ok(n) = val.parse::<u64>() {
                    v[k] = json!(n);
                }
            }
            "disk" | "fsize" => {
                let bytes: Option<Vec<u8>> =
                    (0..val.len() / 2 * 2).step_by(2).map(|i| u8::from_str_radix(&val[i..i + 2], 16).ok()).collect();
                if let Some(b) = bytes {
                    let path = String::from_utf8_lossy(&b).into_owned();
                    match v.get_mut(k).and_then(|a| a.as_array_mut()) {
                        Some(a) => a.push(json!(path)),
                        None => v[k] = json!([path]),
                    }
                }
            }
            _ => {}
        }
    }
    v
}

/// Takes the loader's status line out of the stderr stream, across chunk
/// boundaries; everything else passes through unchanged.
pub struct StatusFilter {
    marker: Vec<u8>,
    /// Bytes of a status line seen so far (None: not inside one).
    inside: Option<Vec<u8>>,
    /// Status lines seen and not yet taken.
    pub statuses: Vec<serde_json::Value>,
}

impl StatusFilter {
    pub fn new(nonce: &str) -> Self {
        StatusFilter { marker: status_marker(nonce), inside: None, statuses: vec![] }
    }

    /// Returns the bytes that belong to the program's stderr.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = vec![];
        let mut rest = chunk;
        loop {
            if let Some(buf) = self.inside.as_mut() {
                match rest.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        buf.extend_from_slice(&rest[..nl]);
                        let line = self.inside.take().unwrap_or_default();
                        self.statuses.push(parse_status(&line));
                        rest = &rest[nl + 1..];
                    }
                    None => {
                        if buf.len() < 4096 {
                            buf.extend_from_slice(rest);
                        }
                        return out;
                    }
                }
            }
            match rest.windows(self.marker.len()).position(|w| w == self.marker.as_slice()) {
                Some(i) => {
                    out.extend_from_slice(&rest[..i]);
                    rest = &rest[i + self.marker.len()..];
                    self.inside = Some(vec![]);
                }
                None => {
                    out.extend_from_slice(rest);
                    return out;
                }
            }
        }
    }
}

/// What the loader reads from stdin: one JSON header line, then the code.
pub fn payload(spec: &RunSpec, nonce: &str) -> Vec<u8> {
    // NUL separates fields; no environment string can hold one.
    let clean = |x: &str| x.replace('\0', "");
    let mut fields: Vec<String> = vec![
        nonce.into(),
        spec.limits.file_size_bytes.to_string(),
        spec.limits.pids.to_string(),
        spec.language.name().into(),
        spec.language.file_name().into(),
        spec.language.interpreter().len().to_string(),
    ];
    fields.extend(spec.language.interpreter().iter().map(|a| a.to_string()));
    for (k, v) in &spec.env {
        fields.push(clean(k));
        fields.push(clean(v));
    }
    let header = fields.join("\0");
    let mut out = format!("{}\n{header}", header.len()).into_bytes();
    out.extend_from_slice(spec.code.as_bytes());
    out
}

/// A run id unique in this process and, with the pid, across processes.
pub fn new_run_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{n}-{nanos:08x}", std::process::id())
}

/// Exit code of the container's init (tini) → (code, signal). tini exits
/// with 128+N when the program died of signal N, as shells do.
pub fn split_exit(code: i64) -> (Option<i32>, Option<i32>) {
    if (129..=128 + 64).contains(&code) {
        (None, Some((code - 128) as i32))
    } else {
        (Some(code as i32), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_header_then_code() {
        let mut spec = RunSpec::new(crate::spec::Language::Sh, "echo hi\n");
        spec.env.insert("A".into(), "b\nc".into());
        let p = payload(&spec, "n0nce");
        let nl = p.iter().position(|&b| b == b'\n').unwrap();
        let len: usize = std::str::from_utf8(&p[..nl]).unwrap().parse().unwrap();
        let fields: Vec<&[u8]> = p[nl + 1..nl + 1 + len].split(|&b| b == 0).collect();
        assert_eq!(fields[0], b"n0nce");
        assert_eq!(fields[3], b"sh");
        assert_eq!(fields[5], b"1");
        assert_eq!(fields[6], b"/bin/sh");
        assert_eq!(&fields[7..], [&b"A"[..], &b"b\nc"[..]]);
        assert_eq!(&p[nl + 1 + len..], b"echo hi\n");
    }

    #[test]
    fn body_is_hardened() {
        let s = Shape::new("img", Some("runsc"), "65534:65534", &Limits::default());
        let b = s.body(HashMap::new());
        let h = b.host_config.unwrap();
        assert_eq!(h.network_mode.as_deref(), Some("none"));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.cap_drop.unwrap(), vec!["ALL"]);
        assert_eq!(h.memory, h.memory_swap);
        assert_eq!(h.init, Some(false));
        assert_eq!(h.runtime.as_deref(), Some("runsc"));
        assert!(h.binds.unwrap().is_empty());
        let env = b.env.unwrap();
        assert!(env.iter().all(|e| !e.starts_with("ANTHROPIC")));
        assert!(env.iter().any(|e| e == "HOME=/work"));
    }

    #[test]
    fn status_lines_are_taken_out_across_chunks() {
        let mut f = StatusFilter::new("abc");
        let mut out = f.feed(b"err1\n\0sandbench-status abc pids=3 disk=2f");
        out.extend(f.feed(b"776f726b\nafter"));
        assert_eq!(out, b"err1\nafter");
        assert_eq!(f.statuses[0]["disk"][0], "/work");
        assert_eq!(f.statuses[0]["pids"], 3);
        let mut g = StatusFilter::new("abc");
        assert_eq!(g.feed(b"\0sandbench-status xyz pids=1\n"), b"\0sandbench-status xyz pids=1\n");
        assert!(g.statuses.is_empty());
    }

    #[test]
    fn exits() {
        assert_eq!(split_exit(0), (Some(0), None));
        assert_eq!(split_exit(137), (None, Some(9)));
        assert_eq!(split_exit(153), (None, Some(25)));
        assert_eq!(split_exit(3), (Some(3), None));
    }
}
