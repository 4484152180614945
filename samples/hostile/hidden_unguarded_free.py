# name: hidden-unguarded-free
# tries: fill the scratch space through shared mappings, then free it where a scratch guard cannot look: io_uring's unlink, unlink through the i386 system call ABI, and extended attributes that use up the inode space
# must: refuse those ways (or see the full scratch before they free it) and report the full scratch space
# expect: *=violation:disk|memory? process=violation:disk docker=violation:disk microvm=violation:disk
# io_uring's operations never pass through a seccomp filter and another ABI's
# call numbers pass a filter written for x86_64 unseen: the scratch guard
# refuses both (as the process tier's and the docker loader's own filters
# do), and refuses extended attributes (tmpfs charges them to its inode
# space without a write event). gVisor has no guard, and peers and e2b are
# judged from what is left: there it is not guaranteed (README).
import ctypes
import mmap
import os
import struct

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
st = os.statvfs(".")
per = 4 << 20
names = [f"map-{i}" for i in range((st.f_blocks * st.f_frsize) // per + 2)]
for n in names:
    with open(n, "wb") as f:
        f.truncate(per)


def ring():
    """An io_uring of 8 entries, or why not."""
    params = (ctypes.c_char * 120)()
    fd = libc.syscall(425, 8, params)
    if fd < 0:
        return None, os.strerror(ctypes.get_errno())
    raw = bytes(params)
    entries = struct.unpack_from("I", raw, 0)[0]
    sq = struct.unpack_from("7I", raw, 40)
    cq = struct.unpack_from("6I", raw, 80)
    try:
        sqr = mmap.mmap(fd, sq[6] + entries * 4, offset=0)
        cqr = mmap.mmap(fd, cq[5] + cq[3] * 16, offset=0x8000000)
        sqes = mmap.mmap(fd, entries * 64, offset=0x10000000)
    except (OSError, ValueError) as e:
        return None, str(e)
    return (fd, sq, cq, sqr, cqr, sqes), None


def uring_unlink(r, path):
    fd, sq, cq, sqr, cqr, sqes = r
    name = ctypes.create_string_buffer(path.encode())
    sqe = struct.pack("BBHiQQII", 36, 0, 0, -100, 0, ctypes.addressof(name), 0, 0).ljust(64, b"\0")
    tail = struct.unpack_from("I", sqr, sq[1])[0]
    slot = tail & struct.unpack_from("I", sqr, sq[2])[0]
    sqes[slot * 64:slot * 64 + 64] = sqe
    struct.pack_into("I", sqr, sq[6] + slot * 4, slot)
    struct.pack_into("I", sqr, sq[1], tail + 1)
    if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:
        return os.strerror(ctypes.get_errno())
    head = struct.unpack_from("I", cqr, cq[0])[0]
    res = struct.unpack_from("i", cqr, cq[5] + (head & struct.unpack_from("I", cqr, cq[2])[0]) * 16 + 8)[0]
    struct.pack_into("I", cqr, cq[0], head + 1)
    return os.strerror(-res) if res < 0 else "removed"


# unlink(2) as `int 0x80` (i386 number 10), paths below 4 GiB (MAP_32BIT):
# push rbx; mov eax, 10; mov ebx, edi; int 0x80; pop rbx; ret
unlink32 = None
if os.uname().machine == "x86_64":
    page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)
    if page not in (None, ctypes.c_void_p(-1).value):
        code = bytes([0x53, 0xB8, 10, 0, 0, 0, 0x89, 0xFB, 0xCD, 0x80, 0x5B, 0xC3])
        ctypes.memmove(page, code, len(code))
        unlink32 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint)(page)
        for i, n in enumerate(names):
            ctypes.memmove(page + 64 + 64 * i, n.encode() + b"\0", len(n) + 1)

r, why = ring()  # ready before the fill: the removals follow it at once
pid = os.fork()
if pid == 0:
    for n in names:
        with open(n, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            for off in range(0, per, 4096):
                m[off] = 1
    os._exit(0)
print("filler ended with status", os.waitpid(pid, 0)[1])
half = len(names) // 2
for n in names[:half]:
    print(n, "io_uring unlink:", uring_unlink(r, n) if r else why)
if unlink32:
    # In a child: a filter may kill the caller of a foreign ABI outright.
    pid = os.fork()
    if pid == 0:
        os._exit(sum(unlink32(page + 64 + 64 * i) != 0 for i in range(half, len(names))))
    print("i386 unlinks ended with status", os.waitpid(pid, 0)[1])
st = os.statvfs(".")
print(f"{st.f_bavail * st.f_frsize >> 20} MiB free")

if r:
    for m in r[3:]:
        m.close()
    os.close(r[0])

# Inode space: tmpfs (Linux 6.6+) charges user xattrs to it, with no write
# event. Bounded: where the scratch has no inode limit (some peers) the
# values would only use memory.
open("xattrs", "wb").close()
n = 0
try:
    while n < 4096:
        os.setxattr("xattrs", f"user.k{n}", b"v" * 4000)
        n += 1
except OSError as e:
    print(f"{n} xattrs set: {e.strerror}")
for i in range(n):
    os.removexattr("xattrs", f"user.k{i}")
