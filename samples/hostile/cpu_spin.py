# name: cpu-spin
# tries: burn CPU forever in one process
# must: kill it at the CPU time limit
# expect: *=violation:cpu_time|wall_timeout
while True:
    pass
