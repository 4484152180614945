//! File operations on trees someone else can write — a program's scratch
//! space, a shared temporary folder — done by code with more privilege
//! than that someone (issue 21, breach 1; the runc CVEs of 2025 were this
//! mistake). Nothing here resolves a path the other party could swap:
//!
//! - A [`Dir`] is a directory descriptor, taken before the other party
//!   could act (a scratch mount just made) or checked after opening it
//!   ([`private_dir`]: ours, not writable by others, not a link).
//! - Every open below it is `openat2` with `RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, plus
//!   `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY`: no link is followed,
//!   no mount crossed, no FIFO blocks the opener, no terminal is adopted.
//! - A file is written by replacing it: the name is unlinked and made anew
//!   with `O_CREAT | O_EXCL`, so a hard link, a FIFO, a socket or a device
//!   node planted at the name is removed, never written through; a
//!   directory in the way is removed (fd-relative, bounded) or moved aside.
//!   Owner and mode are set on the descriptor (`fchown`, `fchmod`).
//! - Walks are fd-relative: `fstatat(AT_SYMLINK_NOFOLLOW)` for each entry,
//!   `openat2(O_DIRECTORY)` to descend, bounded in entries and depth.
//!
//! Names passed to the mutating calls are single path components; deeper
//! work goes through [`Dir::subdir`]. Errors are `io::Error`s whose message
//! names the operation and the entry.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use nix::unistd::{Gid, Uid, UnlinkatFlags};

/// How every open below a [`Dir`] resolves its path.
fn resolve() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH
        | ResolveFlag::RESOLVE_NO_SYMLINKS
        | ResolveFlag::RESOLVE_NO_MAGICLINKS
        | ResolveFlag::RESOLVE_NO_XDEV
}

/// Flags every open below a [`Dir`] carries.
fn always() -> OFlag {
    OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY
}

/// An error with what was being done, keeping the kernel's errno.
#[derive(Debug)]
struct Failed {
    errno: Errno,
    msg: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Failed {}

fn err(e: Errno, what: &str, name: &OsStr) -> io::Error {
    let msg = format!("{what} {}: {}", Path::new(name).display(), io::Error::from(e));
    io::Error::new(io::Error::from(e).kind(), Failed { errno: e, msg })
}

/// The errno behind an error of this module (or any OS error).
pub(crate) fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| e.get_ref()?.downcast_ref::<Failed>().map(|f| f.errno as i32))
}

/// A single path component: not empty, not `.` or `..`, no `/`, no NUL.
pub(crate) fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not a single file name", name.to_string_lossy()),
        ));
    }
    Ok(())
}

/// What a walk or a stat saw of an entry (never through a link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub mode: u32,
    pub uid: u32,
    pub size: u64,
    /// Status change time (seconds, nanoseconds): no program can set it back.
    pub ctime: (i64, i64),
}

impl Entry {
    fn of(st: &FileStat) -> Entry {
        Entry {
            mode: st.st_mode,
            uid: st.st_uid,
            size: st.st_size.max(0) as u64,
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub(crate) fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
}

/// Bounds of a walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    /// Entries looked at, in all, before the walk gives up.
    pub max_entries: usize,
    /// Directory levels below the walk's root it descends.
    pub max_depth: usize,
}

/// What [`Dir::remove_tree`] looks at, at most, before it moves the rest aside.
const REMOVE_BUDGET: usize = 100_000;
const REMOVE_DEPTH: usize = 64;

/// A directory, by descriptor.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// A directory the caller trusts the path of (it made it, or nobody
    /// else can replace it: a mount point on a read-only root, a folder of
    /// its own); a link at its last component is refused.
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | always(), Mode::empty())
            .map(|fd| Dir { fd })
            .map_err(|e| err(e, "open", path.as_os_str()))
    }

    /// A descriptor that must be a directory.
    pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<Dir> {
        let st = fstat(&fd).map_err(io::Error::from)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a directory"));
        }
        Ok(Dir { fd })
    }

    pub(crate) fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir { fd: self.fd.try_clone()? })
    }

    /// Open `path` (relative, any depth) below this directory, never
    /// through a link or across a mount; `flags` gain [`always`]'s.
    pub(crate) fn open_beneath(&self, path: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let how = OpenHow::new().flags(flags | always()).mode(mode).resolve(resolve());
        openat2(&self.fd, path, how).map_err(|e| err(e, "open", path.as_os_str()))
    }

    /// A regular file below this directory, for reading (a FIFO, device or
    /// socket there is refused, not opened for use).
    pub(crate) fn open_read(&self, path: &Path) -> io::Result<File> {
        let fd = self.open_beneath(path, OFlag::O_RDONLY, Mode::empty())?;
        let st = fstat(&fd).map_err(io::Error::from)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(File::from(fd))
    }

    /// A directory below this one.
    pub(crate) fn subdir(&self, path: &Path) -> io::Result<Dir> {
        self.open_beneath(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).map(|fd| Dir { fd })
    }

    /// This directory's own status.
    pub(crate) fn stat_self(&self) -> io::Result<Entry> {
        fstat(&self.fd).map(|st| Entry::of(&st)).map_err(io::Error::from)
    }

    /// Its mode, on the descriptor.
    pub(crate) fn chmod(&self, mode: u32) -> io::Result<()> {
        nix::sys::stat::fchmod(&self.fd, Mode::from_bits_truncate(mode)).map_err(io::Error::from)
    }

    /// Remove whatever is at `name` (a file, link, FIFO, socket, device
    /// node, or a directory tree); nothing there is fine.
    pub(crate) fn remove(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        match nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::EISDIR) => self.remove_tree(name),
            Err(e) => Err(err(e, "remove", name)),
        }
    }

    /// Remove the directory `name` and everything in it, fd-relative. A
    /// directory the caller may not read (its owner locked it) is made
    /// readable on its own inode first; a tree too big or too deep for the
    /// budget is moved aside under a hidden name instead, so that `name` is
    /// free either way.
    pub(crate) fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        let mut budget = REMOVE_BUDGET;
        if self.empty_out(name, REMOVE_DEPTH, &mut budget).is_ok() {
            match nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => return Ok(()),
                Err(_) => {}
            }
        }
        self.move_aside(name)
    }

    fn empty_out(&self, name: &OsStr, depth: usize, budget: &mut usize) -> io::Result<()> {
        let sub = match self.subdir(Path::new(name)) {
            Ok(d) => d,
            Err(e) if errno(&e) == Some(libc::EACCES) => {
                // Ours but locked (mode 000): open it by the inode we stat'ed.
                self.unlock_dir(name)?;
                self.subdir(Path::new(name))?
            }
            Err(e) => return Err(e),
        };
        for n in sub.names()? {
            *budget = budget.checked_sub(1).ok_or_else(|| io::Error::other("too many entries to remove"))?;
            match nix::unistd::unlinkat(&sub.fd, n.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(Errno::EISDIR) if depth > 0 => {
                    sub.empty_out(&n, depth - 1, budget)?;
                    nix::unistd::unlinkat(&sub.fd, n.as_os_str(), UnlinkatFlags::RemoveDir)
                        .map_err(|e| err(e, "remove", &n))?;
                }
                Err(e) => return Err(err(e, "remove", &n)),
            }
        }
        Ok(())
    }

    /// Give the owner (the caller) read, write and search on the directory
    /// `name`, through an `O_PATH` descriptor of it (no link followed).
    fn unlock_dir(&self, name: &OsStr) -> io::Result<()> {
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
            .resolve(resolve());
        let fd = openat2(&self.fd, name, how).map_err(|e| err(e, "open", name))?;
        // fchmod refuses O_PATH descriptors; the descriptor's own magic link
        // names exactly the inode just opened.
        let me = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            &me,
            Mode::from_bits_truncate(0o700),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(|e| err(e, "unlock", name))
    }

    fn move_aside(&self, name: &OsStr) -> io::Result<()> {
        for n in 0..100u32 {
            let mut to = OsString::from(".sandbench-removed-");
            to.push(format!("{}-{n}", std::process::id()));
            match nix::fcntl::renameat2(
                &self.fd,
                name,
                &self.fd,
                to.as_os_str(),
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) | Err(Errno::ENOENT) => return Ok(()),
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(err(e, "move aside", name)),
            }
        }
        Err(io::Error::other(format!("cannot free the name {}", Path::new(name).display())))
    }

    /// The names in this directory (`.` and `..` left out).
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        self.names_upto(usize::MAX).map(|(names, _)| names)
    }

    /// At most `max` names of this directory, and whether it has more: a
    /// program can put millions of names (links to one file cost no inode)
    /// in one directory, and a bounded reader holds no more than its bound.
    fn names_upto(&self, max: usize) -> io::Result<(Vec<OsString>, bool)> {
        // A fresh open of "." (a dup would share, and move, this one's offset).
        let fd = self.open_beneath(Path::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())?;
        let mut d = nix::dir::Dir::from_fd(fd).map_err(io::Error::from)?;
        let mut out = vec![];
        for e in d.iter() {
            let e = e.map_err(io::Error::from)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                if out.len() == max {
                    return Ok((out, true));
                }
                out.push(OsStr::from_bytes(n).to_os_string());
            }
        }
        Ok((out, false))
    }

    /// A new, empty regular file at `name` (whatever was there is removed
    /// first), open for writing. `mode` is the creation mode (the umask
    /// applies; [`Dir::write_file`] sets the exact mode on the descriptor).
    pub(crate) fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        for _ in 0..8 {
            self.remove(name)?;
            match self.open_beneath(
                Path::new(name),
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
                Mode::from_bits_truncate(mode),
            ) {
                Ok(fd) => return Ok(File::from(fd)),
                // Someone made the name again in between: remove it again.
                Err(e) if errno(&e) == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other(format!("{} keeps being re-created", Path::new(name).display())))
    }

    /// Replace `name` with a new file holding `bytes`, of `mode` and, when
    /// given, of `owner` (uid, gid) — both set on the descriptor.
    pub(crate) fn write_file(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let mut f = self.create_new(name, 0o600)?;
        f.write_all(bytes)
            .map_err(|e| io::Error::new(e.kind(), format!("write {}: {e}", Path::new(name).display())))?;
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(&f, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(|e| err(e, "chown", name))?;
        }
        nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(mode)).map_err(|e| err(e, "chmod", name))
    }

    /// Rename `from` to `to`, both in this directory; a directory at `to`
    /// is removed first (a file there is replaced, as rename does).
    pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        for _ in 0..2 {
            match nix::fcntl::renameat(&self.fd, from, &self.fd, to) {
                Ok(()) => return Ok(()),
                Err(Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST) => self.remove(to)?,
                Err(e) => return Err(err(e, "rename", from)),
            }
        }
        Err(io::Error::other(format!("cannot rename {} to {}", Path::new(from).display(), Path::new(to).display())))
    }

    /// Visit every entry below this directory (depth first, bounded),
    /// with its path relative to this directory. `visit` returns false to
    /// stop. The result says whether the walk saw everything, and if not,
    /// which bound it hit: a judge that walks must say so (its verdict is
    /// then incomplete, never `ok`). At most `max_depth + 1` directories
    /// are open at once, however wide the tree: a directory is opened when
    /// its turn comes, by name from its parent.
    pub(crate) fn walk(&self, bounds: Walk, mut visit: impl FnMut(&Path, &Entry) -> bool) -> WalkEnd {
        let mut end = WalkEnd::default();
        let Ok(top) = self.try_clone() else {
            end.unreadable += 1;
            return end;
        };
        // Each level: its directory, its path, and the subdirectories still
        // to visit (names only).
        struct Level {
            dir: Dir,
            rel: PathBuf,
            subdirs: Vec<OsString>,
        }
        let mut budget = bounds.max_entries;
        let mut stack: Vec<Level> = vec![];
        let mut next = Some((top, PathBuf::new()));
        loop {
            if let Some((dir, rel)) = next.take() {
                let depth = stack.len();
                let mut subdirs = vec![];
                match dir.names_upto(budget) {
                    Err(_) => end.unreadable += 1,
                    Ok((names, more)) => {
                        // More names here than the budget has left: the walk
                        // ends at the bound once it has visited these.
                        end.entries |= more;
                        for n in names {
                            if budget == 0 {
                                end.entries = true;
                                return end;
                            }
                            budget -= 1;
                            let Ok(st) = fstatat(&dir.fd, n.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                                // Gone since the listing (the program deletes
                                // as the walk goes): nothing left to judge.
                                continue;
                            };
                            let e = Entry::of(&st);
                            let path = rel.join(&n);
                            if !visit(&path, &e) {
                                end.stopped = true;
                                return end;
                            }
                            if e.is_dir() {
                                if depth < bounds.max_depth {
                                    subdirs.push(n);
                                } else {
                                    end.depth = true;
                                }
                            }
                        }
                    }
                }
                subdirs.reverse();
                stack.push(Level { dir, rel, subdirs });
            }
            let Some(top) = stack.last_mut() else { return end };
            match top.subdirs.pop() {
                None => {
                    stack.pop();
                }
                Some(n) => match top.dir.subdir(Path::new(&n)) {
                    Ok(sub) => next = Some((sub, top.rel.join(&n))),
                    Err(e) => match errno(&e) {
                        // Removed, or swapped for a link or a file since the
                        // listing: refused, not followed; nothing of it left
                        // below this directory to judge.
                        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP) => {}
                        _ => end.unreadable += 1,
                    },
                },
            }
        }
    }
}

/// How a [`Dir::walk`] ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WalkEnd {
    /// `visit` asked to stop.
    pub stopped: bool,
    /// [`Walk::max_entries`] was reached with entries left unvisited.
    pub entries: bool,
    /// A directory at [`Walk::max_depth`] had subdirectories, not entered.
    pub depth: bool,
    /// Directories that could not be opened or listed (permissions, no
    /// descriptors left): what they hold went unseen.
    pub unreadable: usize,
}

impl WalkEnd {
    /// Everything was visited (or `visit` found what it looked for).
    pub(crate) fn whole(&self) -> bool {
        self.stopped || (!self.entries && !self.depth && self.unreadable == 0)
    }
}

/// A folder of this user's that nobody else may write, made if missing:
/// created `mode`, then opened without following a link and checked on
/// the descriptor — owned by the effective uid, or refused with a message
/// that says what to do; a mode of ours that differs is set to `mode`.
pub(crate) fn private_dir(path: &Path, mode: u32) -> io::Result<Dir> {
    match nix::unistd::mkdir(path, Mode::from_bits_truncate(mode)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(err(e, "create", path.as_os_str())),
    }
    let d = match Dir::open(path) {
        Ok(d) => d,
        Err(e) if matches!(errno(&e), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory but a link or a file someone else put there: remove it, or point sandbench elsewhere (XDG_RUNTIME_DIR)",
                    path.display()
                ),
            ))
        }
        Err(e) => return Err(e),
    };
    let st = d.stat_self()?;
    let me = nix::unistd::geteuid().as_raw();
    if st.uid != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to this user (uid {me}): someone else made it; remove it, or point sandbench elsewhere (XDG_RUNTIME_DIR)",
                path.display(),
                st.uid
            ),
        ));
    }
    if st.mode & 0o7777 != mode {
        d.chmod(mode)?;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn tmp() -> (tempfile::TempDir, Dir) {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        (t, d)
    }

    #[test]
    fn names_must_be_single_components() {
        for bad in ["", ".", "..", "a/b", "/etc", "a\0b"] {
            assert!(check_name(OsStr::new(bad)).is_err(), "{bad:?}");
        }
        assert!(check_name(OsStr::new(".main.py.sandbench")).is_ok());
    }

    #[test]
    fn errors_say_what_and_keep_the_errno() {
        let (_t, d) = tmp();
        let e = d.open_read(Path::new("missing")).unwrap_err();
        assert_eq!(errno(&e), Some(libc::ENOENT));
        assert!(e.to_string().starts_with("open missing: "), "{e}");
    }

    #[test]
    fn a_write_replaces_links_fifos_and_directories_and_never_follows_them() {
        let (t, d) = tmp();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "VICTIM").unwrap();
        // A symlink out, a hard link to a file of the dir, a FIFO, a locked tree.
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        std::fs::write(t.path().join("keep"), "KEEP").unwrap();
        std::fs::hard_link(t.path().join("keep"), t.path().join("hard")).unwrap();
        nix::unistd::mkfifo(&t.path().join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir_all(t.path().join("tree/a/b")).unwrap();
        std::fs::write(t.path().join("tree/a/b/f"), "x").unwrap();
        std::fs::set_permissions(t.path().join("tree/a"), std::fs::Permissions::from_mode(0o0)).unwrap();
        for name in ["link", "hard", "fifo", "tree"] {
            d.write_file(OsStr::new(name), b"new", 0o644, None).unwrap();
            let m = std::fs::symlink_metadata(t.path().join(name)).unwrap();
            assert!(m.is_file() && m.mode() & 0o7777 == 0o644 && m.nlink() == 1, "{name}: {m:?}");
            assert_eq!(std::fs::read(t.path().join(name)).unwrap(), b"new");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "VICTIM");
        assert_eq!(std::fs::read_to_string(t.path().join("keep")).unwrap(), "KEEP");
    }

    #[test]
    fn opens_below_refuse_links_and_never_block_on_a_fifo() {
        let (t, d) = tmp();
        std::os::unix::fs::symlink("/etc", t.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", t.path().join("host")).unwrap();
        nix::unistd::mkfifo(&t.path().join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        assert!(d.subdir(Path::new("etc")).is_err());
        assert!(d.open_read(Path::new("host")).is_err());
        assert!(d.open_read(Path::new("etc/hostname")).is_err());
        assert!(d.open_read(Path::new("../x")).is_err());
        assert!(d.open_read(Path::new("fifo")).is_err(), "a FIFO is not a file to read");
        assert!(
            d.open_beneath(Path::new("fifo"), OFlag::O_WRONLY, Mode::empty()).is_err(),
            "no reader: ENXIO, not a hang"
        );
        assert!(d.rename(OsStr::new("host"), OsStr::new("../y")).is_err());
    }

    #[test]
    fn walks_do_not_follow_links_and_keep_to_their_bounds() {
        let (t, d) = tmp();
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::write(t.path().join("a/b/c/deep"), "x").unwrap();
        std::os::unix::fs::symlink("/usr", t.path().join("a/usr")).unwrap();
        let mut seen = vec![];
        assert!(d
            .walk(Walk { max_entries: 100, max_depth: 16 }, |p, e| {
                seen.push((p.to_path_buf(), e.is_dir()));
                true
            })
            .whole());
        seen.sort();
        let names: Vec<_> = seen.iter().map(|(p, _)| p.to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["a", "a/b", "a/b/c", "a/b/c/deep", "a/usr"]);
        let mut n = 0;
        let end = d.walk(Walk { max_entries: 2, max_depth: 16 }, |_, _| {
            n += 1;
            true
        });
        assert_eq!(n, 2);
        assert!(end.entries && !end.whole(), "{end:?}");
    }

    #[test]
    fn a_walk_says_which_bound_it_hit() {
        // rows: (tree, bounds) → what the end says
        let (t, d) = tmp();
        std::fs::create_dir_all(t.path().join("a/b/c/d")).unwrap();
        for i in 0..50 {
            std::fs::write(t.path().join(format!("a/f{i}")), "").unwrap();
        }
        let all = |w: Walk| d.walk(w, |_, _| true);
        assert!(all(Walk { max_entries: 1000, max_depth: 16 }).whole());
        let e = all(Walk { max_entries: 10, max_depth: 16 });
        assert!(e.entries && !e.whole(), "{e:?}");
        let e = all(Walk { max_entries: 1000, max_depth: 2 });
        assert!(e.depth && !e.entries && !e.whole(), "{e:?}");
        // A visit that found what it looked for is a whole walk.
        let e = d.walk(Walk { max_entries: 10, max_depth: 0 }, |_, _| false);
        assert!(e.stopped && e.whole(), "{e:?}");
    }

    #[test]
    fn a_wide_tree_is_walked_with_one_open_directory_per_level() {
        let (t, d) = tmp();
        for i in 0..3000 {
            std::fs::create_dir(t.path().join(format!("s{i}"))).unwrap();
        }
        std::fs::write(t.path().join("s2999/deep"), "x").unwrap();
        let open_fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = open_fds();
        let mut most = 0;
        let mut seen = 0;
        let end = d.walk(Walk { max_entries: 10_000, max_depth: 4 }, |p, _| {
            seen += usize::from(p.ends_with("deep"));
            most = most.max(open_fds());
            true
        });
        assert!(end.whole(), "{end:?}");
        assert_eq!(seen, 1);
        // (one per level; other tests of this process open a few meanwhile)
        assert!(most < before + 1000, "{most} descriptors open while walking, {before} before");
    }

    #[test]
    fn a_private_dir_is_ours_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("mine");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&p, 0o700).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o700);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let e = private_dir(&link, 0o700).unwrap_err().to_string();
        assert!(e.contains("link"), "{e}");
        if nix::unistd::geteuid().is_root() {
            let theirs = t.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = private_dir(&theirs, 0o700).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 65534"), "{e}");
        }
    }
}
