"""write_file / read_file round trips in an MCP session, per tier, interleaved.

A long-lived `sandbench mcp` over stdio (the official Python MCP SDK, timed
from send to reply) keeps one session per tier. Each round, on each tier:
  write    write_file of SIZE bytes of text;
  read     read_file of the same file;
  call     a run_code of `print(1)` in the same session: the baseline every
           file tool call pays too (each is a call of sandbench's helper in
           the session's sandbox).
Each call is followed by a 0.2 s pause (untimed), as an agent's think time
would be: a session makes its next call's process right after a call ends,
and back-to-back calls would measure that start-up instead of the call.
Prints p50s (ms) and the ratios write/call and read/call; only the ratios
mean anything on a shared machine. e2b is measured only where a real (or
fake) E2B is configured through E2B_* variables.

Usage: python benches/mcp-files.py SANDBENCH_BINARY TIERS [ROUNDS] [SIZE]
       (TIERS comma-separated, e.g. process,docker,gvisor,microvm)
"""

import os
import statistics
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


async def main():
    binary, tiers = sys.argv[1], sys.argv[2].split(",")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
    content = ("sandbench " * (size // 10 + 1))[:size]
    t = {k: {tier: [] for tier in tiers} for k in ("write", "read", "call")}
    args = ["mcp", "--tiers", ",".join(tiers), "--max-sessions", str(len(tiers))]
    params = StdioServerParameters(command=binary, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            sessions = {}
            for tier in tiers:
                r = await client.call_tool("open_session", {"tier": tier})
                assert not r.is_error, r
                sessions[tier] = r.structured_content["session"]
                # Warm-up: one of each.
                await client.call_tool("write_file", {"session": sessions[tier], "path": "bench.txt", "content": content})
                await client.call_tool("read_file", {"session": sessions[tier], "path": "bench.txt"})
            for _ in range(rounds):
                for tier in tiers:
                    s = sessions[tier]
                    for kind, name, a in (
                        ("write", "write_file", {"session": s, "path": "bench.txt", "content": content}),
                        ("read", "read_file", {"session": s, "path": "bench.txt"}),
                        ("call", "run_code", {"session": s, "language": "python", "code": "print(1)\n"}),
                    ):
                        start = time.perf_counter()
                        r = await client.call_tool(name, a)
                        t[kind][tier].append((time.perf_counter() - start) * 1000)
                        assert not r.is_error, r
                        await anyio.sleep(0.2)
                        if kind == "read":
                            assert r.structured_content["content"] == content
            for tier in tiers:
                await client.call_tool("close_session", {"session": sessions[tier]})
    print(f"rounds {rounds}, {size} bytes, p50 in ms (send to reply)")
    print(f"{'tier':<9} {'write_file':>11} {'read_file':>10} {'run_code':>9} {'write/call':>11} {'read/call':>10}")
    for tier in tiers:
        w, r, c = p50(t["write"][tier]), p50(t["read"][tier]), p50(t["call"][tier])
        print(f"{tier:<9} {w:11.1f} {r:10.1f} {c:9.1f} {w / c:10.2f}x {r / c:9.2f}x")


anyio.run(main)
