# name: host-socket
# tries: walk every directory it can see and connect to each unix socket found (a host service's socket in /etc, /opt, /usr, /run, /tmp ...)
# must: expose no host socket: none visible, or none connectable
# expect: *=ok microvm=violation:cpu_time?
import os
import socket
import stat
import time

# Breadth-first and bounded: sockets live near the top of a tree (/run/x.sock,
# /etc/app/ctl.sock), and the walk must end well within the run's limits.
deadline = time.monotonic() + 2.0
queue = [("/", 0)]
seen = found = reached = 0
while queue and time.monotonic() < deadline and seen < 40_000:
    d, depth = queue.pop(0)
    try:
        entries = list(os.scandir(d))
    except OSError:
        continue
    for e in entries:
        seen += 1
        try:
            if e.is_symlink():
                continue
            if e.is_dir():
                if depth < 4 and e.path not in ("/proc", "/sys"):
                    queue.append((e.path, depth + 1))
                continue
            if e.is_file() or not stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                continue
        except OSError:
            continue
        found += 1
        s = None
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(e.path)
            reached += 1
            print(f"reached {e.path}")
        except OSError as err:
            print(f"cannot reach {e.path}: {err.strerror or err}")
        finally:
            if s is not None:
                s.close()
print(f"walked {seen} entries, {found} socket(s), reached {reached}")
