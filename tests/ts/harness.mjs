// Starts the real gatecmd binary (GATECMD_BIN, set by scripts/ts-tests.sh) on an ephemeral
// loopback port and connects the official TypeScript SDK to it with its default options,
// as an agent host built on the SDK would.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export const TOKEN_A = "ts-token-for-vm-a-0123456789";
export const TOKEN_B = "ts-token-for-vm-b-9876543210";

export const BASE_CONFIG = `
clients:
  - name: vm-a
    token: ${TOKEN_A}
  - name: vm-b
    token: ${TOKEN_B}
commands:
  - name: echo
    binary: /usr/bin/echo
    description: Print two words.
    read_only: true
    params: {a: "[a-z]+", b: "[a-z]+"}
    allowed_args:
      - pattern: "{a} {b}"
`;

/** A running `gatecmd serve`; `url` is its /mcp endpoint, `log` its stderr lines. */
export async function startServer(config = BASE_CONFIG, env = {}) {
  const bin = process.env.GATECMD_BIN;
  if (!bin) throw new Error("GATECMD_BIN must name the cargo-built gatecmd binary (scripts/ts-tests.sh sets it)");
  const dir = mkdtempSync(join(tmpdir(), "gatecmd-ts-"));
  const cfg = join(dir, "config.yaml");
  writeFileSync(cfg, config.replaceAll("$DIR", dir));
  chmodSync(cfg, 0o600); // it holds tokens: owner-only, or gatecmd refuses
  const proc = spawn(bin, ["serve", "--config", cfg, "--bind", "127.0.0.1:0"], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, GATECMD_LOG: "info", STATE_DIRECTORY: join(dir, "state"), ...env },
  });
  const log = [];
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("gatecmd did not start:\n" + log.join("\n"))), 20000);
    let buf = "";
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (chunk) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        log.push(line);
        if (line.startsWith("gatecmd: listening on ")) {
          clearTimeout(timer);
          resolve(line.slice("gatecmd: listening on ".length));
        }
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`gatecmd exited (${code}) before listening:\n` + log.join("\n")));
    });
  });
  return {
    dir,
    url,
    log,
    async stop() {
      if (proc.exitCode !== null) return;
      const done = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await done;
    },
  };
}

/** An SDK client with default options (no custom timeouts) and a bearer token. */
export async function connect(url, token = TOKEN_A, name = "ts-test") {
  const client = new Client({ name, version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}
