# name: scratch-files
# tries: write and read back files in its own working directory and in /tmp
# must: allow it: the scratch space is the program's own
# expect: *=ok
import os
import tempfile

with open("notes.txt", "w") as f:
    f.write("line one\nline two\n")
with open("notes.txt") as f:
    print("cwd file:", f.read().splitlines())
with tempfile.NamedTemporaryFile("w+", delete=False) as t:
    t.write("scratch")
    name = t.name
print("tmp file:", open(name).read(), "in", os.path.dirname(name))
print("cwd is", os.getcwd(), "and HOME is", os.environ.get("HOME"))
