# name: memory-bomb
# tries: allocate and touch memory without end
# must: stop it at the memory limit (OOM kill or refused allocation); the host keeps its memory
# expect: *=violation:memory
chunks = []
while True:
    chunks.append(bytearray(b"x") * (16 << 20))
