# name: blinded-scan
# tries: hide a file at the file-size limit behind 10,002 empty names, where a walk of the scratch space that stops after a few thousand names would never look (issue 42, item 4)
# must: report the file-size limit hit; a judge that stops short must say "incomplete" (never ok, and no pass)
# expect: *=violation:file_size|disk gvisor=violation:file_size|disk|cpu_time
# On gVisor (ptrace platform here) making the names can use up the CPU limit
# first under load: contained all the same, never ok.
# The names are links to one empty file: they cost no inode and no space,
# only the time a walk spends on them. The file's folder is made between
# two folders of names: a directory lists its names oldest first or newest
# first, and either way a walk meets 5,001 names before the file.
import os


def names(d, n):
    made = 0
    try:
        os.mkdir(d)
        open(f"{d}/e", "w").close()
        for i in range(n):
            os.link(f"{d}/e", f"{d}/n{i}")
            made += 1
    except OSError:
        # A scratch with fewer inodes than names (a tmpfs link takes one):
        # as many as fit.
        pass
    return made


made = names("a", 5_001)
# Room for the file's folder and the file, whatever the inode quota.
for i in range(max(made - 4, 0), made):
    os.unlink(f"a/n{i}")
os.mkdir("zz")
open("zz/big.bin", "wb").close()
names("b", 5_001)
written = 0
block = b"\0" * (1 << 20)
try:
    with open("zz/big.bin", "r+b") as f:
        while True:
            f.write(block)
            f.flush()
            written += len(block)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {e.strerror}")
