//! Facts about the host sandbench runs on, looked up one way everywhere.

use std::path::{Path, PathBuf};

/// The first executable file named `cmd` in the directories of `path`
/// (a `PATH`-style list), like `command -v`.
pub fn which_in(cmd: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `cmd` on sandbench's own `PATH`, then the usual bin folders (where npm and
/// pip put tools, should PATH lack them) and the system's sbin directories
/// (setup runs mkfs.ext4 and friends from a user's PATH too); a path with a
/// slash is taken as it is.
pub fn which(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Path::new(cmd).is_file().then(|| PathBuf::from(cmd));
    }
    // The search path, looked up once: this module is where sandbench asks
    // the host (its PATH is the user's tools, not configuration).
    static SEARCH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let search = SEARCH.get_or_init(|| {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        format!("{path}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin")
    });
    which_in(cmd, search)
}

/// `n` random bytes from the kernel, as hex: nonces and tokens. Failing to
/// read them is an error for the caller to report, never a zero fallback.
pub fn random_hex(n: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The host's physical memory (`MemTotal`), when `/proc/meminfo` says.
pub fn memory_total() -> Option<u64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 =
        t.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

/// A process and its descendants (host pids), from `/proc/<pid>/task/<tid>/children`.
pub fn process_tree(root: i32) -> Vec<i32> {
    let mut out = vec![];
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if out.contains(&p) || out.len() > 4096 {
            continue;
        }
        out.push(p);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            stack.extend(kids.split_whitespace().filter_map(|k| k.parse::<i32>().ok()));
        }
    }
    out
}

/// Proportional set size of these processes together (shared pages split
/// between their users), in bytes; processes gone meanwhile count 0.
pub fn pss_bytes(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum::<u64>()
        * 1024
}

/// What sandbench reads of a `/proc/<pid>/stat` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// The command name (the program's to choose: spaces, parentheses).
    pub comm: String,
    pub ppid: i32,
    /// User + system time, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set, in pages.
    pub rss_pages: u64,
}

impl ProcStat {
    /// Parses one line. The command name may hold spaces and `)`: the
    /// fields start after the last `)`. A line short of the fields read is
    /// `None`, never a panic.
    pub fn parse(line: &str) -> Option<ProcStat> {
        let open = line.find('(')?;
        let close = line.rfind(')')?;
        let comm = line.get(open + 1..close)?.to_string();
        // From the state (3rd field) on: ppid is the 4th, utime and stime
        // the 14th and 15th, rss the 24th.
        let f: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        Some(ProcStat {
            comm,
            ppid: f.get(1)?.parse().ok()?,
            cpu_ticks: num(11)?.saturating_add(num(12)?),
            rss_pages: num(21)?,
        })
    }

    /// `/proc/<pid>/stat`, parsed (`None` once the process is gone).
    pub fn of(pid: i32) -> Option<ProcStat> {
        ProcStat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// The CPU time in ms.
    pub fn cpu_ms(&self) -> u64 {
        self.cpu_ticks.saturating_mul(1000) / clock_ticks()
    }
}

/// The whole machine's busy CPU time in ms (every CPU, every process and
/// kernel thread): the first line of `/proc/stat` less its idle and iowait.
pub fn machine_busy_ms() -> Option<f64> {
    busy_ticks(&std::fs::read_to_string("/proc/stat").ok()?).map(|t| t as f64 * 1000.0 / clock_ticks() as f64)
}

/// `cpu  user nice system idle iowait irq softirq steal guest guest_nice`:
/// guest time is already inside user and nice, so it is not added again.
fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let f: Vec<u64> = line.split_whitespace().map(|v| v.parse().ok()).collect::<Option<_>>()?;
    if f.len() < 4 {
        return None;
    }
    // Fields a kernel too old to have them leaves out count as 0.
    let get = |i: usize| f.get(i).copied().unwrap_or(0);
    Some([0, 1, 2, 5, 6, 7].into_iter().map(get).fold(0u64, u64::saturating_add))
}

/// Clock ticks per second (`/proc`'s unit of CPU time).
pub fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(100)
        .max(1)
}

/// The interpreter the sandboxes use, on the host (never a pyenv shim).
pub fn host_python() -> String {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("python3")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_time_leaves_out_idle_iowait_and_guest() {
        let stat = "cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 50 2 25 4500 20 1 1 0 3 0\n";
        assert_eq!(busy_ticks(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(busy_ticks("cpu  1 2 3\n"), None, "too few fields");
        assert_eq!(busy_ticks("cpu  1 x 3 4\n"), None, "not a number");
        assert_eq!(busy_ticks("intr 1 2 3 4\n"), None);
        assert!(machine_busy_ms().is_some_and(|ms| ms > 0.0));
    }

    #[test]
    fn stat_lines_are_read_past_a_hostile_command_name() {
        let line = "4242 (qemu) 1 2) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 30 10 5 0 123 456 789";
        let s = ProcStat::parse(line).unwrap();
        assert_eq!((s.comm.as_str(), s.ppid, s.cpu_ticks, s.rss_pages), ("qemu) 1 2", 1, 287, 789));
        for short in ["4242 (qemu) S 1", "no parenthesis", "1 (x)", "1 )(", ""] {
            assert_eq!(ProcStat::parse(short), None, "{short:?}");
        }
        // Our own process: a figure, and it only grows.
        let me = std::process::id() as i32;
        let a = ProcStat::of(me).expect("own stat").cpu_ms();
        let mut n = 0u64;
        for i in 0..20_000_000u64 {
            n = n.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(n);
        assert!(ProcStat::of(me).unwrap().cpu_ms() >= a);
        assert_eq!(ProcStat::of(me).unwrap().ppid, nix::unistd::getppid().as_raw());
    }

    #[test]
    fn finds_executables_only() {
        assert!(which_in("sh", "/usr/bin:/bin").is_some());
        assert!(which_in("passwd", "/etc").is_none(), "a plain file is not a command");
        assert!(which_in("sh", "relative:dirs").is_none());
    }

    #[test]
    fn a_child_is_in_its_parents_tree_and_holds_memory() {
        let mut c = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id() as i32;
        let mut found = false;
        for _ in 0..200 {
            if process_tree(me).contains(&(c.id() as i32)) {
                found = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let pss = pss_bytes(&[c.id() as i32]);
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(found, "the child is not in the tree");
        assert!(pss > 0, "a live process has some resident memory");
    }

    #[test]
    fn random_hex_is_fresh_each_time() {
        let (a, b) = (random_hex(16).unwrap(), random_hex(16).unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
