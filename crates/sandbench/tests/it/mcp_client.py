"""A real MCP client (the official Python SDK, `mcp` on PyPI) that drives
`sandbench mcp` over stdio for the integration tests.

Usage: client.py STEPS_JSON SERVER_COMMAND...  (stdio: the client starts the server)
       client.py STEPS_JSON http://127.0.0.1:PORT/mcp  (streamable HTTP to a running server)
STEPS_JSON is a list of {"op": "list_tools"}, {"op": "call", "name": ..., "args": {...}}
or {"op": "sleep", "seconds": N}.
In a call's args the string "$session" stands for the id the last
open_session returned. For each step one JSON line goes to stdout:
{"op": "calling"} just before a call is sent, then the result (or the MCP
error). The test asserts on those lines; this script judges nothing. The
server gets this script's whole environment (the test plants a secret there).
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, Implementation, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def emit(obj):
    print(json.dumps(obj), flush=True)


def transport(server):
    if server[0].startswith("http://"):
        return streamable_http_client(server[0])
    params = StdioServerParameters(command=server[0], args=server[1:], env=dict(os.environ))
    return stdio_client(params)


async def main():
    steps = json.loads(sys.argv[1])
    async with transport(sys.argv[2:]) as streams:
        read, write = streams[0], streams[1]
        info = Implementation(name="sandbench-test-client", version="1.0")
        async with ClientSession(read, write, client_info=info) as client:
            await client.initialize()
            session = None

            def fill(v):
                if v == "$session":
                    return session
                if isinstance(v, dict):
                    return {k: fill(x) for k, x in v.items()}
                return v

            for step in steps:
                if step["op"] == "list_tools":
                    res = await client.list_tools()
                    emit({"tools": [{"name": t.name, "input_schema": t.input_schema} for t in res.tools]})
                elif step["op"] == "call":
                    emit({"op": "calling"})
                    try:
                        res = await client.call_tool(step["name"], fill(step.get("args", {})))
                        if step["name"] == "open_session" and res.structured_content:
                            session = res.structured_content.get("session")
                        emit({
                            "is_error": res.is_error,
                            "structured": res.structured_content,
                            "text": "".join(c.text for c in res.content if getattr(c, "type", "") == "text"),
                        })
                    except MCPError as e:
                        emit({"mcp_error": {"code": e.code, "message": e.message}})
                elif step["op"] == "sleep":
                    # Stay connected a while (another client acts meanwhile).
                    await anyio.sleep(step["seconds"])
                    emit({"slept": step["seconds"]})
                else:
                    raise SystemExit(f"unknown step {step!r}")


anyio.run(main)
