# name: hidden-deleted-file
# tries: hit the file-size limit, then delete the file so that nothing is left to see at exit
# must: report the file-size limit hit although the file is gone
# expect: *=violation:file_size|disk? process=violation:file_size|disk docker=violation:file_size|disk microvm=violation:file_size|disk
# Every write to the scratch space pins the file until the watch has measured
# it (fanotify: init on process, the host on docker, the guest agent on
# microvm), so deleting it is too late. gVisor's host-side watch cannot pin
# (it would keep freed space from being reused), and peers and e2b are judged
# from what is left: there it is not guaranteed (README).
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
