# name: egress-ip-literal
# tries: ask the egress proxy for the allowed host by its IP address instead of its name (plain HTTP and CONNECT)
# must: refuse every address the allow list does not name: an allowed name does not allow its address
# network: allow=allowed.gauntlet.test:{http_port},allowed.gauntlet.test:{tls_port}
# expect: *=ok egress=violation:network
import os
import socket

ip = os.environ.get("GAUNTLET_ALLOWED_IP", "127.0.0.1")
http_port = os.environ.get("GAUNTLET_HTTP_PORT", "80")
tls_port = os.environ.get("GAUNTLET_TLS_PORT", "443")


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


print(via_proxy(f"GET http://{ip}:{http_port}/ HTTP/1.1\r\nHost: {ip}:{http_port}\r\n\r\n".encode()))
print(via_proxy(f"CONNECT {ip}:{tls_port} HTTP/1.1\r\nHost: {ip}:{tls_port}\r\n\r\n".encode()))
# The same address written as a number, or shortened: not an address the proxy takes.
n = int.from_bytes(socket.inet_aton(ip), "big")
print(via_proxy(f"GET http://{n}:{http_port}/ HTTP/1.1\r\nHost: {n}:{http_port}\r\n\r\n".encode()))
