#!/usr/bin/env bash
# End-to-end tests with the official MCP Python SDK (tests/python) against the real gatecmd.
# Creates .venv (python3 -m venv) with tests/python/requirements.txt the first time, or when
# that file changes. GATECMD_BIN=path uses that binary; otherwise the one `cargo test` builds
# (so `make test` builds nothing twice). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv="$root/.venv"
req="$root/tests/python/requirements.txt"

if ! [ -x "$venv/bin/python" ]; then
  echo "pytest: creating .venv"
  python3 -m venv "$venv"
fi
if ! cmp -s "$req" "$venv/.requirements.installed" 2>/dev/null; then
  echo "pytest: installing $(grep -v '^#' "$req" | tr '\n' ' ')into .venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.requirements.installed"
fi

if [ -z "${GATECMD_BIN:-}" ]; then
  cargo test --locked --no-run --quiet
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  GATECMD_BIN="$target_dir/debug/gatecmd"
fi
export GATECMD_BIN

cd tests/python
set +e
timeout 600 "$venv/bin/python" -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest: no tests were collected in tests/python (exit 5): that is a failure here" >&2
  exit 1
fi
exit "$rc"
