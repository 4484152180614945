# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root): the
# official MCP clients the `sandbench mcp` tests drive the server with — the
# Python SDK (`mcp` from PyPI) in a venv, and the TypeScript SDK
# (`@modelcontextprotocol/sdk` from npm) with the MCP Inspector's CLI in a
# test directory. Idempotent: what is there and works is kept. Also runnable
# on its own: bash .ci/setup-mcp.sh

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

# The TypeScript SDK and the Inspector (its 0.x line: 2.x needs Node >= 22).
sb_mcp_node="${SANDBENCH_MCP_NODE:-/opt/sandbench-mcp-node}"
if ! [ -f "$sb_mcp_node/node_modules/@modelcontextprotocol/sdk/package.json" ] \
    || ! [ -f "$sb_mcp_node/node_modules/@modelcontextprotocol/inspector-cli/build/cli.js" ]; then
    command -v npm >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm; }
    echo "ci: installing the TypeScript MCP SDK and the MCP Inspector into $sb_mcp_node"
    mkdir -p "$sb_mcp_node"
    [ -f "$sb_mcp_node/package.json" ] || echo '{"name":"sandbench-mcp-node-client","private":true,"type":"module"}' > "$sb_mcp_node/package.json"
    (cd "$sb_mcp_node" && npm install --no-audit --no-fund '@modelcontextprotocol/sdk@1' '@modelcontextprotocol/inspector@0')
fi
export SANDBENCH_MCP_NODE="$sb_mcp_node"
echo "ci: TypeScript MCP SDK $(node -p "require('$sb_mcp_node/node_modules/@modelcontextprotocol/sdk/package.json').version")"
# `require` exists when sourced by .ci/run.
require="${require:-process},mcp,mcp-ts"
