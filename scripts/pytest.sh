#!/usr/bin/env bash
# End-to-end tests with the official MCP Python SDK (tests/python) against the real gatecmd.
# Uses .venv (scripts/venv.sh). GATECMD_BIN=path uses that binary; otherwise the one
# `cargo test` builds (so `make test` builds nothing twice); GATECMD_VBOARD_BIN likewise for
# gatecmd-vboard. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv="$root/.venv"
./scripts/venv.sh

if [ -z "${GATECMD_BIN:-}" ]; then
  cargo test --locked --workspace --exclude gatecmd-vboard --no-run --quiet
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  GATECMD_BIN="$target_dir/debug/gatecmd"
fi
export GATECMD_BIN
# The virtual board (vboard/, docs/VBOARD.md) for tests/python/test_vboard_usbvm.py.
if [ -z "${GATECMD_VBOARD_BIN:-}" ] && [ -f vboard/Cargo.toml ]; then
  cargo build --locked --quiet -p gatecmd-vboard
  target_dir=${target_dir:-$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')}
  GATECMD_VBOARD_BIN="$target_dir/debug/gatecmd-vboard"
fi
export GATECMD_VBOARD_BIN="${GATECMD_VBOARD_BIN:-}"

cd tests/python
set +e
# A kill-switch, not a budget: the VM files (vboard, families, shell) take 5 to 8 minutes
# together on a loaded two-core machine.
timeout 1500 "$venv/bin/python" -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest: no tests were collected in tests/python (exit 5): that is a failure here" >&2
  exit 1
fi
exit "$rc"
