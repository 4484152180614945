"""MCP's own overhead per call, per tier, fresh and in a session, interleaved.

Two long-lived `sandbench mcp` servers over stdio, one per client:
  sdk   the official Python MCP SDK (what most agents' hosts pay: its own
        pydantic and JSON-schema validation of every reply included);
  raw   a minimal JSON-RPC client (one line out, one line in): what the
        server itself costs, with next to nothing on the client's side.
Each round, on each tier given, each client makes a `run_code` call of
print(1) in a fresh sandbox, one in its open session, and one no-op call
(`list_sessions`: the protocol's floor); calls alternate between the two
clients so that drift on a shared machine hits both. A call's overhead is
its time from send to reply minus the run's own total (the report's
timings_ms.total: from the runner taking the spec to the tier's end), i.e.
parsing, admission, the run log, the reply's JSON and the transport. The
servers get enough run slots that no call waits behind an earlier call's
teardown (admission's queue is not what this measures).

Before each timed call the bench waits SETTLE seconds (default 0.5): a
fresh call's sandbox is torn down and the pool refilled in the background
after the reply (a container removed and another made, ~100-300 ms of the
engine's CPU), and on 2 cores that work, not the server, was what the next
call measured. An agent's calls are seconds apart (the model thinks in
between), so a settled server is also the case that matters; SETTLE=0
measures calls back to back.

Prints p50s per tier and client; the issue's target is the raw client's
overhead <= 1 ms p50 (a release build; a debug build's JSON is slower).

Usage: python benches/mcp-roundtrip.py SANDBENCH_BINARY [TIERS] [ROUNDS] [SETTLE]
       TIERS comma-separated (default process); the Python needs the `mcp`
       package: .ci/setup-mcp.sh makes such a venv.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

CODE = "print(1)\n"


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


class Raw:
    """JSON-RPC over a server's stdio, one request at a time."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))
        self.n = 0
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "mcp-roundtrip-raw", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def rpc(self, method, params):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("the server closed its stdout")
            m = json.loads(line)
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(m["error"])
                return m["result"]

    def call(self, name, args):
        r = self.rpc("tools/call", {"name": name, "arguments": args})
        assert not r.get("isError"), r
        return r.get("structuredContent")

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


async def main():
    binary = sys.argv[1]
    tiers = sys.argv[2].split(",") if len(sys.argv) > 2 else ["process"]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    settle = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    # Admission sized so that no call queues behind an earlier call's
    # teardown (a run's slot is held until its sandbox is gone, which on
    # docker and gVisor is after the reply): this measures the call, not
    # the queue.
    slots = str(4 * len(tiers))
    server = [binary, "mcp", "--tiers", ",".join(tiers), "--max-sessions", str(len(tiers)),
              "--max-runs", slots, "--max-runs-per-client", slots]
    kinds = ("fresh", "session", "noop")
    t = {(c, k, tier): [] for c in ("sdk", "raw") for k in kinds for tier in tiers}
    over = {(c, k, tier): [] for c in ("sdk", "raw") for k in kinds[:2] for tier in tiers}
    raw = Raw(server)
    params = StdioServerParameters(command=server[0], args=server[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as sdk:
            await sdk.initialize()

            async def sdk_call(name, args):
                r = await sdk.call_tool(name, args)
                assert not r.is_error, r
                return r.structured_content

            async def raw_call(name, args):
                return raw.call(name, args)

            clients = {"sdk": sdk_call, "raw": raw_call}
            sessions = {}
            for c, call in clients.items():
                for tier in tiers:
                    sessions[c, tier] = (await call("open_session", {"tier": tier}))["session"]
                    # One warm-up of each kind.
                    await call("run_code", {"language": "python", "code": CODE, "tier": tier})
                    await call("run_code", {"language": "python", "code": CODE, "session": sessions[c, tier]})
            for _ in range(rounds):
                for tier in tiers:
                    for c, call in clients.items():
                        for kind in kinds:
                            if kind == "noop":
                                name, args = "list_sessions", {}
                            else:
                                where = {"tier": tier} if kind == "fresh" else {"session": sessions[c, tier]}
                                name, args = "run_code", {"language": "python", "code": CODE, **where}
                            await anyio.sleep(settle)
                            s = time.perf_counter()
                            r = await call(name, args)
                            took = (time.perf_counter() - s) * 1000
                            t[c, kind, tier].append(took)
                            if kind != "noop":
                                assert r["outcome"] == "ok", r
                                over[c, kind, tier].append(took - r["timings_ms"]["total"])
            for c, call in clients.items():
                for tier in tiers:
                    await call("close_session", {"session": sessions[c, tier]})
    raw.close()
    print(f"rounds {rounds}, settle {settle} s, print(1), p50 in ms; overhead = call - the run's own total")
    print(f"{'tier':<9} {'client':<6} {'fresh call':>10} {'overhead':>9} {'session call':>13} {'overhead':>9} {'no-op call':>11}")
    for tier in tiers:
        for c in ("raw", "sdk"):
            print(
                f"{tier:<9} {c:<6} {p50(t[c, 'fresh', tier]):10.2f} {p50(over[c, 'fresh', tier]):9.2f}"
                f" {p50(t[c, 'session', tier]):13.2f} {p50(over[c, 'session', tier]):9.2f} {p50(t[c, 'noop', tier]):11.2f}"
            )


anyio.run(main)
