# name: lost-output
# tries: lose output on the way out: one large write to each stream, many small ones interleaved, and the last bytes written just before os._exit (no flush, no atexit)
# must: deliver every byte up to the output limit, or flag the cut
# expect: *=ok
# delivers: "LAST-LINE-BEFORE-EXIT"
import os, sys

os.write(1, b"o" * (300 << 10) + b"\n")
os.write(2, b"e" * (200 << 10) + b"\n")
for i in range(2000):
    os.write(1 if i % 2 else 2, b"%05d\n" % i)
os.write(1, b"LAST-LINE-BEFORE-EXIT\n")
os._exit(0)
