# name: ptrace-parent
# tries: attach to its parent with ptrace to read or change its memory
# must: refuse ptrace
# expect: *=ok
# escaped-if: "ATTACHED"
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
for pid in {os.getppid(), 1}:
    r = libc.ptrace(PTRACE_ATTACH, pid, None, None)
    if r == 0:
        print(f"ATTACHED to {pid}")
    else:
        print(f"ptrace({pid}) refused: {os.strerror(ctypes.get_errno())}")
