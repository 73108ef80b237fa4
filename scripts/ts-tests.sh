#!/usr/bin/env bash
# Tests with the official MCP TypeScript SDK (tests/ts, pinned in its package-lock.json)
# against the real binary. GATECMD_BIN=path uses that binary; otherwise the one `cargo test`
# builds. Extra arguments go to `node --test` (e.g. a single test file).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ts-tests: node and npm are needed (scripts/setup.sh --test installs them)" >&2
  exit 1
fi
if [ ! -d tests/ts/node_modules/@modelcontextprotocol/sdk ]; then
  (cd tests/ts && npm ci --no-audit --no-fund --silent)
fi
if [ -z "${GATECMD_BIN:-}" ]; then
  cargo test --locked --workspace --exclude gatecmd-vboard --no-run --quiet
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  GATECMD_BIN="$target_dir/debug/gatecmd"
fi
export GATECMD_BIN
# The virtual board (vboard/, docs/VBOARD.md) for tests/ts/flash_board.test.mjs's VM.
if [ -z "${GATECMD_VBOARD_BIN:-}" ] && [ -f vboard/Cargo.toml ]; then
  cargo build --locked --quiet -p gatecmd-vboard
  target_dir=${target_dir:-$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')}
  GATECMD_VBOARD_BIN="$target_dir/debug/gatecmd-vboard"
fi
export GATECMD_VBOARD_BIN="${GATECMD_VBOARD_BIN:-}"
if [ "$#" -gt 0 ]; then files=("$@"); else files=(tests/ts/*.test.mjs); fi
exec timeout 900 node --test --test-concurrency=3 "${files[@]}"
