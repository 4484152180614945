# name: cpu-spin-multi
# tries: burn CPU forever in several processes, so no single process reaches a per-process CPU limit quickly
# must: count CPU time across the whole sandbox and kill it at the limit
# expect: *=violation:cpu_time|wall_timeout
import os

for _ in range(3):
    if os.fork() == 0:
        break
while True:
    pass
