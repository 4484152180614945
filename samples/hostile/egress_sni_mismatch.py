# name: egress-sni-mismatch
# tries: open a CONNECT tunnel to the allowed host, then start TLS naming another host in the SNI (domain fronting), or naming none
# must: close a tunnel whose ClientHello does not name the CONNECT host, before anything reaches the upstream
# network: allow=allowed.gauntlet.test:{tls_port}
# expect: *=ok egress=violation:network
import os
import socket
import ssl

target = os.environ.get("GAUNTLET_TLS", "allowed.gauntlet.test:443")
evil = os.environ.get("GAUNTLET_EVIL", "evil.gauntlet.test")


def tls_via_proxy(sni):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    except OSError as e:
        return f"no proxy: {e}"
    try:
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 4096:
            x = s.recv(1)
            if not x:
                break
            head += x
        if not head.startswith(b"HTTP/1.1 200"):
            return "tunnel refused: " + head.decode(errors="replace").split("\r\n")[0]
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.close()
        return "handshake done"
    except (OSError, ssl.SSLError) as e:
        return f"refused: {e}"
    finally:
        s.close()


print(f"SNI {evil}:", tls_via_proxy(evil))
print("no SNI:", tls_via_proxy(None))
