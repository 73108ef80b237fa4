// The official TypeScript SDK with default options against the real server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, connect } from "./harness.mjs";

test("the SDK lists gatecmd's tools and runs an allowed command", async () => {
  const server = await startServer();
  try {
    const client = await connect(server.url);
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    assert.ok(names.includes("execute_command"), `tools: ${names}`);
    const res = await client.callTool({ name: "execute_command", arguments: { command: "echo", args: ["hello", "world"] } });
    assert.equal(res.isError ?? false, false, JSON.stringify(res));
    assert.equal(res.structuredContent.exit_code, 0);
    assert.equal(res.structuredContent.stdout, "hello world\n");
    await client.close();
  } finally {
    await server.stop();
  }
});
