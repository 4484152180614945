#!/bin/sh
# Make the docker and gvisor tiers usable on a fresh Debian machine, idempotently:
# install docker.io, runsc and mmdebstrap, register runsc (network off) with the
# daemon, start dockerd when none answers, then let sandbench make sure its image
# is there. Run as root. SANDBENCH (path of the built binary) must be set, or the
# image step is skipped.
set -eu

need=""
command -v dockerd >/dev/null 2>&1 || need="$need docker.io"
command -v runsc >/dev/null 2>&1 || need="$need runsc"
command -v mmdebstrap >/dev/null 2>&1 || need="$need mmdebstrap"
if [ -n "$need" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi

# Register runsc; without --network=none it refuses to start a container in the
# root network namespace (dockerd runs with --bridge=none).
want='{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}}}'
mkdir -p /etc/docker
changed=0
if [ ! -f /etc/docker/daemon.json ]; then
    printf '%s\n' "$want" >/etc/docker/daemon.json
    changed=1
elif ! grep -q '"runsc"' /etc/docker/daemon.json; then
    python3 - <<'PY'
import json
p = "/etc/docker/daemon.json"
d = json.load(open(p))
d.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
json.dump(d, open(p, "w"), indent=2)
PY
    changed=1
fi

answers() { docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

if answers && [ "$changed" = 1 ] && [ -f /var/run/docker.pid ]; then
    # Reload daemon.json (runtimes are reloadable with SIGHUP).
    kill -HUP "$(cat /var/run/docker.pid)" || true
    sleep 1
fi
if ! answers; then
    log=/var/log/sandbench-dockerd.log
    nohup dockerd --bridge=none --iptables=false >"$log" 2>&1 &
    i=0
    until answers; do
        i=$((i + 1))
        if [ "$i" -gt 60 ]; then
            echo "dockerd did not answer within 30 s; see $log" >&2
            tail -n 20 "$log" >&2
            exit 1
        fi
        sleep 0.5
    done
fi

if [ -n "${SANDBENCH:-}" ]; then
    "$SANDBENCH" setup docker
fi
