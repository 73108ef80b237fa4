#!/usr/bin/env bash
# The client suites of `make test`: the official MCP Python SDK (scripts/pytest.sh) and the
# official TypeScript SDK (scripts/ts-tests.sh) side by side, then the conformance suites.
# Side by side because the TypeScript jobs cases spend 90 s waiting on a fake flash (they
# prove a write outlives the SDK's 60 s give-up) and use almost no CPU meanwhile: run
# alone they would add a minute and a half to CI. The TypeScript output is printed after
# pytest's, whole, so the two do not interleave. Binaries are built once, here.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${GATECMD_BIN:-}" ]; then
  cargo test --locked --workspace --exclude gatecmd-vboard --no-run --quiet
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  export GATECMD_BIN="$target_dir/debug/gatecmd"
  if [ -z "${GATECMD_VBOARD_BIN:-}" ] && [ -f vboard/Cargo.toml ]; then
    cargo build --locked --quiet -p gatecmd-vboard
    export GATECMD_VBOARD_BIN="$target_dir/debug/gatecmd-vboard"
  fi
fi
# The Python venv first, so the two do not race on setup output.
./scripts/venv.sh
ts_log=$(mktemp "${TMPDIR:-/tmp}/gatecmd-ts-tests.XXXXXX")
./scripts/ts-tests.sh >"$ts_log" 2>&1 &
ts=$!
trap 'kill "$ts" 2>/dev/null || true; rm -f "$ts_log"' EXIT
set +e
# One test at a time. Two workers (pytest-xdist, `-n 2 --dist loadfile`) took pytest from
# 724 s to about 450 s, but with two VM guests at once on two cores, VM tests failed
# (a guest's gatecmd stream lost mid-test): docs/PERFORMANCE.md, "CI time".
./scripts/pytest.sh
py_rc=$?
wait "$ts"
ts_rc=$?
set -e
echo "--- TypeScript SDK tests (scripts/ts-tests.sh, run beside pytest) ---"
cat "$ts_log"
if [ "$py_rc" != 0 ] || [ "$ts_rc" != 0 ]; then
  echo "client-tests: pytest exit $py_rc, TypeScript tests exit $ts_rc" >&2
  exit 1
fi
./scripts/conformance.sh
