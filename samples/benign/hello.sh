# name: hello-sh
# tries: print a greeting from POSIX sh
# must: run it and show the output
# expect: *=ok
echo "hello from sh in $(pwd)"
