# name: net-loopback
# tries: reach services on the host's loopback: TCP over IPv4 and IPv6, and an abstract unix socket
# must: give it no network path to the host at all
# expect: *=ok
import os
import socket

port = int(os.environ.get("CANARY_PORT", "8765"))
port6 = int(os.environ.get("CANARY_PORT6", str(port)))
name = os.environ.get("CANARY_UNIX", "sandbench-canary")
tries = [
    (socket.AF_INET, ("127.0.0.1", port)),
    (socket.AF_INET6, ("::1", port6)),
    (socket.AF_UNIX, "\0" + name),
]
for family, addr in tries:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        s.sendall(b"escaped\n")
        print(f"CONNECTED to {addr!r}")
    except OSError as e:
        print(f"no connection to {addr!r}: {e}")
    finally:
        s.close()
