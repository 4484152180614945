# name: mount
# tries: mount a file system, or make itself a new user namespace where it could
# must: refuse mount and namespace creation
# expect: *=ok
# escaped-if: "MOUNTED"
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("mnt", exist_ok=True)
r = libc.mount(b"none", b"mnt", b"tmpfs", 0, None)
print("mount tmpfs:", "MOUNTED" if r == 0 else os.strerror(ctypes.get_errno()))
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
r = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
if r == 0:
    r = libc.mount(b"none", b"mnt", b"tmpfs", 0, None)
    print("unshare + mount:", "MOUNTED" if r == 0 else os.strerror(ctypes.get_errno()))
else:
    print("unshare:", os.strerror(ctypes.get_errno()))
