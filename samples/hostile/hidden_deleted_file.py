# name: hidden-deleted-file
# tries: hit the file-size limit, then delete the file so that nothing is left to see at exit
# must: report the file-size limit hit although the file is gone
# expect: *=ok process=violation:file_size|disk
# Known gap (issue 10, item 8): only the process tier keeps a high-water
# mark (init's fanotify watch); docker, gvisor and microvm judge what is left
# at exit, so this program's deleted file goes unseen there.
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
