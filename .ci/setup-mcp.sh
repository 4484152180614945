# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root): the
# official Python MCP SDK (`mcp` from PyPI) in a venv, the real client the
# `sandbench mcp` tests drive the server with. Idempotent: an existing venv
# that imports `mcp` is kept. Also runnable on its own: bash .ci/setup-mcp.sh

sb_mcp_venv="${SANDBENCH_MCP_VENV:-/opt/sandbench-mcp-venv}"
if ! "$sb_mcp_venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
    if ! /usr/bin/python3 -m venv --help >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv
    fi
    echo "ci: installing the Python MCP SDK into $sb_mcp_venv"
    /usr/bin/python3 -m venv "$sb_mcp_venv"
    "$sb_mcp_venv/bin/pip" install --quiet --disable-pip-version-check 'mcp>=2,<3'
fi
export SANDBENCH_MCP_PYTHON="$sb_mcp_venv/bin/python"
echo "ci: MCP client SDK $("$SANDBENCH_MCP_PYTHON" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
# `require` exists when sourced by .ci/run.
require="${require:-process},mcp"
