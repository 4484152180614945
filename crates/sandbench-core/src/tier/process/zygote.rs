//! The process tier's zygote: one warm Python interpreter that forks the
//! program's process of each sandbox, instead of a fresh `python3` starting
//! in every one (an interpreter's start is most of a run's CPU; a fork of a
//! warm one is about a tenth of it).
//!
//! ```text
//! sandbench ──ctl──> zygote (python3 -u main.py = zygote.py; root, warm)
//!     │                 └─ fork: enters init's namespaces (its pidfd), forks
//!     │                      └─ the program's process (in init's pid ns):
//!     │                         session, /work, Landlock, rlimits, its uid,
//!     │                         no_new_privs, guard, seccomp; waits as the
//!     │                         waiter does, then runs the program in itself
//!     └─ helper ─ init ──conn──> (its pidfd and the process's descriptors)
//! ```
//! Who can reach it: only sandbench (its control socket is a socketpair).
//! Per sandbox sandbench makes a connection and hands one end to the
//! zygote with that run's uid, gid and egress port, the other to the
//! helper; init sends one request on it before any program exists and
//! closes it. The parameters that decide the program's identity come from
//! sandbench, never from the sandbox.
//!
//! What a program could reach of it: nothing. It never runs program code
//! (programs run in its grandchildren, after they dropped to the run's uid
//! with no capability under Landlock and seccomp, in another pid namespace),
//! reads nothing a program wrote, and holds nothing of the host's: it is
//! started with the runs' own environment, with an empty `HOME` and its own
//! file in a fresh `/tmp` (tmpfs, read-only, in a mount namespace of its
//! own), so no host file anyone else could write is imported. What every program's process
//! shares with it, by the fork: the interpreter's hash seed and its address
//! layout (as the microVM's zygote; documented in docs/SECURITY.md).
//!
//! It is used only where it is exactly what the sandbox would have started
//! (root, no user namespace, Python with the default environment, Landlock
//! ABI 6); every other run starts its interpreter in the sandbox as before.
//! `[process] zygote = false` turns it off.
#![allow(unsafe_code)] // the trampoline's mount, dup2 and exec before Python starts

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};

use super::sandbox::Waiter;

/// What the zygote runs (`python3 -u main.py`, from a /tmp of its own).
const ZYGOTE_PY: &str = include_str!("zygote.py");

/// The zygote of a tier instance, started at its first use.
#[derive(Debug)]
pub(super) struct Zygote {
    /// The interpreter and environment it was started with: only a sandbox
    /// whose waiter is exactly this gets its process from it.
    pub(super) waiter: Waiter,
    live: Mutex<Option<Live>>,
}

#[derive(Debug)]
struct Live {
    child: std::process::Child,
    ctl: OwnedFd,
}

impl Drop for Live {
    fn drop(&mut self) {
        // Its control socket's EOF ends it too; the kill makes it now.
        let _ = self.child.kill();
        if let Ok(mut p) = PIDS.lock() {
            p.retain(|x| *x != self.child.id());
        }
        let _ = self.child.wait();
    }
}

/// This process's live zygotes (its own children): a CPU meter around this
/// process takes them in too (`cgroup::CpuMeter`).
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub(crate) fn pids() -> Vec<u32> {
    PIDS.lock().map(|p| p.clone()).unwrap_or_default()
}

impl Zygote {
    pub(super) fn new(waiter: Waiter) -> Zygote {
        Zygote { waiter, live: Mutex::new(None) }
    }

    /// Whether this kernel gives the zygote's processes what a fork of init
    /// would get: its process applies Landlock ABI 6 or refuses the run, so
    /// on an older kernel (or where degraded runs are allowed) sandboxes
    /// start their own interpreter, as before.
    pub(super) fn fits(&self, allow_degraded: bool) -> bool {
        static ABI: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
        // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
        let abi = *ABI.get_or_init(|| unsafe {
            libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32)
        });
        !allow_degraded && abi >= 6
    }

    /// The zygote's process id while it runs (the chaos tests kill it).
    pub(super) fn pid(&self) -> Option<u32> {
        let mut live = self.live.lock().ok()?;
        let l = live.as_mut()?;
        // Once it has exited (and been reaped) its pid may be anyone's.
        matches!(l.child.try_wait(), Ok(None)).then(|| l.child.id())
    }

    /// The zygote's resident memory (PSS), while it runs.
    pub(super) fn memory(&self) -> Option<u64> {
        let pid = self.live.lock().ok()?.as_ref()?.child.id();
        Some(crate::host::pss_bytes(&[pid as i32]))
    }

    /// Make sure it runs (started at first use, again if it died): the
    /// sandbox about to be made gets its process from it.
    pub(super) fn ready(&self, helper: &std::path::Path) -> Result<(), String> {
        let mut live = self.live.lock().map_err(|_| "zygote lock poisoned".to_string())?;
        if let Some(l) = live.as_mut() {
            if !matches!(l.child.try_wait(), Ok(None)) {
                *live = None;
            }
        }
        if live.is_none() {
            *live = Some(start(helper, &self.waiter)?);
        }
        Ok(())
    }

    /// Hand the zygote its end of one sandbox's connection (the helper has
    /// the other) with the uid and gid that sandbox's program runs as and
    /// its egress port: what decides the program's identity and reach
    /// comes from here, never from the sandbox.
    pub(super) fn hand(&self, conn: OwnedFd, uid: u32, gid: u32, port: Option<u16>) -> Result<u32, String> {
        let mut live = self.live.lock().map_err(|_| "zygote lock poisoned".to_string())?;
        let Some(l) = live.as_ref() else { return Err("the zygote is not running".into()) };
        let pid = l.child.id();
        let params = serde_json::json!({ "uid": uid, "gid": gid, "port": port }).to_string();
        let fds = [conn.as_raw_fd()];
        let iov = [std::io::IoSlice::new(params.as_bytes())];
        if let Err(e) =
            sendmsg::<()>(l.ctl.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::empty(), None)
        {
            *live = None;
            return Err(format!("the zygote is gone ({e})"));
        }
        Ok(pid)
    }

    /// Whether the zygote that `hand` gave a sandbox to (its pid then) still
    /// runs: a waiting sandbox's process is watched by that zygote's fork,
    /// which dies with it, so a spare made by a zygote that died since can
    /// only fail its run.
    pub(super) fn serving(&self, pid: u32) -> bool {
        let Ok(mut live) = self.live.lock() else { return false };
        match live.as_mut() {
            Some(l) if l.child.id() == pid => matches!(l.child.try_wait(), Ok(None)),
            _ => false,
        }
    }
}

/// A connection between the zygote and one sandbox's init.
pub(super) fn pair() -> nix::Result<(OwnedFd, OwnedFd)> {
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
}

/// The filters the zygote installs in each program's process: the scratch
/// guard's first, then the tier's (`seccomp.rs`), as `program.rs` does.
fn filters() -> Result<Vec<u8>, String> {
    let mut progs: Vec<Vec<(u16, u8, u8, u32)>> =
        vec![crate::highwater::guard_program().iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect()];
    for p in super::seccomp::programs()? {
        progs.push(p.iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect());
    }
    let mut out = (progs.len() as u32).to_le_bytes().to_vec();
    for p in progs {
        out.extend((p.len() as u32).to_le_bytes());
        for (code, jt, jf, k) in p {
            out.extend(code.to_ne_bytes());
            out.push(jt);
            out.push(jf);
            out.extend(k.to_ne_bytes());
        }
    }
    Ok(out)
}

fn start(helper: &std::path::Path, waiter: &Waiter) -> Result<Live, String> {
    let cmd = waiter.interpreter.first().ok_or("no interpreter")?;
    // As init resolves it in the sandbox (/usr is the host's, bound as is).
    let exe = super::sandbox::find_in_path(cmd, &waiter.env).ok_or_else(|| format!("{cmd} is not installed"))?;
    let exe = std::ffi::OsStr::from_bytes(exe.as_bytes());
    let (ctl, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| format!("zygote control socket: {e}"))?;
    let hello = filters()?;
    let child = std::process::Command::new(helper)
        .arg("__zygote")
        .arg(std::process::id().to_string())
        .arg(exe)
        .args(&waiter.interpreter)
        .env_clear()
        .envs(waiter.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(std::process::Stdio::from(theirs))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the zygote: {e}"))?;
    let iov = [std::io::IoSlice::new(&hello)];
    if let Ok(mut p) = PIDS.lock() {
        p.push(child.id());
    }
    let live = Live { child, ctl };
    sendmsg::<()>(live.ctl.as_raw_fd(), &iov, &[], MsgFlags::empty(), None)
        .map_err(|e| format!("cannot hand the zygote its filters: {e}"))?;
    Ok(live)
}

/// Entry point of `sandbench __zygote <host pid> <python> <argv...>`: the
/// interpreter's own mount namespace with an empty `HOME` and its own file
/// in a fresh `/tmp`, its control socket on fd 3, /dev/null on 0–2, then the
/// interpreter. Never returns.
pub fn trampoline_main() -> ! {
    let die = |why: String| -> ! {
        // stderr is /dev/null: the host learns of this from its EOF.
        let _ = why;
        // SAFETY: ends the process at once, before any step.
        unsafe { libc::_exit(121) }
    };
    let args: Vec<OsString> = std::env::args_os().skip(2).collect();
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        die("PR_SET_PDEATHSIG".into());
    }
    let host: i32 = args.first().and_then(|a| a.to_str()).and_then(|a| a.parse().ok()).unwrap_or(-1);
    if nix::unistd::getppid().as_raw() != host || args.len() < 3 {
        die("not started by sandbench".into());
    }
    use nix::mount::{mount, MsFlags};
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
        die(format!("unshare: {e}"));
    }
    if let Err(e) = mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>) {
        die(format!("mount: {e}"));
    }
    // site reads HOME/.local (the user site), and TMPDIR is the runs': the
    // interpreter sees an empty, read-only directory at each, nothing that a
    // user of the host could have put there. Its own file goes in a fresh
    // /tmp, so that it runs as `python3 -u main.py` from there: the command
    // line, `sys.argv` and `sys.orig_argv` a program sees are the ones a
    // sandbox's own interpreter has.
    let home = std::env::var_os("HOME").unwrap_or_default();
    let tmpdir = std::env::var_os("TMPDIR").unwrap_or_default();
    let quiet = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for dir in [home.as_os_str(), tmpdir.as_os_str()] {
        let d = std::path::Path::new(dir);
        if !d.is_absolute() || !d.is_dir() || d == std::path::Path::new("/tmp") {
            continue; // no such directory: only root could make it
        }
        if let Err(e) = mount(Some("tmpfs"), d, Some("tmpfs"), quiet | MsFlags::MS_RDONLY, Some("size=4k,mode=0755")) {
            die(format!("mount over {}: {e}", d.display()));
        }
    }
    let tmp = std::path::Path::new("/tmp");
    if let Err(e) = mount(Some("tmpfs"), tmp, Some("tmpfs"), quiet, Some("size=1m,mode=0755")) {
        die(format!("mount /tmp: {e}"));
    }
    if let Err(e) = std::fs::write(tmp.join("main.py"), ZYGOTE_PY) {
        die(format!("write the zygote: {e}"));
    }
    if let Err(e) =
        mount(None::<&str>, tmp, None::<&str>, quiet | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY, None::<&str>)
    {
        die(format!("remount /tmp: {e}"));
    }
    if let Err(e) = nix::unistd::chdir(tmp) {
        die(format!("chdir: {e}"));
    }
    // SAFETY: dup2 and open on descriptor numbers; nothing else owns 0–3 here.
    unsafe {
        if libc::dup2(0, 3) < 0 {
            die("dup2".into());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null < 0 || libc::dup2(null, 0) < 0 || libc::dup2(null, 1) < 0 || libc::dup2(null, 2) < 0 {
            die("/dev/null".into());
        }
        if null > 3 {
            libc::close(null);
        }
    }
    let c = |s: &std::ffi::OsStr| CString::new(s.as_bytes()).unwrap_or_default();
    let exe = c(&args[1]);
    let mut argv: Vec<CString> = args[2..].iter().map(|a| c(a)).collect();
    argv.push(c"main.py".into());
    let envp: Vec<CString> = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).unwrap_or_default()
        })
        .collect();
    // The zygote's interpreter starts as a terminal's would, whatever
    // sandbench inherited (a shell's background job has SIGINT ignored, and
    // Python then installs no KeyboardInterrupt handler): every program
    // forked from it inherits what it starts with.
    if let Err(e) = super::sandbox::default_signals() {
        die(format!("default signal dispositions: {e}"));
    }
    let e = nix::unistd::execve(&exe, &argv, &envp).unwrap_err();
    die(format!("exec: {e}"))
}
