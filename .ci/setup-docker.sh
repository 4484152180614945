# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root): make
# the docker and gvisor tiers usable on a fresh Debian machine, idempotently.
# Installs docker.io, runsc and mmdebstrap; registers runsc with the daemon
# (network off); starts dockerd when none answers; builds sandbench and runs
# `sandbench setup docker` (uses, pulls or builds the Python image); then
# requires both tiers. Also runnable on its own: bash .ci/setup-docker.sh

apt_need docker.io runsc mmdebstrap 2>/dev/null || {
    # Standalone: .ci/run's helper is not defined.
    for p in docker.io runsc mmdebstrap; do
        dpkg -s "$p" >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io runsc mmdebstrap; break; }
    done
}

# runsc refuses to start in the root network namespace (dockerd runs with
# --bridge=none) unless told the sandbox has no network.
sb_daemon_json_changed=0
mkdir -p /etc/docker
if [ ! -s /etc/docker/daemon.json ]; then
    printf '%s\n' '{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}}}' >/etc/docker/daemon.json
    sb_daemon_json_changed=1
elif ! grep -q '"runsc"' /etc/docker/daemon.json; then
    python3 - <<'PY'
import json
p = "/etc/docker/daemon.json"
d = json.load(open(p))
d.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
json.dump(d, open(p, "w"), indent=2)
PY
    sb_daemon_json_changed=1
fi

sb_docker_answers() { docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

if sb_docker_answers && [ "$sb_daemon_json_changed" = 1 ] && [ -s /var/run/docker.pid ]; then
    # Runtimes are reloaded on SIGHUP.
    kill -HUP "$(cat /var/run/docker.pid)" || true
    sleep 1
fi
if ! sb_docker_answers; then
    echo "ci: starting dockerd (log: /var/log/sandbench-dockerd.log)"
    nohup dockerd --bridge=none --iptables=false >/var/log/sandbench-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        sb_docker_answers && break
        sleep 0.5
    done
    sb_docker_answers || { echo "ci: dockerd did not answer within 30 s" >&2; tail -n 20 /var/log/sandbench-dockerd.log >&2; exit 1; }
fi

cargo build --quiet
./target/debug/sandbench setup docker
./target/debug/sandbench setup gvisor
require="${require:-process},docker,gvisor"
