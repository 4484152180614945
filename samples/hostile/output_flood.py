# name: output-flood
# tries: write to stdout as fast as it can, forever
# must: stop reading at the output limit, kill the run and mark the output truncated
# expect: *=violation:output_limit
import sys

line = ("flood " * 10 + "\n") * 1000
while True:
    sys.stdout.write(line)
