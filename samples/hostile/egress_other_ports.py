# name: egress-other-ports
# tries: find another way out next to the egress proxy: every port 1-1024 and the usual proxy ports on the sandbox's loopback, the proxy's port on other loopback addresses
# must: have nothing listening in the sandbox but the proxy's one port
# network: allow=allowed.gauntlet.test:{http_port}
# escaped-if: "OPEN-PORT"
# expect: *=ok
import socket
import time

deadline = time.monotonic() + 3.0
ports = list(range(1, 1025)) + [1080, 3127, 3129, 8000, 8080, 8118, 8888, 9050]
tried = 0
for port in ports:
    if time.monotonic() > deadline:
        break
    tried += 1
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect(("127.0.0.1", port))
        print(f"OPEN-PORT 127.0.0.1:{port}")
    except OSError:
        pass
    finally:
        s.close()
for family, addr in ((socket.AF_INET, ("127.0.0.2", 3128)), (socket.AF_INET6, ("::1", 3128))):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(addr)
        print(f"OPEN-PORT {addr!r}")
    except OSError as e:
        print(f"nothing at {addr!r}: {e}")
    finally:
        s.close()
print(f"tried {tried} ports")
