# name: shell-tools
# tries: an agent's shell one-liners: awk, sed, grep, ps and which on a file in /work
# must: run them: the usual commands are there and work
# expect: *=ok
# delivers: "tools ok: sum=6 B=1 ps=yes which=/"
set -eu
printf 'a 1\nb 2\nc 3\n' > data.txt
sum=$(awk '{ s += $2 } END { print s }' data.txt)
b=$(sed 's/b/B/' data.txt | grep -c B)
seen=$(ps -e -o pid= | grep -c . || true)
[ "$seen" -ge 1 ] && ps=yes || ps=no
w=$(which awk)
echo "tools ok: sum=$sum B=$b ps=$ps which=$(printf %.1s "$w")"
