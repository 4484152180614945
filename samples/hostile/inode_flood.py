# name: inode-flood
# tries: create empty files without end to exhaust the file system's inodes
# must: stop at the scratch space's inode quota
# expect: *=violation:disk gvisor=violation:disk|cpu_time|memory|wall_timeout microvm=violation:disk|cpu_time|wall_timeout
# On microvm every file created with open(..., "w") (O_TRUNC) waits for the
# guest agent's scratch guard: under emulation the flood can use its CPU time
# before the inodes run out. On gVisor the scratch is a host tmpfs served by the
# gofer (so that the host can watch it): slower file creation, so a loaded host
# may stop the flood at its wall time first.
import os

n = 0
try:
    os.mkdir("flood")
    while True:
        open(f"flood/{n}", "w").close()
        n += 1
except OSError as e:
    print(f"stopped after {n} files: {e}")
