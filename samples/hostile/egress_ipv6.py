# name: egress-ipv6
# tries: reach hosts through IPv6 literals: the host's ::1, and IPv4-mapped forms (::ffff:a.b.c.d) of the allowed and the canary addresses, via the proxy and directly
# must: treat a mapped address as the IPv4 address it is, and refuse every literal the allow list does not name
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket

env = os.environ.get
port = int(env("GAUNTLET_HTTP_PORT", "80"))
port6 = int(env("CANARY_PORT6", env("CANARY_PORT", "8765")))
allowed = env("GAUNTLET_ALLOWED_IP", "127.0.0.1")
canary = env("GAUNTLET_CANARY_IP", "127.0.0.1")


def via_proxy(req):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    except OSError as e:
        return f"no proxy: {e}"
    try:
        s.sendall(req)
        data = s.recv(4096)
        return data.decode(errors="replace").splitlines()[0] if data else "closed"
    except OSError as e:
        return f"error: {e}"
    finally:
        s.close()


for target in (f"[::1]:{port6}", f"[::ffff:{allowed}]:{port}", f"[::ffff:{canary}]:{port}", f"[0:0:0:0:0:ffff:{allowed}]:{port}"):
    print(target, via_proxy(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()))
    print(target, via_proxy(f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()))
for addr in (("::1", port6), (f"::ffff:{canary}", port), (f"::ffff:{allowed}", port)):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        s.sendall(b"GET /direct HTTP/1.1\r\nHost: direct.gauntlet.test\r\n\r\n")
        print(f"CONNECTED directly to {addr!r}")
    except OSError as e:
        print(f"no direct connection to {addr!r}: {e}")
    finally:
        s.close()
