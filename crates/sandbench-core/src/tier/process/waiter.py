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
# file imports nothing that site has not imported already (os and sys), and
# __main__'s namespace is reset to the interpreter's own entries before the
# program's code runs in it. The one visible trace is this function's frame
# below the program's (sys._getframe(1)); tracebacks leave it out.
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
        os.execve(f[0], f[1:end], env)
    if data != b"run":
        os._exit(121)
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


__sandbench_waiter(globals(), {k: v for k, v in globals().items() if k != "__sandbench_waiter"})
