# name: sleep-forever
# tries: never finish, without using any CPU
# must: kill it at the wall-clock limit
# expect: *=violation:wall_timeout
import time

time.sleep(10**6)
