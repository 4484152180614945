//! Least privilege once the sandbox is built (issue 21, item 2). init and
//! the helper need root (or, unprivileged, their user namespace's
//! capabilities) only to build: namespaces, mounts, the run cgroup's
//! descriptors, the scratch watch's fanotify group. What they do for each
//! call afterwards needs none of it:
//!
//! - moving a program process into the run cgroup writes `cgroup.procs`
//!   through a descriptor the helper opened as root (the kernel checks the
//!   opener's credentials);
//! - the fanotify group, made before dropping, is read the same way (the
//!   kernel opens each event's file for the group, whatever the reader);
//! - the guard's seccomp listener, the status pipe and the scratch mounts'
//!   directory descriptors need nothing;
//! - rlimits on, signals to and reaping of processes of its own uid need
//!   nothing either; and the program's files in `/work` are the sandbox
//!   uid's, so writing them as that uid is the rule ("do the work as the
//!   sandbox's uid"), on top of `fsafe`'s no-follow opens.
//!
//! So init becomes the sandbox's uid with no capability at all — effective,
//! permitted, inheritable, ambient and bounding sets empty — no_new_privs,
//! and not dumpable (so the program, the same uid, cannot ptrace it or open
//! its `/proc/1/mem`; as pid 1 of the namespace it ignores the program's
//! signals, and Landlock scopes them away too). The helper, outside the
//! program's pid namespace and only waiting for init, keeps its uid and
//! drops every capability but one: CAP_KILL, because the kernel checks the
//! dying parent's credentials before it delivers init's parent-death
//! signal, and init is another uid by then (without it, a killed helper
//! left init running).
#![allow(unsafe_code)] // capset(2) and prctl(2): raw system calls with integer or plain-data arguments

use nix::unistd::{Gid, Uid};

/// `struct __user_cap_header_struct` with `_LINUX_CAPABILITY_VERSION_3`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

fn prctl(op: libc::c_int, a: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(op, a, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `CAP_KILL`'s number.
const CAP_KILL: u64 = 5;

/// Empty the bounding and ambient sets (needs CAP_SETPCAP, which the
/// caller must still have): nothing can be regained from here on, not even
/// by an exec.
pub(super) fn drop_bounding() -> Result<(), String> {
    drop_bounding_but(0)
}

/// The helper, right after it made the namespaces and before it forks init:
/// the bounding set keeps only `CAP_KILL` (the helper's own need). The
/// bounding set limits what an exec can grant, not what a process holds, so
/// init builds the sandbox with its capabilities as before; init and the
/// program's process inherit the narrowed set and each drop one capability
/// instead of forty (a `PR_CAPBSET_DROP` is a credential change, and a
/// hundred of them per run were measurable).
pub(super) fn narrow_bounding_before_init() -> Result<(), String> {
    drop_bounding_but(1 << CAP_KILL)
}

/// [`drop_bounding`], keeping the capabilities in `keep` (a bit mask).
/// Capabilities already out of the set are left alone (read, not dropped).
fn drop_bounding_but(keep: u64) -> Result<(), String> {
    for cap in (0..64u64).filter(|c| keep & (1 << c) == 0) {
        // 0: already out; -1 (EINVAL): past the kernel's last capability.
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } != 1 {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0
            && nix::errno::Errno::last() != nix::errno::Errno::EINVAL
        {
            return Err(format!("PR_CAPBSET_DROP {cap}: {}", std::io::Error::last_os_error()));
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 {
        return Err(format!("clear the ambient capabilities: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Empty the effective, permitted and inheritable sets (after any uid
/// change that still needed them).
pub(super) fn clear_caps() -> Result<(), String> {
    set_caps(0)
}

/// Effective and permitted become `keep` (a bit mask), inheritable empty.
fn set_caps(keep: u64) -> Result<(), String> {
    let mut hdr = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let half = |i: u32| CapData { effective: (keep >> i) as u32, permitted: (keep >> i) as u32, inheritable: 0 };
    let data = [half(0), half(32)];
    // SAFETY: capset reads the header and two data structs, all alive for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) } != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// init, once the sandbox is built: become `ids` (root mode; `None` in a
/// user namespace, where init already is the invoking user's uid) with no
/// capability, no_new_privs, not dumpable. Returns what it now holds, read
/// back from the kernel (for the host's report), or why it could not drop.
pub(super) fn drop_init(ids: Option<(u32, u32)>) -> Result<String, String> {
    if let Some((uid, gid)) = ids {
        if uid == 0 || gid == 0 {
            return Err("refusing to leave init as root: the sandbox has no uid of its own".into());
        }
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    }
    drop_bounding()?;
    if let Some((uid, gid)) = ids {
        let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
        nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid {gid}: {e}"))?;
        nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid {uid}: {e}"))?;
    }
    clear_caps()?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    let held = held()?;
    if !held.none() {
        return Err(format!("init still holds capabilities after dropping them: {}", held.describe()));
    }
    Ok(held.describe())
}

/// The helper, once init exists: it only waits for init (and says how init
/// ended). Every capability goes but CAP_KILL (see the module's doc); its
/// uid stays (it is outside the program's pid namespace: the program cannot
/// name it).
pub(super) fn drop_helper() -> Result<String, String> {
    let keep = 1 << CAP_KILL;
    drop_bounding_but(keep)?;
    set_caps(keep)?;
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    let held = held()?;
    if !held.only(keep) {
        return Err(format!("the helper still holds more than CAP_KILL after dropping: {}", held.describe()));
    }
    Ok(held.describe())
}

/// No capability in any set (a process forked from a dropped init).
pub(super) fn holds_nothing() -> bool {
    held().is_ok_and(|h| h.caps.iter().all(|(_, v)| *v == 0))
}

/// This process's credentials, asked of the kernel (capget, prctl): the
/// helper cannot read its own `/proc/self` once init has pivoted into the
/// sandbox's root, whose /proc belongs to a pid namespace it is not in.
#[derive(Debug, Default, PartialEq)]
struct Held {
    uid: u32,
    /// (set, bits): effective, permitted, inheritable, ambient, bounding.
    caps: Vec<(&'static str, u64)>,
    no_new_privs: bool,
    dumpable: bool,
}

impl Held {
    fn none(&self) -> bool {
        self.only(0)
    }

    /// Nothing but `keep` in the effective, permitted and bounding sets,
    /// nothing inheritable or ambient; no_new_privs; not dumpable.
    fn only(&self, keep: u64) -> bool {
        let want = |k: &str| if matches!(k, "inheritable" | "ambient") { 0 } else { keep };
        self.no_new_privs && !self.dumpable && self.caps.len() == 5 && self.caps.iter().all(|(k, v)| *v == want(k))
    }

    fn describe(&self) -> String {
        let caps = if self.caps.iter().all(|(_, v)| *v == 0) {
            "no capabilities (effective, permitted, inheritable, ambient and bounding sets empty)".to_string()
        } else if self.caps.iter().all(|(k, v)| *v == 0 || (*v == 1 << CAP_KILL && *k != "inheritable")) {
            "CAP_KILL only (effective, permitted and bounding)".to_string()
        } else {
            self.caps.iter().filter(|(_, v)| *v != 0).map(|(k, v)| format!("{k} {v:#x}")).collect::<Vec<_>>().join(", ")
        };
        let nnp = if self.no_new_privs { "no_new_privs" } else { "may gain privileges (no_new_privs unset)" };
        let dump = if self.dumpable { "dumpable" } else { "not dumpable" };
        format!("uid {}, {caps}, {nnp}, {dump}", self.uid)
    }
}

fn held() -> Result<Held, String> {
    let mut hdr = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two data structs into `data`, alive for the call.
    if unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) } != 0 {
        return Err(format!("capget: {}", std::io::Error::last_os_error()));
    }
    let wide = |f: fn(&CapData) -> u32| u64::from(f(&data[0])) | u64::from(f(&data[1])) << 32;
    let (mut ambient, mut bounding) = (0u64, 0u64);
    for cap in 0..64u64 {
        // SAFETY: prctl with integer arguments only; -1 (EINVAL) past the
        // kernel's last capability.
        let (a, b) = unsafe {
            (
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_IS_SET, cap, 0, 0),
                libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0),
            )
        };
        ambient |= u64::from(a == 1) << cap;
        bounding |= u64::from(b == 1) << cap;
    }
    // SAFETY: prctl with integer arguments only.
    let (nnp, dumpable) =
        unsafe { (libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0)) };
    Ok(Held {
        uid: nix::unistd::geteuid().as_raw(),
        caps: vec![
            ("effective", wide(|d| d.effective)),
            ("permitted", wide(|d| d.permitted)),
            ("inheritable", wide(|d| d.inheritable)),
            ("ambient", ambient),
            ("bounding", bounding),
        ],
        no_new_privs: nnp == 1,
        dumpable: dumpable != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_held_is_said_and_nothing_is_claimed_unproved() {
        let empty = ["effective", "permitted", "inheritable", "ambient", "bounding"].map(|k| (k, 0u64)).to_vec();
        let none = Held { uid: 7, caps: empty.clone(), no_new_privs: true, dumpable: false };
        assert!(none.none(), "{none:?}");
        assert!(none.describe().starts_with("uid 7, no capabilities"), "{}", none.describe());
        assert!(!Held { dumpable: true, ..Held { caps: empty.clone(), ..none } }.none());
        assert!(!Held { no_new_privs: false, caps: empty.clone(), ..none }.none());
        let mut some = empty.clone();
        some[4].1 = 0x1ff_ffff_ffff;
        let h = Held { caps: some, uid: 7, no_new_privs: true, dumpable: false };
        assert!(!h.none());
        assert!(h.describe().contains("bounding 0x1ffffffffff"), "{}", h.describe());
        // No sets read: nothing is proved.
        assert!(!Held { caps: vec![], ..h }.none());
        let kill = ["effective", "permitted", "inheritable", "ambient", "bounding"]
            .map(|k| (k, if matches!(k, "inheritable" | "ambient") { 0 } else { 1 << CAP_KILL }))
            .to_vec();
        let helper = Held { uid: 0, caps: kill, no_new_privs: true, dumpable: false };
        assert!(helper.only(1 << CAP_KILL) && !helper.none());
        assert!(helper.describe().contains("CAP_KILL only"), "{}", helper.describe());
        // This test process (root or not) has a bounding set: it is seen.
        assert!(held().unwrap().caps.iter().any(|(k, v)| *k == "bounding" && *v != 0));
    }
}
