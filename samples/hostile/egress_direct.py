# name: egress-direct
# tries: ignore the proxy variables and connect straight to the allowed host's address, a canary host and the host's loopback, as a client without proxy support would
# must: have no route out but the egress proxy: every direct connection fails
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok microvm=violation:cpu_time?
import os
import socket
import urllib.request

env = os.environ.get
targets = [
    (socket.AF_INET, (env("GAUNTLET_ALLOWED_IP", "127.0.0.1"), int(env("GAUNTLET_HTTP_PORT", "80")))),
    (socket.AF_INET, (env("GAUNTLET_CANARY_IP", "127.0.0.1"), int(env("GAUNTLET_HTTP_PORT", "80")))),
    (socket.AF_INET, ("127.0.0.1", int(env("CANARY_PORT", "8765")))),
    (socket.AF_INET6, ("::1", int(env("CANARY_PORT6", env("CANARY_PORT", "8765"))))),
]
for family, addr in targets:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        # A request only a direct connection carries: the witness knows it.
        s.sendall(b"GET /direct HTTP/1.1\r\nHost: direct.gauntlet.test\r\n\r\n")
        print(f"CONNECTED directly to {addr!r}")
    except OSError as e:
        print(f"no direct connection to {addr!r}: {e}")
    finally:
        s.close()
# A client told to use no proxy at all.
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
url = f"http://{env('GAUNTLET_ALLOWED_IP', '127.0.0.1')}:{env('GAUNTLET_HTTP_PORT', '80')}/direct"
try:
    opener.open(urllib.request.Request(url, headers={"Host": "direct.gauntlet.test"}), timeout=2)
    print("fetched without the proxy")
except OSError as e:
    print(f"no proxy-less fetch: {e}")
