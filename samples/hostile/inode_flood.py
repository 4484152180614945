# name: inode-flood
# tries: create empty files without end to exhaust the file system's inodes
# must: stop at the scratch space's inode quota
# expect: *=violation:disk gvisor=violation:disk|cpu_time|memory
import os

n = 0
try:
    os.mkdir("flood")
    while True:
        open(f"flood/{n}", "w").close()
        n += 1
except OSError as e:
    print(f"stopped after {n} files: {e}")
