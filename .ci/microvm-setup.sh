#!/bin/sh
# Idempotent setup of the microvm tier on a Debian/Ubuntu CI machine (root):
# the system packages it needs, then `sandbench setup microvm`, which builds
# the kernel/initramfs/root disk/agent into sandbench's data dir, probes the
# accelerator and saves a snapshot — each step only when missing or stale.
#
# Env: SANDBENCH = the sandbench command to use (default: cargo run --quiet --).
set -eu
pkgs="qemu-system-x86 linux-image-cloud-amd64 busybox-static mmdebstrap e2fsprogs"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "microvm-setup: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
fi
if [ -n "${SANDBENCH:-}" ]; then
    # shellcheck disable=SC2086
    $SANDBENCH setup microvm
else
    cargo run --quiet -- setup microvm
fi
