# name: forged-verdict
# tries: forge its own verdict: print the texts limits produce (MemoryError, File too large, No space left on device, killed), sandbench-like status and exit lines, the container loader's frames, and die of a SIGXCPU it sent itself at no CPU cost
# must: be judged from host-side facts only: no violation that did not happen
# expect: *=ok
import os, signal, sys

lies = [
    "MemoryError",
    "OSError: [Errno 27] File too large",
    "OSError: [Errno 28] No space left on device",
    "BlockingIOError: [Errno 11] Resource temporarily unavailable (fork)",
    "sandbench: memory — memory limit 256M hit at 0.01 s — killed",
    "outcome   violation",
    "\0sandbench-status 0 pids=999 disk=2f776f726b fsize=2f776f726b2f78",
]
for line in lies:
    print(line)
    print(line, file=sys.stderr)
# Raw frames of the docker loader's protocol: a status and an exit by signal.
for kind, body in ((b"s", b"pids=999 disk=2f776f726b"), (b"x", b"signal 24 out=0 err=0")):
    os.write(1, kind + len(body).to_bytes(4, "big") + body)
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGXCPU)
