//! The hardened container every run gets, cold or warm, and the way code goes
//! in: over the attached stdin, never through the host's filesystem.
//!
//! Each container starts a small resident Python loader (`LOADER`, from
//! `guest/docker_loader.py`) as PID 1. It waits on stdin for one payload — a
//! header (limits, the program's uid, language, file name, the user's `--env`)
//! and the program — then forks the program into a child that drops to the
//! program's own uid before any of its code runs. The container's stdout is
//! the loader's alone: a stream of frames ([`Frames`]) carrying the program's
//! output, the loader's status and the program's exit, which the program has
//! no fd to write. A warm container has paid for container creation and
//! interpreter start before the code exists; it still runs exactly one program.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, ResourcesUlimits};
use serde_json::json;

use crate::event::ExitStatus;
use crate::spec::{Limits, RunSpec};

pub(crate) const WORKDIR: &str = "/work";
pub(crate) const TMPDIR: &str = "/tmp";
/// Docker's own /dev/shm would be extra scratch space outside `--disk`: it
/// is replaced by a tmpfs like the other two, and watched like them.
pub(crate) const SHMDIR: &str = "/dev/shm";

/// What sandbench's seccomp filter denies (installed by the loader in the
/// program's process on runc and runsc alike; see guest/program_filter.py),
/// read off the table it must match (`tier/process/seccomp.rs`).
pub(crate) fn seccomp_denies() -> String {
    use crate::tier::process::seccomp::{CLONE_FLAGS, DENIED};
    let calls: Vec<&str> = DENIED.iter().map(|(n, _)| *n).collect();
    let flags: Vec<&str> = CLONE_FLAGS.iter().map(|(n, _)| *n).collect();
    format!(
        "{}, clone with {} (EPERM); clone3 (ENOSYS); every call of a foreign ABI (i386, x32); \
         socket families other than unix, inet, inet6 and netlink (route), socketpair other than unix (EAFNOSUPPORT)",
        calls.join(", "),
        flags.join(" or ")
    )
}

/// Label keys. `sandbench` holds the run id (or `warm` for a pool container
/// not yet given a program); `sandbench.owner` identifies the sandbench
/// process that owns it, so a later start can tell whether that one is dead.
pub(crate) const LABEL_RUN: &str = "sandbench";
pub(crate) const LABEL_PID: &str = "sandbench.pid";
pub(crate) const LABEL_OWNER: &str = "sandbench.owner";
pub(crate) const LABEL_TIER: &str = "sandbench.tier";

/// The resident loader, after the program's filter, the scratch guard's
/// filter and the egress relay it uses (which define names only). All must
/// stay importable by any Python 3.8+.
pub(crate) const LOADER: &str = concat!(
    include_str!("../../../../../guest/program_filter.py"),
    include_str!("../../../../../guest/scratch_guard.py"),
    include_str!("../../../../../guest/egress_relay.py"),
    include_str!("../../../../../guest/docker_loader.py")
);

/// Everything a container is created with. Two runs can share a warm
/// container only when their shapes are equal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
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
    /// The run's network is an allow list: the loader runs an egress relay
    /// thread (one more task in the container's pids cgroup).
    pub egress: bool,
}

impl Shape {
    pub(crate) fn new(image: &str, runtime: Option<&str>, user: &str, l: &Limits) -> Shape {
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
            egress: !l.network.is_none(),
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

    /// The same limits for a host tmpfs (gVisor's host-side scratch mounts;
    /// nosuid, nodev and noexec are mount flags there).
    pub(crate) fn host_tmpfs_options(&self) -> String {
        format!("size={},nr_inodes={},mode=1777", self.disk_bytes, (self.disk_bytes / 4096).max(1024))
    }

    pub(crate) fn gvisor(&self) -> bool {
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
            // The loader (PID 1) and its egress relay thread are the tasks
            // that are not the program's.
            self.pids.saturating_add(1 + u64::from(self.egress)) as i64
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
    pub(crate) fn hardening(&self) -> serde_json::Value {
        json!({
            "network": if self.egress {
                "network_mode none; out only through the host's egress proxy, which the loader's relay reaches over the attached stdio"
            } else {
                "none"
            },
            "rootfs": "read-only",
            "tmpfs": { WORKDIR: self.disk_bytes, TMPDIR: self.disk_bytes, SHMDIR: self.disk_bytes },
            "watched_mounts": [WORKDIR, TMPDIR, SHMDIR],
            "seccomp": {
                "sandbench_filter": seccomp_denies(),
                "engine_profile": if self.gvisor() { "none (gVisor's own kernel; runsc cannot load OCI profiles reliably)" } else { "Docker's default" },
            },
            "cap_drop": "ALL",
            "no_new_privileges": true,
            "user": describe_user(&self.user),
            "pids_limit": self.pids,
            "pids_enforced_by": if self.gvisor() { "RLIMIT_NPROC inside the gVisor kernel" } else { "cgroup pids.max" },
            "host_pids_limit": self.host_pids_limit(),
            "memory_bytes": self.memory_bytes,
            "memory_swap_bytes": self.memory_bytes,
            "cpus": self.cpus,
            "ulimits": { "fsize": self.file_size_bytes, "nofile": self.open_files, "core": 0, "cpu_secs": self.cpu_secs },
            "init": "sandbench loader as PID 1, uid 0 with only SETUID/SETGID/SETPCAP until the program's process has emptied its bounding set and dropped to its uid, then SETUID alone until the program has exited (to kill what it left as its uid, before the exit report), then none (reaps orphans, not ptrace-able, not signalable by the program; python3 -I, nothing of the scratch on its path)",
            "status_channel": "container stdout, written only by the loader (the program's output arrives framed by it)",
            "mounts": [],
            "devices": [],
            "log_driver": "none",
        })
    }

    /// The create request. `labels` carry run id and owner; `binds`, when
    /// given, are host scratch mounts that replace the engine's tmpfs.
    pub(crate) fn body(&self, labels: HashMap<String, String>, binds: Option<Vec<String>>) -> ContainerCreateBody {
        let base = RunSpec::new(crate::spec::Language::Python, "");
        let env = base.sandbox_env(WORKDIR, TMPDIR).into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        let tmpfs_opts = self.tmpfs_options();
        let mut tmpfs = HashMap::new();
        if binds.is_none() {
            tmpfs.insert(WORKDIR.to_string(), tmpfs_opts.clone());
            tmpfs.insert(TMPDIR.to_string(), tmpfs_opts.clone());
            tmpfs.insert(SHMDIR.to_string(), tmpfs_opts);
        }
        let host = HostConfig {
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            cap_drop: Some(vec!["ALL".into()]),
            // Only for the loader (PID 1, uid 0) to drop the program to its
            // own uid and empty its bounding set; the program's setresuid
            // clears every capability it holds.
            cap_add: Some(LOADER_CAPS.iter().map(|c| c.to_string()).collect()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            privileged: Some(false),
            pids_limit: Some(self.host_pids_limit()),
            memory: Some(self.memory_bytes as i64),
            memory_swap: Some(self.memory_bytes as i64),
            nano_cpus: Some((self.cpus * 1e9) as i64),
            ulimits: Some(self.ulimits()),
            // The loader is the init (PID 1): it reaps orphans like
            // docker-init would, and unlike it cannot be ptraced by the program.
            init: Some(false),
            runtime: self.runtime.clone(),
            binds: Some(binds.unwrap_or_default()),
            devices: Some(vec![]),
            // Output reaches sandbench over the attach stream; a log file
            // on the host would let an output flood fill the host's disk.
            log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
            auto_remove: Some(false),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            entrypoint: Some(vec!["python3".into(), "-I".into(), "-u".into(), "-c".into(), LOADER.into()]),
            cmd: Some(vec![]),
            env: Some(env),
            // The loader starts as root (with LOADER_CAPS only); the program
            // runs as `self.user`, which is never 0.
            user: Some("0:0".into()),
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
    pub(crate) fn cli_flags(&self) -> Vec<String> {
        let tmpfs = self.tmpfs_options();
        let mut f: Vec<String> = vec![
            "--network=none".into(),
            "--read-only".into(),
            format!("--tmpfs=/work:{tmpfs}"),
            format!("--tmpfs=/tmp:{tmpfs}"),
            "--cap-drop=ALL".into(),
            "--security-opt=no-new-privileges".into(),
            format!(
                "--user={}",
                if self.user == AUTO_USER { format!("{UID_BASE}:{UID_BASE}") } else { self.user.clone() }
            ),
            format!("--pids-limit={}", self.host_pids_limit()),
            format!("--memory={}", self.memory_bytes),
            format!("--memory-swap={}", self.memory_bytes),
            format!("--cpus={}", self.cpus),
            format!("--tmpfs=/dev/shm:{tmpfs}"),
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

/// Capabilities the container keeps, for the loader alone: SETUID and
/// SETGID to drop the program to its uid, SETPCAP to empty the program's
/// bounding set first (issue 42, item 8: as the process tier's program).
pub(crate) const LOADER_CAPS: [&str; 3] = ["SETUID", "SETGID", "SETPCAP"];

/// The dedicated range per-run program uids (and gids) come from: far above
/// any distribution's system and login ranges and the usual subordinate-id
/// ranges, so no host account shares a uid — and with it per-uid kernel
/// quotas (inotify instances, RLIMIT_NPROC, ...) — with a program.
pub(crate) const UID_BASE: u32 = 0x7000_0000;
pub(crate) const UID_COUNT: u32 = 1 << 24;

/// `[docker] user`: "auto" (a fresh uid from the dedicated range per run)
/// or a fixed numeric "uid:gid".
pub(crate) const AUTO_USER: &str = "auto";

/// uids of the host's processes inside the dedicated range now (the owner of
/// each /proc entry; under runc that includes other runs' programs).
pub(crate) fn host_uids_in_range() -> std::collections::HashSet<u32> {
    use std::os::unix::fs::MetadataExt;
    let mut used = std::collections::HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return used };
    for e in dir.flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(m) = e.metadata() {
            if (UID_BASE..UID_BASE + UID_COUNT).contains(&m.uid()) {
                used.insert(m.uid());
            }
        }
    }
    used
}

/// The program's uid and gid for one run. Per run: random from the
/// dedicated range, never one a host process has now; randomness from the
/// kernel or the run does not happen.
pub(crate) fn choose_ids(user: &str, local: bool) -> anyhow::Result<(u32, u32)> {
    if user.trim() != AUTO_USER {
        return program_ids(user);
    }
    let used = if local { host_uids_in_range() } else { Default::default() };
    let mut f = std::fs::File::open("/dev/urandom")
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom for the program's uid: {e}"))?;
    for _ in 0..64 {
        let mut b = [0u8; 4];
        std::io::Read::read_exact(&mut f, &mut b)
            .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom for the program's uid: {e}"))?;
        let uid = UID_BASE + u32::from_le_bytes(b) % UID_COUNT;
        if !used.contains(&uid) {
            return Ok((uid, uid));
        }
    }
    anyhow::bail!("no free uid in {UID_BASE}..{}: too many host processes in sandbench's range", UID_BASE + UID_COUNT)
}

/// What `details` and `doctor` say about the program's uid.
pub(crate) fn describe_user(user: &str) -> String {
    if user.trim() == AUTO_USER {
        format!(
            "a fresh uid per run from {UID_BASE}..{} (not any host process's)",
            UID_BASE as u64 + UID_COUNT as u64 - 1
        )
    } else {
        format!("uid:gid {user} (fixed by [docker] user; shared by every run)")
    }
}

/// uid and gid of the program from `user` ("uid:gid" or "uid"); never root.
pub(crate) fn program_ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let (u, g) = user.split_once(':').unwrap_or((user, user));
    let parse = |x: &str| x.trim().parse::<u32>().ok().filter(|&n| n != 0 && n != u32::MAX);
    match (parse(u), parse(g)) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => anyhow::bail!(
            "[docker] user must be \"auto\" or numeric uid:gid, neither 0 (got {user:?}): fix it in the config"
        ),
    }
}

/// Longest frame the loader ever writes (64 KiB of output plus slack).
const MAX_FRAME: usize = 1 << 20;

/// One frame of the loader's stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    /// The program's process exists and runs as this uid; `guard` is the
    /// loader's descriptor of the scratch guard's listener, when asked for.
    Started {
        uid: u32,
        guard: Option<i32>,
    },
    /// The program's process could not be set up: the run did not happen.
    Failed(String),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// What the loader saw from inside (pids at the limit, full mounts,
    /// capped files).
    Status(serde_json::Value),
    /// A message of the loader's egress relay (`egress::mux`).
    Net(Vec<u8>),
    /// The program's main process ended: exit code or signal (never both),
    /// and the bytes the loader read from its stdout and stderr.
    Exit {
        status: ExitStatus,
        stdout_bytes: u64,
        stderr_bytes: u64,
    },
}

/// Decodes the loader's frames (kind byte, 4-byte big-endian length,
/// payload) across chunk boundaries. The program cannot write this stream,
/// but it is still parsed defensively: a malformed frame breaks the stream
/// for good, and the run is an error.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    buf: Vec<u8>,
    start: usize,
    /// Why the stream stopped making sense.
    pub broken: Option<String>,
}

impl Frames {
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<Frame> {
        let mut out = vec![];
        if self.broken.is_some() {
            return out;
        }
        self.buf.extend_from_slice(chunk);
        loop {
            let rest = &self.buf[self.start..];
            if rest.len() < 5 {
                break;
            }
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            if len > MAX_FRAME {
                self.broken = Some(format!("frame of {len} bytes"));
                break;
            }
            if rest.len() < 5 + len {
                break;
            }
            let data = &rest[5..5 + len];
            let frame = match rest[0] {
                b'o' => Some(Frame::Stdout(data.to_vec())),
                b'e' => Some(Frame::Stderr(data.to_vec())),
                b's' => Some(Frame::Status(parse_status(data))),
                b'r' => parse_started(data),
                b'f' => Some(Frame::Failed(crate::sanitize::inert_line(&String::from_utf8_lossy(data), 200))),
                b'x' => parse_exit(data),
                b'n' => Some(Frame::Net(data.to_vec())),
                _ => None,
            };
            match frame {
                Some(f) => out.push(f),
                None => {
                    self.broken = Some(format!("unreadable frame of kind {:#04x}", rest[0]));
                    break;
                }
            }
            self.start += 5 + len;
        }
        if self.start > 0 && (self.start == self.buf.len() || self.start > 1 << 16) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        out
    }

    /// Bytes received that do not (yet) form a whole frame.
    pub(crate) fn pending(&self) -> usize {
        self.buf.len() - self.start
    }
}

fn words(data: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(data)
        .split(' ')
        .filter_map(|t| t.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn parse_started(data: &[u8]) -> Option<Frame> {
    let w = words(data);
    let uid = w.iter().find(|(k, _)| k == "uid")?.1.parse().ok()?;
    let guard = w.iter().find(|(k, _)| k == "guard").and_then(|(_, v)| v.parse::<i32>().ok()).filter(|fd| *fd >= 0);
    Some(Frame::Started { uid, guard })
}

/// `code N out=A err=B` or `signal N out=A err=B`.
fn parse_exit(data: &[u8]) -> Option<Frame> {
    let text = std::str::from_utf8(data).ok()?;
    let mut it = text.split(' ');
    let how = it.next()?;
    let n: i32 = it.next()?.parse().ok()?;
    let status = match how {
        "code" if (0..=255).contains(&n) => ExitStatus { code: Some(n), signal: None },
        "signal" if (1..=64).contains(&n) => ExitStatus { code: None, signal: Some(n) },
        _ => return None,
    };
    let w = words(data);
    let get = |k: &str| w.iter().find(|(key, _)| key == k).and_then(|(_, v)| v.parse().ok());
    Some(Frame::Exit { status, stdout_bytes: get("out")?, stderr_bytes: get("err")? })
}

/// `pids=N disk=HEX fsize=HEX ...` (paths hex-encoded: a hostile file name
/// cannot break the frame) → {"pids": N, "disk": [..], "fsize": [..]};
/// `prior=HEX`: a session's scratch mount full before the call began;
/// `bound=HEX`: a bound the loader's walk hit (`NAME:LIMIT:WHERE`, see
/// `judge::BoundHit::parse`).
fn parse_status(line: &[u8]) -> serde_json::Value {
    let mut v = json!({});
    for tok in line.split(|&b| b == b' ') {
        let t = String::from_utf8_lossy(tok);
        let Some((k, val)) = t.split_once('=') else { continue };
        match k {
            "pids" => {
                if let Ok(n) = val.parse::<u64>() {
                    v[k] = json!(n);
                }
            }
            "disk" | "fsize" | "prior" | "bound" => {
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

/// Where the loader writes a run's CA bundle (the image's system bundle and
/// the run CA), as the program's uid: the root file system is read-only.
pub(crate) const CA_BUNDLE: &str = crate::egress::TMP_CA_BUNDLE;

/// A run's egress, as the loader gets it: the relay's port, the variables
/// the program gets for it (proxy, secrets' placeholders, trust), and the
/// run CA's certificate when a secret goes over TLS.
pub(crate) struct Net {
    pub port: u16,
    pub env: Vec<(String, String)>,
    pub ca: Option<String>,
}

/// What the loader reads from stdin: the header's length on one line, the
/// NUL-separated header, then exactly `code_len` bytes of code and
/// `ca_len` bytes of the run CA's certificate. Stdin stays open after it:
/// one more byte (or EOF) is the host's acknowledgement that it has read
/// the whole stream. `guard`: install the scratch guard in the program's
/// process (only when sandbench will serve it). With `net` stdin carries
/// frames after the payload instead ([`host_frame`]): relay messages, then
/// the acknowledgement.
pub(crate) fn payload(spec: &RunSpec, uid: u32, gid: u32, guard: bool, net: Option<&Net>) -> Vec<u8> {
    // NUL separates fields; no environment string can hold one.
    let clean = |x: &str| x.replace('\0', "");
    let mut fields: Vec<String> = vec![
        spec.code.len().to_string(),
        spec.limits.file_size_bytes.to_string(),
        spec.limits.pids.to_string(),
        uid.to_string(),
        gid.to_string(),
        u8::from(guard).to_string(),
        net.map_or(0, |n| n.port).to_string(),
        net.and_then(|n| n.ca.as_ref()).map_or(0, |c| c.len()).to_string(),
        spec.language.name().into(),
        spec.language.program_file(&spec.code).into(),
        spec.interpreter().len().to_string(),
    ];
    fields.extend(spec.interpreter());
    for (k, v) in net.map(|n| n.env.as_slice()).unwrap_or_default() {
        fields.push(clean(k));
        fields.push(clean(v));
    }
    for (k, v) in &spec.env {
        fields.push(clean(k));
        fields.push(clean(v));
    }
    let header = fields.join("\0");
    let mut out = format!("{}\n{header}", header.len()).into_bytes();
    out.extend_from_slice(spec.code.as_bytes());
    if let Some(ca) = net.and_then(|n| n.ca.as_ref()) {
        out.extend_from_slice(ca.as_bytes());
    }
    out
}

/// Host → loader frames after the payload of a run with egress: `n` a relay
/// message, `k` the acknowledgement.
pub(crate) fn host_frame(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + data.len());
    v.push(kind);
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// A run id unique in this process and, with the pid, across processes.
pub(crate) fn new_run_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{n}-{nanos:08x}", std::process::id())
}

/// Exit code of the container (only when the loader reported no exit: the
/// container was killed) → (code, signal), 128+N meaning signal N.
pub(crate) fn split_exit(code: i64) -> (Option<i32>, Option<i32>) {
    if (129..=128 + 64).contains(&code) {
        (None, Some((code - 128) as i32))
    } else {
        (Some(code as i32), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// guest/program_filter.py, installed in a python3 of the host (the
    /// loader's and the microVM agent's filter for the program): the socket
    /// families outside the allow list and io_uring are refused, the rest
    /// goes on.
    #[test]
    fn the_program_filter_allows_only_the_families_a_sandbox_needs() {
        let script = concat!(
            include_str!("../../../../../guest/program_filter.py"),
            r#"
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
install_program_filter(libc)
def opens(*a):
    try:
        socket.socket(*a).close()
        return "ok"
    except OSError as e:
        return str(e.errno)
def pair(f):
    try:
        for s in socket.socketpair(f, socket.SOCK_STREAM):
            s.close()
        return "ok"
    except OSError as e:
        return str(e.errno)
print(
    opens(socket.AF_INET, socket.SOCK_STREAM), opens(socket.AF_INET6, socket.SOCK_DGRAM),
    opens(socket.AF_UNIX, socket.SOCK_STREAM), opens(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    opens(socket.AF_NETLINK, socket.SOCK_RAW, 9), opens(40, socket.SOCK_STREAM),
    opens(17, socket.SOCK_RAW), opens(38, socket.SOCK_SEQPACKET), pair(socket.AF_UNIX), pair(30),
    libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno(),
)
"#
        );
        let out = std::process::Command::new("python3").args(["-c", script]).output().expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let af = libc::EAFNOSUPPORT;
        // inet, inet6, unix, netlink route; audit, vsock, packet, alg;
        // socketpair unix, tipc; io_uring_setup.
        let want = format!("ok ok ok ok {af} {af} {af} {af} ok {af} -1 {}\n", libc::EPERM);
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }

    #[test]
    fn payload_is_header_then_code() {
        let mut spec = RunSpec::new(crate::spec::Language::Sh, "echo hi\n");
        spec.env.insert("A".into(), "b\nc".into());
        let p = payload(&spec, 1234, 5678, true, None);
        let nl = p.iter().position(|&b| b == b'\n').unwrap();
        let len: usize = std::str::from_utf8(&p[..nl]).unwrap().parse().unwrap();
        let fields: Vec<&[u8]> = p[nl + 1..nl + 1 + len].split(|&b| b == 0).collect();
        assert_eq!(fields[0], b"8");
        assert_eq!(fields[3], b"1234");
        assert_eq!(fields[4], b"5678");
        assert_eq!(fields[5], b"1", "the guard");
        assert_eq!(fields[6], b"0", "no egress port");
        assert_eq!(fields[7], b"0", "no run CA");
        assert_eq!(fields[8], b"sh");
        assert_eq!(fields[10], b"1");
        assert_eq!(fields[11], b"/bin/sh");
        assert_eq!(&fields[12..], [&b"A"[..], &b"b\nc"[..]]);
        assert_eq!(&p[nl + 1 + len..], b"echo hi\n");
        // With egress: the port, the CA's length, its variables before the
        // user's own, the CA after the code.
        let net = Net {
            port: 3128,
            env: vec![("HTTPS_PROXY".into(), "http://127.0.0.1:3128".into())],
            ca: Some("-----BEGIN CERTIFICATE-----".into()),
        };
        let p = payload(&spec, 1234, 5678, false, Some(&net));
        let text = String::from_utf8_lossy(&p);
        assert!(
            text.contains("\x003128\x0027\x00sh\x00") && text.contains("HTTPS_PROXY\0http://127.0.0.1:3128"),
            "{text:?}"
        );
        assert!(text.ends_with("echo hi\n-----BEGIN CERTIFICATE-----"), "{text:?}");
    }

    #[test]
    fn the_program_is_never_root() {
        assert_eq!(program_ids("65534:65534").unwrap(), (65534, 65534));
        assert!(program_ids("0:0").is_err());
        assert!(program_ids("1000:0").is_err());
        assert!(program_ids("nobody").is_err());
        let (u, g) = choose_ids(AUTO_USER, true).unwrap();
        assert!((UID_BASE..UID_BASE + UID_COUNT).contains(&u) && u == g);
        assert_eq!(choose_ids("4242:4343", true).unwrap(), (4242, 4343));
    }

    #[test]
    fn body_is_hardened() {
        let s = Shape::new("img", Some("runsc"), "65534:65534", &Limits::default());
        let b = s.body(HashMap::new(), None);
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
        // /dev/shm is scratch space like the others: inside --disk.
        let tmpfs = h.tmpfs.unwrap();
        assert_eq!(tmpfs.len(), 3);
        assert!(tmpfs[SHMDIR].contains(&format!("size={}", Limits::default().disk_bytes)));
        assert!(h.shm_size.is_none());
    }

    fn frame(kind: u8, data: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn frames_are_decoded_across_chunks() {
        let mut all = frame(b'r', b"uid=4242 gid=4242 guard=7");
        all.extend(frame(b'o', b"\0sandbench-status x pids=3\n"));
        all.extend(frame(b's', b"pids=3 disk=2f776f726b"));
        all.extend(frame(b'e', b""));
        all.extend(frame(b'x', b"code 152 out=27 err=0"));
        // Fed one byte at a time: the same frames.
        let mut f = Frames::default();
        let got: Vec<Frame> = all.iter().flat_map(|b| f.feed(std::slice::from_ref(b))).collect();
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], Frame::Started { uid: 4242, guard: Some(7) });
        assert_eq!(got[1], Frame::Stdout(b"\0sandbench-status x pids=3\n".to_vec()));
        let Frame::Status(s) = &got[2] else { panic!() };
        assert_eq!(s["disk"][0], "/work");
        assert_eq!(
            got[4],
            Frame::Exit { status: ExitStatus { code: Some(152), signal: None }, stdout_bytes: 27, stderr_bytes: 0 }
        );
        assert_eq!(f.pending(), 0);
        assert!(f.broken.is_none());
    }

    #[test]
    fn malformed_frames_break_the_stream() {
        for bad in [frame(b'?', b"x"), frame(b'x', b"code 999 out=0 err=0"), frame(b'x', b"signal 0 out=1 err=1")] {
            let mut f = Frames::default();
            assert!(f.feed(&bad).is_empty());
            assert!(f.broken.is_some());
            assert!(f.feed(&frame(b'o', b"later")).is_empty());
        }
        let mut f = Frames::default();
        assert!(f.feed(&[b'o', 0xff, 0xff, 0xff, 0xff]).is_empty());
        assert!(f.broken.is_some());
    }

    #[test]
    fn exits() {
        assert_eq!(split_exit(0), (Some(0), None));
        assert_eq!(split_exit(137), (None, Some(9)));
        assert_eq!(split_exit(153), (None, Some(25)));
        assert_eq!(split_exit(3), (Some(3), None));
    }
}
