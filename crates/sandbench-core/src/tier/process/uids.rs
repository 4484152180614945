//! Per-run uids for the process tier (when sandbench runs as root). Per-uid
//! kernel quotas (inotify instances, RLIMIT_NPROC, user watches, keys) are
//! shared by every process of a uid: a program running as a uid some host
//! process also has (65534 is everybody's "nobody") could exhaust them for
//! that process. Each run therefore gets a uid (and gid of the same number)
//! from a dedicated range, leased through a lock file that the run holds, and
//! skipped while any process of the host has it.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the leases live (root only: this is only used as root).
const LEASE_DIR: &str = "/run/sandbench/uids";

/// A uid held for one run. Dropping it (closing the lock file) frees it.
#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    /// Held for the run; unlocked and closed on drop.
    _lock: nix::fcntl::Flock<File>,
}

/// Check a configured range: never uid 0, never the all-ones "unchanged"
/// value of setresuid(2), inside 32 bits.
pub(crate) fn check_range(base: u32, count: u32) -> Result<(), String> {
    if base == 0 || count == 0 {
        return Err(format!("[process] uid range {base}+{count} is empty or starts at root"));
    }
    match base.checked_add(count) {
        Some(end) if end < u32::MAX => Ok(()),
        _ => Err(format!("[process] uid range {base}+{count} runs past the largest uid {}", u32::MAX - 1)),
    }
}

/// Real, effective and saved uids of every host process right now.
fn uids_in_use() -> HashSet<u32> {
    let mut set = HashSet::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return set };
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else { continue };
        if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
            set.extend(line.split_whitespace().skip(1).filter_map(|u| u.parse::<u32>().ok()));
        }
    }
    set
}

/// How old a scan of the host's uids may be when a lease uses it. Reading
/// every process's status costs milliseconds (a /proc scan), on the path of
/// every cold start; the range is sandbench's own, so a host process that
/// took one of its uids within the last moment is not worth that.
const SCAN_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

static SCAN: std::sync::Mutex<Option<(std::time::Instant, Arc<HashSet<u32>>)>> = std::sync::Mutex::new(None);

/// The host's uids, scanned at most [`SCAN_FRESH`] ago.
fn busy_uids() -> Arc<HashSet<u32>> {
    if let Ok(g) = SCAN.lock() {
        if let Some((t, set)) = g.as_ref() {
            if t.elapsed() < SCAN_FRESH {
                return set.clone();
            }
        }
    }
    let set = Arc::new(uids_in_use());
    if let Ok(mut g) = SCAN.lock() {
        *g = Some((std::time::Instant::now(), set.clone()));
    }
    set
}

/// Scan the host's uids now, in the background, so that the next lease
/// (a one-shot run's, soon after start-up) finds the scan done.
pub(crate) fn prefetch() {
    static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let fresh = SCAN.lock().ok().and_then(|g| g.as_ref().map(|(t, _)| t.elapsed() < SCAN_FRESH)).unwrap_or(false);
    if fresh || !nix::unistd::geteuid().is_root() || RUNNING.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    std::thread::spawn(|| {
        drop(busy_uids());
        RUNNING.store(false, std::sync::atomic::Ordering::SeqCst);
    });
}

/// Lease the first uid of `base..base+count` that no other run holds and no
/// host process has.
pub(crate) fn lease(base: u32, count: u32) -> Result<UidLease, String> {
    check_range(base, count)?;
    lease_with(Path::new(LEASE_DIR), base, count, &busy_uids())
}

/// Whether a run (of any sandbench) holds `uid`'s lease right now. A
/// process of a run uid whose lease nobody holds outlived its run; one of a
/// held uid belongs to a run still going (another sandbench's, say), which
/// a check for leftovers must leave out.
pub(crate) fn leased_now(uid: u32) -> bool {
    leased_in(Path::new(LEASE_DIR), uid)
}

fn leased_in(dir: &Path, uid: u32) -> bool {
    // Never created: never leased. The probe takes the lock for a moment
    // (no run can lease it meanwhile, so none is refused by it either: a
    // lease skips a busy uid and takes the next).
    let Ok(f) = File::open(dir.join(uid.to_string())) else { return false };
    matches!(
        nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock),
        Err((_, nix::errno::Errno::EWOULDBLOCK))
    )
}

#[cfg(test)]
fn lease_in(dir: &Path, base: u32, count: u32) -> Result<UidLease, String> {
    check_range(base, count)?;
    lease_with(dir, base, count, &uids_in_use())
}

fn lease_with(dir: &Path, base: u32, count: u32, busy: &HashSet<u32>) -> Result<UidLease, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for uid in (base..base + count).filter(|u| !busy.contains(u)) {
        let path: PathBuf = dir.join(uid.to_string());
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(UidLease { uid, _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(format!("flock {}: {e}", path.display())),
        }
    }
    Err(format!("no free uid in {base}..{}: every one is leased by a run or used by a host process", base + count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_never_include_root_or_minus_one() {
        assert!(check_range(0, 10).is_err());
        assert!(check_range(u32::MAX - 5, 10).is_err());
        assert!(check_range(u32::MAX - 5, 5).is_err());
        assert!(check_range(2_000_000_000, 4096).is_ok());
    }

    #[test]
    fn a_held_lease_is_seen_as_held_and_a_dropped_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!leased_in(dir.path(), 2_000_300_000), "never leased");
        let a = lease_in(dir.path(), 2_000_300_000, 1).unwrap();
        assert!(leased_in(dir.path(), a.uid));
        drop(a);
        assert!(!leased_in(dir.path(), 2_000_300_000));
        // Probing did not take it: it can be leased again.
        assert!(lease_in(dir.path(), 2_000_300_000, 1).is_ok());
    }

    #[test]
    fn concurrent_leases_differ_and_free_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let a = lease_in(dir.path(), 2_000_100_000, 2).unwrap();
        let b = lease_in(dir.path(), 2_000_100_000, 2).unwrap();
        assert_ne!(a.uid, b.uid);
        assert!(lease_in(dir.path(), 2_000_100_000, 2).is_err(), "a third lease from two uids");
        let freed = a.uid;
        drop(a);
        assert_eq!(lease_in(dir.path(), 2_000_100_000, 2).unwrap().uid, freed);
    }

    #[test]
    fn a_uid_a_host_process_has_is_skipped() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let (base, mut child) = if nix::unistd::geteuid().is_root() {
            let base = 2_000_200_000;
            let c = std::process::Command::new("sleep").arg("30").uid(base).gid(base).spawn().unwrap();
            (base, Some(c))
        } else {
            (nix::unistd::getuid().as_raw(), None)
        };
        // /proc/<pid>/status shows the new uid once the child has exec'd.
        for _ in 0..200 {
            if uids_in_use().contains(&base) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let l = lease_in(dir.path(), base, 2).unwrap();
        if let Some(c) = child.as_mut() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert_eq!(l.uid, base + 1);
    }
}
