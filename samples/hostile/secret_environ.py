# name: secret-environ
# tries: find the secret's value inside the sandbox: its own environment, every /proc/<pid>/environ and cmdline, and the readable memory of every process it can see (the proxy's, where reachable)
# must: give the program a placeholder only: the value is in no process, file or memory the sandbox can read
# network: allow=bound.gauntlet.test:{bound_port}
# secret: GAUNTLET_KEY@bound.gauntlet.test:{bound_port}
# expect: *=ok bwrap=escaped firejail=escaped codex=escaped
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
import re

print("placeholder:", ph)
print("own env:", {k: v for k, v in os.environ.items() if k.startswith("GAUNTLET")})
hits = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for f in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{f}", "rb").read()
        except OSError:
            continue
        print(f"/proc/{pid}/{f}:", data.replace(b"\0", b" ")[:2000].decode(errors="replace"))
    # The value is made per cell as gauntlet-value-<hex>: look for its shape.
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    for line in maps[:400]:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
        if not m:
            continue
        lo, hi = int(m.group(1), 16), int(m.group(2), 16)
        if hi - lo > 64 << 20:
            continue
        try:
            mem.seek(lo)
            chunk = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        for v in re.findall(rb"gauntlet-value-[0-9a-f]{16,}", chunk):
            hits.append((pid, v.decode()))
print("memory hits:", hits if hits else "none")
