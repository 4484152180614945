# The process tier's pre-started interpreter (sandbench's own code, not the
# program's). The sandbox starts it as `python3 -u main.py` with every limit
# of the run's process already applied (namespaces, root, Landlock, seccomp,
# its own uid), so the interpreter's start-up is paid before the program
# arrives. It writes one byte on fd 4 (ready), then waits on fd 3 for init's
# word: "run" (init has replaced /work/main.py with the program) or "exec"
# and an argv and environment (the run needs a different interpreter or
# environment than this one was started with). Both descriptors are closed
# before any byte of the program runs.
#
# The program must see what `python3 -u main.py` would have shown it: this
# file imports nothing that site has not imported already (os, sys and site
# itself), and __main__'s namespace is reset to the interpreter's own
# entries before the program's code runs in it. The one visible trace is
# this function's frame below the program's (sys._getframe(1)); tracebacks
# leave it out. In a session, also the `-s` it starts with
# (sys.flags.no_user_site, sys.orig_argv):
#
# there this interpreter starts between calls, in a /work the earlier
# calls wrote (HOME is /work), and nothing of those files may run before
# the call that runs it (no CPU limit applies then, no call is charged, and
# the process's readiness holds up the session's next call). So it starts
# with `-s`, and the user site (its .pth files, usercustomize, and
# sitecustomize when the system has none) is added here once the word to
# run has come, where site would have put it at start-up: before the
# system's site-packages, with the script's folder not yet on sys.path.


# What site does for the user site at start-up, done once a session's call
# has come (the waiter started with -s).
def __sandbench_user_site(file):
    import os
    import site
    import sys

    # The script's folder (none under -P or PYTHONSAFEPATH).
    here = sys.path.pop(0) if sys.path[:1] == [os.path.dirname(file)] else None
    # As site.check_enableusersite() decides without -s.
    site.ENABLE_USER_SITE = True if (os.geteuid(), os.getegid()) == (os.getuid(), os.getgid()) else None
    user = site.getusersitepackages()
    added = bool(site.ENABLE_USER_SITE and os.path.isdir(user))
    if added:
        system = set(site.getsitepackages())
        at = next((i for i, p in enumerate(sys.path) if p in system), len(sys.path))
        rest = sys.path[at:]
        del sys.path[at:]
        site.addsitedir(user)
        sys.path.extend(p for p in rest if p not in sys.path)
        del system, at, rest
    if added and "sitecustomize" not in sys.modules:
        site.execsitecustomize()
    if site.ENABLE_USER_SITE:
        site.execusercustomize()
    if here is not None:
        sys.path.insert(0, here)


def __sandbench_waiter(g, init):
    import os
    import sys

    os.write(4, b"r")
    os.close(4)
    data = b""
    while True:
        chunk = os.read(3, 65536)
        if not chunk:
            break
        data += chunk
    os.close(3)
    if data.startswith(b"exec\0"):
        # exe, argv..., "", env... (NUL-separated; written by init)
        f = data[5:].split(b"\0")
        end = f.index(b"", 1)
        env = dict(kv.split(b"=", 1) for kv in f[end + 1 :] if b"=" in kv)
        # Every signal at its default and none blocked, as a program started from a
        # terminal has them: Python ignores SIGPIPE and SIGXFSZ, and an exec keeps an
        # ignored signal ignored (`yes | head -1` then says "Broken pipe", and a file
        # at the size limit reads as EFBIG instead of SIGXFSZ).
        import _signal as signal

        for _s in range(1, signal.NSIG):
            try:
                signal.signal(_s, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        os.execve(f[0], f[1:end], env)
    if data != b"run":
        os._exit(121)
    # -s came from sandbench (a session's waiter), not from the environment.
    if sys.flags.no_user_site and not os.environ.get("PYTHONNOUSERSITE"):
        __sandbench_user_site(init["__file__"])
    with open(init["__file__"], "rb") as fh:
        src = fh.read()
    g.clear()
    g.update(init)
    del data, fh, init, chunk
    failed = False
    try:
        code = compile(src, g["__file__"], "exec", dont_inherit=True)
    except SyntaxError as e:
        # As the interpreter shows a script that does not compile: no traceback.
        sys.excepthook(type(e), e.with_traceback(None), None)
        failed = True
    else:
        del src
        try:
            exec(code, g)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:
            del code
            tb = e.__traceback__.tb_next  # leave this frame out
            sys.excepthook(type(e), e.with_traceback(tb), tb)
            del tb, e
            failed = True
    if failed:
        sys.exit(1)


__sandbench_waiter(globals(), {k: v for k, v in globals().items() if not k.startswith("__sandbench_")})
