# sandbench's container loader: PID 1 of every docker/gvisor container.
# Embedded into the binary (src/tier/docker/container.rs, include_str!) and
# passed as `python3 -u -c`; it must stay importable by any Python 3.8+.
import sys, os, ctypes, _signal
os.chdir("/work")
_libc = ctypes.CDLL(None, use_errno=True)
def _sandbench_load():
    # Header: its length on one line, then NUL-separated fields (no json:
    # importing it costs ~35 ms on gVisor), then the program.
    data = sys.stdin.buffer.read()
    nl = data.find(b"\n")
    if nl < 0:
        os._exit(0)
    end = nl + 1 + int(data[:nl])
    f = data[nl + 1:end].split(b"\0")
    code = data[end:]
    argc = int(f[5])
    hdr = {"nonce": f[0], "fsize": int(f[1]), "pids": int(f[2]), "lang": f[3].decode(), "file": f[4].decode(),
           "argv": [os.fsdecode(a) for a in f[6:6 + argc]]}
    env = f[6 + argc:]
    fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    for i in range(0, len(env) - 1, 2):
        os.environ[os.fsdecode(env[i])] = os.fsdecode(env[i + 1])
    path = "/work/" + hdr["file"]
    with open(path, "wb") as f:
        f.write(code)
    return hdr, path, code
# This process is the container's init (PID 1). Not dumpable: the program,
# same uid, cannot ptrace it. The program runs in a child forked from this
# started interpreter ahead of time (a warm container has paid for the fork
# too); the child takes the program from stdin and tells the init the limits
# it watches over a pipe it closes before any of the program runs.
_libc.prctl(4, 0, 0, 0, 0)
_r, _w = os.pipe()
_pid = os.fork()
if _pid == 0:
    os.close(_r)
    _libc.prctl(4, 1, 0, 0, 0)
    _h, _p, _c = _sandbench_load()
    del _sandbench_load
    os.write(_w, b"\0".join([_h["nonce"], b"%d" % _h["fsize"], b"%d" % _h["pids"]]))
    os.close(_w)
    if _h["lang"] != "python":
        _argv = _h["argv"] + [_p]
        try:
            os.execvpe(_argv[0], _argv, dict(os.environ))
        finally:
            os._exit(127)
    import types
    _m = types.ModuleType("__main__")
    _m.__file__ = _p
    sys.modules["__main__"] = _m
    sys.argv = [_p]
    sys.path[0] = "/work"
    sys.stdin = open(0, "r", closefd=False)
    try:
        exec(compile(_c, _p, "exec"), _m.__dict__)
    except SystemExit:
        raise
    except BaseException as _e:
        import traceback
        traceback.print_exception(type(_e), _e, _e.__traceback__.tb_next)
        sys.exit(1)
    sys.exit(0)
os.close(_w)
_fd = os.open("/dev/null", os.O_RDONLY)
os.dup2(_fd, 0)
os.close(_fd)
_b = b""
while True:
    _x = os.read(_r, 4096)
    if not _x:
        break
    _b += _x
os.close(_r)
_f = _b.split(b"\0")
if len(_f) == 3:
    _h = {"nonce": _f[0], "fsize": int(_f[1]), "pids": int(_f[2])}
else:
    _h = {"nonce": b"-", "fsize": 1 << 62, "pids": 1 << 30}
_said = set()
def _say(found):
    # One nonce-marked status line on stderr; the host takes it out.
    parts = [b"pids=%d" % found["pids"]] if "pids" in found else []
    parts += [b"oom=%d" % found["oom"]] if "oom" in found else []
    parts += [b"disk=" + os.fsencode(d).hex().encode() for d in found.get("disk", [])]
    parts += [b"fsize=" + os.fsencode(q).hex().encode() for q in found.get("fsize", [])]
    msg = b"\0sandbench-status " + _h["nonce"] + b" " + b" ".join(parts)[:4000] + b"\n"
    try:
        os.write(2, msg)
    except OSError:
        pass
def _watch(final):
    # What the program meets, seen from inside: processes at the pids limit
    # (the only view of them on gVisor), a full scratch space, files at the
    # size limit (a program that catches EFBIG/ENOSPC says nothing).
    found = {}
    try:
        if "pids" not in _said:
            n = sum(1 for d in os.listdir("/proc") if d.isdigit())
            if n >= _h["pids"]:
                found["pids"] = n
        for d in ("/work", "/tmp"):
            st = os.statvfs(d)
            if st.f_bavail * st.f_frsize < 1 << 20 or (st.f_files > 0 and st.f_favail == 0):
                if "disk:" + d not in _said:
                    found.setdefault("disk", []).append(d)
            if not final:
                continue
            n = 0
            for root, dirs, files in os.walk(d):
                for f in files:
                    n += 1
                    q = os.path.join(root, f)
                    try:
                        if os.lstat(q).st_size >= _h["fsize"]:
                            found.setdefault("fsize", []).append(q)
                    except OSError:
                        pass
                if n > 5000 or len(found.get("fsize", ())) > 5:
                    break
    except Exception:
        pass
    if found:
        _said.update(["pids"] if "pids" in found else [])
        _said.update("disk:" + d for d in found.get("disk", []))
        _say(found)
_signal.signal(_signal.SIGALRM, lambda *a: _watch(False))
_signal.setitimer(_signal.ITIMER_REAL, 0.1, 0.1)
_st = 0
while True:
    try:
        _w, _s = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    if _w == _pid:
        _st = _s
        break
_signal.setitimer(_signal.ITIMER_REAL, 0)
if os.WIFSIGNALED(_st) and os.WTERMSIG(_st) == 9:
    # Killed: by the kernel's OOM killer? The container's own cgroup says
    # (runc shows it inside; gVisor does not, the host judges there).
    for _f in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            for _l in open(_f):
                if _l.startswith("oom_kill ") and int(_l.split()[1]) > 0:
                    _say({"oom": int(_l.split()[1])})
        except (OSError, ValueError):
            pass
_watch(True)
os._exit(128 + os.WTERMSIG(_st) if os.WIFSIGNALED(_st) else os.WEXITSTATUS(_st))
