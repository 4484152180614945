//! Per-run cgroups, v1 or v2 (detected). They contain fork and memory bombs
//! that rlimits cannot stop for root, account CPU for the whole process tree,
//! and let the host kill every process of a run at once.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::spec::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Version {
    V1,
    V2,
}

/// Where this process can create per-run cgroups.
#[derive(Debug, Clone)]
pub(crate) enum Layout {
    /// One parent directory per controller (memory, pids, cpu, cpuacct).
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
    },
    V2 {
        parent: PathBuf,
    },
}

impl Layout {
    pub(crate) fn version(&self) -> Version {
        match self {
            Layout::V1 { .. } => Version::V1,
            Layout::V2 { .. } => Version::V2,
        }
    }

    fn parents(&self) -> Vec<PathBuf> {
        match self {
            Layout::V1 { memory, pids, cpu, cpuacct } => {
                let mut v = vec![memory.clone(), pids.clone()];
                v.extend(cpu.iter().cloned());
                v.extend(cpuacct.iter().cloned());
                v
            }
            Layout::V2 { parent } => vec![parent.clone()],
        }
    }
}

/// Mount points of cgroup hierarchies, from mountinfo.
fn mounts(mountinfo: &str) -> (Vec<(PathBuf, Vec<String>)>, Option<PathBuf>) {
    let mut v1 = vec![];
    let mut v2 = None;
    for line in mountinfo.lines() {
        // id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let rf: Vec<&str> = right.split(' ').collect();
        if fields.len() < 5 || rf.len() < 3 {
            continue;
        }
        let mountpoint = PathBuf::from(fields[4]);
        match rf[0] {
            "cgroup2" => {
                v2.get_or_insert(mountpoint);
            }
            "cgroup" => {
                let ctrls = rf[2].split(',').map(str::to_string).collect();
                v1.push((mountpoint, ctrls));
            }
            _ => {}
        }
    }
    (v1, v2)
}

/// This process's own cgroup path per v1 controller, and its v2 path.
fn own_paths(proc_cgroup: &str) -> (Vec<(Vec<String>, String)>, Option<String>) {
    let mut v1 = vec![];
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else { continue };
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        } else {
            v1.push((ctrls.split(',').map(str::to_string).collect(), path.to_string()));
        }
    }
    (v1, v2)
}

fn join(mount: &Path, rel: &str) -> PathBuf {
    mount.join(rel.trim_start_matches('/'))
}

/// Find where per-run cgroups can live, or say why not.
pub(crate) fn detect() -> Result<Layout, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read mountinfo: {e}"))?;
    let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let (v1_mounts, v2_mount) = mounts(&mountinfo);
    let (own_v1, own_v2) = own_paths(&own);

    // v2 wins when its hierarchy actually carries the controllers we need.
    if let (Some(m), Some(rel)) = (&v2_mount, &own_v2) {
        let ctrls = fs::read_to_string(m.join("cgroup.controllers")).unwrap_or_default();
        if ctrls.split_whitespace().any(|c| c == "memory") && ctrls.split_whitespace().any(|c| c == "pids") {
            return detect_v2(m, rel);
        }
    }
    let find = |name: &str| -> Option<PathBuf> {
        let (mnt, _) = v1_mounts.iter().find(|(_, c)| c.iter().any(|x| x == name))?;
        let rel = own_v1.iter().find(|(c, _)| c.iter().any(|x| x == name)).map(|(_, p)| p.as_str()).unwrap_or("/");
        Some(join(mnt, rel).join("sandbench"))
    };
    let (Some(memory), Some(pids)) = (find("memory"), find("pids")) else {
        return Err("no cgroup hierarchy with the memory and pids controllers is mounted".into());
    };
    let layout = Layout::V1 { memory, pids, cpu: find("cpu"), cpuacct: find("cpuacct") };
    for p in layout.parents() {
        fs::create_dir_all(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
    }
    Ok(layout)
}

fn detect_v2(mount: &Path, rel: &str) -> Result<Layout, String> {
    let own = join(mount, rel);
    let enable = |dir: &Path| -> io::Result<()> {
        // cpu is optional (it may not be delegated); memory and pids are not.
        let _ = fs::write(dir.join("cgroup.subtree_control"), "+cpu");
        fs::write(dir.join("cgroup.subtree_control"), "+memory +pids")
    };
    let mut candidates = vec![own.join("sandbench")];
    if rel != "/" {
        candidates.push(mount.join("sandbench"));
    }
    let mut last = String::new();
    for parent in candidates {
        let grand = parent.parent().unwrap_or(mount).to_path_buf();
        if let Err(e) = enable(&grand) {
            last = format!("cannot enable controllers in {}: {e}", grand.display());
            continue;
        }
        if let Err(e) = fs::create_dir_all(&parent) {
            last = format!("cannot create {}: {e}", parent.display());
            continue;
        }
        if let Err(e) = enable(&parent) {
            last = format!("cannot enable controllers in {}: {e}", parent.display());
            continue;
        }
        return Ok(Layout::V2 { parent });
    }
    Err(last)
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The cgroup(s) of one run. Removed (after killing what is inside) on drop.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    layout: Layout,
    name: String,
    removed: bool,
    oom_base: u64,
    /// Processes of the tier's own in the cgroup, on top of the program's pids limit.
    supervisors: u64,
    /// The counter files, opened at the first sample and read again in
    /// place: a run is sampled every 10 ms at first, and a path walk per
    /// file per sample was a measurable share of a short run's CPU.
    files: OnceLock<StatFiles>,
    /// The limits last written (memory bytes, pids.max, CPU quota): a spare
    /// is built with the config's limits, and most runs ask for the same.
    applied: Option<(u64, u64, u64)>,
}

/// A run cgroup's counter files, held open (`O_NOFOLLOW`, close-on-exec).
/// Each read is a `pread` at offset 0, which the kernel answers afresh.
#[derive(Debug, Default)]
struct StatFiles {
    memory: Option<fs::File>,
    memory_peak: Option<fs::File>,
    /// v1 `memory.failcnt`; v2 `memory.events` (with `max` and `oom_kill`).
    memory_events: Option<fs::File>,
    /// v1 `memory.oom_control`.
    oom_control: Option<fs::File>,
    pids: Option<fs::File>,
    pids_peak: Option<fs::File>,
    pids_events: Option<fs::File>,
    /// v1 `cpuacct.usage`; v2 `cpu.stat`.
    cpu: Option<fs::File>,
}

fn open_counter(p: &Path) -> Option<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(p).ok()
}

/// The file's text now (a counter file is a few hundred bytes at most).
fn pread_text(f: &Option<fs::File>) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 4096];
    let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

fn pread_u64(f: &Option<fs::File>) -> Option<u64> {
    pread_text(f)?.trim().parse().ok()
}

fn pread_key(f: &Option<fs::File>, key: &str) -> Option<u64> {
    find_key(&pread_text(f)?, key)
}

/// Processes of sandbench's own in a process run's cgroup: none (the helper
/// and the namespace's init stay outside; only the program's process is
/// moved in, and everything it forks is born there). Peers' wrappers count
/// theirs with [`RunCgroup::create_with`].
pub(crate) const SUPERVISORS: u64 = 0;

/// Counters read from the cgroup.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub memory: Option<u64>,
    pub memory_peak: Option<u64>,
    pub pids: Option<u64>,
    /// Highest pids count the kernel saw (newer kernels), finer than sampling.
    pub pids_peak: Option<u64>,
    pub cpu_ns: Option<u64>,
    pub oom_kills: u64,
    /// Times an allocation hit the memory limit (v1 failcnt / v2 `max` events).
    pub memory_max_events: u64,
    pub pids_max_events: u64,
}

impl Stats {
    /// The counters the judge reads: all kernel-kept, none writable from inside.
    pub(crate) fn counters(&self) -> crate::judge::Counters {
        crate::judge::Counters {
            cpu_ms: self.cpu_ns.map(|n| n / 1_000_000),
            oom_kills: Some(self.oom_kills),
            memory_limit_hits: Some(self.memory_max_events),
            pids_refused: Some(self.pids_max_events),
        }
    }
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn read_key(p: &Path, key: &str) -> Option<u64> {
    find_key(&fs::read_to_string(p).ok()?, key)
}

fn find_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl RunCgroup {
    pub(crate) fn create(layout: &Layout, limits: &Limits) -> io::Result<RunCgroup> {
        Self::create_with(layout, limits, SUPERVISORS)
    }

    /// A run cgroup whose tier keeps `supervisors` processes of its own in it
    /// (a peer's wrapper): they are added to the pids limit and left out of the counts.
    pub(crate) fn create_with(layout: &Layout, limits: &Limits, supervisors: u64) -> io::Result<RunCgroup> {
        // Named by this process's owner token, so that a reaper anywhere
        // (another pid namespace included) can prove whether it is alive;
        // in its opaque form, because the program sees the name in
        // /proc/self/cgroup.
        let token = crate::owner::token().map_err(|e| io::Error::other(format!("{e:#}")))?;
        let name = format!("{}-{}", crate::owner::opaque(token), SEQ.fetch_add(1, Ordering::Relaxed));
        let mut cg = RunCgroup {
            layout: layout.clone(),
            name,
            removed: false,
            oom_base: 0,
            supervisors,
            files: OnceLock::new(),
            applied: None,
        };
        for d in cg.dirs() {
            fs::create_dir(&d)?;
        }
        cg.set_limits(limits)?;
        cg.oom_base = cg.stats().oom_kills;
        Ok(cg)
    }

    /// (Re)apply limits; a spare sandbox gets its run's limits just before
    /// the program starts. Nothing is written when they are the ones the
    /// cgroup already has: only sandbench writes these root-owned files.
    pub(crate) fn set_limits(&mut self, limits: &Limits) -> io::Result<()> {
        let quota = ((limits.cpus.clamp(0.01, 1024.0)) * 100_000.0) as u64;
        let want = (limits.memory_bytes, limits.pids + self.supervisors, quota);
        if self.applied == Some(want) {
            return Ok(());
        }
        self.applied = None;
        self.write_limits(want)?;
        self.applied = Some(want);
        Ok(())
    }

    fn write_limits(&self, (memory_bytes, pids, quota): (u64, u64, u64)) -> io::Result<()> {
        let mem = memory_bytes.to_string();
        let pids = pids.to_string();
        match &self.layout {
            Layout::V1 { memory, pids: p, cpu, .. } => {
                let m = memory.join(&self.name);
                // memsw (memory + swap) must stay >= memory: lower it first
                // when shrinking, raise memory first when growing.
                let _ = fs::write(m.join("memory.memsw.limit_in_bytes"), &mem);
                fs::write(m.join("memory.limit_in_bytes"), &mem)?;
                let _ = fs::write(m.join("memory.memsw.limit_in_bytes"), &mem);
                let _ = fs::write(m.join("memory.swappiness"), "0");
                // The program's process joins after its interpreter started
                // (see sandbox.rs): where the kernel still moves charges, its
                // pages charged until then move along. This kernel refuses it
                // (EINVAL), and v2 never did: the interpreter's start-up then
                // stays charged to sandbench's own cgroup, and the run's peak
                // (its cgroup's high-water mark, by definition: see the
                // README's `usage`) leaves it out.
                let _ = fs::write(m.join("memory.move_charge_at_immigrate"), "3");
                fs::write(p.join(&self.name).join("pids.max"), pids)?;
                if let Some(c) = cpu {
                    let c = c.join(&self.name);
                    let _ = fs::write(c.join("cpu.cfs_period_us"), "100000");
                    let _ = fs::write(c.join("cpu.cfs_quota_us"), quota.to_string());
                }
            }
            Layout::V2 { parent } => {
                let d = parent.join(&self.name);
                fs::write(d.join("memory.max"), &mem)?;
                let _ = fs::write(d.join("memory.swap.max"), "0");
                let _ = fs::write(d.join("memory.oom.group"), "0");
                fs::write(d.join("pids.max"), pids)?;
                let _ = fs::write(d.join("cpu.max"), format!("{quota} 100000"));
            }
        }
        Ok(())
    }

    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        self.layout.parents().into_iter().map(|p| p.join(&self.name)).collect()
    }

    /// Files a process writes its pid into to join this run's cgroups.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    pub(crate) fn version(&self) -> Version {
        self.layout.version()
    }

    fn stat_files(&self) -> &StatFiles {
        self.files.get_or_init(|| match &self.layout {
            Layout::V1 { memory, pids, cpuacct, .. } => {
                let (m, p) = (memory.join(&self.name), pids.join(&self.name));
                StatFiles {
                    memory: open_counter(&m.join("memory.usage_in_bytes")),
                    memory_peak: open_counter(&m.join("memory.max_usage_in_bytes")),
                    memory_events: open_counter(&m.join("memory.failcnt")),
                    oom_control: open_counter(&m.join("memory.oom_control")),
                    pids: open_counter(&p.join("pids.current")),
                    pids_peak: open_counter(&p.join("pids.peak")),
                    pids_events: open_counter(&p.join("pids.events")),
                    cpu: cpuacct.as_ref().and_then(|c| open_counter(&c.join(&self.name).join("cpuacct.usage"))),
                }
            }
            Layout::V2 { parent } => {
                let d = parent.join(&self.name);
                StatFiles {
                    memory: open_counter(&d.join("memory.current")),
                    memory_peak: open_counter(&d.join("memory.peak")),
                    memory_events: open_counter(&d.join("memory.events")),
                    oom_control: None,
                    pids: open_counter(&d.join("pids.current")),
                    pids_peak: open_counter(&d.join("pids.peak")),
                    pids_events: open_counter(&d.join("pids.events")),
                    cpu: open_counter(&d.join("cpu.stat")),
                }
            }
        })
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut s = Stats::default();
        let f = self.stat_files();
        s.memory = pread_u64(&f.memory);
        s.memory_peak = pread_u64(&f.memory_peak);
        s.pids = pread_u64(&f.pids);
        s.pids_peak = pread_u64(&f.pids_peak);
        s.pids_max_events = pread_key(&f.pids_events, "max").unwrap_or(0);
        match &self.layout {
            Layout::V1 { .. } => {
                s.memory_max_events = pread_u64(&f.memory_events).unwrap_or(0);
                s.oom_kills = pread_key(&f.oom_control, "oom_kill").unwrap_or(0);
                s.cpu_ns = pread_u64(&f.cpu);
            }
            Layout::V2 { .. } => {
                let events = pread_text(&f.memory_events).unwrap_or_default();
                s.memory_max_events = find_key(&events, "max").unwrap_or(0);
                s.oom_kills = find_key(&events, "oom_kill").unwrap_or(0);
                s.cpu_ns = pread_key(&f.cpu, "usage_usec").map(|u| u * 1000);
            }
        }
        s.oom_kills = s.oom_kills.saturating_sub(self.oom_base);
        s.pids = s.pids.map(|p| p.saturating_sub(self.supervisors));
        s.pids_peak = s.pids_peak.map(|p| p.saturating_sub(self.supervisors));
        s
    }

    /// Processes the run's cgroup counts now, the tier's own left out: a
    /// zombie among them until it is reaped (the pids controller lets go of
    /// a process at its release, not at its exit; `cgroup.procs` no longer
    /// lists it by then). None: no pids counter to read.
    pub(crate) fn pids_now(&self) -> Option<u64> {
        pread_u64(&self.stat_files().pids).map(|p| p.saturating_sub(self.supervisors))
    }

    /// Processes in the run's cgroup now (read from its first hierarchy).
    pub(crate) fn members(&self) -> Vec<i32> {
        self.dirs().first().map(|d| pids_in(d)).unwrap_or_default()
    }

    /// SIGKILL everything in the run's cgroups until they are empty.
    pub(crate) fn kill_all(&self) {
        kill_dirs(&self.dirs());
    }

    /// Kill what is left and remove the directories.
    pub(crate) fn remove(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        remove_dirs(&self.dirs());
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

fn pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn kill_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        // v2 has a one-shot kill of the whole subtree (5.14+).
        if fs::write(d.join("cgroup.kill"), "1").is_ok() {
            continue;
        }
        // A forking program can add processes while we kill; repeat until empty.
        for _ in 0..200 {
            if kill_listed(|| pids_in(d)) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// SIGKILL the processes `list` names, each only while `list` still names
/// it; returns how many it named. A pid read from `cgroup.procs` may be
/// another process's by the time a signal goes by pid: pids wrap (at 32768
/// on many machines) and a program can fork through them. So each is pinned
/// first with a pidfd, the list is read again, and a pinned process whose
/// pid is still listed is signalled through its pidfd, which never reaches
/// a later process of the same pid (if the pinned one has died meanwhile,
/// the signal goes nowhere and the next round sees the list as it is).
fn kill_listed(list: impl Fn() -> Vec<i32>) -> usize {
    let pids = list();
    let mut pinned = vec![];
    for &p in &pids {
        match pidfd_open(p) {
            Ok(fd) => pinned.push((p, fd)),
            // A kernel before 5.3 has no pidfds: by pid, as before them.
            Err(nix::errno::Errno::ENOSYS) if p > 0 => {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
            }
            Err(_) => {} // gone already
        }
    }
    if !pinned.is_empty() {
        let still: std::collections::HashSet<i32> = list().into_iter().collect();
        for (p, fd) in &pinned {
            if still.contains(p) {
                pidfd_kill(fd);
            }
        }
    }
    pids.len()
}

#[allow(unsafe_code)] // pidfd_open(2): integers in, a new descriptor out
fn pidfd_open(pid: i32) -> Result<OwnedFd, nix::errno::Errno> {
    if pid <= 0 {
        return Err(nix::errno::Errno::EINVAL);
    }
    // SAFETY: integer arguments; the result is a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    // SAFETY: pidfd_open just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[allow(unsafe_code)] // pidfd_send_signal(2): a descriptor we own, no siginfo
fn pidfd_kill(fd: &OwnedFd) {
    // SAFETY: a live pidfd, SIGKILL, a null siginfo (the kernel fills in
    // the sender's) and no flags; nothing is read or written through memory.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

fn remove_dirs(dirs: &[PathBuf]) {
    kill_dirs(dirs);
    for d in dirs {
        // Killed processes leave the cgroup asynchronously; rmdir fails with
        // EBUSY until they have.
        for i in 0..500 {
            match fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(_) => {
                    if i % 50 == 49 {
                        kill_dirs(std::slice::from_ref(d));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
}

/// A CPU meter around this process: while entered, this process and all it
/// starts from then on are accounted in a cgroup of their own (the CPU
/// accounting hierarchy only), so their CPU time is known however the
/// processes end (a bwrap's namespace init reaps without waiting: rusage
/// misses its children). Named by the owner token, so the reaper removes it
/// if sandbench dies inside. Entering moves this process (on v1 that waits
/// for an RCU grace period): benchmarks do it between measurements.
pub(crate) struct CpuMeter {
    dir: PathBuf,
    home: PathBuf,
    v2: bool,
}

impl CpuMeter {
    pub(crate) fn enter(layout: &Layout, what: &str) -> io::Result<CpuMeter> {
        let (parent, v2) = match layout {
            Layout::V1 { cpuacct: Some(c), .. } => (c.clone(), false),
            Layout::V1 { .. } => return Err(io::Error::other("no cpuacct hierarchy")),
            Layout::V2 { parent } => (parent.clone(), true),
        };
        let home = parent.parent().ok_or_else(|| io::Error::other("no own cgroup"))?.to_path_buf();
        let token = crate::owner::token().map_err(|e| io::Error::other(format!("{e:#}")))?;
        let dir =
            parent.join(format!("{}-{what}-{}", crate::owner::opaque(token), SEQ.fetch_add(1, Ordering::Relaxed)));
        fs::create_dir(&dir)?;
        if let Err(e) = fs::write(dir.join("cgroup.procs"), std::process::id().to_string()) {
            let _ = fs::remove_dir(&dir);
            return Err(e);
        }
        // This process's zygotes work for its runs: their CPU is this
        // process's too. (Our own unreaped children: their pids are ours.)
        for pid in super::zygote::pids() {
            let _ = fs::write(dir.join("cgroup.procs"), pid.to_string());
        }
        Ok(CpuMeter { dir, home, v2 })
    }

    /// CPU time used inside so far.
    pub(crate) fn cpu_ns(&self) -> Option<u64> {
        if self.v2 {
            read_key(&self.dir.join("cpu.stat"), "usage_usec").map(|u| u * 1000)
        } else {
            read_u64(&self.dir.join("cpuacct.usage"))
        }
    }
}

impl Drop for CpuMeter {
    fn drop(&mut self) {
        // Back where this process came from, then the (empty) meter goes.
        // Never a kill here: this process itself was inside.
        for pid in super::zygote::pids() {
            let _ = fs::write(self.home.join("cgroup.procs"), pid.to_string());
        }
        if fs::write(self.home.join("cgroup.procs"), std::process::id().to_string()).is_err() {
            return;
        }
        for _ in 0..100 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// Run cgroups named by `token` (in its opaque form), in every hierarchy.
pub(crate) fn owned(layout: &Layout, token: &str) -> Vec<PathBuf> {
    let prefix = format!("{}-", crate::owner::opaque(token));
    let mut v = vec![];
    for parent in layout.parents() {
        let Ok(rd) = fs::read_dir(&parent) else { continue };
        v.extend(rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).map(|e| e.path()));
    }
    v
}

/// Remove run cgroups whose owner is provably dead (see `owner`): never
/// another host's or boot's, never one whose owner's lock is held. Returns how many.
pub(crate) fn reap(layout: &Layout) -> usize {
    reap_with(layout, &mut crate::owner::Sweep::new())
}

pub(crate) fn reap_with(layout: &Layout, sweep: &mut crate::owner::Sweep) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    for parent in layout.parents() {
        let Ok(rd) = fs::read_dir(&parent) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !sweep.name_dead(&name) {
                continue;
            }
            remove_dirs(&[e.path()]);
            seen.insert(name);
        }
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_pid_is_signalled_only_while_it_is_still_listed() {
        use std::os::unix::process::ExitStatusExt;
        let mut victim = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = victim.id() as i32;
        // Listed when read, no longer listed once pinned (it left the
        // cgroup, or the pid now names another process): spared.
        let reads = std::cell::Cell::new(0);
        let named = kill_listed(|| {
            reads.set(reads.get() + 1);
            if reads.get() == 1 {
                vec![pid]
            } else {
                vec![]
            }
        });
        assert_eq!((named, reads.get()), (1, 2), "the list is read again once the pids are pinned");
        std::thread::sleep(Duration::from_millis(100));
        assert!(victim.try_wait().unwrap().is_none(), "a process no longer listed was killed");
        // Still listed: killed. Pids that name nothing are passed over.
        assert_eq!(kill_listed(|| vec![pid, -1, 0, i32::MAX]), 4);
        assert_eq!(victim.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(kill_listed(Vec::new), 0);
    }

    #[test]
    fn parses_v1_mountinfo_and_own_paths() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
                  31 25 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                  32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                  33 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let (v1, v2) = mounts(mi);
        assert_eq!(v1.len(), 3);
        assert_eq!(v1[2].1, vec!["rw", "cpu", "cpuacct"]);
        assert_eq!(v2.unwrap(), PathBuf::from("/sys/fs/cgroup/unified"));
        let (own1, own2) = own_paths("7:memory:/user.slice\n3:cpu,cpuacct:/\n0::/init.scope\n");
        assert_eq!(own1[0], (vec!["memory".to_string()], "/user.slice".to_string()));
        assert_eq!(own2.as_deref(), Some("/init.scope"));
        assert_eq!(join(Path::new("/sys/fs/cgroup/memory"), "/a/b"), PathBuf::from("/sys/fs/cgroup/memory/a/b"));
    }

    #[test]
    fn reads_keyed_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("memory.events");
        fs::write(&p, "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(read_key(&p, "max"), Some(12));
        assert_eq!(read_key(&p, "oom_kill"), Some(1));
        assert_eq!(read_key(&p, "nope"), None);
    }
}
