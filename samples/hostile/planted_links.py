# name: planted-links
# tries: leave links, a FIFO and a hard link at the names sandbench's own code uses in the scratch space (the program's file, the other languages' files, a folder), pointing at a host path it was told about, the fake home and /dev/zero, for whatever privileged step reads, writes, chowns or scans them after it
# must: end as usual with nothing created or changed outside the sandbox: privileged code works on the scratch through descriptors and never follows what the program left there
# expect: *=ok
# Sessions reuse the scratch between calls, so the same plants are tried
# there before a second call on every tier with sessions
# (tests/it/session_plants.rs); a one-shot run's privileged steps after the
# program (the scratch scans, the teardown) meet them here.
import os
import sys

outside = os.environ.get("CANARY_OUTSIDE", "/var/tmp/sandbench-canary-outside")
home = os.environ.get("CANARY_HOME", "/root")
me = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""


def plant(what, make):
    try:
        make()
        print(f"planted {what}")
    except OSError as e:
        print(f"cannot plant {what}: {e.strerror}")


def replace_with_link(name, target):
    try:
        os.unlink(name)
    except OSError:
        pass
    os.symlink(target, name)


for d in (os.getcwd(), "/tmp"):
    for name, target in (("main.py", outside), ("main.js", "/dev/zero"), ("main.mjs", outside), ("program", outside)):
        plant(f"{d}/{name} -> {target}", lambda: replace_with_link(os.path.join(d, name), target))
    plant(f"{d}/home -> {home}", lambda: replace_with_link(os.path.join(d, "home"), home))
    plant(f"{d}/main.sh as a FIFO", lambda: (os.path.lexists(os.path.join(d, "main.sh")) and os.unlink(os.path.join(d, "main.sh"))) or os.mkfifo(os.path.join(d, "main.sh")))
if me and os.path.dirname(me):
    plant(f"{me} -> {outside}", lambda: replace_with_link(me, outside))
plant("a hard link of a scratch file", lambda: (open("orig", "w").close(), os.link("orig", "hard")))
print("PLANTED; exiting")
