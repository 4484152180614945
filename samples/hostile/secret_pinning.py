# name: secret-pinning
# tries: refuse the run's CA like a client pinning its own (trusting no CA at all), again after the failure (hoping for a pass-through fallback), then send the placeholder without verifying anything
# must: never fall back to an unintercepted tunnel for a secret's host: a pinned client cannot talk to it; an unverifying one still gets the placeholder substituted and scrubbed
# network: allow=bound.gauntlet.test:{bound_port}
# secret: GAUNTLET_KEY@bound.gauntlet.test:{bound_port}
# expect: *=ok egress=violation:network
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
for attempt in (1, 2):
    pinned = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        s = pinned.wrap_socket(tunnel(), server_hostname=bhost)
        print(f"pinned {attempt}: handshake completed", s.getpeercert())
    except Exception as e:
        print(f"pinned {attempt}: refused", type(e).__name__)
blind = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
blind.check_hostname = False
blind.verify_mode = ssl.CERT_NONE
print("blind:", ask(f"GET /echo HTTP/1.1\r\nHost: {bound}\r\nAuthorization: Bearer {ph}\r\n\r\n".encode(), blind)[:3000])
