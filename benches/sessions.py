"""Sessions and MCP against direct runs, per tier, interleaved round by round.

Each round, on each tier given:
  direct   `sandbench run --tier T print1.py`, timed as a whole process
           (what a script calling sandbench pays);
  mcp      a `run_code` call of the same program to a long-lived
           `sandbench mcp` over stdio, in a fresh sandbox (no session),
           timed from send to reply by the official Python MCP SDK;
  session  the same call in an open session (`run_code {session}`): the
           sandbox is kept, each call a fresh process in it.
Prints p50s and the ratios mcp / direct and session / mcp, plus the run's own
total (the report's timings_ms.total) for mcp and session calls. Only the
ratios mean anything on a shared machine.

Usage: python benches/sessions.py SANDBENCH_BINARY TIERS [ROUNDS]
       (TIERS comma-separated, e.g. process,docker,gvisor; the Python needs
       the `mcp` package: .ci/setup-mcp.sh makes such a venv)
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
    return statistics.median(xs) if xs else float("nan")


async def main():
    binary, tiers = sys.argv[1], sys.argv[2].split(",")
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    prog = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    prog.write(CODE)
    prog.close()
    t = {k: {tier: [] for tier in tiers} for k in ("direct", "mcp", "session", "mcp_run", "session_run")}
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
                # One warm-up of each kind.
                await client.call_tool("run_code", {"language": "python", "code": CODE, "tier": tier})
                await client.call_tool("run_code", {"language": "python", "code": CODE, "session": sessions[tier]})
                subprocess.run([binary, "run", "--tier", tier, prog.name], capture_output=True, check=True)
            for _ in range(rounds):
                for tier in tiers:
                    s = time.perf_counter()
                    subprocess.run([binary, "run", "--tier", tier, prog.name], capture_output=True, check=True)
                    t["direct"][tier].append((time.perf_counter() - s) * 1000)
                    for kind, extra in (("mcp", {"tier": tier}), ("session", {"session": sessions[tier]})):
                        s = time.perf_counter()
                        r = await client.call_tool("run_code", {"language": "python", "code": CODE, **extra})
                        t[kind][tier].append((time.perf_counter() - s) * 1000)
                        assert r.structured_content["outcome"] == "ok", r
                        t[kind + "_run"][tier].append(r.structured_content["timings_ms"]["total"])
            for tier in tiers:
                await client.call_tool("close_session", {"session": sessions[tier]})
    os.unlink(prog.name)
    print(f"rounds {rounds}, print(1), p50 in ms")
    print(f"{'tier':<9} {'direct run':>11} {'mcp call':>9} {'(run)':>8} {'session':>9} {'(run)':>8} {'mcp/direct':>11} {'session/mcp':>12}")
    for tier in tiers:
        d, m, s = p50(t["direct"][tier]), p50(t["mcp"][tier]), p50(t["session"][tier])
        print(
            f"{tier:<9} {d:11.1f} {m:9.1f} {p50(t['mcp_run'][tier]):8.1f} {s:9.1f} {p50(t['session_run'][tier]):8.1f}"
            f" {m / d:10.2f}x {s / m:11.2f}x"
        )


anyio.run(main)
