//! The host side of one peer run: its folder (program, scratch, the tool's
//! home, settings files), the scratch tmpfs, and the fork/exec step that puts the wrapper into the outer cgroup
//! as the run's own uid. Folders live under `/run/sbp` (root) or the
//! user's runtime dir: not under /tmp, which some tools replace (firejail's
//! --private-tmp) or refuse (Codex will not put its helpers there).
//!
//! Who can reach what, as root: the folder of run folders is root's, 0711
//! (enter, never list); a run's folder is root's with the run's own group,
//! 0750, so its uid alone (each run has its own, see `RunAs`) can enter it
//! and cannot rename what root acts on later; its scratch and home are the
//! run uid's, 0700; its program and settings files root's, readable by the
//! run's group. Every step is taken from a directory descriptor: a folder is
//! made with `mkdirat`, opened `O_NOFOLLOW | O_DIRECTORY`, and owner and mode
//! are set on the descriptor; a file is made `O_CREAT | O_EXCL | O_NOFOLLOW`.
//! A name that already exists where a fresh one must be made (a link or a
//! folder another user planted) is refused, never followed, and only what
//! is provably this sandbench's is ever removed.
#![allow(unsafe_code)] // pre_exec hook of the wrapper (async-signal-safe calls only)

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, bail, Context};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{fchown, Gid, Uid};

use super::identity::RunAs;
use crate::spec::RunSpec;
use crate::tier::process::uids::UidLease;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The scratch folder's name in a run folder. Paths here are kept short on
/// purpose: the scratch is the program's TMPDIR, and tools put unix sockets
/// there (srt's proxy bridges), whose paths may not pass 107 bytes. With the
/// owner token in the run folder's name (up to 42 bytes), `/run/sbp/`
/// and `w` leave room for srt's 35-byte socket names.
const SCRATCH: &str = "w";
const PROGRAM: &str = "program";
const HOME: &str = "home";
/// The passwd and group files the wrapper sees (root only, see `etc_files`).
const PASSWD: &str = "etc-passwd";
const GROUP: &str = "etc-group";
/// Largest host passwd or group file copied into a run's.
const MAX_ETC: u64 = 4 << 20;

/// Where run folders go.
pub(crate) fn base(env: &crate::config::HostEnv) -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/sbp");
    }
    match &env.runtime_dir {
        Some(d) => d.join("sbp"),
        None => std::env::temp_dir().join(format!("sbp-{}", nix::unistd::getuid())),
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Open the folder `name` in `parent` as a real folder: a link there fails
/// (`O_NOFOLLOW`), as does anything that is not a folder.
fn open_dir<Fd: AsFd>(parent: Fd, name: &Path) -> nix::Result<OwnedFd> {
    openat(parent, name, dir_flags(), Mode::empty())
}

/// Open, making it if needed, the folder of run folders: a real folder that
/// sandbench's own uid owns, then made 0711 (root: the run uids enter their
/// own folders, nobody lists them) or 0700. A link at its name, or a folder
/// another user made there (the `/tmp/sbp-UID` fallback is in a
/// world-writable folder), is refused: never followed, never chmodded.
pub(crate) fn open_base(base: &Path) -> anyhow::Result<OwnedFd> {
    let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
        bail!("{} cannot hold run folders", base.display());
    };
    fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let pfd = nix::fcntl::open(parent, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .with_context(|| format!("cannot open {}", parent.display()))?;
    match mkdirat(&pfd, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(anyhow!("cannot create {}: {e}", base.display())),
    }
    let fd = open_dir(&pfd, Path::new(name)).map_err(|e| {
        anyhow!(
            "{} is not a plain folder ({e}): refused, not followed (planted by another user?); remove it and try again",
            base.display()
        )
    })?;
    let st = fstat(&fd)?;
    let me = nix::unistd::geteuid();
    if st.st_uid != me.as_raw() {
        bail!(
            "{} belongs to uid {}, not to sandbench (uid {me}): refused (planted by another user?); remove it and try again",
            base.display(),
            st.st_uid
        );
    }
    fchmod(&fd, Mode::from_bits_truncate(if me.is_root() { 0o711 } else { 0o700 }))
        .with_context(|| format!("chmod {}", base.display()))?;
    Ok(fd)
}

/// Make `name` in `parent` fresh (an existing one is refused) and open it.
fn fresh_dir<Fd: AsFd>(parent: Fd, name: &str, shown: &Path) -> anyhow::Result<OwnedFd> {
    mkdirat(&parent, name, Mode::from_bits_truncate(0o700)).map_err(|e| match e {
        Errno::EEXIST => anyhow!("{} already exists: refused (a run's folders are made fresh)", shown.display()),
        e => anyhow!("cannot create {}: {e}", shown.display()),
    })?;
    open_dir(&parent, Path::new(name)).with_context(|| format!("cannot open {}", shown.display()))
}

/// Make file `name` in `parent` fresh (`O_EXCL`, never through a link),
/// write `bytes`, and give it `mode` and the group `gid`.
fn fresh_file<Fd: AsFd>(parent: Fd, name: &str, bytes: &[u8], gid: Option<u32>, mode: u32) -> anyhow::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        bail!("'{}' is not a file name", crate::sanitize::inert_line(name, 80));
    }
    let fd = openat(
        &parent,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| anyhow!("cannot create {name}: {e}"))?;
    if let Some(g) = gid {
        fchown(&fd, None, Some(Gid::from_raw(g))).with_context(|| format!("chown {name}"))?;
    }
    fchmod(&fd, Mode::from_bits_truncate(mode)).with_context(|| format!("chmod {name}"))?;
    fs::File::from(fd).write_all(bytes).with_context(|| format!("cannot write {name}"))?;
    Ok(())
}

/// One run's folder. Dropping it unmounts the scratch, removes everything,
/// and then gives back the run's uid.
pub struct RunDir {
    pub root: PathBuf,
    pub program_dir: PathBuf,
    pub scratch: PathBuf,
    pub home: PathBuf,
    /// The run folder, opened when it was made.
    dir: OwnedFd,
    /// The run's group, when the run has a uid of its own.
    gid: Option<u32>,
    tmpfs: bool,
    /// Released last, once nothing of the run is left.
    _uid: Option<UidLease>,
}

impl RunDir {
    /// Make a run's folders under `base`. `lease`: the run's own uid (root).
    pub fn create(
        base: &Path,
        peer: &str,
        spec: &RunSpec,
        who: &RunAs,
        lease: Option<UidLease>,
        disk_bytes: u64,
    ) -> anyhow::Result<RunDir> {
        // Named by the owner token: its held lock proves the run alive (see `owner`).
        let token = crate::owner::token()?;
        let name = format!("{token}-{}-{peer}", SEQ.fetch_add(1, Ordering::Relaxed));
        RunDir::create_named(base, &name, spec, who, lease, disk_bytes)
    }

    /// [`RunDir::create`] with the run folder's name given.
    pub fn create_named(
        base: &Path,
        name: &str,
        spec: &RunSpec,
        who: &RunAs,
        lease: Option<UidLease>,
        disk_bytes: u64,
    ) -> anyhow::Result<RunDir> {
        let base_fd = open_base(base)?;
        let root = base.join(name);
        let dir = fresh_dir(&base_fd, name, &root)?;
        let gid = who.switch.then_some(who.gid);
        // From here on, dropping it removes what was made.
        let mut rd = RunDir {
            program_dir: root.join(PROGRAM),
            scratch: root.join(SCRATCH),
            home: root.join(HOME),
            root,
            dir,
            gid,
            tmpfs: false,
            _uid: lease,
        };
        if let Some(g) = gid {
            // Root's, the run's group: its uid enters, and renames nothing.
            fchown(&rd.dir, None, Some(Gid::from_raw(g))).context("chown the run folder")?;
            fchmod(&rd.dir, Mode::from_bits_truncate(0o750)).context("chmod the run folder")?;
        }
        let program = fresh_dir(&rd.dir, PROGRAM, &rd.program_dir)?;
        let readable = if gid.is_some() { 0o640 } else { 0o600 };
        if let Some(g) = gid {
            fchown(&program, None, Some(Gid::from_raw(g))).context("chown the program folder")?;
            fchmod(&program, Mode::from_bits_truncate(0o750)).context("chmod the program folder")?;
        }
        fresh_file(&program, spec.language.program_file(&spec.code), spec.code.as_bytes(), gid, readable)?;
        let scratch = fresh_dir(&rd.dir, SCRATCH, &rd.scratch)?;
        let home = fresh_dir(&rd.dir, HOME, &rd.home)?;
        if who.switch {
            // As root: the scratch is a tmpfs of the run's disk size, so a
            // program that fills it never fills the host's disk. Mounted on
            // the folder just made, through its descriptor (no path lookup).
            let inodes = (disk_bytes / 4096).clamp(1024, 65536);
            let opts = format!("size={disk_bytes},nr_inodes={inodes},mode=0700,uid={},gid={}", who.uid, who.gid);
            let on = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&scratch)));
            mount(
                Some("sandbench-peer"),
                &on,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(opts.as_str()),
            )
            .with_context(|| format!("cannot mount the scratch tmpfs on {}", rd.scratch.display()))?;
            rd.tmpfs = true;
            drop(scratch);
            fchown(&home, Some(Uid::from_raw(who.uid)), Some(Gid::from_raw(who.gid))).context("chown home")?;
            let (passwd, group) = etc_files(who, &rd.home)?;
            fresh_file(&rd.dir, PASSWD, passwd.as_bytes(), None, 0o644)?;
            fresh_file(&rd.dir, GROUP, group.as_bytes(), None, 0o644)?;
        }
        Ok(rd)
    }

    /// A settings file the tool reads (not writable by it).
    pub fn write_file(&self, name: &str, text: &str) -> anyhow::Result<()> {
        let mode = if self.gid.is_some() { 0o640 } else { 0o600 };
        fresh_file(&self.dir, name, text.as_bytes(), self.gid, mode)
            .with_context(|| format!("cannot write {}", self.root.join(name).display()))
    }

    /// The passwd and group files the wrapper is shown (root only): the
    /// host's, with the run's uid added.
    pub fn etc_files(&self) -> Option<(PathBuf, PathBuf)> {
        self.gid.map(|_| (self.root.join(PASSWD), self.root.join(GROUP)))
    }

    /// (a file that reached `limit` bytes, whether the scratch tmpfs is
    /// full), read from the host through descriptors: a folder the program
    /// swaps for a link is skipped, never followed. Bounded: a flood of
    /// files is looked at in part, and the bounds the walk hit are returned
    /// (the run is then incomplete unless something is found).
    pub(crate) fn scan(&self, limit: u64) -> (Option<String>, bool, Vec<crate::judge::BoundHit>) {
        use crate::judge::{Bound, BoundHit};
        let unreadable = || vec![BoundHit::new(Bound::ScratchWalkUnreadable, None, "the scan of the scratch folder")];
        let Ok(top) = open_dir(&self.dir, Path::new(SCRATCH)) else { return (None, false, unreadable()) };
        let Ok(top) = crate::fsafe::Dir::from_fd(top) else { return (None, false, unreadable()) };
        let mut capped = None;
        let end = top.walk(PEER_SCAN, |rel, e| {
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
            && nix::sys::statvfs::fstatvfs(&top)
                .map(|s| s.blocks_available() <= s.blocks() / 32 || s.files_available() <= s.files() / 64)
                .unwrap_or(false);
        let bounds = crate::judge::BoundHit::of_walk(&end, PEER_SCAN, "the scan of the scratch folder");
        (capped, full, bounds)
    }
}

/// How much of a peer's scratch folder a scan looks at.
const PEER_SCAN: crate::fsafe::Walk = crate::fsafe::Walk { max_entries: 100_000, max_depth: 64 };

/// The host's passwd and group with the run's account added: some tools
/// (firejail) look their user up and refuse a uid without an entry. The
/// wrapper sees these in place of /etc/passwd and /etc/group (in a mount
/// namespace of its own), so no host account is ever made.
fn etc_files(who: &RunAs, home: &Path) -> anyhow::Result<(String, String)> {
    let read = |p: &str| -> anyhow::Result<String> {
        let f = fs::File::open(p).with_context(|| format!("cannot read {p}"))?;
        let mut s = String::new();
        io::Read::read_to_string(&mut io::Read::take(f, MAX_ETC), &mut s)
            .with_context(|| format!("cannot read {p}"))?;
        if !s.is_empty() && !s.ends_with('\n') {
            s.push('\n');
        }
        Ok(s)
    };
    let home = home.display().to_string().replace([':', '\n'], "_");
    let passwd = format!(
        "{}{}:x:{}:{}:sandbench peer run:{home}:/usr/sbin/nologin\n",
        read("/etc/passwd")?,
        who.user,
        who.uid,
        who.gid
    );
    let group = format!("{}{}:x:{}:\n", read("/etc/group")?, who.user, who.gid);
    Ok((passwd, group))
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.tmpfs {
            let _ = umount2(&self.scratch, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW);
        }
        // std's remove_dir_all does not follow links (openat/unlinkat).
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Remove run folders whose owner is provably dead (see `owner`). A live
/// sandbench, in whatever pid namespace, holds its owner lock. Only real
/// folders sandbench's uid owns, in a folder of run folders it owns, are
/// looked at.
pub(crate) fn reap(base: &Path) -> usize {
    let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else { return 0 };
    let Ok(pfd) = nix::fcntl::open(parent, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
    else {
        return 0;
    };
    let me = nix::unistd::geteuid().as_raw();
    let Ok(bfd) = open_dir(&pfd, Path::new(name)) else { return 0 };
    if fstat(&bfd).map(|st| st.st_uid != me).unwrap_or(true) {
        return 0;
    }
    let Ok(mut d) = bfd.try_clone().map_err(|_| Errno::EBADF).and_then(nix::dir::Dir::from_fd) else { return 0 };
    let names: Vec<String> =
        d.iter().flatten().filter_map(|e| e.file_name().to_str().ok().map(str::to_string)).collect();
    let mut sweep = crate::owner::Sweep::new();
    let mut n = 0;
    for name in names {
        if name == "." || name == ".." {
            continue;
        }
        let ours = fstatat(&bfd, name.as_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR && st.st_uid == me)
            .unwrap_or(false);
        if !ours || !sweep.name_dead(&name) {
            continue;
        }
        let root = base.join(&name);
        let _ = umount2(&root.join(SCRATCH), MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW);
        if fs::remove_dir_all(&root).is_ok() {
            n += 1;
        }
    }
    n
}

/// Between fork and exec: join the outer cgroup (as root, before giving up
/// root), start a new session, show the wrapper `etc` (passwd, group) in
/// place of the host's in a mount namespace of its own, become the run's
/// uid, die with sandbench.
pub(crate) fn enter_outer_net(
    cmd: &mut tokio::process::Command,
    procs: Vec<PathBuf>,
    drop_to: Option<(u32, u32)>,
    etc: Option<(PathBuf, PathBuf)>,
) -> anyhow::Result<()> {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes());
    let procs: Vec<CString> = procs.iter().map(|p| c(p)).collect::<Result<_, _>>()?;
    let etc: Option<[(CString, CString); 2]> = match etc {
        Some((passwd, group)) => {
            Some([(c(&passwd)?, c(Path::new("/etc/passwd"))?), (c(&group)?, c(Path::new("/etc/group"))?)])
        }
        None => None,
    };
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe calls (rt_sigaction, sigprocmask, open, write, close,
    // unshare, mount, setsid, setgroups, setresgid, setresuid, prctl) on
    // memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // The wrapper, and the program through it, start with every
            // signal at its default, whatever sandbench inherited (a
            // background shell's ignored SIGINT, nohup's SIGHUP): as on
            // sandbench's own tiers.
            crate::tier::process::sandbox::default_signals().map_err(|e| io::Error::from_raw_os_error(e as i32))?;
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
            if let Some(files) = &etc {
                // A mount namespace whose mounts reach the host's no more
                // (slave): the two binds are the wrapper's alone.
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_SLAVE,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                for (src, dst) in files {
                    if libc::mount(src.as_ptr(), dst.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) != 0 {
                        return Err(io::Error::last_os_error());
                    }
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
