//! The seccomp filter of the process tier: a deny list of syscalls that an
//! untrusted program has no business making and that widen the kernel's
//! attack surface (ptrace, mount, kexec, bpf, keyctl, perf_event_open, ...),
//! unix sockets other than socketpair(2), and an allow list of socket
//! address families ([`FAMILIES`]).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Syscalls refused with EPERM, whatever their arguments.
pub(crate) const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("reboot", libc::SYS_reboot),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("syslog", libc::SYS_syslog),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("vhangup", libc::SYS_vhangup),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    #[cfg(target_arch = "x86_64")]
    ("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", libc::SYS_ioperm),
];

/// The socket address families a program may use; every other family is
/// refused with EAFNOSUPPORT, as by a kernel built without it (issue 21,
/// item 4: a "no network" program opened `AF_VSOCK` sockets and bound vsock
/// ports in the host's one global vsock port space). An allow list, so that
/// a family added to the kernel later is refused too:
/// - `AF_UNIX`: `socketpair(2)` only (pipes between a program's own
///   processes: multiprocessing, asyncio); `socket(AF_UNIX)` is refused
///   by the deny filter;
/// - `AF_INET`, `AF_INET6`: the sandbox's own network namespace, loopback
///   only, where a run with an allow list finds its egress relay;
/// - `AF_NETLINK` with `NETLINK_ROUTE` only: what libc's `getifaddrs`,
///   `if_nameindex` and `getaddrinfo(AI_ADDRCONFIG)` ask, answered about
///   the sandbox's own namespace; changing anything there needs
///   `CAP_NET_ADMIN`, which the program lacks. Other netlink protocols
///   (audit, uevents, sock_diag, netfilter, xfrm, generic families such as
///   taskstats) are refused.
pub(crate) const FAMILIES: &[(&str, i32)] = &[
    ("unix", libc::AF_UNIX),
    ("inet", libc::AF_INET),
    ("inet6", libc::AF_INET6),
    ("netlink (route)", libc::AF_NETLINK),
];

/// clone(2) flags refused with EPERM: those that create namespaces, so that
/// a program cannot build itself a fresh user namespace with full
/// capabilities, and `CLONE_PARENT` (issue 42): its process's parent would
/// be the program's parent, not the program. A zygote's fork has the zygote
/// there, outside the sandbox, and a process parented on it is reaped by
/// nothing in the sandbox (the zygote reaps every child all the same: this
/// is the second wall, not the only one). No libc, runtime or interpreter
/// asks for it to start a process or a thread; `CLONE_THREAD` without
/// `CLONE_VM` the kernel already refuses (EINVAL).
pub(crate) const CLONE_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_PARENT", libc::CLONE_PARENT as u64),
];

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp: {e:?}"))
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| format!("seccomp: {e}"))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| format!("seccomp: {e}"))
}

/// The socket rules of [`FAMILIES`]: `socket` of a family not listed, or
/// of netlink with a protocol other than `NETLINK_ROUTE`; `socketpair` of
/// any family but `AF_UNIX`.
fn family_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let others = FAMILIES.iter().map(|(_, f)| cond(0, SeccompCmpOp::Ne, *f as u64)).collect::<Result<Vec<_>, _>>()?;
    let netlink = vec![
        cond(0, SeccompCmpOp::Eq, libc::AF_NETLINK as u64)?,
        cond(2, SeccompCmpOp::Ne, libc::NETLINK_ROUTE as u64)?,
    ];
    let pair = vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?];
    Ok([(libc::SYS_socket, vec![rule(others)?, rule(netlink)?]), (libc::SYS_socketpair, vec![rule(pair)?])]
        .into_iter()
        .collect())
}

/// The three filters: EPERM for the deny list and [`CLONE_FLAGS`]; ENOSYS
/// for clone3, whose flags live in memory a filter cannot read (libc then
/// falls back to clone, which the first filter checks); EAFNOSUPPORT for
/// socket families outside [`FAMILIES`].
pub(crate) fn programs() -> Result<Vec<BpfProgram>, String> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|(_, n)| (*n, vec![])).collect();
    let clone_rules = CLONE_FLAGS
        .iter()
        .map(|(_, f)| {
            let c = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(*f), *f)
                .map_err(|e| format!("seccomp: {e}"))?;
            SeccompRule::new(vec![c]).map_err(|e| format!("seccomp: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // No unix sockets of the program's own making: a pathname socket the
    // host left in a bound directory (Landlock cannot confine those yet)
    // stays unreachable. socketpair(2) still works.
    let unix = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, libc::AF_UNIX as u64)
        .map_err(|e| format!("seccomp: {e}"))?;
    rules.insert(libc::SYS_socket, vec![SeccompRule::new(vec![unix]).map_err(|e| format!("seccomp: {e}"))?]);
    let deny = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    let clone3 = SeccompFilter::new(
        [(libc::SYS_clone3, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    let families = SeccompFilter::new(
        family_rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    Ok(vec![
        deny.try_into().map_err(|e| format!("seccomp: {e}"))?,
        clone3.try_into().map_err(|e| format!("seccomp: {e}"))?,
        families.try_into().map_err(|e| format!("seccomp: {e}"))?,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn filters_compile() {
        let p = super::programs().unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0].len() > super::DENIED.len());
    }
}
