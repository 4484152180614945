"""What the egress proxy adds per connection, against a direct loopback one.

A small HTTP server runs on a random 127.66.x.y address; its name, pypi.test,
is given to the proxy through a temporary config ([network] hosts). One
"connection" is: connect, send a GET, read the answer to the end (the server
closes). Direct: the host connects to the server's address itself. Via the
proxy: a program inside a sandbox (`sandbench run --tier T --network
allow=pypi.test:PORT`) connects to 127.0.0.1:3128 and sends the absolute-form
GET, so the figure holds the tier's whole path (process: the namespace's
loopback; docker/gvisor: the loader's relay over the attach stream; microvm:
the guest's relay over virtio-serial, under TCG here) and the proxy's checks,
resolution and upstream connect. Blocks of N connections alternate, direct
then each tier, ROUNDS times, so machine noise hits every contender alike.

Usage: python3 benches/egress-latency.py SANDBENCH_BINARY [TIERS] [ROUNDS] [N]
       (TIERS comma-separated, default process; run as root for docker/gvisor/microvm)
"""

import http.server
import json
import os
import socket
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
import json, socket, sys, time
target = "%(target)s"
out = []
t0 = time.perf_counter()
for _ in range(%(n)d):
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(("GET http://%%s/ HTTP/1.1\r\nHost: %%s\r\nConnection: close\r\n\r\n" %% (target, target)).encode())
    while s.recv(65536):
        pass
    s.close()
    out.append((time.perf_counter() - t) * 1000)
# The whole block too: a guest whose clock ticks coarsely (refined-jiffies, 4 ms
# steps, on a host without an invariant TSC) still gives a fine mean.
print("TIMES " + json.dumps(out))
print("BLOCK " + json.dumps((time.perf_counter() - t0) * 1000))
'''


def direct(ip, port, n):
    out = []
    req = ("GET / HTTP/1.1\r\nHost: pypi.test:%d\r\nConnection: close\r\n\r\n" % port).encode()
    for _ in range(n):
        t = time.perf_counter()
        s = socket.create_connection((ip, port))
        s.sendall(req)
        while s.recv(65536):
            pass
        s.close()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    binary = sys.argv[1]
    tiers = (sys.argv[2] if len(sys.argv) > 2 else "process").split(",")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    rnd = os.urandom(2)
    ip = "127.66.%d.%d" % (rnd[0], max(1, rnd[1]))
    srv = http.server.ThreadingHTTPServer((ip, 0), Answer)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp()
    config = os.path.join(tmp, "config.toml")
    user = os.environ.get("SANDBENCH_CONFIG") or os.path.expanduser("~/.config/sandbench/config.toml")
    base = open(user).read() if os.path.exists(user) else ""
    if "[network]" in base:
        sys.exit("the config already has a [network] table: point SANDBENCH_CONFIG at one without")
    with open(config, "w") as f:
        f.write(base + '\n[network]\nhosts = { "pypi.test" = "%s" }\n' % ip)
    prog = os.path.join(tmp, "inside.py")
    with open(prog, "w") as f:
        f.write(INSIDE % {"target": "pypi.test:%d" % port, "n": n})
    env = dict(os.environ, SANDBENCH_CONFIG=config, SANDBENCH_STATE_DIR=tmp)
    times = {"direct": []}
    blocks = {"direct": []}
    for t in tiers:
        times[t] = []
        blocks[t] = []
    for r in range(rounds):
        t0 = time.perf_counter()
        times["direct"] += direct(ip, port, n)
        blocks["direct"].append((time.perf_counter() - t0) * 1000)
        for t in tiers:
            p = subprocess.run(
                [binary, "run", "--tier", t, "--network", "allow=pypi.test:%d" % port, "--timeout", "300s",
                 "--format", "json", prog],
                env=env, capture_output=True, text=True,
            )
            report = json.loads(p.stdout)
            line = [l for l in report["stdout"].splitlines() if l.startswith("TIMES ")]
            if not line:
                sys.exit("%s: no times (%s): %s" % (t, report.get("outcome"), report.get("error") or report["stderr"][-500:]))
            times[t] += json.loads(line[0][6:])
            block = [l for l in report["stdout"].splitlines() if l.startswith("BLOCK ")]
            blocks[t].append(json.loads(block[0][6:]))
    base = statistics.median(times["direct"])
    mean = lambda k: statistics.median(blocks[k]) / n
    print("per connection (connect + GET + answer), %d each in %d interleaved rounds:" % (n * rounds, rounds))
    print("  %-9s %9s %9s %12s %8s" % ("", "p50", "mean", "added (p50)", "ratio"))
    print("  %-9s %6.3f ms %6.3f ms" % ("direct", base, mean("direct")))
    for t in tiers:
        m = statistics.median(times[t])
        print("  %-9s %6.3f ms %6.3f ms %+9.3f ms %7.1fx" % (t, m, mean(t), m - base, m / base))


if __name__ == "__main__":
    main()
