"""A flood of concurrent run_code calls against `sandbench mcp`'s bounds.

One client (the official Python MCP SDK over stdio) sends CALLS run_code
calls at once, each holding MB megabytes of resident memory for a second and
a half, to a server started with `--max-runs RUNS` (and a queue and
per-client limit wide enough that none is refused, so every call waits its
turn). Meanwhile the host's MemAvailable is sampled every 20 ms and the
server's own count of runs in flight (list_tiers' bounds.in_flight, which
starts no sandbox once cached) every 100 ms. As root on cgroup v1, the
server runs in a memory cgroup of its own (its sandboxes' cgroups nest in
it), whose peak is the server's own figure, free of what others do on a
shared machine. Prints the host's available memory before and its least
during the flood, the server's peak, the most runs in flight, and how long
the flood took. A bench, not a test.

Usage: python benches/mcp-flood.py SANDBENCH_BINARY [CALLS] [RUNS] [MB] [TIER]
       (defaults 50 calls, --max-runs 4, 150 MB, process)
"""

import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


def available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


async def main():
    binary = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    mb = int(sys.argv[4]) if len(sys.argv) > 4 else 150
    tier = sys.argv[5] if len(sys.argv) > 5 else "process"
    code = f"import time\nx = b'x' * ({mb} << 20)\ntime.sleep(1.5)\nprint(len(x))\n"
    args = ["mcp", "--tiers", tier, "--max-runs", str(runs), "--max-runs-per-client", str(runs),
            "--max-queue", str(2 * calls), "--timeout", "120s", "--max-wall", "120s", "--max-memory", "512M"]
    cg = None
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/memory"):
        cg = f"/sys/fs/cgroup/memory/sandbench-flood-{os.getpid()}"
        os.mkdir(cg)
        args = ["-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" "$@"', binary] + args
        binary = "/bin/sh"
    params = StdioServerParameters(command=binary, args=args, env=dict(os.environ))
    samples, in_flight = [], []
    done = anyio.Event()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("list_tiers", {})  # probe once, cached from here on
            await client.call_tool("run_code", {"language": "python", "code": "print(1)\n"})
            before = min(available() for _ in range(10))
            results = []

            async def one():
                r = await client.call_tool("run_code", {"language": "python", "code": code, "limits": {"wall_time": "120s"}})
                results.append(r)

            async def memory():
                while not done.is_set():
                    samples.append(available())
                    await anyio.sleep(0.02)

            async def flight():
                while not done.is_set():
                    r = await client.call_tool("list_tiers", {})
                    in_flight.append(r.structured_content["bounds"]["in_flight"]["runs"])
                    await anyio.sleep(0.1)

            start = time.monotonic()
            async with anyio.create_task_group() as watch:
                watch.start_soon(memory)
                watch.start_soon(flight)
                async with anyio.create_task_group() as tg:
                    for _ in range(calls):
                        tg.start_soon(one)
                took = time.monotonic() - start
                done.set()
    peak = None
    if cg:
        with open(f"{cg}/memory.max_usage_in_bytes") as f:
            peak = int(f.read())
        # The process tier made its run cgroups' parent inside ours.
        for d in (f"{cg}/sandbench", cg):
            for _ in range(100):
                try:
                    if os.path.isdir(d):
                        os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)
    ok = sum(1 for r in results if not r.is_error and r.structured_content["outcome"] == "ok")
    others = {}
    for r in results:
        if r.is_error or r.structured_content["outcome"] != "ok":
            why = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")[:160]
            others[why] = others.get(why, 0) + 1
    for why, n in others.items():
        print(f"not ok ({n}): {why!r}")
    low = min(samples)
    gib = 1 << 30
    print(f"{calls} concurrent run_code calls of {mb} MB each on {tier}, --max-runs {runs}: {ok} ok in {took:.1f} s")
    print(f"host MemAvailable before {before / gib:.2f} GiB, least during the flood {low / gib:.2f} GiB "
          f"(fell by {(before - low) / gib:.2f} GiB; {runs} x {mb} MB = {runs * mb / 1024:.2f} GiB)")
    if peak is not None:
        print(f"the server and its sandboxes together peaked at {peak / gib:.2f} GiB (its own memory cgroup)")
    print(f"runs in flight at once, most seen by the server: {max(in_flight) if in_flight else 'n/a'}")


anyio.run(main)
