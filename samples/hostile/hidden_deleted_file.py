# name: hidden-deleted-file
# tries: hit the file-size limit, then delete the file so that nothing is left to see at exit
# must: report the file-size limit hit although the file is gone
# expect: *=violation:file_size|disk
import os

written = 0
block = b"\0" * (1 << 20)
try:
    with open("big.bin", "wb") as f:
        while True:
            f.write(block)
            f.flush()
            written += len(block)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {e.strerror}")
os.remove("big.bin")
print("deleted the evidence")
