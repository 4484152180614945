# name: hidden-full-scratch
# tries: fill the scratch space until it is full (files below the file-size limit), then empty it again before exit
# must: report that the scratch space was full although it is empty at exit
# expect: *=violation:disk|memory? process=violation:disk|memory docker=violation:disk|memory microvm=violation:disk|memory
# Each remove() waits (a seccomp guard) until the watch has checked the
# mounts, so the full scratch is seen before it is emptied. gVisor has no
# such guard (runsc 20221219), and peers and e2b are judged from what is
# left: there it is not guaranteed (README).
import os

names = []
block = b"\0" * (256 << 10)
try:
    for i in range(100_000):
        name = f"fill-{i}.bin"
        names.append(name)
        with open(name, "wb") as f:
            for _ in range(4):
                f.write(block)
except OSError as e:
    print(f"full after {len(names)} files: {e.strerror}")
for n in names:
    try:
        os.remove(n)
    except OSError:
        pass
print("emptied it again")
