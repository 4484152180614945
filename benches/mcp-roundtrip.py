"""MCP round trip against a direct `sandbench run`, interleaved.

Each round: one `sandbench run --tier process hello.py` timed as a whole
process (what a script calling sandbench pays), then one `run_code` call of
the same program to a long-lived `sandbench mcp` over stdio (what an agent
pays per call), timed from send to reply by the official Python MCP SDK.
Prints p50s, and the MCP call's time beyond the run's own total (the
report's timings_ms.total): protocol, JSON and scheduling.

Usage: python benches/mcp-roundtrip.py SANDBENCH_BINARY [ROUNDS]
(the Python needs the `mcp` package: .ci/setup-mcp.sh makes such a venv).
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

CODE = "print(1)\n"


def p50(xs):
    return statistics.median(xs)


async def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    prog = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    prog.write(CODE)
    prog.close()
    direct, call, total = [], [], []
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # One warm-up each.
            await session.call_tool("run_code", {"language": "python", "code": CODE})
            subprocess.run([binary, "run", "--tier", "process", prog.name], capture_output=True, check=True)
            for _ in range(rounds):
                t = time.perf_counter()
                subprocess.run([binary, "run", "--tier", "process", prog.name], capture_output=True, check=True)
                direct.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                r = await session.call_tool("run_code", {"language": "python", "code": CODE})
                call.append((time.perf_counter() - t) * 1000)
                assert r.structured_content["outcome"] == "ok", r
                total.append(r.structured_content["timings_ms"]["total"])
    os.unlink(prog.name)
    over = [c - t for c, t in zip(call, total)]
    print(f"rounds {rounds}")
    print(f"sandbench run (whole process)  p50 {p50(direct):7.1f} ms")
    print(f"MCP run_code call (stdio)      p50 {p50(call):7.1f} ms  ({p50(call) / p50(direct):.2f}x the direct run)")
    print(f"  of which the run itself      p50 {p50(total):7.1f} ms")
    print(f"  MCP overhead (call - run)    p50 {p50(over):7.1f} ms")


anyio.run(main)
