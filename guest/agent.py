# sandbench guest agent: PID 1 of the microVM after the initramfs hands over.
#
# It sets up the guest (cgroup v2, scratch tmpfs), says READY on the control
# port (a virtio-serial port named "sandbench.0"), waits for one RUN frame,
# runs that one program as an unprivileged uid under cgroup and rlimit limits,
# streams its output, usage samples and exit back as frames, and then idles
# until the host kills the VM. A guest never runs a second program — except a
# session's (RUN says session=1): it waits for the next RUN, each call a fresh
# process whose leftovers die with it, judged on its own share of the
# cgroup's counters; a KILL frame during a call ends that call's program.
#
# Python programs run in a fork of this (already started) interpreter, so a
# pre-booted guest starts them without paying for interpreter start-up under
# emulation; shell programs are exec'd with /bin/sh.
#
# Frame: b"SB" | type u8 | payload length u32 little-endian | payload.
# Guest -> host payloads are JSON objects (or raw output bytes); the host
# treats everything that comes from here as untrusted input. The RUN payload
# (host -> guest) is a list of (key, value) pairs, each a u32 little-endian
# length and bytes, so the agent needs neither json nor re.
#
# Start-up cost matters (a cold run boots a guest under emulation): setup
# byte-compiles this file with the guest's own python3 into the root disk
# (/usr/lib/sandbench/agent.pyc, run directly), python3 runs with -S, and
# nothing is imported before READY that the run can do without; the mounts
# and the cgroup are set up by the initramfs' init.

import os
T0 = open("/proc/uptime").read().split()[0]
import sys
# Nothing of the program's is ever imported or run here (python3 -I -S: no
# PYTHONPATH, no user site, no script folder but the agent's own, read-only
# one), and no bytecode is written next to anything the agent imports late.
sys.dont_write_bytecode = True
import struct
import select
import _signal as signal  # not `signal`: it imports enum, slow to start
import resource
import time
import gc
import builtins

MAGIC = b"SB"
HEADER = struct.Struct("<2sBI")
MAX_IN = 16 << 20
CHUNK = 16 << 10

T_RUN = 0x01
T_PING = 0x02
T_KILL = 0x03
T_READY = 0x10
T_STARTED = 0x11
T_STDOUT = 0x12
T_STDERR = 0x13
T_USAGE = 0x14
T_EXIT = 0x15
T_LOG = 0x16
T_PONG = 0x17

UID = 65534
GID = 65534
CG = "/sys/fs/cgroup"
RUN_CG = CG + "/run"
SAMPLE_EVERY = 0.1

MS_NOSUID, MS_NODEV, MS_REMOUNT = 2, 4, 32

# Descriptors of /work and of the run cgroup, taken at start-up before any
# program exists. The program owns /work's contents and may plant links,
# FIFOs, sockets or folders at any name there: as guest root the agent only
# ever opens a name in it relative to WORK_FD without following a link. The
# cgroup's files (limits the program must not raise) are opened relative to
# CG_FD, never by a path.
WORK_FD = None
CG_FD = None
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


_LIBC = []


def _libc():
    """libc through ctypes, loaded once (main loads it before READY, so a
    restored snapshot or a pooled guest has it: under TCG, importing ctypes
    and loading libc is a good part of a run's start)."""
    if not _LIBC:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        _LIBC.append(libc)
    return _LIBC[0]


def mount(src, target, fstype, flags, data):
    import ctypes  # only when a run needs a different scratch size

    libc = _libc()
    r = libc.mount(
        src.encode() if src else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s: %s" % (target, os.strerror(e)))


def dumps(d):
    """JSON for the flat dicts the agent sends (int, float, bool, None, str,
    and lists of str: a list written as its str() is a string to the host,
    which refuses the frame)."""

    def text(v):
        return '"%s"' % "".join(c if c.isalnum() or c in " .-_+:/" else "\\u%04x" % ord(c) for c in str(v))

    parts = []
    for k, v in d.items():
        if v is None:
            t = "null"
        elif v is True:
            t = "true"
        elif v is False:
            t = "false"
        elif isinstance(v, (int, float)):
            t = repr(v)
        elif isinstance(v, (list, tuple)):
            t = "[" + ", ".join(text(x) for x in v) + "]"
        else:
            t = text(v)
        parts.append('"%s": %s' % (k, t))
    return "{" + ", ".join(parts) + "}"


def decode_run(payload):
    """The RUN payload: (key, value) pairs of u32-length-prefixed bytes."""
    spec = {"env": [], "limits": {}, "argv": []}
    pos = 0
    fields = []
    while pos < len(payload):
        (n,) = struct.unpack_from("<I", payload, pos)
        fields.append(payload[pos + 4:pos + 4 + n])
        pos += 4 + n
    for k, v in zip(fields[0::2], fields[1::2]):
        k = k.decode()
        if k == "env":
            name, _, val = v.decode("utf-8", "surrogateescape").partition("=")
            spec["env"].append((name, val))
        elif k == "argv":
            spec["argv"].append(v.decode())
        elif k in ("language", "file", "seed", "now", "net_port", "session", "since"):
            spec[k] = v.decode()
        elif k in ("code", "ca"):
            spec[k] = v
        else:
            spec["limits"][k] = int(v)
    return spec


def _open(path, flags):
    """A run cgroup file through CG_FD (its names are the agent's own, no
    link followed); anything else (/proc) by path."""
    if CG_FD is not None and path.startswith(RUN_CG + "/"):
        return os.open(path[len(RUN_CG) + 1:], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=CG_FD)
    return os.open(path, flags | os.O_CLOEXEC)


def write_file(path, text):
    fd = _open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_file(path):
    try:
        fd = _open(path, os.O_RDONLY)
    except OSError:
        return ""
    try:
        with open(fd, closefd=True) as f:
            return f.read()
    except OSError:
        return ""


def remove_tree_at(dfd, name, depth=0):
    """Remove the folder `name` in `dfd` and everything in it, through
    descriptors: a link inside is removed, never followed (the program
    planted the tree; this runs as guest root)."""
    if depth > 64:
        raise OSError("a folder nested too deep at %r" % name)
    fd = os.open(name, O_DIR, dir_fd=dfd)
    try:
        for e in list(os.scandir(fd))[:20000]:
            if e.is_dir(follow_symlinks=False):
                remove_tree_at(fd, e.name, depth + 1)
            else:
                os.unlink(e.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dfd)


def write_program(name, code):
    """Write the call's program file `name` in /work, owned by the program's
    uid. Whatever the previous call left at that name (a link to a device or
    a cgroup file, a hard link, a FIFO, a socket, a folder) is removed, not
    opened: the file is made new (O_EXCL, no link followed), and owner and
    mode are set on its descriptor."""
    try:
        os.unlink(name, dir_fd=WORK_FD)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError):
        remove_tree_at(WORK_FD, name)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=WORK_FD)
    try:
        os.fchown(fd, UID, GID)
        os.fchmod(fd, 0o644)
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        # A part-written file (a full /work) would pass for the program.
        os.unlink(name, dir_fd=WORK_FD)
        raise
    finally:
        os.close(fd)


def keyed_in(text, key):
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return 0
    return 0


# The run cgroup's counter files, opened once through CG_FD and read again
# from offset 0 (a cgroup file is made anew on each read from its start): a
# usage sample is a few preads, not a few opens. Never inherited (the zygote
# and the relay close every descriptor of the agent's).
CG_FILES = {}


def cg_read(name):
    try:
        fd = CG_FILES.get(name)
        if fd is None:
            fd = CG_FILES[name] = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=CG_FD)
        return os.pread(fd, 4096, 0).decode("ascii", "replace")
    except OSError:
        return ""


def cg_number(name):
    try:
        return int(cg_read(name).strip())
    except ValueError:
        return None


def number(path):
    try:
        return int(read_file(path).strip())
    except ValueError:
        return None


class Steps:
    """Where a call's time goes inside the guest: ms since its RUN frame was
    read, per step, sent in EXIT (`steps`) for the report's timeline. The
    program's own process stamps its set-up steps too (before its first
    byte) and hands them over with the guard's descriptor."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.marks = []

    def mark(self, name, at=None):
        self.marks.append((name, (time.monotonic() if at is None else at) - self.t0))

    def text(self):
        return " ".join("%s:%.2f" % (n, t * 1000) for n, t in self.marks)


class Port:
    def __init__(self, fd):
        self.fd = fd

    def send(self, kind, payload):
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "replace")
        elif not isinstance(payload, (bytes, bytearray)):
            payload = dumps(payload).encode()
        data = HEADER.pack(MAGIC, kind, len(payload)) + payload
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def read_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(self.fd, n - len(buf))
            if not chunk:
                time.sleep(0.01)
                continue
            buf += chunk
        return buf

    def recv(self):
        magic, kind, length = HEADER.unpack(self.read_exact(HEADER.size))
        if magic != MAGIC or length > MAX_IN:
            raise ValueError("bad frame from the host")
        return kind, self.read_exact(length)


def find_port(want="sandbench.0"):
    base = "/sys/class/virtio-ports"
    for _ in range(1000):
        try:
            for name in sorted(os.listdir(base)):
                if read_file("%s/%s/name" % (base, name)).strip() == want:
                    return "/dev/" + name
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError("the port %s did not appear" % want)


def loopback_up():
    import fcntl
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 0x1 | 0x40))  # SIOCSIFFLAGS UP|RUNNING
    finally:
        s.close()


def start_egress(net_port):
    """A run with an allow list: listen on 127.0.0.1:net_port before the
    program exists, and relay what arrives to the host proxy over the
    sandbench.net port from a process of its own (root, outside the run's
    cgroup; killed with everything else when the program ends)."""
    loopback_up()
    listener = EgressRelay.listen(net_port)
    dev = find_port("sandbench.net")
    pid = os.fork()
    if pid == 0:
        try:
            # Nothing of the agent's (the control port, the zygote's pipes,
            # the guard's listener) stays in the relay.
            keep = listener.fileno()
            os.closerange(3, keep)
            os.closerange(keep + 1, 65536)
            relay_process(listener, os.open(dev, os.O_RDWR))
        finally:
            os._exit(0)
    listener.close()


def relay_process(listener, fd):
    # sandbench.net carries relay messages, each prefixed with its length (u32 BE).
    def send(m):
        view = memoryview(len(m).to_bytes(4, "big") + m)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    relay = EgressRelay(listener, send)
    buf = b""
    while True:
        if not relay.step(1.0, (fd,)):
            continue
        x = os.read(fd, 65536)
        if not x:
            time.sleep(0.01)  # the host end is not connected (yet)
            continue
        buf += x
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big")
            if n > 5 + EgressRelay.MAX_DATA:
                return
            if len(buf) < 4 + n:
                break
            relay.on_message(buf[4:4 + n])
            buf = buf[4 + n:]


def setup_guest():
    """The initramfs mounted /work, /tmp and the cgroup; say what is missing."""
    notes = []
    if not os.path.isdir(RUN_CG):
        notes.append("no cgroup v2 in the guest: memory and pids rely on rlimits only")
    return notes


def scratch_size(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


# What configure() last set: the scratch size and the cgroup's limits. Only
# this agent (guest root) can change them, so a session's calls with the same
# limits skip the remount and the writes.
CONFIGURED = {}


def configure(limits):
    notes = []
    disk = max(int(limits.get("disk_bytes", 64 << 20)), 1 << 20)
    page = os.sysconf("SC_PAGE_SIZE")
    want = -(-disk // page) * page
    if CONFIGURED.get("disk") != want:
        for path in ("/work", "/tmp"):
            if scratch_size(path) != want:
                mount(None, path, None, MS_REMOUNT | MS_NOSUID | MS_NODEV, "size=%d" % disk)
        CONFIGURED["disk"] = want
    cg = (int(limits["memory_bytes"]), int(limits["pids"]))
    if CG_FD is not None and CONFIGURED.get("cgroup") != cg:
        try:
            write_file(RUN_CG + "/memory.max", str(cg[0]))
            if os.path.exists(RUN_CG + "/memory.swap.max"):
                write_file(RUN_CG + "/memory.swap.max", "0")
            write_file(RUN_CG + "/pids.max", str(cg[1]))
            CONFIGURED["cgroup"] = cg
            CONFIGURED["memory_max"] = number(RUN_CG + "/memory.max")
        except OSError as e:
            CONFIGURED.pop("cgroup", None)
            notes.append("cannot set cgroup limits: %s" % e)
    return notes


class Sampler:
    def __init__(self, base=None):
        self.cg = CG_FD is not None
        self.peak_mem = 0
        self.peak_pids = 0
        # The run cgroup's counters run for the guest's life (a session's
        # earlier calls, each call's zygote set up before it): a call
        # reports what they gained since it began.
        self.base = base or {}

    def sample(self):
        if not self.cg:
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            return {"cpu_ms": int((ru.ru_utime + ru.ru_stime) * 1000)}
        cpu_ms = keyed_in(cg_read("cpu.stat"), "usage_usec") // 1000
        mem = cg_number("memory.current")
        pids = cg_number("pids.current")
        events = cg_read("memory.events")
        if mem is not None:
            self.peak_mem = max(self.peak_mem, mem)
        if pids is not None:
            self.peak_pids = max(self.peak_pids, pids)
        b = self.base
        return {
            "cpu_ms": cpu_ms - b.get("cpu_ms", 0),
            "memory_bytes": mem,
            "pids": pids,
            "oom_kills": keyed_in(events, "oom_kill") - b.get("oom_kills", 0),
            # Times usage reached memory.max (reclaim, a refused charge or an
            # OOM kill followed): a limit hit even when nothing was killed.
            "memory_max_events": keyed_in(events, "max") - b.get("memory_max_events", 0),
            "pids_max_events": keyed_in(cg_read("pids.events"), "max") - b.get("pids_max_events", 0),
        }


# High-water marks of the scratch space (issue 10, item 8), the same two
# pieces as the host's src/highwater.rs:
# - a fanotify watch (this agent is root on its own kernel): every write to
#   /work or /tmp queues an event that pins the file until read, so a file
#   that reached the file-size limit is measured even if the program deleted
#   it before the agent looked; each batch of events is followed by a check
#   of both mounts while its files are still held;
# - a guard: a seccomp filter in the program makes every call that can free
#   scratch space (unlink, rmdir, rename, truncate, an open with O_TRUNC, a
#   punched hole, madvise(MADV_REMOVE)) wait until this agent has drained the
#   watch and checked the mounts (SECCOMP_RET_USER_NOTIF), then go on
#   unchanged, and refuses io_uring, xattrs and other ABIs, which would free
#   space where the guard cannot look (guest/scratch_guard.py).
FAN_MODIFY = 0x2
FAN_Q_OVERFLOW = 0x4000
FAN_INIT = 0x1 | 0x2 | 0x10  # FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE (class notif)
FAN_MARK = 0x1 | 0x100  # FAN_MARK_ADD | FAN_MARK_FILESYSTEM
EVENT_META = struct.Struct("=IBBHQii")
SCRATCH = ("/work", "/tmp")

# (x86_64, aarch64, argument index or None, mask): as src/highwater.rs.
NOTIF_RECV = 0xC0502100
NOTIF_SEND = 0xC0182101


class Watch:
    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        # The call's file-size limit, set when the call arrives.
        self.file_size = 1 << 62
        self.capped = None
        self.full = []
        self.lost = False
        self.why_not = None
        self.roots = []
        for m in SCRATCH:
            self.roots.append((m, os.open(m, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)))
        libc = _libc()
        fd = libc.fanotify_init(FAN_INIT, os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC | os.O_NONBLOCK)
        if fd < 0:
            self.fd = None
            self.why_not = "fanotify: %s" % os.strerror(ctypes.get_errno())
            return
        self.fd = fd
        for m, _ in self.roots:
            if libc.fanotify_mark(fd, FAN_MARK, FAN_MODIFY, -100, m.encode()) != 0:
                self.why_not = "fanotify mark %s: %s" % (m, os.strerror(ctypes.get_errno()))
                os.close(fd)
                self.fd = None
                return

    def forget(self):
        """Drop the events of the agent's own writes (the call's program
        file, written after this watch was made, before the program exists)."""
        if self.fd is None:
            return
        for _ in range(32):
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            pos = 0
            while pos + EVENT_META.size <= len(data):
                n, _v, _r, _m, mask, fd, _pid = EVENT_META.unpack_from(data, pos)
                if n < EVENT_META.size:
                    break
                if fd >= 0:
                    os.close(fd)
                pos += n

    def drain(self):
        if self.fd is None:
            return
        for _ in range(32):
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                self.lost = True
                continue
            held = []
            pos = 0
            while pos + EVENT_META.size <= len(data):
                n, _v, _r, _m, mask, fd, _pid = EVENT_META.unpack_from(data, pos)
                if n < EVENT_META.size:
                    break
                if mask & FAN_Q_OVERFLOW:
                    self.lost = True
                if fd >= 0:
                    held.append(fd)
                pos += n
            for fd in held:
                if self.capped is None:
                    try:
                        st = os.fstat(fd)
                        if (st.st_mode & 0o170000) == 0o100000 and st.st_size >= self.file_size:
                            self.capped = os.readlink("/proc/self/fd/%d" % fd)[:240]
                    except OSError:
                        pass
            self.check()
            for fd in held:
                os.close(fd)

    def close(self):
        # A session's guest runs many programs: one watch each, no fd kept.
        for _m, fd in self.roots:
            os.close(fd)
        self.roots = []
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def check(self):
        for m, fd in self.roots:
            try:
                st = os.fstatvfs(fd)
            except OSError:
                continue
            if (st.f_bavail == 0 or (st.f_files > 0 and st.f_favail == 0)) and m not in self.full:
                self.full.append(m)


_FILTERS = []


def _filters():
    """The program's filter and the scratch guard's as ctypes sock_fprog
    structures, built once in the agent (every zygote inherits them: under
    TCG, building them in Python took milliseconds per call)."""
    if not _FILTERS:
        import ctypes

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        raw, n = program_filter()
        graw, gn, col = scratch_guard_filter()
        pbuf = ctypes.create_string_buffer(raw, len(raw))
        gbuf = ctypes.create_string_buffer(graw, len(graw))
        # The buffers stay referenced: the structures point into them.
        _FILTERS.extend([Fprog(n, ctypes.addressof(pbuf)), Fprog(gn, ctypes.addressof(gbuf)), col, pbuf, gbuf])
    return _FILTERS


def drop_bounding():
    """In the zygote, as guest root: empty the bounding and ambient sets, as
    the process tier's program has them (privs.rs), so that no exec can
    give the program a capability back, whatever file capabilities a binary
    on the root disk carries (no_new_privs refuses those too; this holds
    without it). The zygote's own capabilities stay until it drops to the
    program's uid."""
    import ctypes

    libc = _libc()
    ul = ctypes.c_ulong
    cap = 0
    # PR_CAPBSET_READ fails past the kernel's last capability.
    while libc.prctl(23, ul(cap), ul(0), ul(0), ul(0)) >= 0:
        if libc.prctl(24, ul(cap), ul(0), ul(0), ul(0)) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP %d" % cap)
        cap += 1
    if libc.prctl(47, ul(4), ul(0), ul(0), ul(0)) != 0:  # PR_CAP_AMBIENT, CLEAR_ALL
        raise OSError(ctypes.get_errno(), "PR_CAP_AMBIENT_CLEAR_ALL")
    # Read back from the kernel (a first PR_CAPBSET_READ that failed would
    # have dropped nothing).
    with open("/proc/self/status") as fh:
        sets = dict(l.split(":", 1) for l in fh.read().splitlines() if l.startswith(("CapBnd:", "CapAmb:")))
    if len(sets) != 2 or any(int(v, 16) for v in sets.values()):
        raise OSError(0, "the bounding or ambient set is not empty: %r" % sets)


def install_filters():
    """In the zygote: no_new_privs, sandbench's filter for the program
    (guest/program_filter.py, the docker loader's too: the guest kernel keeps
    the program from this agent, which holds the host's channel; the filter
    keeps that kernel's surface small), then the scratch guard's. Returns the
    guard's listener fd."""
    import ctypes

    libc = _libc()
    prog, guard, col = _filters()[:3]
    ul = ctypes.c_ulong
    if libc.prctl(38, ul(1), ul(0), ul(0), ul(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs")
    if libc.prctl(22, ul(2), ctypes.byref(prog), ul(0), ul(0)) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "seccomp")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)
    fd = libc.syscall(ctypes.c_long((317, 277)[col]), ul(1), ul(8), ctypes.byref(guard))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "seccomp listener")
    return fd


_NOTIF_SIZE = []


def notif_size():
    """sizeof(struct seccomp_notif) on this kernel, asked once."""
    if not _NOTIF_SIZE:
        import ctypes

        sizes = (ctypes.c_uint16 * 3)()
        col = 0 if os.uname().machine == "x86_64" else 1
        _libc().syscall(ctypes.c_long((317, 277)[col]), ctypes.c_ulong(3), ctypes.c_ulong(0), ctypes.byref(sizes))
        _NOTIF_SIZE.append(max(80, sizes[0]))
    return _NOTIF_SIZE[0]


class Guard:
    def __init__(self, fd):
        import fcntl

        self.fd = fd
        self.fcntl = fcntl
        self.size = notif_size()
        self.served = 0

    def serve(self, watch):
        req = bytearray(self.size)
        try:
            self.fcntl.ioctl(self.fd, NOTIF_RECV, req, True)
        except OSError:
            return  # the waiting thread died meanwhile
        (nid,) = struct.unpack_from("=Q", req, 0)
        watch.drain()
        watch.check()
        self.served += 1
        try:
            # id, val, error, flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE
            self.fcntl.ioctl(self.fd, NOTIF_SEND, bytearray(struct.pack("=QqiI", nid, 0, 0, 1)), True)
        except OSError:
            pass


def read_exact_fd(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("the agent closed the call's spec")
        buf += chunk
    return buf


class Zygote:
    """The next call's process, made ahead while the guest waits (after
    READY, and after each session call's EXIT) so that a call does not pay
    for it: a fork of this agent that joins the run cgroup, installs the
    program's filter and the scratch guard, keeps none of the agent's
    descriptors, and waits for its call's spec. The call then only sets its
    rlimits, drops to the program's uid and starts the program. One zygote
    per call, never reused: each program is a fresh fork, and nothing it
    could write is shared with the agent or with another call (its pipes and
    its guard are its own; the fanotify watch made here is the agent's)."""

    def __init__(self):
        import _socket

        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        spec_r, spec_w = os.pipe()
        sock, child_sock = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        _filters()
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            sock.detach()  # closed with the rest in the zygote
            zygote(out_w, err_w, spec_r, child_sock)
        for fd in (out_w, err_w, spec_r):
            os.close(fd)
        child_sock.close()
        self.pid, self.out_r, self.err_r, self.spec_w, self.sock = pid, out_r, err_r, spec_w, sock
        self.used = False
        self.setup_cpu_ms = 0
        try:
            # Wakes the call's loop the moment the program exits.
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None
        self.guard = None
        self.why_no_guard = None
        try:
            _m, anc, _f, _a = sock.recvmsg(1, _socket.CMSG_SPACE(4))
            for lvl, ty, data in anc:
                if lvl == _socket.SOL_SOCKET and ty == _socket.SCM_RIGHTS and len(data) >= 4:
                    self.guard = Guard(int.from_bytes(data[:4], sys.byteorder))
        except OSError as e:
            self.why_no_guard = str(e)
        # Watching starts before the program exists: no write goes unseen.
        self.watch = Watch()

    def alive(self):
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def go(self, spec):
        """Hand the zygote its call (and the program's code)."""
        import marshal

        self.used = True
        data = marshal.dumps(spec)
        view = memoryview(struct.pack("<I", len(data)) + data)
        try:
            while view:
                view = view[os.write(self.spec_w, view):]
        except OSError:
            pass  # it died: its stderr and its exit say why
        os.close(self.spec_w)
        self.spec_w = None

    def set_up(self):
        """Wait until the zygote's own set-up is done (or it died)."""
        try:
            self.sock.recv(1)
        except OSError:
            pass

    def started(self, steps):
        """Wait until the zygote is about to run the program (or has died):
        its steps, stamped on this clock."""
        try:
            m = self.sock.recv(1024)
        except OSError:
            m = b""
        self.sock.close()
        self.sock = None
        for part in m.decode("ascii", "replace").split():
            n, _, at = part.partition("=")
            try:
                if n == "setup_cpu_ms":
                    self.setup_cpu_ms = max(0, int(at))
                else:
                    steps.mark(n, float(at))
            except ValueError:
                pass

    def close(self):
        """An unused zygote's end (it died while waiting)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        for fd in (self.out_r, self.err_r, self.spec_w, self.pidfd, self.guard.fd if self.guard else None):
            if fd is not None:
                os.close(fd)
        if self.sock is not None:
            self.sock.close()
        self.watch.close()


def zygote(out_w, err_w, spec_r, sock):
    """In the forked zygote: everything no call changes, then wait for the
    call and become its program. Never returns."""
    try:
        os.setsid()
        if os.path.isdir(RUN_CG):
            write_file(RUN_CG + "/cgroup.procs", str(os.getpid()))
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        lo, hi = sorted((spec_r, sock.fileno()))
        os.closerange(3, lo)
        os.closerange(lo + 1, hi)
        os.closerange(hi + 1, 65536)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        import _socket

        drop_bounding()
        # From here on the agent answers for every guarded call; the
        # listener goes to the agent, nothing of it stays here.
        g = install_filters()
        sock.sendmsg([b"g"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, g.to_bytes(4, sys.byteorder))])
        os.close(g)
        import marshal

        site_setup()
        warm_up()
        # Set up: the agent takes the call's base of the run cgroup's CPU
        # only after this byte, so the zygote's own set-up (in that cgroup)
        # is never the program's.
        sock.sendall(b"w")
        (n,) = struct.unpack("<I", read_exact_fd(spec_r, 4))
        spec = marshal.loads(read_exact_fd(spec_r, n))
        os.close(spec_r)
        become_program(spec, sock)
    except BaseException as e:  # noqa: B902 - the zygote must never return into the agent
        try:
            os.write(2, ("sandbench agent: cannot start the program: %s\n" % e).encode())
        except OSError:
            pass
        os._exit(127)


# Every signal at its default and none blocked, as a program started from a
# terminal has them: Python ignores SIGPIPE and SIGXFSZ, and an exec keeps an
# ignored signal ignored (`yes | head -1` then says "Broken pipe", and a file
# at the size limit reads as EFBIG instead of SIGXFSZ).
def default_signals():
    for _s in range(1, signal.NSIG):
        try:
            signal.signal(_s, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def become_program(spec, sock):
    """The call's own part, in the zygote: its limits, the program's uid,
    then the program. `sock` carries the steps to the agent and is closed
    before the program's first byte."""
    marks = ["child_spec=%.6f" % time.monotonic()]
    # This process's CPU before its call (the zygote's set-up): not the
    # program's. The agent takes it off the exact count wait4 gives, and
    # RLIMIT_CPU (which counts the process's whole life) starts above it.
    ru = resource.getrusage(resource.RUSAGE_SELF)
    setup_ms = int((ru.ru_utime + ru.ru_stime) * 1000)
    marks.append("setup_cpu_ms=%d" % setup_ms)
    lim = spec["limits"]
    # The CPU limit is the host's (it sends KILL at the limit, from the
    # run cgroup's count bounded by the CPU QEMU got); the cpu_ms given
    # here is a backstop far above it, where the agent kills on its own.
    # RLIMIT_CPU is a backstop above that: the kernel checks it against
    # tick-sampled time, which under TCG ran ahead of the real count by
    # up to ~8%, and a SIGXCPU a program may have sent itself is no
    # evidence.
    cpu_s = max(1, -(-int(lim["cpu_ms"]) // 1000))
    cpu_s += max(1, cpu_s // 2) + -(-setup_ms // 1000)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(lim["file_size_bytes"]),) * 2)
    # With a pids cgroup, RLIMIT_NPROC is only a backstop set above it, so
    # that the cgroup (which counts refusals) is the limit that bites.
    nproc = int(lim["pids"]) + (16 if os.path.isdir(RUN_CG) else 0)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(lim["open_files"]),) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not spec.get("memory_by_cgroup"):
        # Only without the cgroup's memory.max: RLIMIT_DATA limits
        # virtual size, which refused a program's 40th thread (stacks)
        # under 256M while it used a few MiB, and its refusals are
        # counted nowhere. Resident memory is what the limit means.
        resource.setrlimit(resource.RLIMIT_DATA, (int(lim["memory_bytes"]) + (64 << 20),) * 2)
    marks.append("child_rlimits=%.6f" % time.monotonic())
    os.setgroups([])
    os.setgid(GID)
    os.setuid(UID)
    os.chdir("/work")
    os.umask(0o022)
    marks.append("child_uid=%.6f" % time.monotonic())
    if spec.get("ca"):
        write_ca_bundle(spec["ca"])
    env = dict((str(k), str(v)) for k, v in spec["env"])
    marks.append("child_ready=%.6f" % time.monotonic())
    sock.sendall(" ".join(marks).encode())
    sock.close()
    if spec["language"] in INTERPRETERS:
        # Its own process image (exec), never this interpreter: a Node
        # program shares nothing of the agent's address space.
        default_signals()
        # The host's command line for a shell program (bash when its #!
        # line says so), else this table's.
        argv = (spec["argv"] or INTERPRETERS[spec["language"]]) + [program_path(spec)]
        os.execve(argv[0], argv, env)
    os.environ.clear()
    os.environ.update(env)
    run_python(spec["code"])


# Where the program's trust variables point (egress::TMP_CA_BUNDLE).
CA_BUNDLE = "/tmp/sandbench-ca-bundle.pem"
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def write_ca_bundle(ca):
    """As the program's uid, in its fresh /tmp, never through a link: the
    root disk's own bundle (if it has one) and the run's CA."""
    system = b""
    for b in SYSTEM_BUNDLES:
        try:
            with open(b, "rb") as f:
                system = f.read(8 << 20)
            break
        except OSError:
            pass
    fd = os.open(CA_BUNDLE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(system + b"\n# sandbench: this run's CA (secrets)\n" + ca)


# Languages that run as their own process (exec'd after every limit and
# filter is applied); Python runs in a fork of this interpreter instead.
INTERPRETERS = {"sh": ["/bin/sh"], "javascript": ["/usr/bin/node"]}
DEFAULT_FILE = {"sh": "main.sh", "javascript": "main.js"}


def program_path(spec):
    """/work/<file>: the host's name for it (main.mjs for an ES module), never a path."""
    f = spec.get("file") or DEFAULT_FILE.get(spec["language"], "main.py")
    if "/" in f or f.startswith(".") or len(f) > 64:
        raise ValueError("bad program file name")
    return "/work/" + f


def site_setup():
    """What site would have set up (the agent runs with -S), done by the
    zygote before its call: only the root disk is looked at (the program's
    /work goes on sys.path once it is the program's uid, in run_python)."""
    import _sitebuiltins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    ver = "%d.%d" % sys.version_info[:2]
    for d in ("/usr/local/lib/python%s/dist-packages" % ver, "/usr/lib/python3/dist-packages"):
        if os.path.isdir(d) and d not in sys.path:
            sys.path.append(d)


def warm_up():
    """In the zygote, after it answered the agent (so READY never waits for
    this), before its call: compile, run and print a line to /dev/null, as
    a program's first steps do. Under TCG the first run of any code path in
    a guest pays for translating it (a fresh guest's first print(1) took
    ~90 ms, later ones ~25 ms); a call that arrives meanwhile waits at most
    for this. Nothing of it stays: the objects are gone before the call."""
    # Not open(path, "w"): its O_TRUNC is a call the scratch guard holds
    # until the agent serves it, which it does only during a call.
    with open(os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC), "w") as f:
        exec(compile("print(1, file=f)\n", "<warm-up>", "exec"), {"f": f})
        f.flush()
    stdin = open(0, "r", closefd=False)
    stdin.close()


def run_python(src):
    """Run /work/main.py in this interpreter as `python3 -u main.py` would
    (site_setup() done)."""
    code = 0
    main = type(sys)("__main__")
    main.__file__ = "/work/main.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = ["/work/main.py"]
    sys.path[0:1] = ["/work"]
    sys.stdin = open(0, "r", closefd=False)
    gc.unfreeze()
    gc.enable()
    try:
        exec(compile(src, "/work/main.py", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            try:
                sys.stderr.write("%s\n" % (e.code,))
            except Exception:
                pass
            code = 1
    except BaseException as e:
        import traceback

        # As python3 prints it: without this agent's own frame.
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        traceback.print_exception(type(e), e, tb)
        code = 1
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def run(port, spec, steps, zyg):
    """One call, in the zygote made for it (`zyg.used` once it was handed
    the call; an unused one stays for the next)."""
    notes = configure(spec["limits"])
    steps.mark("configured")
    if not zyg.alive():
        # It died waiting (its charge above a lowered memory limit, say).
        zyg.close()
        zyg = Zygote()
        steps.mark("zygote_remade")
    now = spec.get("now")
    if now:
        # No RTC, and a restored snapshot keeps the time it was saved at:
        # the host's clock is the truth.
        try:
            time.clock_settime(time.CLOCK_REALTIME, float(now))
        except (OSError, ValueError) as e:
            notes.append("cannot set the guest clock: %s" % e)
    seed = spec.get("seed")
    if seed:
        # Every guest (and every snapshot restore) starts from the same
        # state; the host's randomness makes their entropy pools differ.
        try:
            with open("/dev/urandom", "wb") as f:
                f.write(bytes.fromhex(seed))
        except (OSError, ValueError):
            pass
    # The memory limit is the cgroup's memory.max (resident memory) when it
    # holds; RLIMIT_DATA stands in only when it does not.
    want = int(spec["limits"].get("memory_bytes", 0))
    spec["memory_by_cgroup"] = want > 0 and "cgroup" in CONFIGURED and CONFIGURED.get("memory_max") == want
    if not spec["memory_by_cgroup"]:
        notes.append("the guest cgroup does not hold the memory limit: RLIMIT_DATA (virtual size) stands in for it")
    for n in notes:
        port.send(T_LOG, n)
    steps.mark("clock_and_seed")
    session = spec.get("session") == "1"
    # Session mode: files changed before `since` (host clock) and scratch
    # space already full are earlier calls', not this one's.
    since = float(spec.get("since") or 0)
    prior_full = [d for d in ("/work", "/tmp") if session and scratch_full(d)]
    name = program_path(spec)[len("/work/"):]
    try:
        write_program(name, spec["code"])
    except OSError as e:
        zyg.watch.forget()
        if spec["language"] in INTERPRETERS:
            # /bin/sh and node read the file: this call fails, the guest (and a
            # session) stays for the next one.
            port.send(T_EXIT, {"refused": "cannot write /work/%s: %s" % (name, e)})
            return zyg
        # Python runs the code from memory: the call goes on (and can free
        # the space a previous call of the session filled).
        port.send(T_LOG, "the program file /work/%s could not be written (%s): the program runs without it" % (name, e))
    # The watch was made with the zygote: the program file is the agent's.
    zyg.watch.forget()
    steps.mark("program_written")
    if spec.get("net_port"):
        start_egress(int(spec["net_port"]))
    watch = zyg.watch
    watch.file_size = int(spec["limits"].get("file_size_bytes", 16 << 20))
    limit = watch.file_size
    # The run cgroup's counters before the call: a session's earlier calls
    # and, in any run, the zygote's own set-up are not this program's.
    zyg.set_up()
    base = Sampler().sample()
    steps.mark("base_sampled")
    zyg.go(spec)
    steps.mark("spec_sent")
    zyg.started(steps)
    steps.mark("zygote_answered")
    if zyg.why_no_guard:
        port.send(T_LOG, "no scratch guard: %s" % zyg.why_no_guard)
    guard, pid, out_r, err_r = zyg.guard, zyg.pid, zyg.out_r, zyg.err_r
    port.send(T_STARTED, {"pid": pid})
    cpu_limit_ms = int(spec["limits"]["cpu_ms"])
    sampler = Sampler(base)
    streams = {out_r: T_STDOUT, err_r: T_STDERR}
    # A KILL frame from the host ends the program: a cancel (in a session;
    # the guest stays for the next call) or the CPU limit, which the host
    # enforces (it bounds the count below by the CPU QEMU got, which this
    # guest cannot see); the agent's own kill below is a backstop.
    host = [port.fd]
    status = None
    main_cpu_ms = 0
    killed_all = False
    cpu_killed = False
    # The first sample after one period: at the very start it would only
    # compete with the program for the (often single) vCPU.
    next_sample = time.monotonic() + SAMPLE_EVERY
    last = {}
    first_output = True
    poller = select.poll()
    for fd in list(streams) + host + [f for f in (guard.fd if guard else None, watch.fd, zyg.pidfd) if f is not None]:
        poller.register(fd, select.POLLIN)
    while streams or status is None:
        timeout = max(0.0, next_sample - time.monotonic())
        ready = poller.poll(timeout * 1000)
        for fd, ev in ready:
            if guard is not None and fd == guard.fd:
                if ev & select.POLLIN:
                    guard.serve(watch)
                else:
                    # No program process is left to wait on it (POLLHUP): a
                    # receive would block for ever.
                    poller.unregister(fd)
                continue
            if fd == watch.fd:
                watch.drain()
                continue
            if fd == zyg.pidfd:
                # The program exited (reaped below); readable from now on.
                poller.unregister(fd)
                continue
            if fd == port.fd:
                kind, _ = port.recv()
                if kind == T_KILL:
                    kill_everything()
                continue
            if fd not in streams:
                continue
            data = os.read(fd, CHUNK)
            if data:
                if first_output:
                    first_output = False
                    steps.mark("first_output")
                port.send(streams[fd], data)
            else:
                poller.unregister(fd)
                os.close(fd)
                del streams[fd]
        while True:
            try:
                p, st, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if p == 0:
                break
            if p == pid:
                status = st
                steps.mark("program_reaped")
                # The kernel's exact count of the program's own CPU time
                # (the cgroup's last sample can trail it).
                main_cpu_ms = max(0, int((ru.ru_utime + ru.ru_stime) * 1000) - zyg.setup_cpu_ms)
        if status is not None and not killed_all:
            # The program is gone: whatever it left behind goes too (PID 1's
            # kill(-1) reaches every other process), so its pipes reach EOF.
            killed_all = True
            kill_everything()
        if time.monotonic() >= next_sample:
            next_sample = time.monotonic() + SAMPLE_EVERY
            # Now and then anyway: a file filled through a mapping sends no event.
            watch.check()
            last = sampler.sample()
            port.send(T_USAGE, last)
            if last.get("cpu_ms", 0) > cpu_limit_ms and not cpu_killed and status is None:
                cpu_killed = True
                kill_everything()
    steps.mark("output_drained")
    last = sampler.sample()
    ex = {
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        # The cgroup's last sample can trail the program's own final
        # accounting (a SIGXCPU at the limit read as a few ms short).
        "cpu_ms": max(last.get("cpu_ms", 0), main_cpu_ms),
        "memory_peak": sampler.peak_mem or None,
        "pids_peak": sampler.peak_pids or None,
        "oom_kills": last.get("oom_kills", 0),
        "memory_max_events": last.get("memory_max_events", 0),
        "pids_max_events": last.get("pids_max_events", 0),
        "cpu_killed": cpu_killed,
    }
    peak = None if session else number(RUN_CG + "/memory.peak")
    if peak:
        # (a session's cgroup peak is the whole session's)
        ex["memory_peak"] = peak
    # Peak memory is the run cgroup's own accounting, as on every tier (what
    # its limit is enforced against), never a process's max RSS: the cgroup
    # charges the interpreter's shared pages to whoever touched them first
    # (this agent's own Python), so a small program reads ~1 MiB.
    steps.mark("counters_read")
    watch.drain()
    watch.check()
    hit, full, bounds = scan_scratch(limit, since, prior_full)
    steps.mark("scratch_scanned")
    ex["fsize_hit"] = watch.capped or hit
    if watch.lost:
        bounds.append("file_events_lost::the agent's scratch watch")
    ex["incomplete"] = bounds[:8]
    # A mount already full before a session's call was that earlier call's.
    newly_full = [m for m in watch.full if m not in prior_full]
    ex["disk_full"] = full or bool(newly_full)
    ex["full_mounts"] = ", ".join(newly_full)
    ex["file_events"] = watch.fd is not None
    ex["guarded_calls"] = guard.served if guard else None
    if watch.why_not:
        port.send(T_LOG, "scratch files not watched (%s): a capped file deleted or truncated before exit may go unreported" % watch.why_not)
    if watch.lost:
        port.send(T_LOG, "file events were lost: a hidden limit hit may go unreported")
    if prior_full:
        ex["prior_full"] = " ".join(prior_full)
    steps.mark("exit_sent")
    ex["steps"] = steps.text()
    port.send(T_EXIT, ex)
    # After EXIT: closing a fanotify group waits for an RCU grace period
    # (~16 ms under TCG), and nothing of the call depends on it any more.
    watch.close()
    if guard is not None:
        os.close(guard.fd)
    if zyg.pidfd is not None:
        os.close(zyg.pidfd)
    return zyg


def scratch_full(top):
    try:
        st = os.statvfs(top)
    except OSError:
        return False
    return st.f_bavail == 0 or (st.f_files > 0 and st.f_favail == 0)


# How much of each scratch mount the exit scan looks at (entries, levels).
# A scan that stops short says so ("incomplete" in the exit message) and
# the run reads incomplete, never ok: raising these is not a fix by itself.
SCAN_ENTRIES = 100000
SCAN_DEPTH = 64


def scan_scratch(limit, since=0, skip_full=()):
    """After the program: a file at the file-size limit, or a full scratch
    file system (space or inodes)? Facts the program cannot fake by printing.
    Bounded walk, symlinks not followed; the bounds it hit, and directories
    it could not read, are returned as "NAME:LIMIT:WHERE" (host: judge.rs)."""
    hit, full, bounds = None, False, []
    for top in ("/work", "/tmp"):
        if top not in skip_full and scratch_full(top):
            full = True
        if hit is not None:
            continue
        where = "the agent's scan of " + top
        budget = SCAN_ENTRIES
        stack = [(top, 0)]
        unreadable = deep = False
        while stack and hit is None:
            d, depth = stack.pop()
            # Read as it goes (one directory can hold millions of names: links
            # to one file cost no inode), never more than the budget.
            try:
                with os.scandir(d) as it:
                    for e in it:
                        if budget <= 0:
                            bounds.append("scratch_walk_entries:%d:%s" % (SCAN_ENTRIES, where))
                            stack = []
                            break
                        budget -= 1
                        try:
                            if e.is_file(follow_symlinks=False):
                                st = e.stat(follow_symlinks=False)
                                if st.st_size >= limit and st.st_ctime >= since:
                                    hit = e.path[:200]
                                    break
                            elif e.is_dir(follow_symlinks=False):
                                if depth < SCAN_DEPTH:
                                    stack.append((e.path, depth + 1))
                                else:
                                    deep = True
                        except FileNotFoundError:
                            continue
            except FileNotFoundError:
                continue
            except OSError:
                unreadable = True
                continue
        if hit is None:
            if unreadable:
                bounds.append("scratch_walk_unreadable::%s" % where)
            if deep:
                bounds.append("scratch_walk_depth:%d:%s" % (SCAN_DEPTH, where))
    if hit is not None:
        bounds = []
    return hit, full, bounds


def kill_everything():
    if os.path.isdir(RUN_CG):
        try:
            write_file(RUN_CG + "/cgroup.kill", "1")
        except OSError:
            pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass


def idle():
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(3600)


def main():
    global WORK_FD, CG_FD
    # Not /work: nothing is ever looked up relative to a folder the program
    # can write.
    os.chdir("/")
    WORK_FD = os.open("/work", O_DIR)
    if os.path.isdir(RUN_CG):
        CG_FD = os.open(RUN_CG, O_DIR)
    notes = setup_guest()
    fd = os.open(find_port(), os.O_RDWR)
    port = Port(fd)
    for n in notes:
        port.send(T_LOG, n)
    # What every run needs, loaded while nothing waits (see _libc).
    import fcntl  # noqa: F401
    import _socket  # noqa: F401

    _libc()
    # The first call's process, ready before READY: a pooled guest, a
    # snapshot and a cold boot all start their call from it.
    gc.collect()
    zyg = Zygote()
    port.send(T_READY, {
        "agent": 1,
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
        "cgroup": os.path.isdir(RUN_CG),
        "uptime_agent_start": float(T0),
        "uptime_ready": float(read_file("/proc/uptime").split()[0]),
    })
    while True:
        kind, payload = port.recv()
        if kind == T_PING:
            # A guest restored from a snapshot proves it is alive this way.
            port.send(T_PONG, payload)
        if kind != T_RUN:
            continue
        zyg, session = call(port, payload, zyg)
        # A session's guest waits for its next call; any other runs one
        # program and idles until the host kills it.
        if not session:
            break
        if zyg.used:
            # The next call's, made while the host reads this one's result.
            # Nothing of this call is referenced here any more (its spec
            # lived in call()'s frame): the next program inherits no object
            # of it.
            payload = zyg = None
            zyg = Zygote()
    idle()


def call(port, payload, zyg):
    """One RUN: the zygote left for the next call, and whether the guest
    stays for one (a session)."""
    steps = Steps()
    try:
        spec = decode_run(payload)
        steps.mark("decoded")
        zyg = run(port, spec, steps, zyg)
    except Exception:
        import traceback

        # Say why, then end PID 1: the kernel panics, QEMU exits (panic=-1,
        # -no-reboot) and the host reports the error at once instead of
        # waiting for a program that will never start.
        port.send(T_LOG, "agent error: " + traceback.format_exc()[-2000:])
        os._exit(1)
    return zyg, spec.get("session") == "1"


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        # Before READY: say why on the console and end PID 1, which panics
        # the kernel and (with panic=-1 and -no-reboot) ends QEMU at once.
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
