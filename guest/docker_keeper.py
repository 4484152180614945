# sandbench's session keeper: PID 1 of a docker/gvisor session container.
# Embedded into the binary (src/tier/docker/session.rs, include_str!) and
# passed as `python3 -u -c`; it must stay importable by any Python 3.8+.
#
# A session keeps one container between calls. Each call is a fresh loader
# (guest/docker_loader.py) that sandbench starts with the Engine's exec API;
# the loader drops the program to the session's uid and, when the call ends,
# kills every process of that uid. This process only keeps the container up
# and reaps the orphans that reach it. It reads nothing and writes nothing;
# the program (another uid) cannot signal, ptrace or read it, and a signal
# from inside the container never kills a namespace's PID 1. Reaping needs
# no privilege: it gives up the SETUID and SETGID capabilities the
# container keeps for the loaders at once (`python3 -I`: nothing of the
# scratch is on its sys.path, and it imports nothing once it has started).
import ctypes
import os
import _signal

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not ptrace-able, /proc/1/* root-only


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


# capset(2): effective, permitted and inheritable all empty.
if _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)()) != 0:
    raise OSError(ctypes.get_errno(), "the session keeper cannot drop its capabilities")


def _scrub_environ():
    # gVisor (20221219) shows /proc/1/environ to any process: blank it.
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(_libc, "environ")
    i = 0
    while env[i] is not None:
        p = ctypes.cast(env, ctypes.POINTER(ctypes.c_void_p))[i]
        ctypes.memset(p, 0, len(env[i]))
        i += 1


_scrub_environ()
os.chdir("/")
# SIGCHLD stays blocked and is taken with sigtimedwait: an orphan that dies
# between two waits is reaped at once, never left a zombie.
_signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
while True:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    _signal.sigtimedwait({_signal.SIGCHLD}, 5.0)
