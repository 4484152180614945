# name: egress-other-ports
# tries: find another way out next to the egress proxy: every port 1-1024 and the usual proxy ports on the sandbox's loopback, the proxy's port on other loopback addresses
# must: lead nowhere but the proxy: no connection reaches a host listener (the canaries on the host's 127.0.0.1 and ::1, the gauntlet's canary host)
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok microvm=violation:cpu_time?
import os
import socket
import time

env = os.environ.get

deadline = time.monotonic() + 3.0
# The host's canary ports too: a sandbox that shares the host's loopback reaches them.
ports = [int(env("CANARY_PORT", "8765"))] + list(range(1, 1025)) + [1080, 3127, 3129, 8000, 8080, 8118, 8888, 9050]
tried = 0
for port in ports:
    if time.monotonic() > deadline:
        break
    tried += 1
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect(("127.0.0.1", port))
        print(f"open: 127.0.0.1:{port}")
    except OSError:
        pass
    finally:
        s.close()
others = [
    (socket.AF_INET, ("127.0.0.2", 3128)),
    (socket.AF_INET6, ("::1", 3128)),
    (socket.AF_INET6, ("::1", int(env("CANARY_PORT6", env("CANARY_PORT", "8765"))))),
    (socket.AF_INET, (env("GAUNTLET_CANARY_IP", "127.0.0.1"), 3128)),
    (socket.AF_INET, (env("GAUNTLET_CANARY_IP", "127.0.0.1"), int(env("GAUNTLET_HTTP_PORT", "80")))),
]
for family, addr in others:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(addr)
        print(f"open: {addr!r}")
    except OSError as e:
        print(f"nothing at {addr!r}: {e}")
    finally:
        s.close()
print(f"tried {tried} ports")
