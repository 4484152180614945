# name: stdin-forever
# tries: wait for input that never comes
# must: give it no input (stdin is /dev/null or closed), so it ends at once or at the wall limit
# expect: *=ok
import sys

data = sys.stdin.read()
print(f"stdin gave {len(data)} bytes and ended")
