#!/usr/bin/env bash
# Records a scripted demo of the workbench as an asciinema cast, and saves a
# screen of the gauntlet view with the safety × latency frontier as SVG
# (the workbench's ^P), for the README:
#
#   scripts/demo-cast.sh [OUT_DIR]        (default: docs/)
#
# Needs tmux and asciinema (Debian: apt-get install tmux asciinema) and a
# built sandbench ($SANDBENCH, default target/release/sandbench, else
# target/debug/sandbench). The frontier needs a gauntlet kept in the state
# dir: run `sandbench report` (or `sandbench gauntlet`) first, or point
# SANDBENCH_STATE_DIR at one. The session is driven with tmux send-keys, as a
# person would type; the cast is written to OUT_DIR/demo.cast and the screen
# to OUT_DIR/workbench-frontier.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
bin="${SANDBENCH:-}"
if [ -z "$bin" ]; then
    for b in target/release/sandbench target/debug/sandbench; do
        if [ -x "$b" ]; then bin="$b"; break; fi
    done
fi
[ -x "${bin:-}" ] || { echo "demo-cast: build sandbench first (cargo build --release)" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
for t in tmux asciinema; do
    command -v "$t" >/dev/null || { echo "demo-cast: $t is missing (apt-get install $t)" >&2; exit 1; }
done

work="$(mktemp -d)"
session="sandbench-demo-$$"
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The workbench writes ^P screens to its working directory.
cp samples/benign/hello.py "$work/hello.py"
cd "$work"
# A tmux server started earlier has its own environment: pass sandbench's on.
pass=()
for v in SANDBENCH_STATE_DIR SANDBENCH_DATA_DIR SANDBENCH_CONFIG SANDBENCH_SAMPLES; do
    if [ -n "${!v:-}" ]; then pass+=("$v=${!v}"); fi
done
tmux new-session -d -s "$session" -x 100 -y 30 \
    "env ${pass[*]} asciinema rec --quiet --overwrite --idle-time-limit 1.5 -c '$bin hello.py' '$work/demo.cast'"

# Wait until the screen shows $1 (at most $2 seconds, default 60).
wait_for() {
    local i
    for ((i = 0; i < ${2:-60} * 5; i++)); do
        if tmux capture-pane -t "$session" -p | grep -qF -- "$1"; then return 0; fi
        sleep 0.2
    done
    echo "demo-cast: '$1' never appeared; the screen was:" >&2
    tmux capture-pane -t "$session" -p >&2
    exit 1
}
keys() { tmux send-keys -t "$session" "$@"; sleep "${PAUSE:-1}"; }

wait_for "process  ✔ ready"
sleep 2
keys F5                         # run hello on the process tier
wait_for "ok · exit code 0"
sleep 2
keys F2                         # the samples picker, filtered
for c in f o r k - b; do keys "$c"; done
keys Enter
keys F5                         # a fork bomb, contained
wait_for "violation"
sleep 3
keys F9                         # the gauntlet view: the kept matrix's frontier
sleep 3
keys C-p                        # the screen as SVG
wait_for "screen saved as"
sleep 2
keys Escape
keys C-q                        # quit (the loaded sample has no unsaved edits)
for _ in $(seq 1 100); do
    tmux has-session -t "$session" 2>/dev/null || break
    sleep 0.2
done
shot="$(ls -t "$work"/sandbench-screen-*.svg 2>/dev/null | head -1 || true)"
[ -n "$shot" ] || { echo "demo-cast: no screen was saved" >&2; exit 1; }
cp "$shot" "$out/workbench-frontier.svg"
cp "$work/demo.cast" "$out/demo.cast"
echo "demo-cast: wrote $out/demo.cast ($(wc -c < "$out/demo.cast") bytes) and $out/workbench-frontier.svg"
