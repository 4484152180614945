# name: hello
# tries: print a greeting
# must: run it and show the output
# expect: *=ok
print("hello from the sandbox")
