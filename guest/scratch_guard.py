# sandbench's scratch guard filter, for the guest side (the docker loader and
# the microVM agent): the calls that can free scratch space wait for the
# watcher (SECCOMP_RET_USER_NOTIF) until it has checked the mounts, and the
# ways to free or fill it that cannot be made to wait are refused. Prepended
# to guest/docker_loader.py and guest/agent.py at build time, like
# guest/egress_relay.py; it defines names only and imports nothing until
# used. The table is the host's `rules()` in src/highwater.rs (the process
# tier's), which says why each row is there; a unit test there checks that
# the two filters are the same bytes.

SCRATCH_GUARDED = [
    # (x86_64, aarch64, what, argument index, value): what is "errno" (value
    # is the errno), "wait", "bit" (wait if the argument has a bit of value)
    # or "eq" (wait if the argument equals value).
    (425, 425, "errno", None, 1),  # io_uring_setup: EPERM
    (426, 426, "errno", None, 1),  # io_uring_enter
    (427, 427, "errno", None, 1),  # io_uring_register
    (188, 5, "errno", None, 95),  # setxattr: EOPNOTSUPP
    (189, 6, "errno", None, 95),  # lsetxattr
    (190, 7, "errno", None, 95),  # fsetxattr
    (463, 463, "errno", None, 95),  # setxattrat
    (197, 14, "errno", None, 95),  # removexattr
    (198, 15, "errno", None, 95),  # lremovexattr
    (199, 16, "errno", None, 95),  # fremovexattr
    (466, 466, "errno", None, 95),  # removexattrat
    (263, 35, "wait", None, 0),  # unlinkat
    (316, 276, "wait", None, 0),  # renameat2
    (76, 45, "wait", None, 0),  # truncate
    (77, 46, "wait", None, 0),  # ftruncate
    (437, 437, "wait", None, 0),  # openat2 (its flags are in memory)
    (257, 56, "bit", 2, 0o1000),  # openat with O_TRUNC
    (285, 47, "bit", 1, 0x02 | 0x08 | 0x10),  # fallocate punching, collapsing or zeroing a range
    (28, 233, "eq", 2, 9),  # madvise(MADV_REMOVE)
    (440, 440, "eq", 3, 9),  # process_madvise(MADV_REMOVE)
    (87, None, "wait", None, 0),  # unlink
    (84, None, "wait", None, 0),  # rmdir
    (82, None, "wait", None, 0),  # rename
    (264, 38, "wait", None, 0),  # renameat
    (85, None, "wait", None, 0),  # creat
    (2, None, "bit", 1, 0o1000),  # open with O_TRUNC
]


def scratch_guard_filter():
    """The filter as raw sock_filter bytes, its instruction count, and the
    architecture's column in SCRATCH_GUARDED (0 x86_64, 1 aarch64)."""
    import os
    import struct

    col = 0 if os.uname().machine == "x86_64" else 1
    arch = (0xC000003E, 0xC00000B7)[col]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, notify, errno = 0x7FFF0000, 0x7FC00000, 0x00050000
    enosys = errno | 38
    # Another ABI (i386, x32) is refused: its numbers would pass unseen.
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, enosys)]
    if col == 0:
        prog += [(ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, enosys)]
    for row in SCRATCH_GUARDED:
        nr, what, arg, value = row[col], row[2], row[3], row[4]
        if nr is None:
            continue
        prog += [(ld, 0, 0, 0)]
        if what == "errno":
            prog += [(jeq, 0, 1, nr), (ret, 0, 0, errno | value)]
        elif what == "wait":
            prog += [(jeq, 0, 1, nr), (ret, 0, 0, notify)]
        else:
            test = jset if what == "bit" else jeq
            prog += [(jeq, 0, 3, nr), (ld, 0, 0, 16 + 8 * arg), (test, 0, 1, value), (ret, 0, 0, notify)]
    prog += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in prog), len(prog), col
