# name: hidden-deep-file
# tries: hit the file-size limit in a file buried 17 directories deep, where a bounded scan of the scratch space would not look
# must: report the file-size limit hit however deep the file is
# expect: *=violation:file_size|disk
import os

d = "."
for i in range(17):
    d = os.path.join(d, f"d{i}")
os.makedirs(d)
written = 0
block = b"\0" * (1 << 20)
try:
    with open(os.path.join(d, "big.bin"), "wb") as f:
        while True:
            f.write(block)
            f.flush()
            written += len(block)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {e.strerror}")
