# sandbench's scratch guard filter, for the guest side (the docker loader and
# the microVM agent): the calls that can free scratch space wait for the
# watcher (SECCOMP_RET_USER_NOTIF) until it has checked the mounts. Prepended
# to guest/docker_loader.py and guest/agent.py at build time, like
# guest/egress_relay.py; it defines names only and imports nothing until
# used. The list is the host's `guarded()` in src/highwater.rs (the process
# tier's); a unit test there checks the two agree.

SCRATCH_GUARDED = [
    # (x86_64, aarch64, argument index or None, mask of that argument)
    (263, 35, None, 0),  # unlinkat
    (316, 276, None, 0),  # renameat2
    (76, 45, None, 0),  # truncate
    (77, 46, None, 0),  # ftruncate
    (437, 437, None, 0),  # openat2 (its flags are in memory)
    (257, 56, 2, 0o1000),  # openat with O_TRUNC
    (285, 47, 1, 0x02 | 0x08),  # fallocate punching a hole or collapsing a range
    (87, None, None, 0),  # unlink
    (84, None, None, 0),  # rmdir
    (82, None, None, 0),  # rename
    (264, 38, None, 0),  # renameat
    (85, None, None, 0),  # creat
    (2, None, 1, 0o1000),  # open with O_TRUNC
]


def scratch_guard_filter():
    """The filter as raw sock_filter bytes, its instruction count, and the
    architecture's column in SCRATCH_GUARDED (0 x86_64, 1 aarch64)."""
    import os
    import struct

    col = 0 if os.uname().machine == "x86_64" else 1
    arch = (0xC000003E, 0xC00000B7)[col]
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, notify = 0x7FFF0000, 0x7FC00000
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, allow)]
    for row in SCRATCH_GUARDED:
        nr, arg, mask = row[col], row[2], row[3]
        if nr is None:
            continue
        if arg is None:
            prog += [(ld, 0, 0, 0), (jeq, 0, 1, nr), (ret, 0, 0, notify)]
        else:
            prog += [(ld, 0, 0, 0), (jeq, 0, 3, nr), (ld, 0, 0, 16 + 8 * arg), (jset, 0, 1, mask), (ret, 0, 0, notify)]
    prog += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", c, jt, jf, k) for c, jt, jf, k in prog), len(prog), col
