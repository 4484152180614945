# name: leftover-writer
# tries: leave four processes behind that wake the moment the program exits (the end of a pipe only it held), wait 0.3 s, then write to stdout as fast as they can, for good
# must: end what the program leaves with the program: nothing it left may add output to the run, hold it open, or turn its verdict
# expect: *=ok firejail=violation:output_limit|wall_timeout
# delivers: "program done"
import os
import time

r, w = os.pipe()
for _ in range(4):
    if os.fork() == 0:
        os.close(w)
        os.read(r, 1)
        time.sleep(0.3)
        chunk = b"LEFTOVER-OUTPUT " * 4096
        while True:
            os.write(1, chunk)
os.close(r)
print("program done", flush=True)
