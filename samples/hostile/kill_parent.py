# name: kill-parent
# tries: kill its parent (the sandbox's supervisor) and pid 1
# must: survive it: the supervisor is out of reach, the run is still judged and cleaned up
# expect: *=ok
import os
import signal

# A parent outside its pid namespace (the process tier's zygote) shows as 0,
# and kill(0) would be its own process group: nothing to aim at.
if os.getppid() == 0:
    print("its parent is outside its pid namespace")
for pid in {os.getppid(), 1} - {0}:
    try:
        os.kill(pid, signal.SIGKILL)
        print(f"sent SIGKILL to {pid}")
    except OSError as e:
        print(f"cannot kill {pid}: {e.strerror}")
print("still here")
