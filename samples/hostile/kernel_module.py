# name: kernel-module
# tries: load a kernel module (init_module / finit_module)
# must: refuse module loading
# expect: *=ok
# escaped-if: "MODULE LOADED"
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
SYS_init_module, SYS_finit_module = 175, 313  # x86_64
image = b"\x7fELF" + b"\0" * 60  # not a valid module; the permission check comes first
r = libc.syscall(SYS_init_module, image, len(image), b"")
print("init_module:", "MODULE LOADED" if r == 0 else os.strerror(ctypes.get_errno()))
fd = os.open("/dev/null", os.O_RDONLY)
r = libc.syscall(SYS_finit_module, fd, b"", 0)
print("finit_module:", "MODULE LOADED" if r == 0 else os.strerror(ctypes.get_errno()))
