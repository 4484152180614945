//! The host side of one peer run: its folder (program, scratch, the tool's
//! home, settings files), the scratch tmpfs, and the fork/exec step that puts the wrapper into the outer cgroup
//! as the peer user. Folders live under `/run/sandbench-peers` (root) or the
//! user's runtime dir: not under /tmp, which some tools replace (firejail's
//! --private-tmp) or refuse (Codex will not put its helpers there).
#![allow(unsafe_code)] // pre_exec hook of the wrapper (async-signal-safe calls only)

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::RunAs;
use crate::spec::RunSpec;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The scratch folder's name in a run folder. Paths here are kept short on
/// purpose: the scratch is the program's TMPDIR, and tools put unix sockets
/// there (srt's proxy bridges), whose paths may not pass 107 bytes. With the
/// owner token in the run folder's name (up to 42 bytes), `/run/sbp/`
/// and `w` leave room for srt's 35-byte socket names.
const SCRATCH: &str = "w";

/// Where run folders go.
pub fn base(env: &crate::config::HostEnv) -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/sbp");
    }
    match &env.runtime_dir {
        Some(d) => d.join("sbp"),
        None => std::env::temp_dir().join(format!("sbp-{}", nix::unistd::getuid())),
    }
}

/// One run's folder. Dropping it unmounts the scratch and removes everything.
pub struct RunDir {
    pub root: PathBuf,
    pub program_dir: PathBuf,
    pub scratch: PathBuf,
    pub home: PathBuf,
    tmpfs: bool,
}

fn mkdir(p: &Path, mode: u32) -> io::Result<()> {
    fs::create_dir(p)?;
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
}

impl RunDir {
    pub fn create(base: &Path, peer: &str, spec: &RunSpec, who: &RunAs, disk_bytes: u64) -> anyhow::Result<RunDir> {
        if let Some(parent) = base.parent() {
            fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // The peer user must be able to walk in; nobody else may write. Made
        // and checked on its descriptor: the fallback under /tmp is a name
        // any local user could have taken first, or planted as a link (which
        // a chmod by path would have followed).
        crate::fsafe::private_dir(base, 0o755).map_err(|e| anyhow::anyhow!("peer run folders: {e}"))?;
        // Named by the owner token: its held lock proves the run alive (see `owner`).
        let token = crate::owner::token()?;
        let root = base.join(format!("{token}-{}-{peer}", SEQ.fetch_add(1, Ordering::Relaxed)));
        mkdir(&root, 0o755).with_context(|| format!("cannot create {}", root.display()))?;
        let mut dir = RunDir {
            program_dir: root.join("program"),
            scratch: root.join(SCRATCH),
            home: root.join("home"),
            root,
            tmpfs: false,
        };
        mkdir(&dir.program_dir, 0o755)?;
        let file = dir.program_dir.join(spec.language.file_name());
        fs::write(&file, &spec.code)?;
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644))?;
        mkdir(&dir.scratch, 0o700)?;
        mkdir(&dir.home, 0o700)?;
        if who.switch {
            // As root: the scratch is a tmpfs of the run's disk size, so a
            // program that fills it never fills the host's disk.
            let inodes = (disk_bytes / 4096).clamp(1024, 65536);
            let opts = format!("size={disk_bytes},nr_inodes={inodes},mode=0700,uid={},gid={}", who.uid, who.gid);
            mount(
                Some("sandbench-peer"),
                &dir.scratch,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(opts.as_str()),
            )
            .with_context(|| format!("cannot mount the scratch tmpfs on {}", dir.scratch.display()))?;
            dir.tmpfs = true;
            chown(&dir.home, Some(who.uid), Some(who.gid))?;
        }
        Ok(dir)
    }

    /// A settings file the tool reads (not writable by it).
    pub fn write_file(&self, name: &str, text: &str) -> anyhow::Result<()> {
        let p = self.root.join(name);
        fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644))?;
        Ok(())
    }

    /// (a file that reached `limit` bytes, whether the scratch tmpfs is
    /// full), read from the host. Bounded: a flood of files is looked at in
    /// part. The peer's program owns the scratch: walked fd-relative, no
    /// link followed (fsafe), though this runs as root.
    pub fn scan(&self, limit: u64) -> (Option<String>, bool) {
        let Ok(dir) = crate::fsafe::Dir::open(&self.scratch) else { return (None, false) };
        let mut capped = None;
        dir.walk(crate::fsafe::Walk { max_entries: 20_000, max_depth: 32 }, |rel, e| {
            if e.is_file() && e.size >= limit {
                capped = Some(rel.display().to_string());
                return false;
            }
            true
        });
        // "Full" is within 1/32 of the size or 1/64 of the inodes: a program
        // that hit ENOSPC may have freed a little before the next look, and so
        // may the tool (srt removes its mount-point files when it exits).
        let full = self.tmpfs
            && nix::sys::statvfs::fstatvfs(&dir)
                .map(|s| s.blocks_available() <= s.blocks() / 32 || s.files_available() <= s.files() / 64)
                .unwrap_or(false);
        (capped, full)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.tmpfs {
            let _ = umount2(&self.scratch, MntFlags::MNT_DETACH);
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Remove run folders whose owner is provably dead (see `owner`). A live
/// sandbench, in whatever pid namespace, holds its owner lock.
pub fn reap(base: &Path) -> usize {
    let Ok(rd) = fs::read_dir(base) else { return 0 };
    let mut sweep = crate::owner::Sweep::new();
    let mut n = 0;
    for e in rd.flatten() {
        let root = e.path();
        if !sweep.name_dead(&e.file_name().to_string_lossy()) {
            continue;
        }
        let _ = umount2(&root.join(SCRATCH), MntFlags::MNT_DETACH);
        if fs::remove_dir_all(&root).is_ok() {
            n += 1;
        }
    }
    n
}

/// Between fork and exec: join the outer cgroup (as root, before giving up
/// root), start a new session, become the peer user, die with sandbench.
pub fn enter_outer_net(
    cmd: &mut tokio::process::Command,
    procs: Vec<PathBuf>,
    drop_to: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    let procs: Vec<CString> = procs.iter().map(|p| CString::new(p.as_os_str().as_bytes())).collect::<Result<_, _>>()?;
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls (open, write, close, setsid, setgroups,
    // setresgid, setresuid, prctl) on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for p in &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let r = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if r != 1 {
                    return Err(err);
                }
            }
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some((uid, gid)) = drop_to {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setresgid(gid, gid, gid) != 0
                    || libc::setresuid(uid, uid, uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            // After the uid change, which clears it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_planted_as_a_link_is_refused_and_its_target_untouched() {
        use std::os::unix::fs::MetadataExt;
        // What /tmp/sbp-UID is when another local user made it first.
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::create_dir(&victim).unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o700)).unwrap();
        let base = t.path().join("sbp-1000");
        std::os::unix::fs::symlink(&victim, &base).unwrap();
        let who = RunAs { user: "me".into(), uid: 1, gid: 1, switch: false };
        let spec = RunSpec::new(crate::spec::Language::Python, "print(1)");
        let e = RunDir::create(&base, "bwrap", &spec, &who, 1 << 20).err().expect("refused").to_string();
        assert!(e.contains("link"), "{e}");
        assert_eq!(fs::metadata(&victim).unwrap().mode() & 0o7777, 0o700, "chmodded through the link");
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
    }

    #[test]
    fn a_tools_socket_in_the_scratch_fits_in_sun_path() {
        // The longest owner token (12-hex host, 12-hex boot, a 7-digit pid,
        // 8-hex nonce), a long run sequence and peer name, and srt's bridge
        // socket name (`claude-socks-<16 hex>.sock`).
        let token = format!("{}-{}-{}-{}", "a".repeat(12), "b".repeat(12), 4_194_304, "c".repeat(8));
        let root = PathBuf::from("/run/sbp").join(format!("{token}-999999-firejail"));
        let socket = root.join(SCRATCH).join(format!("claude-socks-{}.sock", "d".repeat(16)));
        let n = socket.as_os_str().len();
        assert!(n < 108, "{n} bytes: {}", socket.display());
    }
}
