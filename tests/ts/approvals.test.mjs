// Approvals (issue 33) with the official TypeScript SDK and its default options: a call
// that waits for an approver outlives the SDK's 60 s give-up without losing the request.
// The foreground call times out at 60 s (the SDK sends notifications/cancelled); the
// request and its job stay, list_jobs shows the job awaiting approval, an approver client
// approves after the give-up, and wait_job returns the run's result.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startServer, connect, TOKEN_A, TOKEN_B } from "./harness.mjs";

const config = `
clients:
  - name: vm-a
    token: ${TOKEN_A}
  - name: ops
    token: ${TOKEN_B}
commands:
  - name: erase
    binary: $DIR/erase.sh
    description: A stand-in for rkdeveloptool ef that leaves a marker.
    destructive: true
    allowed_args:
      - pattern: ef
approvals:
  - command: erase
    approve: {by: [ops], timeout_secs: 300}
`;

test("a request waiting more than 60 s for its approver is not lost", { timeout: 120000 }, async () => {
  const server = await startServer(config);
  try {
    const script = join(server.dir, "erase.sh");
    writeFileSync(script, `#!/bin/sh\necho erased > ${server.dir}/erased\necho "erase done"\n`);
    chmodSync(script, 0o755);
    const agent = await connect(server.url, TOKEN_A, "agent");
    const ops = await connect(server.url, TOKEN_B, "ops");
    const started = Date.now();
    await assert.rejects(
      agent.callTool({ name: "execute_command", arguments: { command: "erase", args: ["ef"] } }),
      (e) => e.code === -32001, // the SDK's own "Request timed out"
    );
    const gaveUp = (Date.now() - started) / 1000;
    assert.ok(gaveUp >= 59 && gaveUp < 75, `gave up after ${gaveUp} s`);
    assert.ok(!existsSync(join(server.dir, "erased")), "it ran without an approval");
    // The request is still there: the job waits, detached once the cancel arrived.
    let job;
    for (let i = 0; i < 50; i++) {
      const list = await agent.callTool({ name: "list_jobs", arguments: {} });
      job = list.structuredContent.jobs.find((j) => j.command === "erase");
      assert.ok(job, JSON.stringify(list.structuredContent));
      if (job.origin === "detached") break;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    assert.equal(job.state, "awaiting_approval");
    assert.equal(job.origin, "detached");
    const res = await ops.readResource({ uri: "gatecmd://approvals" });
    const pending = JSON.parse(res.contents[0].text).pending;
    assert.equal(pending.length, 1);
    assert.equal(pending[0].id, job.approval);
    assert.equal(pending[0].client, "vm-a");
    const ok = await ops.callTool({ name: "approve", arguments: { approval: job.approval, note: "after lunch" } });
    assert.ok(!ok.isError, JSON.stringify(ok));
    const done = await agent.callTool({ name: "wait_job", arguments: { job: job.job, timeout_secs: 30 } });
    const s = done.structuredContent;
    assert.equal(s.state, "succeeded", JSON.stringify(s));
    assert.equal(s.exit_code, 0);
    assert.equal(s.stdout, "erase done\n");
    assert.equal(readFileSync(join(server.dir, "erased"), "utf8"), "erased\n");
    assert.ok((Date.now() - started) / 1000 > 60, "the approval came after the SDK's give-up");
    await agent.close();
    await ops.close();
  } finally {
    await server.stop();
  }
});
