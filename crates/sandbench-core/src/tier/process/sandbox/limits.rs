//! rlimits: the run's limits applied to the program's process by init
//! (prlimit, as the program's real ids) and to itself by the program.

use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{Gid, Pid, Uid};

use super::base::*;

pub(super) fn prlimit(pid: Pid, res: Resource, soft: u64, hard: u64) -> Result<(), String> {
    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: prlimit reads `lim` and writes nothing (null old limit).
    if unsafe { libc::prlimit(pid.as_raw(), res as _, &lim, std::ptr::null_mut()) } != 0 {
        return Err(format!("prlimit {res:?}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The run's rlimits on the program's process, before its program starts.
/// prlimit(2) on another process needs CAP_SYS_RESOURCE or the same real
/// ids; a root sandbench may lack the capability (containers drop it), so
/// init takes the program's uid and gid as its *real* ids for the call
/// (its effective ids, and so its privileges, stay) and then restores them.
/// The program's process runs only sandbench's waiting code meanwhile.
pub(super) fn apply_rlimits_as(pid: Pid, cfg: &SandboxConfig, ids: Option<(u32, u32)>) -> Result<(), String> {
    let Some((uid, gid)) = ids else { return apply_rlimits(pid, cfg) };
    let keep = Uid::from_raw(u32::MAX);
    let keep_g = Gid::from_raw(u32::MAX);
    let (ruid, rgid) = (nix::unistd::getuid(), nix::unistd::getgid());
    nix::unistd::setresgid(Gid::from_raw(gid), keep_g, keep_g).map_err(|e| format!("setresgid for prlimit: {e}"))?;
    nix::unistd::setresuid(Uid::from_raw(uid), keep, keep).map_err(|e| format!("setresuid for prlimit: {e}"))?;
    let r = apply_rlimits(pid, cfg);
    nix::unistd::setresuid(ruid, keep, keep).map_err(|e| format!("setresuid back: {e}"))?;
    nix::unistd::setresgid(rgid, keep_g, keep_g).map_err(|e| format!("setresgid back: {e}"))?;
    r
}

pub(super) fn apply_rlimits(pid: Pid, cfg: &SandboxConfig) -> Result<(), String> {
    // A backstop one second past the limit: the host's cgroup counter judges
    // and kills first, so the hit is reported from a fact the program cannot
    // forge (a SIGXCPU death alone is not).
    prlimit(pid, Resource::RLIMIT_CPU, cfg.cpu_secs + 1, cfg.cpu_secs + 2)?;
    if let Some(n) = cfg.data_limit {
        prlimit(pid, Resource::RLIMIT_DATA, n, n)?;
    }
    prlimit(pid, Resource::RLIMIT_FSIZE, cfg.file_size_bytes, cfg.file_size_bytes)?;
    prlimit(pid, Resource::RLIMIT_NOFILE, cfg.open_files, cfg.open_files)?;
    if let Some(n) = cfg.nproc {
        prlimit(pid, Resource::RLIMIT_NPROC, n, n)?;
    }
    Ok(())
}

pub(super) fn rlimit(res: Resource, v: u64, hard: u64) -> Result<(), String> {
    setrlimit(res, v, hard).map_err(|e| format!("setrlimit {res:?}: {e}"))
}
