"""What intercepting a secret's host costs per HTTPS connection, side by side
with the pass-through proxy (issue 25).

An HTTPS server (a test CA made here with `openssl`) runs on a random
127.66.x.y address; its name, api.test, is given to the proxy through a
temporary config ([network] hosts), and the test CA as [network] upstream_ca.
One "connection" is: CONNECT through the proxy, TLS handshake, GET with an
Authorization header, read the answer to the end (the server closes).
Three contenders, in blocks of N that alternate ROUNDS times:
- direct: the host connects to the server itself (TLS, no proxy);
- pass-through, per tier: `--network allow=api.test:PORT`, the program
  trusts the test CA itself, the proxy tunnels the TLS opaquely;
- intercepted, per tier: the same plus `--secret K=env:...@api.test:PORT`:
  the proxy answers the TLS with the run's CA, substitutes, re-originates
  verified TLS and scrubs the answer.

Usage: python3 benches/secrets-latency.py SANDBENCH_BINARY [TIERS] [ROUNDS] [N]
       (TIERS comma-separated, default process; run as root for docker/gvisor/microvm)
"""

import http.server
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time


class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *a):
        pass


INSIDE = r'''
import json, os, socket, ssl, time
host, port = "api.test", %(port)d
ctx = ssl.create_default_context(cadata=os.environ["TEST_CA"]) if "%(mode)s" == "pass" else ssl.create_default_context()
key = os.environ.get("K", "none")
out = []
t0 = time.perf_counter()
for _ in range(%(n)d):
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("CONNECT %%s:%%d HTTP/1.1\r\nHost: %%s:%%d\r\n\r\n" %% (host, port, host, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    tls = ctx.wrap_socket(s, server_hostname=host)
    tls.sendall(("GET / HTTP/1.1\r\nHost: %%s:%%d\r\nAuthorization: Bearer %%s\r\nConnection: close\r\n\r\n" %% (host, port, key)).encode())
    while True:
        try:
            b = tls.recv(65536)
        except (ssl.SSLEOFError, ConnectionResetError):
            break
        if not b:
            break
    tls.close()
    out.append((time.perf_counter() - t) * 1000)
print("TIMES " + json.dumps(out))
print("BLOCK " + json.dumps((time.perf_counter() - t0) * 1000))
'''


def certs(tmp):
    def run(*a):
        subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=tmp)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-days", "2", "-subj", "/CN=secrets bench CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "leaf.key",
        "-out", "leaf.csr", "-subj", "/CN=api.test")
    with open(os.path.join(tmp, "ext"), "w") as f:
        f.write("subjectAltName=DNS:api.test\n")
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "leaf.pem", "-days", "2", "-extfile", "ext")


def direct(ip, port, n, ctx):
    out = []
    req = ("GET / HTTP/1.1\r\nHost: api.test:%d\r\nConnection: close\r\n\r\n" % port).encode()
    for _ in range(n):
        t = time.perf_counter()
        s = ctx.wrap_socket(socket.create_connection((ip, port)), server_hostname="api.test")
        s.sendall(req)
        while True:
            try:
                b = s.recv(65536)
            except (ssl.SSLEOFError, ConnectionResetError):
                break
            if not b:
                break
        s.close()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    binary = sys.argv[1]
    tiers = (sys.argv[2] if len(sys.argv) > 2 else "process").split(",")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    tmp = tempfile.mkdtemp()
    certs(tmp)
    rnd = os.urandom(2)
    ip = "127.66.%d.%d" % (rnd[0], max(1, rnd[1]))
    srv = http.server.ThreadingHTTPServer((ip, 0), Answer)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(os.path.join(tmp, "leaf.pem"), os.path.join(tmp, "leaf.key"))
    srv.socket = sctx.wrap_socket(srv.socket, server_side=True)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ca_pem = open(os.path.join(tmp, "ca.pem")).read()
    cctx = ssl.create_default_context(cadata=ca_pem)
    config = os.path.join(tmp, "config.toml")
    user = os.environ.get("SANDBENCH_CONFIG") or os.path.expanduser("~/.config/sandbench/config.toml")
    base = open(user).read() if os.path.exists(user) else ""
    if "[network]" in base:
        sys.exit("the config already has a [network] table: point SANDBENCH_CONFIG at one without")
    with open(config, "w") as f:
        f.write(base + '\n[network]\nhosts = { "api.test" = "%s" }\nupstream_ca = "%s"\n'
                % (ip, os.path.join(tmp, "ca.pem")))
    progs = {}
    for mode in ("pass", "intercept"):
        progs[mode] = os.path.join(tmp, mode + ".py")
        with open(progs[mode], "w") as f:
            f.write(INSIDE % {"port": port, "n": n, "mode": mode})
    env = dict(os.environ, SANDBENCH_CONFIG=config, SANDBENCH_STATE_DIR=tmp, BENCH_SECRET="sk-bench-0123456789abcdef")
    keys = ["direct"] + ["%s %s" % (t, m) for t in tiers for m in ("pass", "intercept")]
    times = {k: [] for k in keys}
    blocks = {k: [] for k in keys}
    for _ in range(rounds):
        t0 = time.perf_counter()
        times["direct"] += direct(ip, port, n, cctx)
        blocks["direct"].append((time.perf_counter() - t0) * 1000)
        for t in tiers:
            for mode in ("pass", "intercept"):
                args = [binary, "run", "--tier", t, "--network", "allow=api.test:%d" % port, "--timeout", "300s",
                        "--format", "json", "--env", "TEST_CA=" + ca_pem]
                if mode == "intercept":
                    args += ["--secret", "K=env:BENCH_SECRET@api.test:%d" % port]
                p = subprocess.run(args + [progs[mode]], env=env, capture_output=True, text=True)
                report = json.loads(p.stdout)
                out = report["stdout"].splitlines()
                line = [l for l in out if l.startswith("TIMES ")]
                if not line:
                    sys.exit("%s %s: no times (%s): %s" % (t, mode, report.get("outcome"),
                                                           report.get("error") or report["stderr"][-500:]))
                if mode == "intercept":
                    used = (report.get("secrets") or [{}])[0].get("substituted", 0)
                    if used != n:
                        sys.exit("%s intercept: %s of %d requests substituted" % (t, used, n))
                times["%s %s" % (t, mode)] += json.loads(line[0][6:])
                blocks["%s %s" % (t, mode)].append(json.loads([l for l in out if l.startswith("BLOCK ")][0][6:]))
    base = statistics.median(times["direct"])
    mean = lambda k: statistics.median(blocks[k]) / n
    print("per HTTPS connection (CONNECT + TLS + GET + answer), %d each in %d interleaved rounds:" % (n * rounds, rounds))
    print("  %-20s %9s %9s %12s %8s" % ("", "p50", "mean", "added (p50)", "ratio"))
    print("  %-20s %6.3f ms %6.3f ms" % ("direct", base, mean("direct")))
    for k in keys[1:]:
        m = statistics.median(times[k])
        print("  %-20s %6.3f ms %6.3f ms %+9.3f ms %7.1fx" % (k, m, mean(k), m - base, m / base))


if __name__ == "__main__":
    main()
