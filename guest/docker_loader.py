# sandbench's container loader: PID 1 of every docker/gvisor run's container,
# and in a session container the child the session agent (PID 1,
# guest/docker_keeper.py) forks for each call.
# Embedded into the binary (src/tier/docker/container.rs, include_str!) and
# passed as `python3 -u -c`; it must stay importable by any Python 3.8+.
#
# Why it is built this way (issue 10, items 4 and 5):
# - The program never shares this process: it runs in a child that has
#   dropped to its own uid before any of its code runs, with only three fds
#   (stdin = /dev/null, stdout and stderr = pipes to this process). It cannot
#   signal, ptrace or read this process (other uid, not dumpable).
# - The container's stdout is this process's alone: everything on it is a
#   frame (kind byte, 4-byte big-endian length, payload) written here. The
#   program's output arrives as 'o'/'e' frames, framed by this process, so
#   the program cannot forge a status ('s') or exit ('x') frame whatever it
#   writes. The container's stderr carries only this loader's own failures.
# - The exit frame says "code N" or "signal N" from waitpid: an exit 152 is
#   not a SIGXCPU.
# - After the exit frame this process waits for the host's acknowledgement
#   on stdin before it exits, so no output can be lost when the container
#   ends (gVisor dropped the tail of a pipe at container exit).
# - Nothing the program left in its scratch (a session's earlier calls) can
#   steer it (issue 21): it runs `python3 -I` (no script directory, no
#   PYTHON* variables, no user site on sys.path), keeps no path under the
#   scratch on sys.path and its working directory at /, writes the
#   program's file as the program's uid and without following anything
#   planted at its name, and walks the scratch fd-relative.
import sys, os, ctypes, _signal, select

sys.path[:] = [p for p in sys.path if p.startswith("/") and not p.startswith(("/work", "/tmp", "/dev/shm"))]
sys.dont_write_bytecode = True

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not ptrace-able, /proc/1/* root-only


def _scrub_environ():
    # gVisor (20221219) shows /proc/1/environ to any process whatever the
    # dumpable flag: blank the block it reads from (os.environ is a copy).
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(_libc, "environ")
    i = 0
    while env[i] is not None:
        p = ctypes.cast(env, ctypes.POINTER(ctypes.c_void_p))[i]
        ctypes.memset(p, 0, len(env[i]))
        i += 1


_scrub_environ()
os.chdir("/")


def _drop_caps(keep=0):
    # capset(2): effective and permitted `keep` (a mask of the first 32),
    # inheritable empty.
    class Hdr(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    if _libc.capset(ctypes.byref(Hdr(0x20080522, 0)), (Data * 2)(Data(keep, keep, 0))) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _drop_bounding():
    # The bounding and ambient sets emptied (CAP_SETPCAP, the loader's for
    # this alone), as the process tier's program has them: no exec gives the
    # program a capability back, whatever file capabilities a binary in the
    # image carries (no_new_privs refuses those too; this holds without it).
    cap = 0
    while _libc.prctl(23, cap, 0, 0, 0) >= 0:  # PR_CAPBSET_READ: fails past the last
        if _libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP %d" % cap)
        cap += 1
    err = 0
    if _libc.prctl(47, 4, 0, 0, 0) != 0:  # PR_CAP_AMBIENT, CLEAR_ALL
        err = ctypes.get_errno()
    # Read back from the kernel: the bounding set empty (a first
    # PR_CAPBSET_READ that failed would have dropped nothing), the ambient set
    # empty, or absent where the kernel does not know the call.
    with open("/proc/self/status") as fh:
        sets = dict(l.split(":", 1) for l in fh.read().splitlines() if l.startswith(("CapBnd:", "CapAmb:")))
    if int(sets.get("CapBnd", "1"), 16) or int(sets.get("CapAmb", "0"), 16) or err not in (0, 22):
        raise OSError(err, "the bounding or ambient set is not empty: %r" % sets)


def _remove(dfd, name):
    # Whatever the program left at `name` in the directory `dfd` (a link, a
    # FIFO, a socket, a directory tree), removed without following it. Run
    # as the program's uid: it may have locked its directories; it owns them.
    try:
        os.unlink(name, dir_fd=dfd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):
        pass
    try:
        os.chmod(name, 0o700, dir_fd=dfd)
        for root, dirs, files, rfd in os.fwalk(name, topdown=False, dir_fd=dfd):
            for f in files:
                os.unlink(f, dir_fd=rfd)
            for d in dirs:
                try:
                    os.rmdir(d, dir_fd=rfd)
                except NotADirectoryError:
                    os.unlink(d, dir_fd=rfd)  # a link to a directory
        os.rmdir(name, dir_fd=dfd)
    except OSError:
        # Too locked or too odd to empty: out of the way under a hidden name.
        os.rename(name, ".sandbench-removed-%d" % os.getpid(), src_dir_fd=dfd, dst_dir_fd=dfd)


def _write_new(dfd, name, data):
    # The program's file, made anew: never written through a link, a hard
    # link or a FIFO the program planted at its name.
    _remove(dfd, name)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)

# Session mode (src/tier/docker/session.rs): this loader is a child of the
# session agent (guest/docker_keeper.py, PID 1, which runs before this file
# and sets _keeper_child in the child it forks), started before its call
# exists. It reads the call's payload from the container's stdin, which
# sandbench keeps attached for the whole session. Files whose ctime (which
# no program can set back) is older than _since, when this loader started,
# belong to earlier calls.
_session = globals().get("_keeper_child", False)
_since = 0.0

# sandbench's seccomp filter for the program (io_uring, namespaces, mounts,
# ...; an allow list of socket families) is guest/program_filter.py's
# (prepended, as the relay is), installed in the program's process on both
# runtimes.
def _seccomp():
    install_program_filter(_libc)


# The scratch guard (issue 10, item 8; see src/highwater.rs): calls that
# can free scratch space (unlink, rmdir, rename, truncate, an open with
# O_TRUNC, a punched hole, madvise(MADV_REMOVE)) wait until sandbench, on the
# host, has drained its fanotify watch of the scratch mounts and checked
# them, then go on unchanged; io_uring, xattrs and other ABIs are refused.
# Installed only when the host says it will answer (a local engine,
# sandbench as root): nobody else would, and the calls would wait. The
# filter is guest/scratch_guard.py's (prepended, as the relay is).
def _guard():
    raw, n, col = scratch_guard_filter()
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fp = Fprog(n, ctypes.addressof(buf))
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER)
    fd = _libc.syscall(ctypes.c_long((317, 277)[col]), ctypes.c_ulong(1), ctypes.c_ulong(8), ctypes.byref(fp))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "seccomp listener")
    return fd


# Held while a frame is written once the egress relay thread (below) writes
# frames too; None in a run without network.
_out_lock = None


def _frame(kind, data):
    buf = kind + len(data).to_bytes(4, "big") + data
    if _out_lock is not None:
        _out_lock.acquire()
    try:
        while buf:
            n = os.write(1, buf)
            buf = buf[n:]
    finally:
        if _out_lock is not None:
            _out_lock.release()


class _Reader:
    # Exact reads from `fd`; with `keep`, the bytes read are kept (a
    # session's loader hands the call, as received, to the program's process).
    def __init__(self, fd, keep=False):
        self.fd = fd
        self.raw = [] if keep else None

    def exactly(self, n):
        out = b""
        while len(out) < n:
            x = os.read(self.fd, n - len(out))
            if not x:
                raise EOFError("the payload ended early")
            out += x
        if self.raw is not None:
            self.raw.append(out)
        return out

    def line(self):
        out = b""
        while not out.endswith(b"\n"):
            out += self.exactly(1)
            if len(out) > 32:
                raise ValueError("bad payload header")
        return out


def _read_payload(rd):
    # Header: its length on one line, then NUL-separated fields (no json:
    # importing it costs ~35 ms on gVisor), then exactly code_len bytes of
    # code and ca_len bytes of the run CA's certificate (a run with a secret
    # over TLS).
    n = int(rd.line())
    f = rd.exactly(n).split(b"\0")
    code_len, fsize, pids, uid, gid, guarded, net, ca_len = (int(x) for x in f[:8])
    lang, file, argc = f[8].decode(), f[9].decode(), int(f[10])
    argv = [os.fsdecode(a) for a in f[11:11 + argc]]
    env = f[11 + argc:]
    code = rd.exactly(code_len)
    ca = rd.exactly(ca_len) if ca_len else b""
    if uid == 0 or gid == 0 or "/" in file or not file:
        raise ValueError("refusing to run the program as root or outside /work")
    return fsize, pids, uid, gid, guarded, net, lang, file, argv, env, code, ca


def _read_ack():
    # Session mode: bytes up to sandbench's acknowledgement (a newline) are
    # kills it sent before it saw this call end; the next call's payload
    # starts after it. Stdin ended: sandbench is gone, and so is the session.
    while True:
        x = os.read(0, 1)
        if not x:
            os._exit(3)
        if x == b"\n":
            return


# Where the program's trust variables point (src/tier/docker/container.rs).
_CA_BUNDLE = "/tmp/sandbench-ca-bundle.pem"
_SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def _write_ca_bundle(ca):
    # As the program's uid, in its fresh /tmp, never through a link: the
    # image's own bundle (if it has one) and the run's CA.
    system = b""
    for b in _SYSTEM_BUNDLES:
        try:
            with open(b, "rb") as fh:
                system = fh.read(8 << 20)
            break
        except OSError:
            pass
    fd = os.open(_CA_BUNDLE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(system + b"\n# sandbench: this run's CA (secrets)\n" + ca)


def _become_program(uid, gid, keep):
    # In the program's process, before any of its code exists here: stdin
    # /dev/null, stdout and stderr the pipes to the loader, no other fd but
    # `keep`, the program's uid and gid, working directory /work.
    _signal.set_wakeup_fd(-1)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(_out_w, 1)
    os.dup2(_err_w, 2)
    lo = 3
    for k in sorted(keep):
        os.closerange(lo, k)
        lo = k + 1
    os.closerange(lo, 1 << 16)
    try:
        # The OOM killer takes the program, never the loader.
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    os.setgroups([])
    _drop_bounding()
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        os._exit(121)
    _libc.prctl(4, 1, 0, 0, 0)
    os.chdir("/work")


def _write_program(file, code):
    # Written as the program's uid: the program owns its own file.
    wd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    _write_new(wd, file, code)
    os.close(wd)


def _program_environ(fields):
    env = dict(os.environ)
    for i in range(0, len(fields) - 1, 2):
        env[os.fsdecode(fields[i])] = os.fsdecode(fields[i + 1])
    os.environ.clear()
    os.environ.update(env)


# Every signal at its default and none blocked, as a program started from a
# terminal has them: Python ignores SIGPIPE and SIGXFSZ, and an exec keeps an
# ignored signal ignored (`yes | head -1` then says "Broken pipe", and a file
# at the size limit reads as EFBIG instead of SIGXFSZ).
def _default_signals():
    for _s in range(1, _signal.NSIG):
        try:
            _signal.signal(_s, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())


def _run_program(lang, argv, path, code):
    # Never returns: the program's interpreter, or its code in this one.
    if lang != "python":
        argv = argv + [path]
        try:
            _default_signals()
            os.execvpe(argv[0], argv, dict(os.environ))
        finally:
            os._exit(127)
    import types
    m = types.ModuleType("__main__")
    m.__file__ = path
    sys.modules["__main__"] = m
    sys.argv = [path]
    sys.path[0] = "/work"
    sys.stdin = open(0, "r", closefd=False)
    before = set(sys.modules)
    status = 0
    try:
        exec(compile(code, path, "exec"), m.__dict__)
    except SystemExit as e:
        if not _session:
            raise
        status = e.code
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 1
    if not _session:
        sys.exit(status)
    _program_exit(status, m, before)


def _program_exit(status, main, before):
    # A session's call ends as the interpreter ends a program, step by step
    # (Py_FinalizeEx's order), except that the loader's own modules, which
    # this process inherited through fork, are not torn down: that teardown
    # touched, and so copied, every page of the loader's heap (~4 ms of CPU
    # a call here, several times that under gVisor) for nothing of the
    # program's. What the program made is finalized: its threads joined, its
    # atexit functions run, the globals of __main__ and of the modules it
    # brought from its scratch cleared (files it left open are flushed and
    # closed, __del__ runs), cycles collected, stdout and stderr flushed.
    try:
        if status is None:
            code = 0
        elif isinstance(status, int):
            code = status & 0xFF
        else:
            # sys.exit("message"): the message on stderr, exit 1.
            try:
                sys.stderr.write(str(status) + "\n")
            except Exception:
                pass
            code = 1
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
        mine = [mod for name, mod in list(sys.modules.items()) if name not in before
                and str(getattr(mod, "__file__", "") or "").startswith(("/work/", "/tmp/", "/dev/shm/"))]
        for mod in reversed(mine):
            mod.__dict__.clear()
        main.__dict__.clear()
        import gc
        gc.collect()
        try:
            sys.stdout.flush()
        except Exception:
            code = 120
        try:
            sys.stderr.flush()
        except Exception:
            pass
    except BaseException:
        code = 1
    os._exit(code)


def _full(d):
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize < 1 << 20 or (st.f_files > 0 and st.f_favail == 0)


_out_r, _out_w = os.pipe()
_err_r, _err_w = os.pipe()
_ok_r, _ok_w = os.pipe()
_wake_r, _wake_w = os.pipe()
os.set_blocking(_wake_w, False)
# A SIGCHLD handler so that the wakeup fd ends select() the moment the
# program exits (the default disposition would not wake it).
_signal.signal(_signal.SIGCHLD, lambda *a: None)
_signal.set_wakeup_fd(_wake_w)
_failed = None
_egress = None
# Scratch mounts an earlier call of the session filled (set below).
_prior_full = []
if _session:
    # The program's process is made before its call exists: isolated (its
    # uid, no other fd, seccomp) and waiting on a pipe for the call as this
    # loader received it. It says "1" once isolated and "2" once its file
    # is written; the call runs only after both.
    import time

    # No process of the session's uid is left from earlier calls (the last
    # loader killed them all before it exited, and this one was forked
    # after): every change they made is older than this.
    _since = time.time()
    _uid, _gid = _keeper_ids
    _call_r, _call_w = os.pipe()
    # The loader's objects stay out of the program's collections: its
    # collector never walks (and so never copies) their pages.
    import gc

    gc.freeze()
    _pid = os.fork()
    if _pid == 0:
        try:
            _become_program(_uid, _gid, [_ok_w, _call_r])
            _seccomp()
            os.write(_ok_w, b"1")
            _, _, _, _, _, _, _lang, _file, _argv, _env, _code, _ = _read_payload(_Reader(_call_r))
            os.close(_call_r)
            _write_program(_file, _code)
            _program_environ(_env)
            os.write(_ok_w, b"2")
            os.close(_ok_w)
        except BaseException:
            os._exit(121)
        _run_program(_lang, _argv, "/work/" + _file, _code)
    os.close(_call_r)
    os.close(_out_w)
    os.close(_err_w)
    os.close(_ok_w)
    _ready = os.read(_ok_r, 1) == b"1"
    # tmpfs may stamp a change with the coarse clock, which lags by up to a
    # tick: the call's program starts only once that clock has passed
    # _since, so whatever it changes is stamped at or after it (off the
    # call's path unless calls come back to back; 5 is CLOCK_REALTIME_COARSE).
    try:
        while time.clock_gettime(5) <= _since:
            time.sleep(0.001)
    except OSError:
        time.sleep(0.01)
    # Idle until the call: stdin readable (its payload, or its end).
    select.select([0], [], [])
    _rd = _Reader(0, keep=True)
    try:
        _fsize, _pids, _puid, _pgid, _guarded, _net, _lang, _file, _argv, _env, _code, _ca = _read_payload(_rd)
    except EOFError:
        # Sandbench's attach ended while the session was idle.
        os._exit(3)
    # A scratch mount already full before the program gets its call was
    # filled by an earlier call (and reported there): said once, not counted
    # again. Looked at before the call is handed over: the program starts
    # the moment it has its code, and one that fills a mount within
    # milliseconds must not pass its own fill off as an earlier call's.
    for _d in ("/work", "/tmp", "/dev/shm"):
        try:
            if _full(_d):
                _prior_full.append(_d)
        except OSError:
            pass
    if (_puid, _pgid) != (_uid, _gid) or _guarded or _net or _ca:
        _failed = b"a session's call asked for another uid, a scratch guard or a network"
    elif _ready:
        try:
            _view = memoryview(b"".join(_rd.raw))
            while _view:
                _view = _view[os.write(_call_w, _view):]
        except OSError:
            _ready = False
    os.close(_call_w)
    _rd = None
    if _failed is None and (not _ready or os.read(_ok_r, 1) != b"2"):
        _failed = b"the program's process could not drop to uid %d, install its seccomp filters or write its file" % _uid
else:
    _fsize, _pids, _uid, _gid, _guarded, _net, _lang, _file, _argv, _env, _code, _ca = _read_payload(_Reader(0))
    # A run with an allow list: the egress listener exists before the
    # program does (the child closes its fd); the relay thread starts once
    # it runs.
    _egress = EgressRelay.listen(_net) if _net else None
    if _guarded:
        import _socket
        # The child hands the guard's listener to this process over it.
        _gs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    _pid = os.fork()
    if _pid == 0:
        try:
            if _guarded:
                _gs[0].detach()  # closed below with the rest; never closed again by its object
            _become_program(_uid, _gid, [_ok_w] + ([_gs[1].fileno()] if _guarded else []))
            _write_program(_file, _code)
            if _ca:
                _write_ca_bundle(_ca)
            _program_environ(_env)
            _seccomp()
            if _guarded:
                _g = _guard()
                _gs[1].sendmsg([b"g"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _g.to_bytes(4, sys.byteorder))])
                os.close(_g)
                _gs[1].close()
            # Only now is the program's sandbox complete: say so, and keep no
            # fd of the loader's.
            os.write(_ok_w, b"1")
            os.close(_ok_w)
        except BaseException:
            os._exit(121)
        _run_program(_lang, _argv, "/work/" + _file, _code)
    os.close(_out_w)
    os.close(_err_w)
    os.close(_ok_w)
    if os.read(_ok_r, 1) != b"1":
        _failed = b"the program's process could not drop to uid %d or install its seccomp filters" % _uid
if _failed is not None:
    # The run must not happen: its process is ended (a session's waits on
    # a pipe that has closed, and exits).
    try:
        os.kill(_pid, 9)
    except OSError:
        pass
    _frame(b"f", _failed)
    if _session:
        _read_ack()
    else:
        os.read(0, 1)
    os._exit(0)

os.close(_ok_r)
if not _session:
    # The program is its own uid now. A one-shot loader keeps SETUID alone:
    # at the program's end it takes the program's uid as its effective uid
    # to kill whatever the program left (as a session's loader does), then
    # drops it too. SETGID and SETPCAP have no use left.
    try:
        _drop_caps(1 << 7)
    except OSError:
        pass
_gfd = -1
if _guarded:
    # Kept open (never read here) for the host to take with pidfd_getfd.
    _gs[1].close()
    _m, _anc, _fl, _ad = _gs[0].recvmsg(1, _socket.CMSG_SPACE(4))
    for _lvl, _ty, _data in _anc:
        if _lvl == _socket.SOL_SOCKET and _ty == _socket.SCM_RIGHTS and len(_data) >= 4:
            _gfd = int.from_bytes(_data[:4], sys.byteorder)
    _gs[0].close()
_frame(b"r", b"uid=%d gid=%d guard=%d" % (_uid, _gid, _gfd))
_code = None


def _egress_main(relay, acked):
    # After the payload, stdin carries the host's frames: 'n' (a relay
    # message) and 'k' (the acknowledgement).
    buf = b""
    while True:
        if not relay.step(0.5, (0,)):
            continue
        x = os.read(0, 65536)
        if not x:
            acked.set()
            return
        buf += x
        while len(buf) >= 5:
            n = int.from_bytes(buf[1:5], "big")
            if len(buf) < 5 + n:
                break
            kind, payload, buf = buf[:1], buf[5:5 + n], buf[5 + n:]
            if kind == b"n":
                relay.on_message(payload)
            elif kind == b"k":
                acked.set()


_acked = None
if _egress is not None:
    import threading

    _out_lock = threading.Lock()
    _acked = threading.Event()
    _relay = EgressRelay(_egress, lambda m: _frame(b"n", m))
    threading.Thread(target=_egress_main, args=(_relay, _acked), daemon=True).start()
_said = set("disk:" + d for d in _prior_full)
if _prior_full:
    _frame(b"s", b" ".join(b"prior=" + os.fsencode(d).hex().encode() for d in _prior_full))


def _say(found):
    # Bounds first: the frame is cut at 4000 bytes, and a cut name is still a
    # name, while a lost bound would read as a walk that saw everything.
    parts = [b"bound=" + os.fsencode(b).hex().encode() for b in found.get("bound", [])]
    parts += [b"pids=%d" % found["pids"]] if "pids" in found else []
    parts += [b"disk=" + os.fsencode(d).hex().encode() for d in found.get("disk", [])]
    parts += [b"fsize=" + os.fsencode(q).hex().encode() for q in found.get("fsize", [])]
    _frame(b"s", b" ".join(parts)[:4000])


# How much of each scratch mount the exit walk looks at: entries (names)
# and directory levels. A walk that stops short says so (a "bound" the host
# reports, and the run reads incomplete, never ok): raising these is not a
# fix by itself (issue 42, item 4: 10,002 empty names hid a capped file
# from a 5,000-name walk). Sized like the process tier's scan, so that a
# session's installed packages stay within them.
_WALK_ENTRIES = 100000
_WALK_DEPTH = 64
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _bound(found, name, limit, where):
    b = "%s:%s:%s" % (name, limit, where)
    if b not in found.setdefault("bound", []):
        found["bound"].append(b)


def _walk(top, found):
    # Files at the size limit under `top`, changed since the call began.
    # fd-relative and no link followed (the program may swap a directory
    # for a link while this root process walks); depth first with one open
    # directory per level, however wide the tree (a descriptor per pending
    # directory would run out, and a directory not opened goes unseen).
    where = "the loader's walk of " + top
    try:
        fd = os.open(top, _OPEN_DIR)
    except OSError:
        _bound(found, "scratch_walk_unreadable", "", where)
        return
    left = _WALK_ENTRIES
    unreadable = deep = False
    stack = []
    cur = (fd, top)
    try:
        while True:
            if cur is not None:
                fd, path = cur
                cur = None
                subs = []
                stack.append((fd, path, subs))
                try:
                    with os.scandir(fd) as it:
                        for e in it:
                            if left <= 0:
                                _bound(found, "scratch_walk_entries", _WALK_ENTRIES, where)
                                return
                            left -= 1
                            try:
                                if e.is_dir(follow_symlinks=False):
                                    if len(stack) <= _WALK_DEPTH:
                                        subs.append(e.name)
                                    else:
                                        deep = True
                                elif e.is_file(follow_symlinks=False):
                                    st = e.stat(follow_symlinks=False)
                                    if st.st_size >= _fsize and st.st_ctime >= _since:
                                        found.setdefault("fsize", []).append(os.path.join(path, e.name))
                                        if len(found["fsize"]) > 5:
                                            return
                            except FileNotFoundError:
                                pass
                except OSError:
                    unreadable = True
            if not stack:
                break
            fd, path, subs = stack[-1]
            if not subs:
                stack.pop()
                os.close(fd)
                continue
            n = subs.pop()
            try:
                cur = (os.open(n, _OPEN_DIR, dir_fd=fd), os.path.join(path, n))
            except (FileNotFoundError, NotADirectoryError):
                pass
            except OSError as ex:
                # ELOOP: swapped for a link since the listing, refused.
                if ex.errno != 40:
                    unreadable = True
    finally:
        for fd, _, _ in stack:
            os.close(fd)
        if cur is not None:
            os.close(cur[0])
    if unreadable:
        _bound(found, "scratch_walk_unreadable", "", where)
    if deep:
        _bound(found, "scratch_walk_depth", _WALK_DEPTH, where)


def _watch(final):
    # What the program meets, seen from inside: processes at the pids limit
    # (the only view of them on gVisor), a full scratch space, files at the
    # size limit (a program that catches EFBIG/ENOSPC says nothing).
    found = {}
    try:
        if "pids" not in _said:
            # This loader is not one of the program's processes.
            n = sum(1 for d in os.listdir("/proc") if d.isdigit()) - 1
            if n >= _pids:
                found["pids"] = n
        for d in ("/work", "/tmp", "/dev/shm"):
            try:
                st = os.statvfs(d)
            except OSError:
                continue
            if st.f_bavail * st.f_frsize < 1 << 20 or (st.f_files > 0 and st.f_favail == 0):
                if "disk:" + d not in _said:
                    found.setdefault("disk", []).append(d)
            if final and len(found.get("fsize", ())) <= 5:
                _walk(d, found)
    except Exception:
        if final:
            # A walk that failed saw nothing past where it failed.
            _bound(found, "scratch_walk_unreadable", "", "the loader's walk (it failed)")
    if found:
        _said.update(["pids"] if "pids" in found else [])
        _said.update("disk:" + d for d in found.get("disk", []))
        _say(found)


_streams = {_out_r: b"o", _err_r: b"e"}
_counts = {b"o": 0, b"e": 0}
_st = None


def _pump(fd):
    try:
        x = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not x:
        os.close(fd)
        del _streams[fd]
        return False
    _counts[_streams[fd]] += len(x)
    _frame(_streams[fd], x)
    return True


def _reap():
    # PID 1 reaps every orphan; the program's own status is kept.
    global _st
    while True:
        try:
            w, s = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if w == 0:
            return
        if w == _pid:
            _st = s


def _kill_program():
    # Every process of the program's uid goes (its daemons too), never PID 1
    # (the keeper, or this loader in a one-shot container), which kill(-1)
    # skips. Only the effective uid changes: this process may then signal
    # the program's processes, and none of them may signal it. False if it
    # could not (no process left to signal is not a failure).
    try:
        os.seteuid(_uid)
        try:
            os.kill(-1, 9)
        except ProcessLookupError:
            pass
        finally:
            os.seteuid(0)
        return True
    except OSError:
        return False


def _end_leftovers():
    # One-shot: this loader is PID 1, so whatever the program left behind is
    # reparented here. Kill and reap until none is left (each round's kill
    # reaches what the last one's victims forked meanwhile), so the verdict
    # below is about a program that has ended whole, as on the other tiers.
    while _kill_program():
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    try:
        _drop_caps()
    except OSError:
        pass


# Session mode: a byte (or EOF) on stdin while the program runs is the
# host's kill (cancel, CPU limit); the container stays.
_host = [0] if _session else []
_host_gone = False
while _st is None:
    ready, _, _ = select.select(list(_streams) + [_wake_r] + _host, [], [], 0.1)
    for fd in ready:
        if fd == _wake_r:
            os.read(_wake_r, 512)
        elif fd == 0:
            _host_gone = not os.read(0, 1)
            _host = []
            _kill_program()
        else:
            _pump(fd)
    _reap()
    _watch(False)
if _session:
    _kill_program()
else:
    _end_leftovers()
# The program is gone: what it wrote before it exited is in the pipes. Take
# all of it, but do not wait for descendants that keep the pipes open.
for fd in list(_streams):
    os.set_blocking(fd, False)
    while fd in _streams and _pump(fd):
        pass
_watch(True)
if os.WIFSIGNALED(_st):
    how = b"signal %d" % os.WTERMSIG(_st)
else:
    how = b"code %d" % os.WEXITSTATUS(_st)
_frame(b"x", how + b" out=%d err=%d" % (_counts[b"o"], _counts[b"e"]))
# Stay up until the host has taken everything (it acknowledges on stdin).
if _acked is not None:
    _acked.wait()
elif _session:
    if _host_gone:
        os._exit(3)
    _read_ack()
else:
    try:
        os.read(0, 1)
    except OSError:
        pass
os._exit(0)
