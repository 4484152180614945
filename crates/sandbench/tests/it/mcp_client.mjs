// A real MCP client (the official TypeScript SDK, @modelcontextprotocol/sdk
// on npm, installed by .ci/setup-mcp.sh into $SANDBENCH_MCP_NODE) that drives
// `sandbench mcp` for the integration tests, with the same steps as
// mcp_client.py.
//
// Usage: node mcp_client.mjs STEPS_JSON SERVER_COMMAND...   (stdio)
//        node mcp_client.mjs STEPS_JSON http://127.0.0.1:PORT/mcp
//        (the bearer token from $SANDBENCH_MCP_TOKEN, extra headers from
//        $SANDBENCH_MCP_HEADERS, JSON)
// Steps: {"op": "list_tools"}, {"op": "call", "name", "args", "progress"?,
// "cancel_after"?}, {"op": "set_level", "level"}, {"op": "logs"}. "$session"
// in a call's args is the id the last open_session returned. One JSON line
// per step on stdout (a {"op": "calling"} line before each call); a failed
// connection is one {"connect_error": {...}} line and exit status 3.

import path from "node:path";
import { pathToFileURL } from "node:url";

const sdk = (p) =>
  import(pathToFileURL(path.join(process.env.SANDBENCH_MCP_NODE || "/opt/sandbench-mcp-node", "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { LoggingMessageNotificationSchema } = await sdk("types.js");

const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const steps = JSON.parse(process.argv[2]);
const server = process.argv.slice(3);

let transport;
if (server[0].startsWith("http://")) {
  const headers = JSON.parse(process.env.SANDBENCH_MCP_HEADERS || "{}");
  if (process.env.SANDBENCH_MCP_TOKEN) headers.Authorization = "Bearer " + process.env.SANDBENCH_MCP_TOKEN;
  transport = new StreamableHTTPClientTransport(new URL(server[0]), { requestInit: { headers } });
} else {
  transport = new StdioClientTransport({ command: server[0], args: server.slice(1), env: { ...process.env }, stderr: "ignore" });
}
const client = new Client({ name: "sandbench-ts-client", version: "1.0" });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
try {
  await client.connect(transport);
} catch (e) {
  emit({ connect_error: { code: e.code ?? null, message: String(e.message ?? e) } });
  process.exit(3);
}

let session = null;
const fill = (v) => {
  if (v === "$session") return session;
  if (v && typeof v === "object" && !Array.isArray(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fill(x)]));
  return v;
};

for (const step of steps) {
  if (step.op === "list_tools") {
    const r = await client.listTools();
    emit({ tools: r.tools.map((t) => ({ name: t.name, input_schema: t.inputSchema })) });
  } else if (step.op === "call") {
    emit({ op: "calling" });
    const progress = step.progress ? [] : null;
    const ac = new AbortController();
    let timer = null;
    if (step.cancel_after !== undefined) timer = setTimeout(() => ac.abort("cancelled by the test"), step.cancel_after * 1000);
    try {
      const r = await client.callTool({ name: step.name, arguments: fill(step.args ?? {}) }, undefined, {
        signal: ac.signal,
        timeout: 300000,
        onprogress: progress ? (p) => progress.push({ progress: p.progress, message: p.message ?? null }) : undefined,
      });
      if (step.name === "open_session" && r.structuredContent) session = r.structuredContent.session;
      const out = {
        is_error: r.isError ?? false,
        structured: r.structuredContent ?? null,
        text: (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join(""),
      };
      if (progress) out.progress = progress;
      emit(out);
    } catch (e) {
      if (ac.signal.aborted) emit({ cancelled: true });
      else emit({ mcp_error: { code: e.code ?? null, message: String(e.message ?? e) } });
    } finally {
      if (timer) clearTimeout(timer);
    }
  } else if (step.op === "set_level") {
    await client.setLoggingLevel(step.level);
    emit({ level: step.level });
  } else if (step.op === "logs") {
    emit({ logs: logs.splice(0) });
  } else {
    throw new Error("unknown step " + JSON.stringify(step));
  }
}
await client.close();
process.exit(0);
