# name: big-file
# tries: write one file without end
# must: stop the file at the file-size limit
# expect: *=violation:file_size|disk
written = 0
block = b"\0" * (1 << 20)
try:
    with open("big.bin", "wb") as f:
        while True:
            f.write(block)
            f.flush()
            written += len(block)
except OSError as e:
    print(f"stopped after {written >> 20} MiB: {e}")
