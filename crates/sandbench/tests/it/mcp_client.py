"""A real MCP client (the official Python SDK, `mcp` on PyPI) that drives
`sandbench mcp` for the integration tests.

Usage: client.py STEPS_JSON SERVER_COMMAND...  (stdio: the client starts the server)
       client.py STEPS_JSON http://127.0.0.1:PORT/mcp  (streamable HTTP to a running server;
       the bearer token from $SANDBENCH_MCP_TOKEN, extra headers from $SANDBENCH_MCP_HEADERS, JSON)
STEPS_JSON is a list of steps:
  {"op": "list_tools"}
  {"op": "call", "name": ..., "args": {...}, "progress": bool, "cancel_after": seconds}
      progress: send a progressToken and report the notifications received;
      cancel_after: cancel the call (notifications/cancelled) after that long;
      retry_for: call again while the result is a tool error, for up to that long
  {"op": "concurrent", "calls": [call steps]}: all at once; one line with every result, in order
  {"op": "set_level", "level": "info"}: logging/setLevel
  {"op": "logs"}: the log messages received so far (and forget them)
  {"op": "sleep", "seconds": N}
  {"op": "close_listed"}: list_sessions, then close_session each one listed; {"closed": [ids]}
In a call's args the string "$session" stands for the id the last
open_session returned, and {"$repeat": [text, n]} for text repeated n times. For each step one JSON line goes to stdout:
{"op": "calling"} just before a call is sent, then the result (or the MCP
error). The test asserts on those lines; this script judges nothing. The
server gets this script's whole environment (the test plants a secret there).
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession, Implementation, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def emit(obj):
    print(json.dumps(obj), flush=True)


def transport(server):
    if server[0].startswith("http://"):
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = json.loads(os.environ.get("SANDBENCH_MCP_HEADERS", "{}"))
        token = os.environ.get("SANDBENCH_MCP_TOKEN")
        if token:
            headers["Authorization"] = "Bearer " + token
        return streamable_http_client(server[0], http_client=create_mcp_http_client(headers=headers))
    params = StdioServerParameters(command=server[0], args=server[1:], env=dict(os.environ))
    return stdio_client(params)


def result_of(res, progress):
    out = {
        "is_error": res.is_error,
        "structured": res.structured_content,
        "text": "".join(c.text for c in res.content if getattr(c, "type", "") == "text"),
    }
    if progress is not None:
        out["progress"] = progress
    return out


async def main():
    steps = json.loads(sys.argv[1])
    logs = []

    async def on_log(params):
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    async with transport(sys.argv[2:]) as streams:
        read, write = streams[0], streams[1]
        info = Implementation(name="sandbench-test-client", version="1.0")
        async with ClientSession(read, write, client_info=info, logging_callback=on_log) as client:
            await client.initialize()
            state = {"session": None}

            def fill(v):
                if v == "$session":
                    return state["session"]
                if isinstance(v, dict) and "$repeat" in v:
                    # {"$repeat": [text, n]}: text n times (too big for argv).
                    return v["$repeat"][0] * v["$repeat"][1]
                if isinstance(v, dict):
                    return {k: fill(x) for k, x in v.items()}
                return v

            async def call(step):
                progress = [] if step.get("progress") else None

                async def on_progress(value, total, message):
                    progress.append({"progress": value, "message": message, "t": time.monotonic()})

                try:
                    res = await client.call_tool(
                        step["name"], fill(step.get("args", {})), progress_callback=on_progress if progress is not None else None
                    )
                    if step["name"] == "open_session" and res.structured_content:
                        state["session"] = res.structured_content.get("session")
                    out = result_of(res, progress)
                    out["t"] = time.monotonic()
                    return out
                except MCPError as e:
                    return {"mcp_error": {"code": e.code, "message": e.message}}

            async def call_or_cancel(step):
                if "retry_for" in step:
                    # Again every half second while it is refused (a slot
                    # still held by a sandbox being torn down).
                    until = time.monotonic() + step["retry_for"]
                    while True:
                        out = await call(step)
                        if out.get("is_error") is False or time.monotonic() > until:
                            return out
                        await anyio.sleep(0.5)
                if "cancel_after" not in step:
                    return await call(step)
                box = {}

                async def run():
                    box["result"] = await call(step)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    await anyio.sleep(step["cancel_after"])
                    if "result" not in box:
                        box["cancelled_at"] = time.monotonic()
                        tg.cancel_scope.cancel()
                return box.get("result") or {"cancelled": True, "t": box.get("cancelled_at")}

            for step in steps:
                if step["op"] == "list_tools":
                    res = await client.list_tools()
                    emit({"tools": [{"name": t.name, "input_schema": t.input_schema} for t in res.tools]})
                elif step["op"] == "close_listed":
                    listed = await client.call_tool("list_sessions", {})
                    ids = [x["id"] for x in (listed.structured_content or {}).get("sessions", [])]
                    for i in ids:
                        await client.call_tool("close_session", {"session": i})
                    emit({"closed": ids, "t": time.monotonic()})
                elif step["op"] == "call":
                    emit({"op": "calling", "t": time.monotonic()})
                    emit(await call_or_cancel(step))
                elif step["op"] == "concurrent":
                    emit({"op": "calling", "t": time.monotonic()})
                    results = [None] * len(step["calls"])

                    async def one(i, s):
                        results[i] = await call_or_cancel(s)

                    async with anyio.create_task_group() as tg:
                        for i, s in enumerate(step["calls"]):
                            tg.start_soon(one, i, s)
                    emit({"results": results})
                elif step["op"] == "set_level":
                    await client.set_logging_level(step["level"])
                    emit({"level": step["level"]})
                elif step["op"] == "logs":
                    emit({"logs": list(logs)})
                    logs.clear()
                elif step["op"] == "sleep":
                    # Stay connected a while (another client acts meanwhile).
                    await anyio.sleep(step["seconds"])
                    emit({"slept": step["seconds"]})
                else:
                    raise SystemExit(f"unknown step {step!r}")


anyio.run(main)
