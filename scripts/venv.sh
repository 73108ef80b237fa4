#!/usr/bin/env bash
# The Python venv (.venv) with tests/python/requirements.txt (the official MCP Python SDK),
# created the first time or when that file changes. Used by scripts/pytest.sh and `make bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/.venv"
req="$PWD/tests/python/requirements.txt"

if ! [ -x "$venv/bin/python" ]; then
  echo "venv: creating .venv"
  python3 -m venv "$venv"
fi
if ! cmp -s "$req" "$venv/.requirements.installed" 2>/dev/null; then
  echo "venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into .venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.requirements.installed"
fi
