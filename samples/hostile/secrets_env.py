# name: secrets-env
# tries: find the API key planted in the launcher's environment (a fake one each gauntlet run): its own environment, its parent's, init's, any /proc/<pid>/environ
# must: show it nothing of the host's environment
# expect: *=ok
import os

found = []
if "ANTHROPIC_API_KEY" in os.environ:
    found.append("env: " + os.environ["ANTHROPIC_API_KEY"])
pids = {"self", str(os.getppid()), "1"}
try:
    pids |= {p for p in os.listdir("/proc") if p.isdigit()}
except OSError:
    pass
for pid in sorted(pids):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"ANTHROPIC_API_KEY="):
                    found.append(f"/proc/{pid}/environ: " + var.decode(errors="replace"))
    except OSError:
        pass
print("found:", found if found else "nothing")
