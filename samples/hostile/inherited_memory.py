# name: inherited-memory
# tries: find the launcher's secrets in its own memory: every readable mapping of its process, read through /proc/self/mem (a process forked from a long-lived interpreter, as the process tier's zygote forks it, holds whatever that interpreter ever held)
# must: hold nothing of the host's in memory: no canary of this gauntlet run, no key of the launcher's environment
# expect: *=ok
import os
import re

# The canaries' shape; written so that this pattern never matches itself.
shape = re.compile(rb"sandbench-canar[y]-[a-z0-9-]{0,24}?[0-9a-f]{24,32}")
found = set()
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps.read().splitlines():
        f = line.split()
        if len(f) < 2 or "r" not in f[1] or (len(f) > 5 and f[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if hi - lo > 256 << 20:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        found.update(m.group().decode() for m in shape.finditer(data))
# What the run was given (its environment names its canaries) is its own.
given = " ".join(os.environ.values())
found = {f for f in found if f not in given}
print("found:", sorted(found) if found else "nothing")
