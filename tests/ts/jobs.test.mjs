// Long flashes with the official TypeScript SDK and its default options (issue 23): a 90 s
// fake `rkdeveloptool wl` called in the foreground outlives the client's 60 s give-up as a
// job; the same run started with `background: true` is followed with wait_job; cancel_job
// kills the whole process group. The long cases run side by side on one server.
import { describe, test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, connect, TOKEN_A, TOKEN_B } from "./harness.mjs";

const FAKE_RK = join(dirname(fileURLToPath(import.meta.url)), "..", "tools", "fake-rkdeveloptool");

// Two commands so that the two 90 s runs do not share an output marker; neither touches a
// device class (no board here), so they take no lock and run side by side.
const config = `
clients:
  - name: vm-a
    token: ${TOKEN_A}
  - name: vm-b
    token: ${TOKEN_B}
limits:
  kill_grace_secs: 1
commands:
  - name: rkdeveloptool
    binary: ${FAKE_RK}
    destructive: true
    timeout_secs: 120
    progress: "\\\\((\\\\d+)%\\\\)"
    env:
      FAKE_RK_STEPS: "90"
      FAKE_RK_DELAY: "1"
      FAKE_RK_MARKER: $DIR/wl.done
    params: {lba: "[0-9]+"}
    allowed_args:
      - pattern: wl {lba}
  - name: flash-bg
    binary: ${FAKE_RK}
    destructive: true
    timeout_secs: 120
    progress: "\\\\((\\\\d+)%\\\\)"
    env:
      FAKE_RK_STEPS: "90"
      FAKE_RK_DELAY: "1"
      FAKE_RK_MARKER: $DIR/bg.done
    params: {lba: "[0-9]+"}
    allowed_args:
      - pattern: wl {lba}
  - name: flash-cancel
    binary: ${FAKE_RK}
    destructive: true
    env:
      FAKE_RK_STEPS: "600"
      FAKE_RK_DELAY: "0.1"
      FAKE_RK_IGNORE_TERM: "1"
      FAKE_RK_CHILD: $DIR/grandchild.pid
    params: {lba: "[0-9]+"}
    allowed_args:
      - pattern: wl {lba}
`;

// The SDK's default request timeout is 60 s, and progress does not extend it: a wait_job
// step must answer within it. 50 s steps are well inside both that and the 110 s maximum.
const STEP_SECS = 50;

async function waitToEnd(client, job) {
  let cursor = { stdout: 0, stderr: 0 };
  let stdout = "";
  let steps = 0;
  for (;;) {
    steps += 1;
    assert.ok(steps < 20, "the job never ended");
    const r = await client.callTool({
      name: "wait_job",
      arguments: { job, timeout_secs: STEP_SECS, output_cursor: cursor },
    });
    const s = r.structuredContent;
    assert.ok(!s.refusal, JSON.stringify(s));
    stdout += s.stdout;
    cursor = s.output_cursor;
    if (s.state !== "running" && !s.more_output) return { last: s, stdout, steps };
  }
}

// Alive and not a zombie (a killed grandchild waits for init to reap it).
function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !stat.slice(stat.lastIndexOf(") ") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

describe("jobs with the TypeScript SDK's defaults", { concurrency: true }, () => {
  let server;
  before(async () => {
    server = await startServer(config);
  });
  after(async () => {
    await server?.stop();
  });

  test("a 90 s foreground wl survives the client's 60 s give-up and finishes as a job", async () => {
    const client = await connect(server.url, TOKEN_A, "fg");
    const started = Date.now();
    await assert.rejects(
      client.callTool({ name: "execute_command", arguments: { command: "rkdeveloptool", args: ["wl", "0"] } }),
      (e) => e.code === -32001, // the SDK's own "Request timed out"
    );
    const gaveUp = (Date.now() - started) / 1000;
    assert.ok(gaveUp >= 59 && gaveUp < 75, `gave up after ${gaveUp} s`);
    assert.ok(!existsSync(join(server.dir, "wl.done")), "the write finished before the give-up?");
    // The next call is told; list_jobs shows the job, detached and running. The SDK's
    // notifications/cancelled travels on its own POST: the first list may overtake it.
    let jobs = [];
    const notices = [];
    for (let i = 0; i < 50; i++) {
      const list = await client.callTool({ name: "list_jobs", arguments: {} });
      notices.push(...(list.structuredContent.notices ?? []));
      jobs = list.structuredContent.jobs.filter((j) => j.command === "rkdeveloptool");
      assert.equal(jobs.length, 1, JSON.stringify(list.structuredContent));
      if (jobs[0].origin === "detached") break;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    assert.equal(jobs[0].origin, "detached");
    assert.equal(jobs[0].state, "running", "the give-up killed the write");
    assert.ok(
      notices.some((n) => n.includes(jobs[0].job) && n.includes("wait_job")),
      JSON.stringify(notices),
    );
    const { last, stdout } = await waitToEnd(client, jobs[0].job);
    assert.equal(last.state, "succeeded", JSON.stringify(last));
    assert.equal(last.exit_code, 0);
    assert.ok(existsSync(join(server.dir, "wl.done")), "the write did not complete");
    // The whole output, from the first line to the last: nothing lost across the give-up.
    assert.match(stdout, /^Write LBA from file \(0%\)\n/);
    for (const p of [1, 30, 60, 61, 88, 100]) assert.ok(stdout.includes(`(${p}%)`), `(${p}%) missing`);
    assert.ok(stdout.endsWith("Write LBA from file OK.\n"), stdout.slice(-200));
    assert.equal(last.stdout_dropped, 0);
    await client.close();
  });

  test("a 90 s background wl is followed to its end in wait_job steps", async () => {
    const client = await connect(server.url, TOKEN_A, "bg");
    const t0 = Date.now();
    const r = await client.callTool({
      name: "execute_command",
      arguments: { command: "flash-bg", args: ["wl", "0"], background: true },
    });
    assert.ok(Date.now() - t0 < 5000, "background: true did not answer at once");
    const h = r.structuredContent;
    assert.match(h.job, /^job-\d+$/, JSON.stringify(h));
    assert.ok(h.started_at && h.argv.at(-1) === "0", JSON.stringify(h));
    // Another client cannot see it, wait on it or cancel it.
    const other = await connect(server.url, TOKEN_B, "other");
    const refused = await other.callTool({ name: "wait_job", arguments: { job: h.job, timeout_secs: 0 } });
    assert.equal(refused.isError, true);
    assert.equal(refused.structuredContent.refusal.reason, "not_found");
    const refusedCancel = await other.callTool({ name: "cancel_job", arguments: { job: h.job } });
    assert.equal(refusedCancel.structuredContent.refusal.reason, "not_found");
    await other.close();
    // A wait past the maximum is refused, naming it.
    const long = await client.callTool({ name: "wait_job", arguments: { job: h.job, timeout_secs: 111 } });
    assert.equal(long.structuredContent.refusal.reason, "limit");
    assert.match(long.structuredContent.refusal.message, /110/);
    const { last, stdout, steps } = await waitToEnd(client, h.job);
    assert.equal(last.state, "succeeded", JSON.stringify(last));
    assert.equal(last.exit_code, 0);
    assert.ok(steps >= 2, `one wait covered 90 s? (${steps})`);
    assert.ok(stdout.includes("(100%)") && stdout.endsWith("OK.\n"));
    assert.equal(last.progress, 100);
    await client.close();
  });

  test("cancel_job kills the job's whole process group", async () => {
    const client = await connect(server.url, TOKEN_A, "cancel");
    const r = await client.callTool({
      name: "execute_command",
      arguments: { command: "flash-cancel", args: ["wl", "0"], background: true },
    });
    const job = r.structuredContent.job;
    const pidFile = join(server.dir, "grandchild.pid");
    for (let i = 0; i < 100 && !existsSync(pidFile); i++) await new Promise((ok) => setTimeout(ok, 50));
    const grandchild = Number(readFileSync(pidFile, "utf8").trim());
    assert.ok(alive(grandchild));
    const c = await client.callTool({ name: "cancel_job", arguments: { job } });
    assert.equal(c.structuredContent.state, "cancelled", JSON.stringify(c.structuredContent));
    assert.equal(c.structuredContent.ended_by, "vm-a");
    // It ignores SIGTERM, and so does its grandchild: only the group's SIGKILL stops them.
    for (let i = 0; i < 40 && alive(grandchild); i++) await new Promise((ok) => setTimeout(ok, 50));
    assert.ok(!alive(grandchild), "the grandchild outlived cancel_job");
    const w = await client.callTool({ name: "wait_job", arguments: { job, timeout_secs: 0 } });
    assert.equal(w.structuredContent.state, "cancelled");
    await client.close();
  });
});
