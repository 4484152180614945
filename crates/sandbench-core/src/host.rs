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
