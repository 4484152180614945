# name: daemon
# tries: double-fork into a new session, ignore SIGTERM and SIGHUP, and outlive the run
# must: kill the whole process tree when the run ends
# expect: *=ok
import os
import signal
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        os.close(1)
        os.close(2)
        while True:
            time.sleep(0.1)
    os._exit(0)
time.sleep(0.3)
print("parent leaves; the daemon stays behind")
