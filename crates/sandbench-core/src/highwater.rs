//! High-water marks of a sandbox's scratch space (issue 10, item 8): a file
//! that reached the file-size limit at any moment, and a scratch mount that
//! was ever full, count even when the program deletes, renames, truncates or
//! buries the evidence before it exits. Two pieces, used by every tier that
//! runs on a Linux kernel it can watch (the process tier's sandbox init,
//! the docker tier from the host):
//!
//! - [`Watch`] marks each scratch file system with fanotify
//!   (`FAN_MARK_FILESYSTEM`: every path and depth of it). Every write
//!   queues an event that pins the file: the watch reads it as a
//!   descriptor, so a file deleted or renamed before the watch looked is
//!   still measured, and while a batch of such files is held it checks
//!   whether a mount is full. Deleting a file frees its space at once (the
//!   watch holds nothing longer than one batch: holding deleted files made
//!   ordinary programs that reuse freed space meet ENOSPC under load).
//! - [`Guard`]: a seccomp filter in the program makes every call that can
//!   free scratch space — unlink, rmdir, rename, truncate, an open with
//!   `O_TRUNC`, a punched hole, `madvise(MADV_REMOVE)` — wait until the
//!   watcher has drained the queued events and checked the mounts, then go
//!   on unchanged, and refuses the ways to free space it could not make
//!   wait (io_uring, extended attributes, other ABIs; see [`rules`]).
//!   Whatever the program did before such a call is so judged before the
//!   call can undo it: a full mount emptied, a capped file truncated.
//!
//! What can still go unseen, and why, is in the tiers' README sections:
//! space freed without a call the guard sees (the last close or unmap of a
//! deleted file, the process ending) races the watch, and so does a
//! fallocate the kernel undid itself after ENOSPC.
//!
//! The watch needs `CAP_SYS_ADMIN`; without it only the mount checks run
//! (at every guarded call and now and then). Synchronous and fork-safe, so
//! that the process tier's sandbox init (a forked child) can run it;
//! [`Running`] runs both on a thread for tiers that watch from the host.
#![allow(unsafe_code)] // fanotify event descriptors, seccomp notifications and BPF come from and go to the kernel raw

use std::fs;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};

/// A scratch mount to watch: `path` is where the watcher reaches it (e.g.
/// `/proc/<pid>/root/work` from the host), `name` how verdicts call it.
#[derive(Debug, Clone)]
pub(crate) struct Scratch {
    pub name: String,
    pub path: PathBuf,
}

impl Scratch {
    pub(crate) fn new(name: &str, path: impl Into<PathBuf>) -> Scratch {
        Scratch { name: name.into(), path: path.into() }
    }
}

/// How a watch reads file events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Each event pins its file until read (descriptor events): a file
    /// deleted before the watch looked is still measured. For tiers whose
    /// program frees space only through guarded calls (the guard drains
    /// first) or that can afford a deleted file being freed a little late.
    Pin,
    /// Events carry file handles and pin nothing; the watch opens each file
    /// by its handle to measure it, so one already gone is missed. For
    /// tiers without a guard, where a pin would keep space a program just
    /// freed from being reused at once.
    Handles,
}

/// What a watch found over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// Files that reached the file-size limit (as the sandbox names them,
    /// `(deleted)` appended when they were gone), first few only. Untrusted:
    /// the program chose these names.
    pub capped: Vec<String>,
    /// Names of the mounts that were full (space or inodes) at some moment.
    pub full: Vec<String>,
    /// Why the watch may have missed something; empty when it saw all it is
    /// built to see.
    pub gaps: Vec<String>,
    /// Bounds hit (events lost; a scan's walk stopped short): with no
    /// violation, the run reads `incomplete`.
    pub bounds: Vec<crate::bound::BoundHit>,
}

impl Found {
    /// Another watch's findings too (a tier that also scans at exit).
    pub(crate) fn merge(&mut self, other: Found) {
        for c in other.capped {
            if self.capped.len() < MAX_CAPPED && !self.capped.contains(&c) {
                self.capped.push(c);
            }
        }
        for f in other.full {
            if !self.full.contains(&f) {
                self.full.push(f);
            }
        }
        self.gaps.extend(other.gaps);
        self.bounds.extend(other.bounds);
    }
}

/// Longest name kept for a capped file (the judge shortens it again).
const MAX_NAME: usize = 240;
/// Capped files remembered.
const MAX_CAPPED: usize = 8;
/// Reads per [`Watch::drain`] call: a flood of events cannot keep the
/// caller from its other work; it is polled again.
const DRAIN_ROUNDS: usize = 32;

struct Root {
    name: String,
    fd: OwnedFd,
    /// How the watcher's /proc/self/fd names things under this mount.
    prefix: String,
    dev: u64,
}

/// The watch. Create it before the program starts; call [`Watch::drain`]
/// whenever [`Watch::fd`] is readable, [`Watch::check_mounts`] now and then,
/// [`Watch::finish_keeping`] once the program is gone.
pub(crate) struct Watch {
    /// None without CAP_SYS_ADMIN: then only the mounts are checked.
    pin: Option<Fanotify>,
    why_not: Option<String>,
    roots: Vec<Root>,
    file_size: u64,
    capped: Vec<((u64, u64), String)>,
    full: Vec<bool>,
    lost: bool,
    buf: Vec<u8>,
}

impl Watch {
    /// Open the mounts and mark them. An error only when a mount cannot be
    /// opened; without fanotify the watch still checks the mounts (and
    /// [`Found::gaps`] says what that misses).
    pub(crate) fn new(mounts: &[Scratch], file_size: u64, mode: Mode) -> Result<Watch, String> {
        let mut roots = vec![];
        for m in mounts {
            let fd = nix::fcntl::open(
                &m.path,
                nix::fcntl::OFlag::O_RDONLY
                    | nix::fcntl::OFlag::O_DIRECTORY
                    | nix::fcntl::OFlag::O_CLOEXEC
                    | nix::fcntl::OFlag::O_NOFOLLOW,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| format!("open {}: {e}", m.path.display()))?;
            let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("stat {}: {e}", m.path.display()))?;
            let prefix = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            roots.push(Root { name: m.name.clone(), fd, prefix, dev: st.st_dev });
        }
        let (pin, why_not) = match Self::mark(&roots, mode) {
            Ok(f) => (Some(f), None),
            Err(e) => (None, Some(e)),
        };
        let full = vec![false; roots.len()];
        Ok(Watch { pin, why_not, roots, file_size, capped: vec![], full, lost: false, buf: vec![0; 64 << 10] })
    }

    fn mark(roots: &[Root], mode: Mode) -> Result<Fanotify, String> {
        let flags = InitFlags::FAN_CLOEXEC
            | InitFlags::FAN_NONBLOCK
            | InitFlags::FAN_CLASS_NOTIF
            | InitFlags::FAN_UNLIMITED_QUEUE;
        let pin = match mode {
            // Non-blocking, so that a FIFO's event never waits for a writer.
            Mode::Pin => Fanotify::init(
                flags,
                EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC | EventFFlags::O_NONBLOCK,
            ),
            Mode::Handles => {
                Fanotify::init(flags | InitFlags::from_bits_retain(libc::FAN_REPORT_FID), EventFFlags::O_RDONLY)
            }
        }
        .map_err(|e| format!("fanotify: {e}"))?;
        for r in roots {
            pin.mark(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_FILESYSTEM,
                // Writes only (a truncation and a fallocate count as writes):
                // each queued event pins its file until read, and an event
                // at open or close would keep a file the program just
                // deleted from being freed until the watch has read it.
                MaskFlags::FAN_MODIFY,
                r.fd.as_fd(),
                None::<&str>,
            )
            .map_err(|e| format!("fanotify mark {}: {e}", r.name))?;
        }
        Ok(pin)
    }

    /// The file-size limit files are measured against (a process sandbox
    /// built ahead learns its run's limit only when the run arrives; events
    /// queued before are measured against it too).
    pub(crate) fn set_file_size(&mut self, file_size: u64) {
        self.file_size = file_size;
    }

    /// Does the watch see file events (or only mount states)?
    pub(crate) fn sees_files(&self) -> bool {
        self.pin.is_some()
    }

    /// Why file events are not seen, when they are not.
    pub(crate) fn why_not(&self) -> Option<&str> {
        self.why_not.as_deref()
    }

    /// The descriptor to poll for readability (None: nothing to poll).
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.pin.as_ref().map(|p| p.as_fd())
    }

    /// Read the queued events, a batch at a time: judge each file's size,
    /// then check the mounts while the batch's files are still held.
    pub(crate) fn drain(&mut self) {
        let Some(pin) = self.pin.as_ref().map(|p| p.as_fd().as_raw_fd()) else { return };
        for _ in 0..DRAIN_ROUNDS {
            // SAFETY: `pin` is our fanotify descriptor, open as long as self.
            let pin = unsafe { BorrowedFd::borrow_raw(pin) };
            let n = match nix::unistd::read(pin, &mut self.buf) {
                Ok(0) | Err(nix::errno::Errno::EAGAIN) => break,
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    // The kernel could not open an event's file for us (out
                    // of descriptors, say): that event is gone.
                    self.lost = true;
                    continue;
                }
            };
            let mut held = vec![];
            let mut handles = vec![];
            for ev in Events::new(&self.buf[..n]) {
                if ev.mask & libc::FAN_Q_OVERFLOW != 0 {
                    self.lost = true;
                }
                if ev.fd >= 0 {
                    // SAFETY: the kernel opened this descriptor for us in this
                    // read; nothing else owns it.
                    held.push(unsafe { OwnedFd::from_raw_fd(ev.fd) });
                } else if let Some(h) = ev.handle() {
                    handles.push(h);
                }
            }
            handles.sort();
            handles.dedup();
            for h in &handles {
                if let Some(fd) = self.open_handle(h) {
                    held.push(fd);
                }
            }
            for fd in &held {
                self.measure(fd);
            }
            self.check_mounts();
        }
    }

    /// A file by its handle (Handles mode), if it still exists.
    fn open_handle(&self, h: &(i32, Vec<u8>)) -> Option<OwnedFd> {
        if h.1.len() > MAX_HANDLE {
            return None;
        }
        let mut fh = RawHandle { bytes: h.1.len() as u32, kind: h.0, data: [0; MAX_HANDLE] };
        fh.data[..h.1.len()].copy_from_slice(&h.1);
        for r in &self.roots {
            // SAFETY: `fh` is a struct file_handle with room for its bytes;
            // the call reads it and returns a new descriptor or -1.
            let fd = unsafe {
                libc::open_by_handle_at(
                    r.fd.as_raw_fd(),
                    (&mut fh as *mut RawHandle).cast(),
                    libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: a descriptor the kernel just returned to us.
                return Some(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        None
    }

    fn measure(&mut self, fd: &OwnedFd) {
        let Ok(st) = nix::sys::stat::fstat(fd) else { return };
        let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
        let key = (st.st_dev, st.st_ino);
        if regular
            && st.st_size as u64 >= self.file_size
            && self.capped.len() < MAX_CAPPED
            && !self.capped.iter().any(|(k, _)| *k == key)
        {
            let name = self.name_of(fd, st.st_dev);
            self.capped.push((key, name));
        }
    }

    /// The sandbox's name for a file the watcher holds.
    fn name_of(&self, fd: &OwnedFd, dev: u64) -> String {
        let raw = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "a file".into());
        let named = self
            .roots
            .iter()
            .find(|r| r.dev == dev && raw.starts_with(&r.prefix))
            .map(|r| format!("{}{}", r.name, &raw[r.prefix.len()..]))
            .unwrap_or(raw);
        named.chars().take(MAX_NAME).collect()
    }

    /// Is any mount full right now (space or inodes)? Cheap: also worth
    /// calling now and then, since a file filled through a mapping sends
    /// no event.
    pub(crate) fn check_mounts(&mut self) {
        for (i, r) in self.roots.iter().enumerate() {
            if let Ok(s) = nix::sys::statvfs::fstatvfs(&r.fd) {
                if s.blocks_available() == 0 || (s.files() > 0 && s.files_available() == 0) {
                    self.full[i] = true;
                }
            }
        }
    }

    /// The program is gone: a last drain and mount check, handing back the
    /// fanotify group instead of closing it: closing one waits for an SRCU grace period (~14 ms measured here,
    /// most of a warm run), so a caller closes it after the verdict is out.
    pub(crate) fn finish_keeping(mut self) -> (Found, Option<Fanotify>) {
        let found = self.take();
        (found, self.pin.take())
    }

    /// What was found since the watch was made or last taken (after a last
    /// drain and mount check); then it starts afresh with the same fanotify
    /// group: a session's calls share one, made while its init could.
    pub(crate) fn take(&mut self) -> Found {
        self.drain();
        self.check_mounts();
        let mut gaps = vec![];
        if let Some(why) = &self.why_not {
            gaps.push(format!(
                "scratch files not watched ({why}): a capped file deleted or truncated before exit may go unreported"
            ));
        }
        let mut bounds = vec![];
        if self.lost {
            gaps.push("file events were lost: a hidden limit hit may go unreported".into());
            bounds.push(crate::bound::BoundHit::new(crate::bound::Bound::FileEventsLost, None, "the scratch watch"));
        }
        let found = Found {
            capped: self.capped.iter().map(|(_, n)| n.clone()).collect(),
            full: self.roots.iter().zip(&self.full).filter(|(_, f)| **f).map(|(r, _)| r.name.clone()).collect(),
            gaps,
            bounds,
        };
        self.capped.clear();
        self.full.iter_mut().for_each(|f| *f = false);
        self.lost = false;
        found
    }
}

/// One event of a fanotify read buffer.
struct Event<'a> {
    mask: u64,
    fd: i32,
    info: &'a [u8],
}

impl Event<'_> {
    /// The object's file handle (the FID record, Handles mode).
    fn handle(&self) -> Option<(i32, Vec<u8>)> {
        let mut rest = self.info;
        while rest.len() >= 4 {
            let len = u16::from_ne_bytes([rest[2], rest[3]]) as usize;
            if len < 4 || len > rest.len() {
                return None;
            }
            let rec = &rest[..len];
            // header (4), fsid (8), handle_bytes (4), handle_type (4), bytes
            if rec[0] == libc::FAN_EVENT_INFO_TYPE_FID && rec.len() >= 20 {
                let n = u32::from_ne_bytes([rec[12], rec[13], rec[14], rec[15]]) as usize;
                let ty = i32::from_ne_bytes([rec[16], rec[17], rec[18], rec[19]]);
                return (n <= MAX_HANDLE && 20 + n <= rec.len()).then(|| (ty, rec[20..20 + n].to_vec()));
            }
            rest = &rest[len..];
        }
        None
    }
}

/// Largest file handle (MAX_HANDLE_SZ).
const MAX_HANDLE: usize = 128;

/// struct file_handle with room for MAX_HANDLE bytes.
#[repr(C)]
struct RawHandle {
    bytes: u32,
    kind: i32,
    data: [u8; MAX_HANDLE],
}

/// Walks the events of one read (each `event_len` long; a malformed length
/// ends the walk: the kernel wrote this buffer, but it is parsed defensively).
struct Events<'a> {
    buf: &'a [u8],
}

impl<'a> Events<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Events { buf }
    }
}

/// struct fanotify_event_metadata: event_len u32, vers u8, reserved u8,
/// metadata_len u16, mask u64, fd i32, pid i32.
const META: usize = 24;

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;
    fn next(&mut self) -> Option<Event<'a>> {
        let b = self.buf;
        if b.len() < META {
            return None;
        }
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let meta = u16::from_ne_bytes([b[6], b[7]]) as usize;
        if len < META || len > b.len() || meta < META || meta > len {
            self.buf = &[];
            return None;
        }
        let mask = u64::from_ne_bytes(b[8..16].try_into().ok()?);
        let fd = i32::from_ne_bytes(b[16..20].try_into().ok()?);
        let ev = Event { mask, fd, info: &b[meta..len] };
        self.buf = &b[len..];
        Some(ev)
    }
}

/// What the guard's filter does with one system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Every call waits for the watcher.
    Wait,
    /// Waits when argument `.0` has any bit of `.1` (low 32 bits).
    WaitAnyBit(u32, u32),
    /// Waits when argument `.0` equals `.1` (low 32 bits).
    WaitEquals(u32, u32),
    /// Refused with this errno: a way to free or fill scratch space that the
    /// guard could not make wait.
    Refuse(u32),
}

/// setxattrat(2) and removexattrat(2), Linux 6.13 (one number on every
/// architecture; not in the libc crate yet).
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Every way a program can free scratch space without the watch being told
/// first (issue 21, item 7), and what the guard does about each:
/// - calls that free space wait for the watcher: unlink, rmdir, rename
///   (over a file), truncate, an open with `O_TRUNC`, a `fallocate` that
///   punches, collapses or zeroes a range, `madvise(MADV_REMOVE)` on a
///   shared mapping, and `process_madvise(MADV_REMOVE)` (any advice for
///   oneself since Linux 6.13);
/// - io_uring is refused: its unlink, rename, fallocate and madvise
///   operations never pass through a filter;
/// - extended attributes cannot be set or removed (EOPNOTSUPP, as on a file
///   system without them): tmpfs charges user xattrs to its inode space
///   (Linux 6.6+), they send no write event, and a mount filled with them
///   stops short of zero free inodes;
/// - another ABI (i386 through `int 0x80`, x32) is refused: its numbers
///   differ and would pass this list unseen. The process tier's and the
///   docker loader's own filters refuse those too; on the microVM this is
///   the program's only filter that stands between it and the guard.
///
/// Not here, because nothing frees space through them: writes through a
/// shared mapping (they fill; the next guarded call or mount check sees
/// it), `MADV_DONTNEED`/`MADV_FREE` (tmpfs pages stay in the file),
/// munmap, mremap, remap_file_pages, copy_file_range, splice, vmsplice,
/// sendfile, memfd_create (not on a scratch mount). What still frees space
/// unguarded is the last close or unmap of a deleted file and the end of a
/// process holding one: a race, said so in the README.
fn rules() -> Vec<(i64, Rule)> {
    use Rule::*;
    let trunc = libc::O_TRUNC as u32;
    let frees = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_ZERO_RANGE) as u32;
    let remove = libc::MADV_REMOVE as u32;
    let eperm = libc::EPERM as u32;
    let noxattr = libc::EOPNOTSUPP as u32;
    let mut v = vec![
        (libc::SYS_io_uring_setup, Refuse(eperm)),
        (libc::SYS_io_uring_enter, Refuse(eperm)),
        (libc::SYS_io_uring_register, Refuse(eperm)),
        (libc::SYS_setxattr, Refuse(noxattr)),
        (libc::SYS_lsetxattr, Refuse(noxattr)),
        (libc::SYS_fsetxattr, Refuse(noxattr)),
        (SYS_SETXATTRAT, Refuse(noxattr)),
        (libc::SYS_removexattr, Refuse(noxattr)),
        (libc::SYS_lremovexattr, Refuse(noxattr)),
        (libc::SYS_fremovexattr, Refuse(noxattr)),
        (SYS_REMOVEXATTRAT, Refuse(noxattr)),
        (libc::SYS_unlinkat, Wait),
        (libc::SYS_renameat2, Wait),
        (libc::SYS_truncate, Wait),
        (libc::SYS_ftruncate, Wait),
        // openat2's flags are in memory a filter cannot read: every call.
        (libc::SYS_openat2, Wait),
        (libc::SYS_openat, WaitAnyBit(2, trunc)),
        (libc::SYS_fallocate, WaitAnyBit(1, frees)),
        (libc::SYS_madvise, WaitEquals(2, remove)),
        (libc::SYS_process_madvise, WaitEquals(3, remove)),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_unlink, Wait),
        (libc::SYS_rmdir, Wait),
        (libc::SYS_rename, Wait),
        (libc::SYS_renameat, Wait),
        (libc::SYS_creat, Wait),
        (libc::SYS_open, WaitAnyBit(1, trunc)),
    ]);
    #[cfg(target_arch = "aarch64")]
    v.push((libc::SYS_renameat, Wait));
    v
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 system calls carry this bit in their number (same AUDIT_ARCH).
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

/// The guard's filter (see [`rules`]): the calls that free scratch space
/// wait for the supervisor (SECCOMP_RET_USER_NOTIF), those it cannot make
/// wait are refused, and everything else is allowed here (the tiers' other
/// filters refuse what else must be refused).
pub(crate) fn guard_program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let ld = BPF_LD | BPF_W | BPF_ABS;
    let notify = libc::SECCOMP_RET_USER_NOTIF;
    let allow = libc::SECCOMP_RET_ALLOW;
    let errno = |e: u32| libc::SECCOMP_RET_ERRNO | e;
    let enosys = errno(libc::ENOSYS as u32);
    let mut p = vec![stmt(ld, 4), jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0), stmt(BPF_RET | BPF_K, enosys)];
    #[cfg(target_arch = "x86_64")]
    {
        use libc::BPF_JGE;
        p.push(stmt(ld, 0));
        p.push(jump(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
        p.push(stmt(BPF_RET | BPF_K, enosys));
    }
    for (nr, rule) in rules() {
        let nr = nr as u32;
        p.push(stmt(ld, 0));
        match rule {
            Rule::Wait | Rule::Refuse(_) => {
                p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
                p.push(stmt(BPF_RET | BPF_K, if let Rule::Refuse(e) = rule { errno(e) } else { notify }));
            }
            Rule::WaitAnyBit(idx, k) | Rule::WaitEquals(idx, k) => {
                let test = if matches!(rule, Rule::WaitAnyBit(..)) { BPF_JSET } else { BPF_JEQ };
                p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 3));
                // The low 32 bits of the argument (little-endian layout of
                // seccomp_data.args on both supported architectures).
                p.push(stmt(ld, 16 + 8 * idx));
                p.push(jump(BPF_JMP | test | BPF_K, k, 0, 1));
                p.push(stmt(BPF_RET | BPF_K, notify));
            }
        }
    }
    p.push(stmt(BPF_RET | BPF_K, allow));
    p
}

/// Install the guard's filter in the calling process (the program's, before
/// exec; `no_new_privs` must be set) and return the listener descriptor,
/// which the supervisor must serve: until it does, guarded calls wait.
pub(crate) fn install_guard() -> Result<OwnedFd, String> {
    let mut prog = guard_program();
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
    // SAFETY: seccomp(2) reads the program through `fprog`, which points at
    // `prog`, alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(format!("seccomp listener: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: seccomp returned a new descriptor that only we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A copy of descriptor `fd` of process `pid` (host root: how sandbench
/// takes the guard's listener from a container's loader).
pub(crate) fn take_fd(pid: i32, fd: i32) -> Result<OwnedFd, String> {
    // SAFETY: pidfd_open and pidfd_getfd take integers and return new
    // descriptors (or -1), which we own from here.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(format!("pidfd_open {pid}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor pidfd_open just returned; nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: integers in, a new descriptor (or -1) out.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(format!("pidfd_getfd {pid}/{fd}: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor pidfd_getfd just installed in our table.
    Ok(unsafe { OwnedFd::from_raw_fd(got as i32) })
}

/// The supervisor's side of the guard: each notification is a program
/// thread about to free scratch space.
pub(crate) struct Guard {
    fd: OwnedFd,
    /// No program process is left on the filter: nothing more to serve.
    gone: bool,
    /// u64s, so that the kernel's structs are aligned in it.
    buf: Vec<u64>,
    served: u64,
}

impl Guard {
    pub(crate) fn new(fd: OwnedFd) -> Result<Guard, String> {
        let mut sizes = libc::seccomp_notif_sizes { seccomp_notif: 0, seccomp_notif_resp: 0, seccomp_data: 0 };
        // SAFETY: SECCOMP_GET_NOTIF_SIZES writes three u16 into `sizes`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_NOTIF_SIZES,
                0,
                &mut sizes as *mut libc::seccomp_notif_sizes,
            )
        };
        if r != 0 {
            return Err(format!("seccomp notification sizes: {}", std::io::Error::last_os_error()));
        }
        let bytes = (sizes.seccomp_notif as usize)
            .max(sizes.seccomp_notif_resp as usize)
            .max(std::mem::size_of::<libc::seccomp_notif>())
            .max(std::mem::size_of::<libc::seccomp_notif_resp>());
        Ok(Guard { fd, gone: false, buf: vec![0; bytes.div_ceil(8)], served: 0 })
    }

    /// The listener to poll, while there is anything to serve.
    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        (!self.gone).then(|| self.fd.as_fd())
    }

    /// Take a poll result: true when a call waits ([`Guard::serve`] it).
    pub(crate) fn ready(&mut self, revents: nix::poll::PollFlags) -> bool {
        use nix::poll::PollFlags;
        if revents.contains(PollFlags::POLLIN) {
            return true;
        }
        // POLLHUP: no program process is left on the filter, and a receive
        // now would block for ever.
        if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
            self.gone = true;
        }
        false
    }

    /// Calls that waited for the watcher so far.
    pub(crate) fn served(&self) -> u64 {
        self.served
    }

    /// Take one waiting call: look (drain the watch, check the mounts), then
    /// let the call go on unchanged. False when the listener is dead.
    pub(crate) fn serve(&mut self, watch: &mut Watch) -> bool {
        self.buf.iter_mut().for_each(|w| *w = 0);
        let req = self.buf.as_mut_ptr().cast::<libc::seccomp_notif>();
        // SAFETY: `buf` is zeroed, aligned and at least as large as the
        // kernel's struct seccomp_notif.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, req) } != 0 {
            let e = nix::errno::Errno::last();
            // ENOENT: the waiting thread was killed; EINTR: try again later.
            let alive = matches!(e, nix::errno::Errno::ENOENT | nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN);
            self.gone |= !alive;
            return alive;
        }
        // SAFETY: the kernel filled in the struct just now.
        let id = unsafe { (*req).id };
        watch.drain();
        watch.check_mounts();
        self.served += 1;
        let mut resp =
            libc::seccomp_notif_resp { id, val: 0, error: 0, flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32 };
        // SAFETY: `resp` is a complete seccomp_notif_resp. ENOENT (the thread
        // died meanwhile) is fine.
        unsafe {
            libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp as *mut libc::seccomp_notif_resp)
        };
        true
    }
}

/// A watch (and its guard, when the tier could install one) running on its
/// own thread until [`Running::finish`]: for tiers that watch from the host.
pub(crate) struct Running {
    stop: Option<OwnedFd>,
    /// What the thread found; it closes the watch after sending this (the
    /// close waits for an SRCU grace period the verdict need not wait for).
    result: Option<std::sync::mpsc::Receiver<(Found, u64)>>,
}

/// How often an idle watch checks the mounts anyway (ms).
const IDLE_CHECK: u16 = 50;

impl Running {
    pub(crate) fn spawn(mut watch: Watch, mut guard: Option<Guard>) -> Result<Running, String> {
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("scratch-watch".into())
            .spawn(move || {
                use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
                // Every guarded call of the program waits for this thread:
                // ahead of ordinary work where allowed (root). On Linux
                // PRIO_PROCESS with 0 names the calling thread.
                // SAFETY: setpriority with integer arguments only.
                // Not a real-time class: a program's stream of writes must not
                // be able to starve the host through this thread.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
                loop {
                    let (stop, notified, events) = {
                        let mut fds = vec![PollFd::new(stop_r.as_fd(), PollFlags::POLLIN)];
                        let guarded = guard.as_ref().and_then(|g| g.fd()).is_some();
                        if let Some(f) = guard.as_ref().and_then(|g| g.fd()) {
                            fds.push(PollFd::new(f, PollFlags::POLLIN));
                        }
                        if let Some(f) = watch.fd() {
                            fds.push(PollFd::new(f, PollFlags::POLLIN));
                        }
                        let r = poll(&mut fds, PollTimeout::from(IDLE_CHECK));
                        let revents = |i: usize| fds.get(i).and_then(|f| f.revents()).unwrap_or(PollFlags::empty());
                        match r {
                            Ok(_) => (!revents(0).is_empty(), guarded.then(|| revents(1)), r != Ok(0)),
                            Err(_) => (false, None, false),
                        }
                    };
                    let call = match (notified, &mut guard) {
                        (Some(rev), Some(g)) => g.ready(rev),
                        _ => false,
                    };
                    if call {
                        if let Some(g) = &mut guard {
                            g.serve(&mut watch);
                        }
                    } else if events {
                        watch.drain();
                    } else {
                        watch.check_mounts();
                    }
                    if stop {
                        let served = guard.as_ref().map_or(0, Guard::served);
                        let (found, pin) = watch.finish_keeping();
                        let _ = tx.send((found, served));
                        drop(pin);
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start the scratch watch: {e}"))?;
        Ok(Running { stop: Some(stop_w), result: Some(rx) })
    }

    /// Stop (after a last drain) and say what was found, and how many calls
    /// waited for the watch. Call it once the program is gone.
    pub(crate) fn finish(mut self) -> (Found, u64) {
        self.stop.take(); // closing the pipe wakes the thread
        self.result.take().and_then(|r| r.recv().ok()).unwrap_or_else(|| {
            (
                Found {
                    gaps: vec!["the scratch watch failed: hidden limit hits may go unreported".into()],
                    bounds: vec![crate::bound::BoundHit::new(
                        crate::bound::Bound::FileEventsLost,
                        None,
                        "the scratch watch (it failed)",
                    )],
                    ..Default::default()
                },
                0,
            )
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A run that ended early (error, cancel): the thread stops by itself.
        self.stop.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mask: u64, fd: i32) -> Vec<u8> {
        let mut v = (META as u32).to_ne_bytes().to_vec();
        v.extend([3u8, 0]);
        v.extend((META as u16).to_ne_bytes());
        v.extend(mask.to_ne_bytes());
        v.extend(fd.to_ne_bytes());
        v.extend(0i32.to_ne_bytes());
        v
    }

    #[test]
    fn events_are_walked_and_malformed_lengths_end_the_walk() {
        let mut buf = meta(libc::FAN_MODIFY, 7);
        buf.extend(meta(libc::FAN_Q_OVERFLOW, -1));
        let evs: Vec<_> = Events::new(&buf).collect();
        assert_eq!(evs.len(), 2);
        assert_eq!((evs[0].fd, evs[1].mask), (7, libc::FAN_Q_OVERFLOW));
        let mut bad = meta(libc::FAN_MODIFY, 7);
        bad[0] = 200; // longer than the buffer
        assert_eq!(Events::new(&bad).count(), 0);
        bad[0] = 3; // shorter than the metadata
        assert_eq!(Events::new(&bad).count(), 0);
        assert_eq!(Events::new(&[0u8; 10]).count(), 0);
    }

    #[test]
    fn handles_are_found_in_fid_records() {
        // A DFID_NAME record first, then the object's own FID record.
        let rec = |kind: u8, handle: &[u8]| {
            let mut body = vec![0u8; 8];
            body.extend((handle.len() as u32).to_ne_bytes());
            body.extend(1i32.to_ne_bytes());
            body.extend(handle);
            let mut v = vec![kind, 0];
            v.extend(((4 + body.len()) as u16).to_ne_bytes());
            v.extend(body);
            v
        };
        let mut info = rec(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, &[1, 2, 3, 4]);
        info.extend(rec(libc::FAN_EVENT_INFO_TYPE_FID, &[9; 12]));
        let mut buf = meta(libc::FAN_MODIFY, -1);
        let len = (META + info.len()) as u32;
        buf[..4].copy_from_slice(&len.to_ne_bytes());
        buf.extend(&info);
        let ev = Events::new(&buf).next().unwrap();
        assert_eq!(ev.handle(), Some((1, vec![9; 12])));
        // A record that claims to run past the event is not read.
        let mut bad = buf.clone();
        bad[META + info.len() - 12 - 20 + 2] = 0xff;
        assert_eq!(Events::new(&bad).next().map(|e| e.handle()), Some(None));
    }

    #[test]
    fn the_guard_program_checks_the_arch_and_ends_in_allow() {
        let p = guard_program();
        assert_eq!(p[0].k, 4, "loads seccomp_data.arch first");
        assert_eq!(p.last().unwrap().k, libc::SECCOMP_RET_ALLOW);
        let notifies = p.iter().filter(|i| i.k == libc::SECCOMP_RET_USER_NOTIF).count();
        let waits = rules().iter().filter(|(_, r)| !matches!(r, Rule::Refuse(_))).count();
        assert_eq!(notifies, waits);
        assert!(p.len() < 256);
    }

    /// What the filter does, call by call, in a process that has it: its
    /// listener closed at once, so that a call that would wait for the
    /// supervisor fails with ENOSYS instead (the kernel's answer when no
    /// supervisor is left), which tells "waits" from "refused" from "allowed".
    #[test]
    fn the_guard_refuses_what_it_cannot_make_wait() {
        let dir = tempfile::tempdir().unwrap();
        let script = concat!(
            include_str!("../../../guest/scratch_guard.py"),
            r#"
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
open("f", "wb").close()
raw, n, col = scratch_guard_filter()
buf = ctypes.create_string_buffer(raw, len(raw))
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fp = Fprog(n, ctypes.addressof(buf))
assert libc.prctl(38, 1, 0, 0, 0) == 0
fd = libc.syscall((317, 277)[col], 1, 8, ctypes.byref(fp))
assert fd >= 0, ctypes.get_errno()
os.close(fd)
def err(f):
    try:
        f()
        return 0
    except OSError as e:
        return e.errno
m = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)
print(
    libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno(),
    err(lambda: os.setxattr("f", "user.a", b"1")),
    err(lambda: os.removexattr("f", "user.a")),
    err(lambda: m.madvise(mmap.MADV_REMOVE)),
    err(lambda: m.madvise(mmap.MADV_DONTNEED)),
    err(lambda: os.remove("f")),
    err(lambda: os.stat("f")),
)
"#
        );
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .current_dir(dir.path())
            .output()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let (eperm, enosys, eopnotsupp) = (libc::EPERM, libc::ENOSYS, libc::EOPNOTSUPP);
        // io_uring_setup refused; xattrs refused; MADV_REMOVE and unlink
        // wait (here: no supervisor, so the file stays); MADV_DONTNEED goes
        // through.
        let want = format!("-1 {eperm} {eopnotsupp} {eopnotsupp} {enosys} 0 {enosys} 0\n");
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }

    /// The docker loader and the microVM agent build the same filter in
    /// Python (guest/scratch_guard.py): byte for byte this one.
    #[test]
    fn the_guests_guard_filter_is_this_one() {
        let script = concat!(
            include_str!("../../../guest/scratch_guard.py"),
            "import sys\nraw, n, col = scratch_guard_filter()\nsys.stdout.buffer.write(raw)\n"
        );
        let out = std::process::Command::new("python3").args(["-c", script]).output().expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mine: Vec<u8> = guard_program()
            .iter()
            .flat_map(|i| [&i.code.to_ne_bytes()[..], &[i.jt, i.jf], &i.k.to_ne_bytes()[..]].concat())
            .collect();
        assert_eq!(out.stdout, mine);
    }
}
