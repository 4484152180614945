# name: shared-uid
# tries: exhaust per-uid kernel quotas (inotify instances) and signal every process it can, hoping to share its uid with a host process
# must: run as a uid no host process has, so that neither reaches one
# expect: *=ok
import ctypes, os, signal

libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print("inotify instances held:", len(held), "as uid", os.getuid())
try:
    os.kill(-1, signal.SIGKILL)
except OSError as e:
    print("kill(-1):", e.strerror)
