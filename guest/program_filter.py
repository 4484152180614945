# sandbench's seccomp filter for the program, on the guest side: installed
# by the docker loader in the program's process on runc and runsc alike (so
# both refuse the same calls; runsc 20221219 cannot load an OCI profile:
# with --oci-seccomp threads fail; on runc it stacks on Docker's default
# profile), and by the microVM agent in the program's process (where the
# guest kernel is the boundary that keeps the program from the agent, and
# this keeps that kernel's surface small). Prepended to
# guest/docker_loader.py and guest/agent.py at build time, like
# guest/scratch_guard.py; it defines names only and imports nothing until
# used.
#
# Denied (EPERM): the process tier's table, row for row
# (crates/sandbench-core/src/tier/process/seccomp.rs: DENIED, CLONE_FLAGS,
# FAMILIES, the source of truth; its test runs this filter and that one over
# every syscall number, clone flag and socket family and fails on any
# difference): ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, io_uring,
# namespaces (unshare, setns, clone with any CLONE_NEW* flag or
# CLONE_PARENT), mounts, keyrings, bpf, perf events, userfaultfd, module and
# kexec loading, file handles, swap, reboot, syslog, quotas, setting the
# clocks, vhangup, fanotify, iopl/ioperm; clone3 gives ENOSYS (its flags
# cannot be inspected; libc falls back to clone); calls of any other ABI
# (i386, x32) are refused.
#
# Socket address families: an allow list, the process tier's
# (src/tier/process/seccomp.rs, FAMILIES, which says why each): unix, inet,
# inet6 and netlink with NETLINK_ROUTE only; every other family (vsock,
# packet, other netlink protocols, bluetooth, can, xdp, alg, tipc, rds, ...)
# gives EAFNOSUPPORT, as from a kernel built without it, and socketpair of
# anything but unix too.

PROGRAM_DENY = {
    # name: (x86_64, aarch64); None: the arch has no such call.
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "clock_adjtime": (305, 266), "adjtimex": (159, 171), "vhangup": (153, 58),
    "iopl": (172, None), "ioperm": (173, None),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265), "acct": (163, 89), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "syslog": (103, 116), "quotactl": (179, 60), "lookup_dcookie": (212, 18),
    "fanotify_init": (300, 262), "kcmp": (312, 272), "quotactl_fd": (443, 443),
    "open_tree_attr": (467, 467), "sync": (162, 81), "syncfs": (306, 267),
}
PROGRAM_CLONE = (56, 220)
PROGRAM_CLONE3 = (435, 435)
PROGRAM_CLONE_REFUSED = 0x7E028000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|PARENT
PROGRAM_SOCKET = (41, 198)
PROGRAM_SOCKETPAIR = (53, 199)
# AF_UNIX, AF_INET, AF_INET6, AF_NETLINK; NETLINK_ROUTE is protocol 0.
PROGRAM_FAMILIES = (1, 2, 10, 16)


def program_filter():
    """The filter as raw sock_filter bytes and its instruction count."""
    import os
    import struct

    machine = os.uname().machine
    if machine == "x86_64":
        arch, col = 0xC000003E, 0
    elif machine == "aarch64":
        arch, col = 0xC00000B7, 1
    else:
        raise OSError("no seccomp table for " + machine)
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    eafnosupport = errno | 97
    unix, inet, inet6, netlink = PROGRAM_FAMILIES
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, errno | 1), (ld, 0, 0, 0)]
    if col == 0:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, errno | 1)]
    for nrs in PROGRAM_DENY.values():
        if nrs[col] is not None:
            prog += [(jeq, 0, 1, nrs[col]), (ret, 0, 0, errno | 1)]
    prog += [(jeq, 0, 1, PROGRAM_CLONE3[col]), (ret, 0, 0, errno | 38)]
    prog += [(jeq, 0, 3, PROGRAM_CLONE[col]), (ld, 0, 0, 16), (jset, 0, 1, PROGRAM_CLONE_REFUSED), (ret, 0, 0, errno | 1)]
    # socket(family, type, protocol): the allowed families go on; netlink
    # only with protocol 0 (NETLINK_ROUTE).
    prog += [
        (ld, 0, 0, 0),
        (jeq, 0, 9, PROGRAM_SOCKET[col]),
        (ld, 0, 0, 16),
        (jeq, 6, 0, unix),
        (jeq, 5, 0, inet),
        (jeq, 4, 0, inet6),
        (jeq, 0, 2, netlink),
        (ld, 0, 0, 32),
        (jeq, 1, 0, 0),
        (ret, 0, 0, eafnosupport),
        (ret, 0, 0, allow),
    ]
    # socketpair(family, ...): unix only.
    prog += [(ld, 0, 0, 0), (jeq, 0, 3, PROGRAM_SOCKETPAIR[col]), (ld, 0, 0, 16), (jeq, 1, 0, unix), (ret, 0, 0, eafnosupport)]
    prog += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in prog), len(prog)


def install_program_filter(libc):
    """no_new_privs, then the filter, in the calling process (`libc` is a
    ctypes CDLL with use_errno)."""
    import ctypes

    raw, n = program_filter()
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fp = Fprog(n, ctypes.addressof(buf))
    ul = ctypes.c_ulong
    if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, ul(2), ctypes.byref(fp), ul(0), ul(0)) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "seccomp")
