# name: fork-bomb
# tries: fork without end until the host's process table is full
# must: refuse new processes at the pids limit and stop the run at its CPU or wall limit; the host stays responsive
# expect: *=violation:pids gvisor=violation:pids|memory
import os

while True:
    try:
        os.fork()
    except OSError:
        pass
