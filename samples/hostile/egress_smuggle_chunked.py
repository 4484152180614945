# name: egress-smuggle-chunked
# tries: smuggle a second request past the egress proxy to the allowed host with chunked framing two parsers read differently: CL.TE, TE.CL, an obfuscated or repeated Transfer-Encoding, a space before the colon, a folded header, bare LF line ends, chunk sizes with extensions or past 64 bits, a chunk longer than its size, a request behind the last chunk
# must: refuse every ambiguous framing (400 and a network violation), re-chunk the rest canonically, and let the allowed host see no second request and no framing a strict server refuses
# network: allow=allowed.gauntlet.test:{http_port}
# expect: *=ok egress=violation:network
import os
import socket

target = os.environ.get("GAUNTLET_HTTP", "allowed.gauntlet.test:80")
evil = os.environ.get("GAUNTLET_EVIL", "evil.gauntlet.test")
smuggled = f"GET /smuggled HTTP/1.1\r\nHost: {evil}\r\n\r\n"


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


def post(fields, payload, version="1.1", eol="\r\n"):
    head = [f"POST http://{target}/upload HTTP/{version}", f"Host: {target}"] + fields
    return eol.join(head) + eol + eol + payload


te = "Transfer-Encoding: chunked"
for name, req in [
    ("CL.TE", post(["Content-Length: 5", te], "0\r\n\r\n" + smuggled)),
    ("TE.CL", post([te, "Content-Length: 3"], "8\r\nSMUGGLED\r\n0\r\n\r\n" + smuggled)),
    ("TE.TE", post([te, "Transfer-Encoding: identity"], "0\r\n\r\n" + smuggled)),
    ("xchunked", post(["Transfer-Encoding: xchunked"], "0\r\n\r\n" + smuggled)),
    ("space before colon", post(["Transfer-Encoding : chunked"], "0\r\n\r\n" + smuggled)),
    ("vertical tab", post(["Transfer-Encoding: \x0bchunked"], "0\r\n\r\n" + smuggled)),
    ("folded", post(["X-Pad: a", " Transfer-Encoding: chunked"], "0\r\n\r\n" + smuggled)),
    ("bare LF head", post([te], "0\r\n\r\n" + smuggled, eol="\n")),
    ("TE in HTTP/1.0", post([te], "0\r\n\r\n" + smuggled, version="1.0")),
    ("chunk past 64 bits", post([te], "10000000000000005\r\nhello\r\n0\r\n\r\n" + smuggled)),
    ("chunk longer than its size", post([te], "1\r\nhello\r\n0\r\n\r\n" + smuggled)),
    ("LF-only chunks", post([te], "5\nhello\n0\n\n" + smuggled)),
    ("extensions", post([te], "5;ext=1\r\nhello\r\n0;last\r\n\r\n" + smuggled)),
    ("odd case", post(["Transfer-encoding: cHuNkEd"], "5\r\nhello\r\n0\r\n\r\n" + smuggled)),
]:
    print(f"{name}: {via_proxy(req)}")
