//! The seccomp filter of the process tier: a deny list of syscalls that an
//! untrusted program has no business making and that widen the kernel's
//! attack surface (ptrace, mount, kexec, bpf, keyctl, perf_event_open, ...),
//! unix sockets other than socketpair(2), and an allow list of socket
//! address families ([`FAMILIES`]).
//!
//! [`DENIED`], [`CLONE_FLAGS`] and [`FAMILIES`] are the one table of what a
//! program may not call on any tier (issue 42, item 8): the containers' and
//! the microVM guest's filter (`guest/program_filter.py`) must refuse exactly
//! the same calls, which a test here checks by running both filters over
//! every syscall number, clone flag and socket family. docs/tiers.md lists
//! the one difference a tier's boundary makes moot.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Syscalls refused with EPERM, whatever their arguments, on every tier.
pub const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    // open_tree with mount attributes (6.15; not in libc yet, and the same
    // number on every architecture, as every call since 424).
    ("open_tree_attr", 467),
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
    // The same call by a descriptor (5.14): a second spelling of quotactl.
    ("quotactl_fd", libc::SYS_quotactl_fd),
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
    ("fanotify_init", libc::SYS_fanotify_init),
    // Writeback of the host's whole disk (sync) or of the file system a
    // read-only bind shows (syncfs on `/usr`): a program held its processes in
    // uninterruptible sleep past its own exit and stalled every writer on the
    // host. A sandbox's scratch is memory: nothing there needs them.
    // `sync(2)` cannot fail by its contract, so libc's callers see nothing.
    ("sync", libc::SYS_sync),
    ("syncfs", libc::SYS_syncfs),
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

/// clone(2) flags refused with EPERM on every tier: those that create namespaces, so that
/// a program cannot build itself a fresh user namespace with full
/// capabilities, and `CLONE_PARENT` (issue 42): its process's parent would
/// be the program's parent, not the program. A zygote's fork has the zygote
/// there, outside the sandbox, and a process parented on it is reaped by
/// nothing in the sandbox (the zygote reaps every child all the same: this
/// is the second wall, not the only one). No libc, runtime or interpreter
/// asks for it to start a process or a thread; `CLONE_THREAD` without
/// `CLONE_VM` the kernel already refuses (EINVAL).
pub const CLONE_FLAGS: &[(&str, u64)] = &[
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

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The second filter, by hand (seccompiler's rules compare a syscall
/// number whole): ENOSYS for clone3, and on x86_64 EPERM for every call of
/// the x32 ABI, which has the same AUDIT_ARCH_X86_64 and its number with bit
/// 30 set. Without that, on a kernel built with x32 support, `mount |
/// 0x4000_0000` passed every filter here (the guest's filter, and the
/// scratch guard where there is one, refused it already). Another arch is
/// killed, as seccompiler's filters do.
fn clone3_and_x32() -> BpfProgram {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let f = |code: u32, jt: u8, jf: u8, k: u32| seccompiler::sock_filter { code: code as u16, jt, jf, k };
    let ld = BPF_LD | BPF_W | BPF_ABS;
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | e as u32;
    let mut p = vec![
        f(ld, 0, 0, 4),
        f(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH),
        f(BPF_RET | BPF_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        f(ld, 0, 0, 0),
        f(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, libc::SYS_clone3 as u32),
        f(BPF_RET | BPF_K, 0, 0, errno(libc::ENOSYS)),
    ];
    #[cfg(target_arch = "x86_64")]
    p.extend([f(BPF_JMP | libc::BPF_JGE | BPF_K, 0, 1, 0x4000_0000), f(BPF_RET | BPF_K, 0, 0, errno(libc::EPERM))]);
    p.push(f(BPF_RET | BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    p
}

/// The three filters: EPERM for the deny list and the refused clone flags;
/// ENOSYS for clone3, whose flags live in memory a filter cannot read (libc
/// then falls back to clone, which the first filter checks), and EPERM for
/// x32 calls; EAFNOSUPPORT for socket families outside [`FAMILIES`].
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
    let families = SeccompFilter::new(
        family_rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    Ok(vec![
        deny.try_into().map_err(|e| format!("seccomp: {e}"))?,
        clone3_and_x32(),
        families.try_into().map_err(|e| format!("seccomp: {e}"))?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile() {
        let p = programs().unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0].len() > DENIED.len());
    }

    type Insn = (u16, u8, u8, u32);

    /// A classic BPF program over one `seccomp_data` (nr, arch, ip, args),
    /// as the kernel runs it: the return value. Only what seccomp filters
    /// use; anything else fails the test rather than being guessed at.
    fn run(prog: &[Insn], data: &[u8; 64]) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let (code, jt, jf, k) = *prog.get(pc).unwrap_or_else(|| panic!("ran off the end at {pc}"));
            pc += 1;
            let jump = |cond: bool| if cond { jt as usize } else { jf as usize };
            match code as u32 {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    acc = u32::from_ne_bytes(data[k as usize..k as usize + 4].try_into().unwrap())
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += k as usize,
                c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => pc += jump(acc == k),
                c if c == libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K => pc += jump(acc > k),
                c if c == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K => pc += jump(acc >= k),
                c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => pc += jump(acc & k != 0),
                c if c == libc::BPF_RET | libc::BPF_K => return k,
                other => panic!("instruction {other:#x} at {}", pc - 1),
            }
        }
    }

    /// Filters stacked in this order (first installed first): the action
    /// the kernel takes, the one of highest precedence, the latest
    /// installed among equals (kernel/seccomp.c, seccomp_run_filters).
    fn stacked(progs: &[Vec<Insn>], data: &[u8; 64]) -> u32 {
        let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        let mut ret = libc::SECCOMP_RET_ALLOW;
        for p in progs.iter().rev() {
            let r = run(p, data);
            if action(r) < action(ret) {
                ret = r;
            }
        }
        ret
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    fn verdict(r: u32) -> String {
        match r & libc::SECCOMP_RET_ACTION_FULL {
            libc::SECCOMP_RET_ALLOW => "allowed".into(),
            libc::SECCOMP_RET_ERRNO => format!("errno {}", r & libc::SECCOMP_RET_DATA),
            libc::SECCOMP_RET_KILL_PROCESS => "killed".into(),
            other => format!("action {other:#x}"),
        }
    }

    /// The guest's filter (guest/program_filter.py), as a python3 of the
    /// host builds it, and the names of its deny list.
    fn guest() -> (Vec<Insn>, Vec<String>) {
        let script = concat!(
            include_str!("../../../../../guest/program_filter.py"),
            "import sys\nraw, n = program_filter()\nsys.stdout.buffer.write(raw)\n",
            "sys.stderr.write(' '.join(PROGRAM_DENY))\n"
        );
        let out = std::process::Command::new("python3").args(["-c", script]).output().expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let prog = out
            .stdout
            .chunks_exact(8)
            .map(|i| (u16::from_ne_bytes([i[0], i[1]]), i[2], i[3], u32::from_ne_bytes(i[4..8].try_into().unwrap())))
            .collect();
        (prog, String::from_utf8_lossy(&out.stderr).split_whitespace().map(String::from).collect())
    }

    fn ours() -> Vec<Vec<Insn>> {
        programs().unwrap().iter().map(|p| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect()).collect()
    }

    /// Every call, as both filters answer it (issue 42, item 8: the
    /// containers' and the guest's filter let ptrace, process_vm_readv/writev
    /// and pidfd_getfd through, which this one refuses): each syscall number
    /// of this arch and of x32 with zero arguments, clone with each flag
    /// bit, socket with each family (and each netlink protocol), socketpair
    /// with each family. They must answer alike, but for the one difference
    /// docs/tiers.md lists: `socket(AF_UNIX)`, refused here only (the
    /// process tier's sandbox shares the host's file system, where a
    /// pathname socket Landlock cannot confine may be bound; a container or
    /// a guest has its own).
    #[test]
    fn the_guests_program_filter_refuses_what_this_one_does() {
        let (guest, _) = guest();
        let (guest, ours) = (vec![guest], ours());
        let mut cases: Vec<(String, u32, [u64; 6])> = vec![];
        for nr in 0..1024u32 {
            cases.push((format!("syscall {nr}"), nr, [0; 6]));
            #[cfg(target_arch = "x86_64")]
            cases.push((format!("x32 syscall {nr}"), nr | 0x4000_0000, [0; 6]));
        }
        let clone = libc::SYS_clone as u32;
        for bit in 0..64 {
            cases.push((format!("clone flag bit {bit}"), clone, [1 << bit | libc::SIGCHLD as u64, 0, 0, 0, 0, 0]));
        }
        let (socket, pair) = (libc::SYS_socket as u32, libc::SYS_socketpair as u32);
        for family in 0..64u64 {
            for proto in 0..32u64 {
                let what = format!("socket({family}, SOCK_RAW, {proto})");
                cases.push((what, socket, [family, libc::SOCK_RAW as u64, proto, 0, 0, 0]));
            }
            cases.push((format!("socketpair({family})"), pair, [family, libc::SOCK_STREAM as u64, 0, 0, 0, 0]));
        }
        let mut differ = vec![];
        for (what, nr, args) in &cases {
            let d = data(AUDIT_ARCH, *nr, *args);
            let (g, o) = (verdict(stacked(&guest, &d)), verdict(stacked(&ours, &d)));
            if g != o {
                differ.push(format!("{what}: guest {g}, process {o}"));
            }
        }
        let unix = libc::AF_UNIX;
        let moot: Vec<String> = (0..32)
            .map(|p| format!("socket({unix}, SOCK_RAW, {p}): guest allowed, process errno {}", libc::EPERM))
            .collect();
        assert_eq!(differ, moot);
        // Another arch (i386 on x86_64, arm on aarch64): refused by both,
        // the process tier by killing the process (seccompiler's check).
        let other = AUDIT_ARCH & !0x8000_0000;
        for nr in 0..512u32 {
            let d = data(other, nr, [0; 6]);
            assert_eq!(verdict(stacked(&guest, &d)), format!("errno {}", libc::EPERM), "foreign syscall {nr}");
            assert_eq!(verdict(stacked(&ours, &d)), "killed", "foreign syscall {nr}");
        }
    }

    /// The filters refuse the table's rows and nothing else that zero
    /// arguments reach; the guest's deny list has the same rows by name (so
    /// its other architecture's column has them too).
    #[test]
    fn the_filters_refuse_the_table_and_nothing_else() {
        let ours = ours();
        let mut refused: Vec<(i64, String)> = (0..1024i64)
            .filter_map(|nr| {
                let v = verdict(stacked(&ours, &data(AUDIT_ARCH, nr as u32, [0; 6])));
                (v != "allowed").then_some((nr, v))
            })
            .collect();
        refused.sort();
        let eperm = format!("errno {}", libc::EPERM);
        let mut want: Vec<(i64, String)> = DENIED.iter().map(|(_, nr)| (*nr, eperm.clone())).collect();
        let eafnosupport = format!("errno {}", libc::EAFNOSUPPORT);
        want.push((libc::SYS_clone3, format!("errno {}", libc::ENOSYS)));
        // AF_UNSPEC is outside the family allow list.
        want.push((libc::SYS_socket, eafnosupport.clone()));
        want.push((libc::SYS_socketpair, eafnosupport));
        want.sort();
        assert_eq!(refused, want);
        let (_, mut names) = guest();
        let mut table: Vec<String> = DENIED.iter().map(|(n, _)| n.to_string()).collect();
        #[cfg(not(target_arch = "x86_64"))]
        table.extend(["iopl".to_string(), "ioperm".to_string()]);
        names.sort();
        table.sort();
        assert_eq!(names, table);
    }
}
