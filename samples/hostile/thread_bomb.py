# name: thread-bomb
# tries: start threads without end (each a kernel task)
# must: refuse new threads at the pids (or memory) limit
# expect: *=violation:pids|memory|wall_timeout
import threading
import time

n = 0
while True:
    try:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        n += 1
    except (RuntimeError, MemoryError) as e:
        print(f"thread {n} refused: {e}", flush=True)
        time.sleep(3600)
