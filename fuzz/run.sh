#!/usr/bin/env bash
# Run every fuzz target (or those named) for SECS seconds each (default 60),
# on the stable toolchain: RUSTC_BOOTSTRAP=1 lets it take the unstable
# sanitizer flags cargo-fuzz passes. Needs `cargo install cargo-fuzz` and a
# C++ compiler (libFuzzer is built from source by libfuzzer-sys).
#   fuzz/run.sh                 # every target, 60 s each
#   SECS=300 fuzz/run.sh envd_stream
# Corpora live in fuzz/corpus/<target> (kept small in the repo: new inputs
# are merged back with -merge=1); crashes go to fuzz/artifacts/<target>.
set -euo pipefail
cd "$(dirname "$0")"
SECS="${SECS:-60}"
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(sanitize_core sanitize_tui microvm_frames envd_stream container_frames)
export RUSTC_BOOTSTRAP=1
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    echo "== $t: ${SECS}s"
    nice -n 10 cargo fuzz run --sanitizer none "$t" "corpus/$t" -- \
        -max_total_time="$SECS" -max_len=4096 -print_final_stats=1
    # Keep the corpus minimal: only inputs that add coverage stay.
    tmp="$(mktemp -d)"
    nice -n 10 cargo fuzz run --sanitizer none "$t" "$tmp" "corpus/$t" -- -merge=1 >/dev/null 2>&1 || true
    rm -rf "corpus/$t" && mv "$tmp" "corpus/$t"
done
