# name: refused-calls
# tries: every call sandbench's filters refuse on every tier (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, unshare, mounts, keyrings, bpf, io_uring, clocks, ...), clone with each refused flag, clone3 and an x32 call, with arguments an unfiltered kernel would answer
# must: refuse each with EPERM (ENOSYS for clone3 and for calls the kernel does not have), before the kernel looks at the arguments
# expect: *=ok bwrap=escaped nsjail=escaped srt=escaped codex=escaped firejail=escaped
# escaped-if: "ALLOWED"
# Issue 42, item 8: the containers' and the microVM guest's filter let
# ptrace, process_vm_readv/writev and pidfd_getfd through, which the process
# tier refused. One table (tier/process/seccomp.rs: DENIED, CLONE_FLAGS) is
# now every tier's, and this sample tries each row of it. The arguments are
# ones an unfiltered kernel answers with something other than EPERM or
# ENOSYS where there are such (reading its own memory, a pidfd of itself,
# unshare(0), adjtimex reading the clock, a bad pointer the kernel would
# fault on): such an answer means the call reached the kernel, and is
# printed as ALLOWED (a breach of the table). Calls whose every path starts
# with a capability check answer EPERM from the kernel too: the tests run
# the filters themselves over every call for those. Every call is harmless
# if it does get through (no tracing, no clock set, children exit at once).
import ctypes
import errno
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X86 = platform.machine() == "x86_64"
col = 0 if X86 else 1
L = ctypes.c_long

buf = ctypes.create_string_buffer(64)
other = ctypes.create_string_buffer(64)


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


iov_local = Iovec(ctypes.addressof(buf), 16)
iov_remote = Iovec(ctypes.addressof(other), 16)
# struct timeval with tv_usec out of range: EINVAL from an unfiltered kernel.
bad_tv = (ctypes.c_long * 2)(0, 2_000_000)
# struct timex (208 bytes), modes 0: a read of the clock, open to anyone.
timex = ctypes.create_string_buffer(256)
me = os.getpid()
pidfd = -1
try:
    pidfd = os.pidfd_open(me)
except (AttributeError, OSError):
    pass
BAD = L(8)  # a pointer the kernel faults on: EFAULT unfiltered

# name: ((x86_64, aarch64), args). None: the arch has no such call.
CALLS = {
    "ptrace": ((101, 117), (3, os.getppid(), 0, 0)),  # PTRACE_PEEKUSER of a process not traced: ESRCH
    "process_vm_readv": ((310, 270), (me, ctypes.byref(iov_local), 1, ctypes.byref(iov_remote), 1, 0)),
    "process_vm_writev": ((311, 271), (me, ctypes.byref(iov_local), 1, ctypes.byref(iov_remote), 1, 0)),
    "pidfd_getfd": ((438, 438), (pidfd, 1, 0)),
    "kcmp": ((312, 272), (me, me, 0, 1, 1)),  # KCMP_FILE: the same file, 0
    "settimeofday": ((164, 170), (ctypes.byref(bad_tv), None)),
    "clock_settime": ((227, 112), (0x7FFF, BAD)),  # no such clock: EINVAL
    "clock_adjtime": ((305, 266), (0x7FFF, BAD)),
    "adjtimex": ((159, 171), (timex,)),
    "vhangup": ((153, 58), ()),
    "iopl": ((172, None), (0,)),
    "ioperm": ((173, None), (0x80, 1, 0)),  # turning access off needs nothing
    "io_uring_setup": ((425, 425), (0, BAD)),
    "io_uring_enter": ((426, 426), (-1, 0, 0, 0, None, 0)),
    "io_uring_register": ((427, 427), (-1, 0, None, 0)),
    "unshare": ((272, 97), (0,)),
    "setns": ((308, 268), (-1, 0)),
    "mount": ((165, 40), (BAD, BAD, BAD, 0, None)),
    "umount2": ((166, 39), (BAD, 0xFFFF)),
    "pivot_root": ((155, 41), (BAD, BAD)),
    "chroot": ((161, 51), (BAD,)),
    "open_tree": ((428, 428), (-1, BAD, 0xFFFFFFFF)),
    "move_mount": ((429, 429), (-1, BAD, -1, BAD, 0xFFFFFFFF)),
    "fsopen": ((430, 430), (BAD, 0xFFFFFFFF)),
    "fsconfig": ((431, 431), (-1, 0xFFFF, None, None, 0)),
    "fsmount": ((432, 432), (-1, 0xFFFFFFFF, 0)),
    "fspick": ((433, 433), (-1, BAD, 0xFFFFFFFF)),
    "mount_setattr": ((442, 442), (-1, BAD, 0xFFFFFFFF, None, 0)),
    "keyctl": ((250, 219), (0xFFFF, 0, 0, 0, 0)),
    "add_key": ((248, 217), (BAD, BAD, None, 0, 0)),
    "request_key": ((249, 218), (BAD, BAD, None, 0)),
    "bpf": ((321, 280), (0xFFFF, None, 0)),
    "perf_event_open": ((298, 241), (BAD, 0, -1, -1, 0)),
    "userfaultfd": ((323, 282), (0xFFFFFFFF,)),
    "kexec_load": ((246, 104), (0, 0, None, 0xFFFFFFFF)),
    "kexec_file_load": ((320, 294), (-1, -1, 0, None, 0xFFFFFFFF)),
    "init_module": ((175, 105), (None, 0, BAD)),
    "finit_module": ((313, 273), (-1, BAD, 0xFFFFFFFF)),
    "delete_module": ((176, 106), (BAD, 0)),
    "name_to_handle_at": ((303, 264), (-1, BAD, None, None, 0xFFFFFFFF)),
    "open_by_handle_at": ((304, 265), (-1, BAD, 0)),
    "acct": ((163, 89), (BAD,)),
    "swapon": ((167, 224), (BAD, 0)),
    "swapoff": ((168, 225), (BAD,)),
    "reboot": ((169, 142), (0, 0, 0, None)),  # bad magic: EINVAL
    "syslog": ((103, 116), (10, None, 0)),  # SYSLOG_ACTION_SIZE_BUFFER
    "quotactl": ((179, 60), (0xFFFFFFFF, BAD, 0, None)),
    "lookup_dcookie": ((212, 18), (0, None, 0)),
    "fanotify_init": ((300, 262), (0x200, 0)),  # FAN_REPORT_FID: open to anyone since 5.13
    "quotactl_fd": ((443, 443), (-1, 0, 0, None)),  # EBADF
    "open_tree_attr": ((467, 467), (-1, BAD, 0, None, 0)),  # EBADF (ENOSYS before 6.15)
    "syncfs": ((306, 267), (-1,)),  # EBADF
    "sync": ((162, 81), ()),  # returns 0: it cannot fail
}
# The refused clone flags (the table's CLONE_FLAGS), each with SIGCHLD.
CLONE = (56, 220)
CLONE_FLAGS = {
    "CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x00020000, "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWCGROUP": 0x02000000, "CLONE_PARENT": 0x00008000,
}
REFUSED = (errno.EPERM, errno.ENOSYS)


def arg(a):
    return L(a) if isinstance(a, int) else a


def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(L(nr), *[arg(a) for a in args])
    return r, ctypes.get_errno()


def report(what, r, e):
    if r == -1 and e in REFUSED:
        print(f"refused {what}: {errno.errorcode[e]}")
    elif r == -1:
        print(f"ALLOWED {what}: the kernel answered {errno.errorcode.get(e, e)}")
    else:
        print(f"ALLOWED {what}: returned {r}")


for name, (nrs, args) in CALLS.items():
    if nrs[col] is None:
        continue
    r, e = call(nrs[col], *args)
    if r >= 0 and name in ("pidfd_getfd", "fanotify_init", "io_uring_setup", "userfaultfd"):
        os.close(r)
    report(name, r, e)

for name, flag in CLONE_FLAGS.items():
    # A fork (no CLONE_VM) whose child leaves at once, if it exists at all.
    r, e = call(CLONE[col], flag | 17, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)
    if r > 0 and flag != 0x00008000:
        os.waitpid(r, 0)
    report(f"clone({name})", r, e)

# clone3 with a size too small to hold its arguments: EINVAL unfiltered.
report("clone3", *call(435, None, 0))

if X86:
    # unshare(0) through the x32 ABI: ENOSYS where the kernel has no x32.
    report("x32 unshare", *call(0x40000000 | 272, 0))



def capabilities(op):
    # The set, asked of the kernel one capability at a time (gVisor's
    # /proc/self/status shows no ambient set and no no_new_privs); the
    # first refusal is the end of the kernel's list, or a kernel that has
    # no such set.
    held = 0
    for cap in range(64):
        r = libc.prctl(*[L(a) for a in op(cap)])
        if r < 0:
            break
        held |= (r == 1) << cap
    return held


# What an exec could still grant (the tests hold every tier to the process
# tier's: nothing).
bounding = capabilities(lambda c: (23, c, 0, 0, 0))  # PR_CAPBSET_READ
ambient = capabilities(lambda c: (47, 1, c, 0, 0))  # PR_CAP_AMBIENT_IS_SET
nnp = libc.prctl(L(39), L(0), L(0), L(0), L(0))  # PR_GET_NO_NEW_PRIVS
print(f"holds: bounding={bounding:016x} ambient={ambient:016x} no_new_privs={nnp}")
print("done")
