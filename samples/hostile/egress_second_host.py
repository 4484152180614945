# name: egress-second-host
# tries: ride on an allowed connection to reach another host: a second request pipelined behind an allowed one, and a CONNECT tunnel to the allowed host that speaks plain HTTP for another
# must: end a plain HTTP connection with its one response, and open tunnels for TLS to the CONNECT host only
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket

target = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
evil = os.environ.get("GAUNTLET_EVIL", "evil.gauntlet.test")
port = os.environ.get("GAUNTLET_HTTP_PORT", "80")


def via_proxy(req):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    except OSError as e:
        return f"no proxy: {e}"
    try:
        s.sendall(req)
        data = b""
        while len(data) < 65536:
            x = s.recv(4096)
            if not x:
                break
            data += x
        return f"{data.count(b'HTTP/1.')} answer(s): " + data.decode(errors="replace").replace("\r\n", " | ")[:200]
    except OSError as e:
        return f"error: {e}"
    finally:
        s.close()


first = f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nConnection: keep-alive\r\n\r\n"
second = f"GET http://{evil}:{port}/ HTTP/1.1\r\nHost: {evil}:{port}\r\n\r\n"
print(via_proxy((first + second).encode()))
print(via_proxy((first + f"GET / HTTP/1.1\r\nHost: {evil}:{port}\r\n\r\n").encode()))
print(via_proxy(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\nGET / HTTP/1.1\r\nHost: {evil}:{port}\r\n\r\n".encode()))
