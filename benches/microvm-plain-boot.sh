#!/bin/sh
# Baseline for `sandbench bench --tier microvm`: a plain QEMU microvm boot of
# the same kernel, initramfs and root disk sandbench uses, running
# `python3 -c 'print(1)'` from the root disk and powering off — no agent, no
# control channel, no sandbench. Prints the program's output ("1").
#
# Usage: microvm-plain-boot.sh [ARTEFACT_DIR] [ACCEL] [MEMORY_MIB]
# ARTEFACT_DIR defaults to ${SANDBENCH_DATA_DIR:-~/.local/share/sandbench}/microvm.
set -eu
dir=${1:-${SANDBENCH_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/sandbench}/microvm}
accel=${2:-tcg}
mem=${3:-448}
qemu=${QEMU:-qemu-system-x86_64}
for f in vmlinuz initrd.cpio root.ext4; do
    [ -f "$dir/$f" ] || { echo "missing $dir/$f: run sandbench setup microvm" >&2; exit 1; }
done
cpu=""
[ "$accel" = kvm ] && cpu="-cpu host"
# shellcheck disable=SC2086
"$qemu" -M "microvm,accel=$accel,x-option-roms=off,rtc=off,pcie=off" $cpu -m "${mem}M" -smp 1 \
    -nodefaults -no-user-config -display none -no-reboot \
    -chardev stdio,id=con,signal=off -serial chardev:con \
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd.cpio" \
    -append "console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=2000000 pci=off rdinit=/init sandbench.baseline" \
    -drive "id=root,file=$dir/root.ext4,format=raw,if=none,readonly=on" -device virtio-blk-device,drive=root \
    </dev/null | tr -d '\r' | sed -n 's/^sandbench-baseline-out://p'
