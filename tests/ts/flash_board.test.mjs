// flash_board with the official TypeScript SDK and its default options (issue 32): a flash
// longer than the SDK's 60 s request timeout, on the virtual board in a usbvm guest
// (tests/python/vbench_serve.py starts it: gatecmd-vboard's flash slowed to 1 MiB/s, an
// 80 MiB image), outlives the client's give-up as a job and is followed to its end with
// wait_job, whose `result` is the flash's. Without the usbvm harness or QEMU the test is
// skipped with the reason; under CI=true that is a failure instead.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "./harness.mjs";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const PYTHON = existsSync(join(REPO, ".venv/bin/python")) ? join(REPO, ".venv/bin/python") : "python3";

// Starts the VM; resolves with {url, token, image} or {unavailable}.
function startBench() {
  const child = spawn(PYTHON, [join(REPO, "tests/python/vbench_serve.py")], {
    cwd: join(REPO, "tests/python"),
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    lines.once("line", (l) => resolve({ child, ...JSON.parse(l) }));
    child.once("exit", (code) => reject(new Error(`vbench_serve exited with ${code} before it was ready`)));
  });
}

test("a flash_board longer than 60 s outlives the SDK's default timeout and is followed to its end", { timeout: 600_000 }, async (t) => {
  const bench = await startBench();
  if (bench.unavailable) {
    if (process.env.CI === "true") assert.fail(`CI=true: ${bench.unavailable}`);
    t.skip(bench.unavailable);
    return;
  }
  try {
    const client = await connect(bench.url, bench.token, "ts-flash");
    const lock = await client.callTool({ name: "lock_board", arguments: { board: "vb1", ttl_secs: 900 } });
    const lease = lock.structuredContent.lease_id;
    assert.ok(lease, JSON.stringify(lock.structuredContent));
    const started = Date.now();
    await assert.rejects(
      client.callTool({
        name: "flash_board",
        arguments: { board: "vb1", image: bench.image, loader: "loader.bin", lease },
      }),
      (e) => e.code === -32001, // the SDK's own "Request timed out"
    );
    const gaveUp = (Date.now() - started) / 1000;
    assert.ok(gaveUp >= 59 && gaveUp < 75, `gave up after ${gaveUp} s`);
    // The flash continues as a job of this client; find it (the cancel notification travels
    // on its own POST: the first list may overtake it).
    let job;
    for (let i = 0; i < 50 && !job; i++) {
      const list = await client.callTool({ name: "list_jobs", arguments: {} });
      job = list.structuredContent.jobs.find((j) => j.command === "flash_board");
      if (!job) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(job, "no flash_board job after the give-up");
    assert.equal(job.state, "running", JSON.stringify(job));
    // Followed to its end: 50 s steps stay inside the SDK's 60 s.
    let last;
    let stdout = "";
    let cursor = { stdout: 0, stderr: 0 };
    for (let i = 0; i < 20; i++) {
      const r = await client.callTool({
        name: "wait_job",
        arguments: { job: job.job, timeout_secs: 50, output_cursor: cursor },
      });
      last = r.structuredContent;
      stdout += last.stdout;
      cursor = last.output_cursor;
      if (last.state !== "running" && !last.more_output) break;
    }
    assert.equal(last.state, "succeeded", JSON.stringify(last));
    const took = (Date.now() - started) / 1000;
    assert.ok(took > 60, `the flash took ${took} s, not longer than the SDK's timeout`);
    const result = last.result;
    assert.equal(result.verified, true, JSON.stringify(result));
    // A loaded machine can stretch one of the slowed board's 4 MiB transfers past the
    // rockusb crate's 5 s: the flash then takes the `recover` step (docs/FLASHING.md) and
    // goes on where the board's journal says, so the image is covered by what was written
    // and what was found already there.
    const steps = result.steps.map((s) => s.step);
    const written = result.flashed.written;
    if (steps.includes("recover")) {
      assert.equal(written.bytes_written + written.bytes_skipped, bench.mib * 1048576, JSON.stringify(written));
    } else {
      assert.equal(written.bytes_written, bench.mib * 1048576, JSON.stringify(written));
    }
    assert.deepEqual(
      steps.filter((s) => s !== "recover"),
      ["accept", "check_image", "maskrom", "await_rockusb", "download_boot", "await_loader", "flash_info", "write", "verify", "reset", "await_console", "hash_files"],
    );
    assert.match(stdout, /write .* at [\d.]+ MB\/s/);
    await client.close();
  } finally {
    bench.child.stdin.end();
    await new Promise((r) => bench.child.once("exit", r));
  }
});
