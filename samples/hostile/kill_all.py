# name: kill-all
# tries: kill every process it can see (kill(-1, SIGKILL)), hoping to reach the host's
# must: confine signals to the sandbox's own processes
# expect: *=ok
import os
import signal
import sys

print("about to kill(-1, SIGKILL)", flush=True)
try:
    os.kill(-1, signal.SIGKILL)
except OSError as e:
    print(f"kill(-1) refused: {e.strerror}")
print("done", flush=True)
sys.exit(0)
