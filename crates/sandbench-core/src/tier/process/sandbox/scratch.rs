//! The sandbox's scratch space as init works on it: `/work`, `/tmp` and
//! `/dev/shm`, tmpfs mounts init made, held by directory descriptor from
//! before any program process exists. Everything init does to them later —
//! writing the waiter's and the program's files, judging files at the size
//! limit and full mounts — goes through those descriptors ([`crate::fsafe`]):
//! never a path the program could have turned into a link to a host device
//! node or into `/proc/sys`, never an open that a FIFO could block, never a
//! write through a hard link.

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use crate::fsafe::{Dir, Walk};

/// The scratch mounts: the only places the program can write.
pub(super) const SCRATCH: [&str; 3] = ["/work", "/tmp", "/dev/shm"];

/// How much of a scratch mount a scan looks at (per mount). Hitting either
/// bound makes the run `incomplete` (unless a violation is found): sized so
/// that a session's installed packages (tens of thousands of files, deep
/// `node_modules`) stay within it, in ~0.1 s at the bound.
pub(crate) const SCAN: Walk = Walk { max_entries: 100_000, max_depth: 64 };

/// Longest name reported for a capped file (the program chose it).
const MAX_NAME: usize = 200;

pub(super) struct Scratch {
    dirs: Vec<(&'static str, Dir)>,
}

impl Scratch {
    /// Open the mounts (after pivot_root, before any program process).
    pub(super) fn open() -> Result<Scratch, String> {
        let dirs = SCRATCH
            .iter()
            .map(|m| Dir::open(Path::new(m)).map(|d| (*m, d)).map_err(|e| format!("scratch mount: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Scratch { dirs })
    }

    fn work(&self) -> &Dir {
        &self.dirs[0].1
    }

    /// `/work` is the program's (its uid owns the mount's root): it may have
    /// locked it. Its owner (init, or root) takes its access back, on the
    /// descriptor.
    fn unlock_work(&self) -> Result<(), String> {
        self.work().chmod(0o700).map_err(|e| format!("/work: {e}"))
    }

    /// Replace `/work/<name>` with a file of the program's uid (mode 0644)
    /// holding `bytes`, whatever the program left at that name.
    pub(super) fn write_work(&self, name: &str, bytes: &[u8], owner: (u32, u32)) -> Result<(), String> {
        self.unlock_work()?;
        self.work().write_file(OsStr::new(name), bytes, 0o644, Some(owner)).map_err(|e| format!("/work: {e}"))
    }

    /// Remove `/work/<name>`, whatever is there.
    pub(super) fn remove_work(&self, name: &str) -> Result<(), String> {
        self.unlock_work()?;
        self.work().remove(OsStr::new(name)).map_err(|e| format!("/work: {e}"))
    }

    /// Rename within `/work`.
    pub(super) fn rename_work(&self, from: &str, to: &str) -> Result<(), String> {
        self.work().rename(OsStr::new(from), OsStr::new(to)).map_err(|e| format!("/work: {e}"))
    }

    /// Mounts out of space or inodes right now.
    pub(super) fn full_mounts(&self) -> Vec<&'static str> {
        self.dirs
            .iter()
            .filter(|(_, d)| {
                nix::sys::statvfs::fstatvfs(d)
                    .map(|s| s.blocks_available() == 0 || (s.files() > 0 && s.files_available() == 0))
                    .unwrap_or(false)
            })
            .map(|(m, _)| *m)
            .collect()
    }

    /// A file at the size limit (changed since `since`, when given: its
    /// ctime, which no program can set back). Bounded; no link followed.
    /// Run as the sandbox's uid (a session's init), it sees what that uid
    /// may search: the scratch watch, which sees every write, is the
    /// primary evidence, this scan its backstop.
    /// Also the bounds its walk hit (none when it found a capped file).
    pub(super) fn capped(
        &self,
        file_size: u64,
        since: Option<SystemTime>,
    ) -> (Option<String>, Vec<crate::judge::BoundHit>) {
        let since = since.map(|t| {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            (d.as_secs() as i64, d.subsec_nanos() as i64)
        });
        let mut hit = None;
        let mut bounds = vec![];
        for (mount, dir) in &self.dirs {
            let end = dir.walk(SCAN, |rel, e| {
                if e.is_file() && e.size >= file_size && since.is_none_or(|s| e.ctime >= s) {
                    hit = Some(format!("{mount}/{}", rel.display()).chars().take(MAX_NAME).collect());
                    return false;
                }
                true
            });
            if hit.is_some() {
                return (hit, vec![]);
            }
            bounds.extend(crate::judge::BoundHit::of_walk(&end, SCAN, &format!("the exit scan of {mount}")));
        }
        (hit, bounds)
    }

    /// After a one-shot run's program: a capped file and the full mounts.
    pub(super) fn judge(&self, file_size: u64) -> crate::highwater::Found {
        let (capped, bounds) = self.capped(file_size, None);
        crate::highwater::Found {
            capped: capped.into_iter().collect(),
            full: self.full_mounts().into_iter().map(String::from).collect(),
            gaps: vec![],
            bounds,
        }
    }
}
