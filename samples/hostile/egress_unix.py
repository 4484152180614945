# name: egress-unix
# tries: reach the egress proxy's transport (or any other service) through a unix socket: every socket /proc/net/unix lists, abstract ones included, and the usual proxy socket paths
# must: expose no unix socket that leads out of the sandbox (no connection reaches the host's canary sockets)
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok
import os
import socket

names = []
try:
    with open("/proc/net/unix") as f:
        for line in list(f)[1:]:
            parts = line.split()
            if len(parts) >= 8:
                names.append(parts[7])
except OSError as e:
    print(f"no /proc/net/unix: {e}")
names += ["@" + os.environ.get("CANARY_UNIX", "sandbench-canary"), "/run/sandbench.sock", "@sandbench-egress"]
seen = set()
for n in names[:500]:
    if n in seen:
        continue
    seen.add(n)
    addr = "\0" + n[1:] if n.startswith("@") else n
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as e:
        print(f"no unix sockets at all: {e}")
        break
    s.settimeout(1)
    try:
        s.connect(addr)
        print(f"connected: {n}")
    except OSError as e:
        print(f"cannot reach {n}: {e.strerror or e}")
    finally:
        s.close()
print(f"{len(seen)} socket name(s) tried")
