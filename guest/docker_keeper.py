# sandbench's session agent: PID 1 of a docker/gvisor session container.
# Embedded into the binary (src/tier/docker/session.rs, include_str!),
# between the filters the loader uses and guest/docker_loader.py itself, and
# passed as `python3 -I -u -c`; it must stay importable by any Python 3.8+.
#
# A session keeps one container between calls, and sandbench attaches to
# its stdin and stdout once, when the container starts (as it talks to the
# microVM's guest agent over one virtio port). Every call goes over that one
# stream, with no Engine exec per call (issue 24: creating, starting and
# attaching an exec cost 50-130 ms a call):
#
# - This process is the session's agent. It reads nothing and writes
#   nothing on the stream itself: it forks the next call's loader as soon as
#   the last one has ended, so the loader's interpreter is started before
#   the call's payload exists, and otherwise only reaps the orphans that
#   reach PID 1. Its child falls through into guest/docker_loader.py (the
#   code after this file) in session mode: it reads one payload from stdin,
#   drops the program to the session's uid in a child of its own, frames its
#   output, status and exit on stdout, kills every process of the uid when
#   the program exits or sandbench sends a `k`, and exits once sandbench has
#   acknowledged the exit frame (a newline; bytes before it are stale kills).
# - The stream is only ever written by one loader at a time and read by it:
#   the program has neither (its stdin is /dev/null, its stdout and stderr
#   pipes to the loader, which frames what it reads as data), so it cannot
#   forge a frame or read another call's payload.
# - This process keeps CAP_SETUID, CAP_SETGID and CAP_SETPCAP for its
#   loaders (they empty the program's bounding set, drop the program to its
#   uid and end the call's processes with that uid's kill(-1)); a
#   capability dropped here could never come back to a child.
#   It is immune to the program all the same: another uid, not dumpable (so
#   no ptrace and /proc/1/* root-only), its environment blanked (gVisor shows
#   /proc/1/environ to anyone), working directory /, `python3 -I` (nothing of
#   the scratch on sys.path) and it opens no path at all; a namespace's
#   PID 1 cannot be killed from inside it.
# - When sandbench's attach ends (it exited or was killed), stdin ends: the
#   waiting loader exits with 3 and so does this process, and the container
#   with it. Any other loader failure ends the container too (fail closed:
#   sandbench sees the session die).
import ctypes
import os
import _signal

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not ptrace-able, /proc/1/* root-only


def _keeper_scrub_environ():
    # gVisor (20221219) shows /proc/1/environ to any process: blank it
    # (os.environ, a copy, stays for the loaders to build the program's from).
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(_libc, "environ")
    i = 0
    while env[i] is not None:
        p = ctypes.cast(env, ctypes.POINTER(ctypes.c_void_p))[i]
        ctypes.memset(p, 0, len(env[i]))
        i += 1


# The session's program uid and gid (sandbench's choice, in the container's
# environment): each loader makes the program's process ahead with them.
# Blanked first: popping it would unsetenv(3), which takes the pointer out of
# the environ array but leaves the text in the block /proc shows.
_keeper_ids = tuple(int(x) for x in os.environ["SANDBENCH_SESSION_IDS"].split(":"))
if len(_keeper_ids) != 2 or 0 in _keeper_ids:
    raise ValueError("a session's program never runs as root")
_keeper_scrub_environ()
os.environ.pop("SANDBENCH_SESSION_IDS")
os.chdir("/")
# Set in the loader's process only: docker_loader.py runs in session mode.
_keeper_child = False


def _keeper_main():
    # SIGCHLD stays blocked and is taken with sigtimedwait: an orphan that
    # dies between two waits is reaped at once, never left a zombie.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
    while True:
        loader = os.fork()
        if loader == 0:
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGCHLD})
            return
        status = None
        while status is None:
            while True:
                try:
                    pid, st = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                if pid == loader:
                    status = st
            if status is None:
                _signal.sigtimedwait({_signal.SIGCHLD}, 5.0)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            # Stdin ended (3), or the loader failed: the session is over.
            os._exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3 else 1)


_keeper_main()
_keeper_child = True
