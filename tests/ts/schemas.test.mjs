// The official TypeScript SDK compiles every tool's input and output schema (ajv) when it
// lists tools and checks each structured result against its output schema. Any warning or
// error it prints about a schema (e.g. `unknown format "uint64" ignored in schema`, which
// schemars' integer formats caused ~90 times per connection) fails this test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, connect } from "./harness.mjs";

/** Runs `body` with console output captured; returns what was printed. */
async function capturingConsole(body) {
  const printed = [];
  const saved = {};
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    saved[level] = console[level];
    console[level] = (...args) => printed.push(`${level}: ${args.map(String).join(" ")}`);
  }
  try {
    await body();
  } finally {
    Object.assign(console, saved);
  }
  return printed;
}

test("the SDK compiles every tool schema without a warning", async () => {
  const server = await startServer();
  try {
    let tools = [];
    const printed = await capturingConsole(async () => {
      const client = await connect(server.url);
      ({ tools } = await client.listTools());
      // Results checked against their output schemas: a command, lists, a refusal.
      const run = await client.callTool({ name: "execute_command", arguments: { command: "echo", args: ["a", "b"] } });
      assert.equal(run.isError ?? false, false, JSON.stringify(run));
      for (const name of ["list_commands", "list_devices", "list_locks", "list_boards"]) {
        const res = await client.callTool({ name, arguments: {} });
        assert.equal(res.isError ?? false, false, `${name}: ${JSON.stringify(res)}`);
      }
      const refused = await client.callTool({ name: "execute_command", arguments: { command: "echo", args: ["A", "b"] } });
      assert.equal(refused.isError, true, JSON.stringify(refused));
      await client.close();
    });
    assert.ok(tools.length >= 10, `tools: ${tools.map((t) => t.name)}`);
    assert.ok(tools.every((t) => t.outputSchema), "every tool has an output schema");
    assert.deepEqual(printed, [], `the SDK printed while compiling schemas:\n${printed.slice(0, 5).join("\n")}`);
    // The formats' meaning is kept as standard bounds.
    const exec = tools.find((t) => t.name === "execute_command");
    assert.equal(exec.inputSchema.properties.wait_secs.minimum, 0, JSON.stringify(exec.inputSchema.properties.wait_secs));
  } finally {
    await server.stop();
  }
});
