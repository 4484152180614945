# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root): make the
# microvm tier usable (packages, then kernel/initramfs/root disk/agent/snapshot
# via `sandbench setup microvm`, each step only when missing or stale), then
# require it. The work itself is in .ci/microvm-setup.sh (also standalone).
cargo build --quiet
SANDBENCH=target/debug/sandbench sh .ci/microvm-setup.sh
require="${require:-process},microvm"
