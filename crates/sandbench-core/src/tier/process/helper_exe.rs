//! Which binary the process tier starts as its sandbox helper. The helper
//! is exec'd for every sandbox, so the size of what is exec'd is paid on
//! every run: sandbench's own binary (29 MB of text, 43,000 relocations)
//! costs ~1.5 ms of CPU and 310 page faults to start; `sandbench-sandbox`,
//! a binary that holds only the helper, ~0.8 ms and 80.
//!
//! The small binary is used only when it provably is this build's helper:
//! it sits next to sandbench's own binary, is a regular file (not a link)
//! that only root or the owner of sandbench's binary can write, in a folder
//! nobody else can write either, and it answers `__build` with this build's
//! token (`SANDBENCH_BUILD`, see `build.rs`). It is opened once and started
//! from that descriptor (`/proc/self/fd/N`), so what was checked is what
//! runs for the whole life of this process, even if a rebuild replaces the
//! file. Anything else (no such file, `cargo run` having rebuilt only the
//! main binary, a file someone else could write) falls back to sandbench's
//! own binary, which is always this build's. The helper checks the token
//! again (`Prepare::build`), so a mismatch fails closed.
#![allow(unsafe_code)] // owning the descriptor fcntl(F_DUPFD_CLOEXEC) returns

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::fcntl::{FcntlArg, OFlag};

/// This build's token, shared by every binary linked with this engine.
pub const BUILD: &str = env!("SANDBENCH_BUILD");

/// The small helper binary's name, next to sandbench's own.
pub const HELPER_NAME: &str = "sandbench-sandbox";

/// What the helper's `__build` answer may be, at most (a token is 16 hex digits).
const MAX_ANSWER: usize = 64;

/// The helper the tier starts when none is configured.
#[derive(Debug)]
pub struct Resolved {
    /// The path to exec: `/proc/self/fd/N` of the checked small binary, or
    /// `/proc/self/exe`.
    pub exe: PathBuf,
    /// Why the small binary is not used (`None`: it is).
    pub fallback: Option<String>,
    /// Held open for the life of the process: `exe` names it.
    _pinned: Option<OwnedFd>,
}

/// The default helper, resolved once per process.
pub fn default_helper() -> &'static Resolved {
    static R: OnceLock<Resolved> = OnceLock::new();
    R.get_or_init(|| {
        let own = std::env::current_exe().ok();
        match own.as_deref().and_then(Path::parent).map(|d| small_helper(d, own.as_deref())) {
            Some(Ok(fd)) => Resolved {
                exe: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                fallback: None,
                _pinned: Some(fd),
            },
            Some(Err(why)) => self_exe(why),
            None => self_exe("sandbench cannot tell where its own binary is".into()),
        }
    })
}

/// Which helper runs start with under `env`, in a few words.
pub(crate) fn describe(env: &crate::config::HostEnv) -> String {
    if let Some(p) = &env.helper {
        // Configured: nothing is resolved (or exec'd) to describe it.
        return format!("{} (SANDBENCH_HELPER)", p.display());
    }
    match &default_helper().fallback {
        None => format!("{HELPER_NAME} (this build's)"),
        Some(why) => format!("sandbench's own binary ({why})"),
    }
}

fn self_exe(why: String) -> Resolved {
    tracing::debug!("sandbox helper: this binary ({why})");
    Resolved { exe: PathBuf::from("/proc/self/exe"), fallback: Some(why), _pinned: None }
}

/// The small helper in `dir`, checked (see the module's doc) and opened; the
/// descriptor is numbered 10 or above, out of the way of the numbers the
/// helper's descriptors are moved to before its exec.
pub fn small_helper(dir: &Path, own_exe: Option<&Path>) -> Result<OwnedFd, String> {
    // Root, or whoever owns sandbench's own binary (a `cargo build` of theirs).
    let owner = own_exe.and_then(|p| std::fs::metadata(p).ok()).map(|m| m.uid()).unwrap_or(0);
    let trusted = |uid: u32| uid == 0 || uid == owner;
    let folder = crate::fsafe::Dir::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let d = folder.stat_self().map_err(|e| e.to_string())?;
    if !trusted(d.uid) || d.mode & 0o022 != 0 {
        return Err(format!("{} can be written by others than its owner", dir.display()));
    }
    let fd =
        folder.open_beneath(Path::new(HELPER_NAME), OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).map_err(|e| {
            match crate::fsafe::errno(&e) {
                Some(libc::ENOENT) => format!("no {HELPER_NAME} next to it (cargo build --release builds it)"),
                _ => format!("{HELPER_NAME}: {e}"),
            }
        })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("{HELPER_NAME}: {e}"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
        return Err(format!("{HELPER_NAME} is not an executable file"));
    }
    if !trusted(st.st_uid) || st.st_mode & 0o022 != 0 {
        return Err(format!("{HELPER_NAME} can be written by others than its owner"));
    }
    let high = nix::fcntl::fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(10)).map_err(|e| format!("{HELPER_NAME}: {e}"))?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that only we own.
    let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(high) };
    let exe = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let out = std::process::Command::new(&exe)
        .arg("__build")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{HELPER_NAME} does not start: {e}"))?;
    let answer = String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(MAX_ANSWER)]).trim().to_string();
    if !out.status.success() || answer != BUILD {
        return Err(format!("{HELPER_NAME} is from another build (cargo build --release rebuilds it)"));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str, mode: u32) {
        let p = dir.join(HELPER_NAME);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sandbench-helper-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn a_stale_missing_or_writable_helper_is_refused() {
        let d = tmp("refused");
        assert!(small_helper(&d, None).unwrap_err().contains("no sandbench-sandbox"));
        // (A script cannot read itself through a descriptor closed at exec, so
        // these never answer: the helper that does is the built binary, in
        // `it::process_helper`.)
        script(&d, "#!/bin/sh\necho 0123456789abcdef\n", 0o755);
        assert!(small_helper(&d, None).unwrap_err().contains("another build"));
        script(&d, &format!("#!/bin/sh\necho {BUILD}\n"), 0o775);
        assert!(small_helper(&d, None).unwrap_err().contains("written by others"));
        script(&d, &format!("#!/bin/sh\necho {BUILD}\n"), 0o644);
        assert!(small_helper(&d, None).unwrap_err().contains("not an executable"));
        // A link, even to a good helper, is not followed.
        std::fs::remove_file(d.join(HELPER_NAME)).unwrap();
        let real = d.join("real");
        std::fs::write(&real, format!("#!/bin/sh\necho {BUILD}\n")).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&real, d.join(HELPER_NAME)).unwrap();
        assert!(small_helper(&d, None).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_configured_helper_is_described_as_configured() {
        let env = crate::config::HostEnv { helper: Some(PathBuf::from("/opt/x/helper")), ..Default::default() };
        assert_eq!(describe(&env), "/opt/x/helper (SANDBENCH_HELPER)");
    }

    #[test]
    fn a_folder_others_can_write_is_refused() {
        let d = tmp("folder");
        script(&d, &format!("#!/bin/sh\necho {BUILD}\n"), 0o755);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(small_helper(&d, None).unwrap_err().contains("written by others"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
