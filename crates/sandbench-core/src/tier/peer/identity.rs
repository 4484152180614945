//! Who a peer run runs as: a uid of its own as root, else the caller. Its
//! own file because the run directory (`rundir.rs`) is made for that
//! identity, and the tier (`mod.rs`) uses the run directory.

use crate::tier::process::uids::{self, UidLease};

/// Who the wrapper runs as: as root, a uid of the run's own (and the group
/// of the same number); else the caller.
#[derive(Debug, Clone)]
pub struct RunAs {
    /// The name the wrapper's passwd gives it (`sandbench-peer-UID`), or the caller's.
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Whether sandbench switches to it (it is root).
    pub switch: bool,
}

/// The run's identity, and (as root) the lease that keeps its uid the
/// run's alone until it is dropped. `range`: the process tier's uid range.
pub(crate) fn run_as(range: (u32, u32)) -> Result<(RunAs, Option<UidLease>), String> {
    use nix::unistd::{getgid, getuid, User};
    if !nix::unistd::geteuid().is_root() {
        let uid = getuid().as_raw();
        let user = User::from_uid(getuid()).ok().flatten().map(|u| u.name).unwrap_or_else(|| uid.to_string());
        return Ok((RunAs { user, uid, gid: getgid().as_raw(), switch: false }, None));
    }
    let lease = uids::lease(range.0, range.1).map_err(|e| format!("cannot give the peer run a uid of its own: {e}"))?;
    let uid = lease.uid;
    Ok((RunAs { user: format!("sandbench-peer-{uid}"), uid, gid: uid, switch: true }, Some(lease)))
}

/// What `doctor` says about who peer runs run as.
pub(super) fn run_as_policy(range: (u32, u32)) -> String {
    if nix::unistd::geteuid().is_root() {
        format!(
            "each run gets its own uid from {}..{} (the process tier's range), its folders reachable by that uid alone",
            range.0,
            range.0.saturating_add(range.1).saturating_sub(1)
        )
    } else {
        format!("runs as you (uid {}): runs of one user share it", nix::unistd::getuid())
    }
}
