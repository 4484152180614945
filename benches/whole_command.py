#!/usr/bin/env python3
"""Whole-process time of `sandbench run --tier process print1.py`, side by side
with bare python3 and bwrap + python3, interleaved round by round so machine
noise lands on every contender alike. Prints p50/min per contender and the
ratios the README quotes.

    python3 benches/whole_command.py [--runs 30] [--sandbench target/release/sandbench]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--runs", type=int, default=30)
ap.add_argument("--sandbench", default="target/release/sandbench")
ap.add_argument("--python", default="/usr/bin/python3")
a = ap.parse_args()

if not os.access(a.sandbench, os.X_OK):
    sys.exit(f"no sandbench binary at {a.sandbench}: build it with `cargo build --release`")
if not os.access(a.python, os.X_OK):
    sys.exit(f"no python at {a.python}: pass --python")

prog = os.path.join(tempfile.mkdtemp(prefix="sandbench-bench-"), "print1.py")
with open(prog, "w") as f:
    f.write("print(1)\n")

contenders = {"python3": [a.python, prog]}
if shutil.which("bwrap"):
    contenders["bwrap"] = [
        "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
        "--ro-bind", prog, "/p.py", "--proc", "/proc", "--dev", "/dev", a.python, "/p.py",
    ]
contenders["sandbench"] = [a.sandbench, "run", "--tier", "process", prog]

times = {k: [] for k in contenders}
for c in contenders.values():  # one warm-up each: page cache, not the figure
    subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(a.runs):
    for name, cmd in contenders.items():
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dt = (time.perf_counter() - t0) * 1000
        if r.returncode != 0:
            sys.exit(f"{name} failed (exit {r.returncode}): {' '.join(cmd)}")
        times[name].append(dt)

p50 = {k: statistics.median(v) for k, v in times.items()}
for k, v in times.items():
    print(f"{k:10} p50 {p50[k]:7.1f} ms   min {min(v):7.1f} ms   ({len(v)} runs)")
for base in ("python3", "bwrap"):
    if base in p50:
        print(f"sandbench run / {base}: {p50['sandbench'] / p50[base]:.2f}x (p50)")
