# name: hidden-punched-mapping
# tries: fill the scratch space through shared memory mappings (no write, no file event), then punch the pages away with madvise(MADV_REMOVE) and process_madvise
# must: report that the scratch space was full although the files are empty at exit
# expect: *=violation:disk|memory? process=violation:disk docker=violation:disk microvm=violation:disk
# madvise(MADV_REMOVE) and process_madvise(MADV_REMOVE) wait for the scratch
# guard (seccomp user notification) until the watch has checked the mounts,
# like unlink and truncate. gVisor has no such guard (and answers MADV_REMOVE
# with ENOSYS), and peers and e2b are judged from what is left: there it is
# not guaranteed (README).
import ctypes
import mmap
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
st = os.statvfs(".")
size = st.f_blocks * st.f_frsize
per = 4 << 20
names = [f"map-{i}" for i in range(size // per + 2)]
for n in names:
    with open(n, "wb") as f:
        f.truncate(per)

pid = os.fork()
if pid == 0:
    # A page the mount has no room for kills this child (SIGBUS).
    for n in names:
        with open(n, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            for off in range(0, per, 4096):
                m[off] = 1
    os._exit(0)
print("filler ended with status", os.waitpid(pid, 0)[1])


class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


try:
    me = os.pidfd_open(os.getpid())
except (AttributeError, OSError):
    me = -1


def process_madvise(m):
    """MADV_REMOVE through process_madvise (any advice for oneself since
    Linux 6.13); False where it is refused or unknown."""
    if me < 0:
        return False
    first = (ctypes.c_char * 1).from_buffer(m)
    try:
        iov = Iov(ctypes.addressof(first), per)
        return libc.syscall(440, me, ctypes.byref(iov), 1, mmap.MADV_REMOVE, 0) >= 0
    finally:
        del first


for i, n in enumerate(names):
    with open(n, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        try:
            if not (i % 2 and process_madvise(m)):
                m.madvise(mmap.MADV_REMOVE)
        except OSError as e:
            print(f"{n}: {e.strerror}")
        m.close()
st = os.statvfs(".")
print(f"punched; {st.f_bavail * st.f_frsize >> 20} MiB free again")
