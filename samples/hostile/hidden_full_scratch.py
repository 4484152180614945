# name: hidden-full-scratch
# tries: fill the scratch space until it is full (files below the file-size limit), then empty it again before exit
# must: report that the scratch space was full although it is empty at exit
# expect: *=ok process=violation:disk|memory docker=violation:disk|memory
# Known gap (issue 10, item 8): gvisor and microvm judge the scratch space
# as it is at exit, so a space filled and emptied again goes unseen there.
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
