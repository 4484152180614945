# name: egress-allowed
# tries: fetch a page from the one host its network limit allows, through the egress proxy at 127.0.0.1:3128
# must: get the page where the tier has egress (and run, with no network, where it has none)
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok
import os
import socket

# The proxy, named outright: the program never resolves a name itself. A
# plain socket, not urllib: a control must stay light under emulation (the
# microVM on TCG runs Python ~20x slower than the host, and urllib's imports
# alone took most of a 2 s CPU limit there on a loaded machine).
host = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
try:
    with socket.create_connection(("127.0.0.1", 3128), timeout=5) as s:
        s.sendall(f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while len(data) < 1 << 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status, _, rest = data.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    if b" 200 " not in status + b" ":
        print(f"no page: {status.decode(errors='replace')}")
    else:
        print(body.decode(errors="replace").strip())
except OSError as e:
    print(f"no network here: {e}")
