# name: zygote-parent
# tries: make processes whose parent is its own parent (clone with CLONE_PARENT): on the process tier's warm path that is the zygote, outside the sandbox, which nothing inside reaps; one exits at once, two stay
# must: refuse the flag or reap them: no process or zombie of the run outlives its verdict (the report's processes_after)
# expect: *=ok
import ctypes
import errno
import os
import platform
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_PARENT = 0x8000
SIGCHLD = 17


def clone():
    # No stack of its own: the child goes on on a copy of this one, as after
    # a fork. SYS_clone: 56 on x86_64, 220 on aarch64.
    nr = 56 if platform.machine() == "x86_64" else 220
    pid = libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(CLONE_PARENT | SIGCHLD), None, None, None, None)
    return errno.errorcode.get(ctypes.get_errno(), "?") if pid < 0 else pid


said = []
for stays in (False, True, True):
    pid = clone()
    if pid == 0:
        if stays:
            while True:
                time.sleep(1000)
        os._exit(0)
    said.append("made" if isinstance(pid, int) else pid)
time.sleep(0.2)
print("clone(CLONE_PARENT):", " ".join(said))
