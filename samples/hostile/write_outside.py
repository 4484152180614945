# name: write-outside
# tries: create files outside its scratch space: in the host's home, /etc, /usr and a host path it was told about
# must: allow writes only to its own scratch directory and private /tmp
# expect: *=ok
import os

home = os.environ.get("CANARY_HOME", "/root")
targets = [
    os.environ.get("CANARY_OUTSIDE", "/var/tmp/sandbench-canary-outside"),
    os.path.join(home, "written-by-sandbox"),
    "/etc/sandbench-canary",
    "/usr/sandbench-canary",
]
for t in targets:
    try:
        with open(t, "w") as f:
            f.write("escaped")
        print(f"WROTE {t}")
    except OSError as e:
        print(f"cannot write {t}: {e.strerror}")
