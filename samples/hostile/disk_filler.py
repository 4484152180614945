# name: disk-filler
# tries: fill the disk with many medium-sized files
# must: stop at the scratch space quota, never filling the host's disk
# expect: *=violation:disk|file_size|memory
import os

written = 0
block = b"\0" * (1 << 20)
try:
    for i in range(100_000):
        with open(f"fill-{i}.bin", "wb") as f:
            for _ in range(4):
                f.write(block)
                written += len(block)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {e}")
