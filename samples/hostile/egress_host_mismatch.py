# name: egress-host-mismatch
# tries: send a plain HTTP request for the allowed host whose Host header names another site (virtual-host fronting), or carries two Host headers
# must: refuse a request whose Host header does not name the host it goes to
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket

target = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
evil = os.environ.get("GAUNTLET_EVIL", "evil.gauntlet.test")


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


print(via_proxy(f"GET http://{target}/ HTTP/1.1\r\nHost: {evil}\r\n\r\n".encode()))
print(via_proxy(f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nHost: {evil}\r\n\r\n".encode()))
print(via_proxy(f"GET http://{target}/ HTTP/1.1\r\n\r\n".encode()))
