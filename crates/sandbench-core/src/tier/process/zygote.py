# The process tier's zygote (sandbench's own code, never the program's): one
# Python interpreter, started once and warm, that forks the program's process
# of each run instead of a fresh `python3 -u main.py` starting in every
# sandbox. See tier/process/zygote.rs for who starts it and why it is safe;
# this file is what it runs, as `python3 -u main.py` (the command line a
# sandbox's own interpreter has).
#
# Started by `sandbench __zygote` as root with the runs' environment only
# (nothing of the host's), in a mount namespace of its own whose /tmp is a
# read-only tmpfs holding only this file (and is its working directory),
# stdin/stdout/stderr on /dev/null and its control socket on fd 3. The control socket is the host's alone: over it come the
# filters (once) and, per sandbox, a connection with that run's uid, gid and
# egress port. On a connection comes one request, from the sandbox's init
# before any program exists: its pidfd and the program process's
# descriptors. For it the zygote forks; the child enters init's namespaces
# and forks again (so that the grandchild is in init's pid namespace, which
# reaps it), and the grandchild does what `program.rs` does for a process
# forked by init (its own session, /work, Landlock, rlimits, its uid with no
# capability, no_new_privs, the scratch guard, seccomp), then waits as
# `waiter.py` does and runs the program in itself.
#
# The zygote never runs a program's code and reads nothing a program wrote:
# each program's process is a fresh fork, and what it changes stays in its
# own copy of the pages.
import os
import sys

# Not even its own folder is searched for imports.
del sys.path[0]
# What the interpreter imported by itself: the program's process keeps only these.
__sandbench_base = frozenset(sys.modules)


def __sandbench_zygote():
    import builtins
    import ctypes
    import gc
    import json
    import resource
    import select
    import struct
    import time
    import _signal
    import _socket

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ul = ctypes.c_ulong
    x86 = os.uname().machine == "x86_64"
    SYS_SECCOMP = 317 if x86 else 277
    SYS_SETNS = 308 if x86 else 268

    ctl = _socket.socket(fileno=3)
    # The first packet: the filters, as the host built them (seccomp.rs,
    # highwater.rs): u32 count, then per program u32 length and its
    # sock_filter instructions.
    hello = ctl.recv(1 << 20)
    (count,) = struct.unpack_from("<I", hello, 0)
    at = 4
    programs = []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", hello, at)
        at += 4
        buf = ctypes.create_string_buffer(hello[at : at + 8 * n], 8 * n)
        at += 8 * n
        programs.append((n, buf))
    del hello

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprogs = [Fprog(n, ctypes.addressof(b)) for n, b in programs]
    guard_prog, filters = fprogs[0], fprogs[1:]

    # The ast types, made once here: the first compile() of a process makes
    # them (~1 ms), and every program's process inherits them.
    compile("", "<zygote>", "exec")
    main_loader = None
    try:
        import _frozen_importlib_external

        main_loader = _frozen_importlib_external.SourceFileLoader
    except ImportError:
        pass

    def report(line):
        # A status line for the host, on init's status pipe (fd `status`).
        try:
            os.write(report.fd, (json.dumps(line) + "\n").encode())
        except OSError:
            pass

    report.fd = -1

    def fail(msg):
        report({"t": "error", "msg": "the sandbox's zygote: " + msg})
        os._exit(121)

    def check(r, what):
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, "%s: %s" % (what, os.strerror(e)))
        return r

    def landlock(port):
        # Landlock ABI 6, every right handled, as program.rs asks of the
        # landlock crate; anything less refuses the run (sandbench does not
        # use the zygote on such a kernel, nor where degraded runs are allowed:
        # those sandboxes start their own interpreter).
        abi = libc.syscall(ctypes.c_long(444), None, ul(0), ul(1))
        if abi < 6:
            raise OSError(0, "Landlock ABI %d (6 needed)" % abi)
        fs_all, fs_read, fs_file = 0xFFFF, 0x1 | 0x4 | 0x8, 0x1 | 0x2 | 0x4 | 0x4000 | 0x8000
        attr = struct.pack("<QQQ", fs_all, 0x3, 0x3)  # fs; bind+connect TCP; abstract unix + signal
        rs = check(libc.syscall(ctypes.c_long(444), attr, ul(len(attr)), ul(0)), "landlock_create_ruleset")
        try:
            rules = [("/", fs_read), ("/work", fs_all), ("/tmp", fs_all), ("/dev/shm", fs_all)]
            rules += [("/dev/null", fs_file), ("/dev/zero", fs_file), ("/dev/full", fs_file)]
            for path, access in rules:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue  # as the landlock crate's path_beneath_rules: no such path, no rule
                try:
                    rule = struct.pack("<Qi", access, fd)
                    check(libc.syscall(ctypes.c_long(445), ul(rs), ul(1), rule, ul(0)), "landlock_add_rule " + path)
                finally:
                    os.close(fd)
            if port is not None:
                rule = struct.pack("<QQ", 0x2, port)
                check(libc.syscall(ctypes.c_long(445), ul(rs), ul(2), rule, ul(0)), "landlock_add_rule port")
            check(libc.syscall(ctypes.c_long(446), ul(rs), ul(0)), "landlock_restrict_self")
        finally:
            os.close(rs)

    def drop_to(uid, gid):
        if uid == 0 or gid == 0:
            raise OSError(0, "refusing to run the program as root")
        os.setgroups([])
        for cap in range(64):
            if libc.prctl(23, ul(cap), ul(0), ul(0), ul(0)) == 1:  # PR_CAPBSET_READ
                check(libc.prctl(24, ul(cap), ul(0), ul(0), ul(0)), "PR_CAPBSET_DROP")
        check(libc.prctl(47, ul(4), ul(0), ul(0), ul(0)), "clear the ambient set")
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        hdr = struct.pack("<Ii", 0x20080522, 0)
        data = bytes(24)
        check(libc.syscall(ctypes.c_long(126 if x86 else 91), hdr, data), "capset")

    def program(req, fds):
        # In the fork, already in init's pid namespace: the rest of init's
        # namespaces through its pidfd (a mount namespace's root and cwd
        # come with it).
        pidfd, go, ready, guard, status, out, err, exit_w = fds
        # SIGCHLD as a fresh interpreter has it: its default action and no
        # wakeup descriptor (the zygote's wake the zygote's loop only).
        _signal.set_wakeup_fd(-1)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        report.fd = status
        os.close(exit_w)
        # Should the zygote die, so does this process (init then sees the
        # exit pipe's EOF and ends the sandbox).
        check(libc.prctl(1, ul(9), ul(0), ul(0), ul(0)), "PR_SET_PDEATHSIG")
        flags = 0x00020000 | 0x40000000 | 0x04000000 | 0x08000000 | 0x02000000
        check(libc.syscall(ctypes.c_long(SYS_SETNS), ul(pidfd), ul(flags)), "setns")
        os.close(pidfd)
        os.write(ready, b"p%d\n" % os.getpid())
        os.setsid()
        os.chdir("/work")
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        try:
            landlock(req.get("port"))
        except OSError as e:
            fail("Landlock not fully enforced (%s): refusing to run" % e)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
        drop_to(int(req["uid"]), int(req["gid"]))
        # An exec after the uid change would have made the process dumpable
        # again (its /proc/self files its own); there is no exec here.
        check(libc.prctl(4, ul(1), ul(0), ul(0), ul(0)), "PR_SET_DUMPABLE")
        # The uid change cleared the parent-death signal: set it again.
        check(libc.prctl(1, ul(9), ul(0), ul(0), ul(0)), "PR_SET_PDEATHSIG")
        check(libc.prctl(38, ul(1), ul(0), ul(0), ul(0)), "PR_SET_NO_NEW_PRIVS")
        # The guard first, its listener to init (which serves it), then the
        # program's filters.
        g = check(libc.syscall(ctypes.c_long(SYS_SECCOMP), ul(1), ul(8), ctypes.byref(guard_prog)), "seccomp listener")
        gs = _socket.socket(fileno=guard)
        gs.sendmsg([b"g"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("i", g))])
        gs.close()
        os.close(g)
        for f in filters:
            check(libc.prctl(22, ul(2), ctypes.byref(f), ul(0), ul(0)), "seccomp filter")
        report({"t": "isolation", "landlock": "fully_enforced", "seccomp": True, "uid": os.getuid(),
                "user_ns": False, "degraded": []})
        report({"t": "mark", "what": "isolation_applied", "mono_ns": time.monotonic_ns()})
        os.close(status)
        report.fd = -1
        # Only the program's three and the two waiting ones stay open.
        keep = sorted((0, 1, 2, go, ready))
        for lo, hi in zip(keep, keep[1:] + [1 << 20]):
            os.closerange(lo + 1, hi)
        return go, ready

    def rights(anc):
        return [x for _lvl, ty, d in anc if ty == _socket.SCM_RIGHTS for x in struct.unpack("%di" % (len(d) // 4), d[: len(d) // 4 * 4])]

    def reap(children):
        # Every exited child of the zygote, not only the processes it forked:
        # a program can make processes whose parent is the zygote (clone with
        # CLONE_PARENT, where a filter lets it), and an unreaped one would
        # hold its pid for the zygote's life and keep its sandbox's pid
        # namespace from ending (init waits in zap_pid_ns_processes until
        # every process of it is reaped). A program's process: init learns
        # how it ended from the kernel's word (its parent is this process).
        while True:
            try:
                pid, st, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exit_w = children.pop(pid, None)
            if exit_w is None:
                continue  # parented here by a program: reaped, nothing to tell
            code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -1
            sig = os.WTERMSIG(st) if os.WIFSIGNALED(st) else -1
            cpu = int((ru.ru_utime + ru.ru_stime) * 1000)
            try:
                os.write(exit_w, b"x %d %d %d %d\n" % (code, sig, cpu, ru.ru_maxrss))
            except OSError:
                pass
            os.close(exit_w)

    def serve():
        # The zygote's own pid namespace, to return to after each fork.
        own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        gc.freeze()
        poll = select.poll()
        poll.register(ctl.fileno(), select.POLLIN)
        # Any child's end wakes the loop: SIGCHLD writes to this pipe.
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        _signal.signal(_signal.SIGCHLD, lambda _s, _f: None)
        _signal.set_wakeup_fd(wake_w)
        poll.register(wake_r, select.POLLIN)
        conns = {}  # connection fd -> the run's parameters (from sandbench)
        children = {}  # pid of a program's process -> init's exit pipe
        while True:
            for fd, ev in poll.poll():
                if fd == ctl.fileno():
                    m, anc, _f, _a = ctl.recvmsg(4096, _socket.CMSG_SPACE(4))
                    got = rights(anc)
                    if not m:
                        os._exit(0)  # sandbench is gone
                    if len(got) != 1:
                        for x in got:
                            os.close(x)
                        continue
                    conns[got[0]] = json.loads(m)
                    poll.register(got[0], select.POLLIN)
                    continue
                if fd == wake_r:
                    # Drained before the reaping: a child that ends after
                    # it writes again and wakes the next round.
                    try:
                        while os.read(wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    reap(children)
                    continue
                req = conns.pop(fd)
                poll.unregister(fd)
                conn = _socket.socket(fileno=fd)
                try:
                    m, anc, flags, _a = conn.recvmsg(16, _socket.CMSG_SPACE(8 * 4))
                except OSError:
                    m, anc, flags = b"", [], 0
                conn.close()
                got = rights(anc)
                if m != b"z" or len(got) != 8 or flags & _socket.MSG_CTRUNC:
                    for x in got:
                        os.close(x)
                    continue
                # The fork is born in init's pid namespace (its parent is this
                # process, which learns of its exit); then back to our own.
                if libc.syscall(ctypes.c_long(SYS_SETNS), ul(got[0]), ul(0x20000000)) != 0:
                    for x in got:
                        os.close(x)  # init sees the ready pipe's EOF
                    continue
                try:
                    pid = os.fork()
                except OSError:
                    pid = -1
                if pid == 0:
                    try:
                        go, ready = program(req, got)
                    except BaseException as e:  # noqa: B902 - never back into the zygote's loop
                        fail(str(e))
                    return go, ready
                if libc.syscall(ctypes.c_long(SYS_SETNS), ul(own_pid_ns), ul(0x20000000)) != 0:
                    os._exit(1)  # never fork another run's process into this one's namespace
                for x in got[:7]:
                    os.close(x)
                if pid < 0:
                    os.close(got[7])
                    continue
                children[pid] = got[7]

    go, ready = serve()
    # The program's process, as `python3 -u main.py` run from /work shows
    # itself: fresh __main__, argv, path, and none of the zygote's imports.
    for name in [n for n in sys.modules if n not in __sandbench_base]:
        del sys.modules[name]
    # (sys.argv and sys.orig_argv are already `main.py`'s: the zygote's own.)
    sys.path.insert(0, "/work")
    g = {
        "__name__": "__main__",
        "__doc__": None,
        "__package__": None,
        "__loader__": main_loader("__main__", "/work/main.py") if main_loader else None,
        "__spec__": None,
        "__annotations__": {},
        "__builtins__": builtins,
        "__file__": "/work/main.py",
        "__cached__": None,
    }
    main = type(sys)("__main__")
    main.__dict__.update(g)
    sys.modules["__main__"] = main
    # The zygote's own objects stay frozen (out of every collection): a
    # collection that walked them would copy their pages into this process.
    return main.__dict__, go, ready


def __sandbench_run(g, go, ready):
    # waiter.py's second half, with go and ready where the zygote put them.
    os.write(ready, b"r")
    os.close(ready)
    data = b""
    while True:
        chunk = os.read(go, 65536)
        if not chunk:
            break
        data += chunk
    os.close(go)
    if data.startswith(b"exec\0"):
        f = data[5:].split(b"\0")
        end = f.index(b"", 1)
        env = dict(kv.split(b"=", 1) for kv in f[end + 1 :] if b"=" in kv)
        # Every signal at its default and none blocked, as a program started from a
        # terminal has them: Python ignores SIGPIPE and SIGXFSZ, and an exec keeps an
        # ignored signal ignored (`yes | head -1` then says "Broken pipe", and a file
        # at the size limit reads as EFBIG instead of SIGXFSZ).
        import _signal

        for _s in range(1, _signal.NSIG):
            try:
                _signal.signal(_s, _signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
        os.execve(f[0], f[1:end], env)
    if data != b"run":
        os._exit(121)
    with open(g["__file__"], "rb") as fh:
        src = fh.read()
    del data, fh, chunk
    status = 0
    # The interpreter takes __file__ and __cached__ out of __main__ once its
    # script has run, before atexit; not when it leaves through SystemExit.
    tidy = True
    try:
        code = compile(src, g["__file__"], "exec", dont_inherit=True)
    except SyntaxError as e:
        # As the interpreter shows a script that does not compile: no traceback.
        sys.excepthook(type(e), e.with_traceback(None), None)
        status = 1
    else:
        del src
        try:
            exec(code, g)
        except SystemExit as e:
            # As the interpreter ends on SystemExit.
            tidy = False
            if e.code is None:
                status = 0
            elif isinstance(e.code, int):
                status = e.code & 0xFF
            else:
                try:
                    print(e.code, file=sys.stderr)
                except BaseException:
                    pass
                status = 1
        except BaseException as e:
            del code
            tb = e.__traceback__.tb_next  # leave this frame out
            sys.excepthook(type(e), e.with_traceback(tb), tb)
            del tb
            status = 130 if isinstance(e, KeyboardInterrupt) else 1
            del e
    # The interpreter's own end without tearing down every module and
    # object: in a fork of the zygote that would copy each of its pages
    # only to free them. Threads are waited for, atexit handlers run and the
    # streams flushed, as at any exit; objects' __del__ at teardown is what
    # does not happen (docs/tiers.md).
    if tidy:
        g.pop("__file__", None)
        g.pop("__cached__", None)
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = 120 if status == 0 else status
    os._exit(status)


__sandbench_run(*__sandbench_zygote())
