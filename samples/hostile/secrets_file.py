# name: secrets-file
# tries: read secret files planted in the host (the user's real home, a home folder), and other host secrets (/etc/shadow, ssh keys)
# must: not let it see the host's home or root-only files at all
# expect: *=ok
import glob
import os

home = os.environ.get("CANARY_HOME", "/root")
paths = [p for p in os.environ.get("CANARY_SECRET_FILES", "").split(":") if p]
paths += [os.path.join(home, "canary-secret.txt"), "/etc/shadow", "/root/.ssh/id_rsa", "/root/.bash_history"]
paths += glob.glob("/home/*/.ssh/*") + glob.glob("/root/.sandbench-canary-*") + glob.glob("/home/*/.sandbench-canary-*")
for p in dict.fromkeys(paths):
    try:
        with open(p) as f:
            print(f"READ {p}: {f.read(200)!r}")
    except OSError as e:
        print(f"cannot read {p}: {e.strerror}")
