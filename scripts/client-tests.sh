#!/usr/bin/env bash
# The client suites of `make test`: the official MCP Python SDK (scripts/pytest.sh) in two
# lanes and the official TypeScript SDK (scripts/ts-tests.sh), all three side by side; the
# conformance suites (scripts/conformance.sh) follow the second lane, in its job, since the
# first (the guests) is the longest. pytest's lanes: the files that boot a QEMU guest (those importing
# tests/python/vbench.py or demo_run.py), one after another, and every other file, one
# after another. One guest at a time: two guests at once on two cores lost a guest's
# gatecmd stream mid-test (docs/PERFORMANCE.md, "CI time"). Each lane is a plain pytest
# run of whole files, so a module's guest is booted once and its tests run in file order.
# The TypeScript jobs cases spend 90 s waiting on a fake flash (they prove a write outlives
# the SDK's 60 s give-up) and use almost no CPU meanwhile. Each suite's output is printed
# whole after all three end, so they do not interleave. Binaries are built once, here.
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
guests=()
others=()
for f in tests/python/test_*.py; do
  if grep -qE '^(import|from) (vbench|demo_run)\b' "$f"; then
    guests+=("$(basename "$f")")
  else
    others+=("$(basename "$f")")
  fi
done
logs=()
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "${logs[@]}"' EXIT
names=("pytest, the files that boot a guest" "pytest, the other files; then the conformance suites" "TypeScript SDK tests (scripts/ts-tests.sh)")
for n in 0 1 2; do
  log=$(mktemp "${TMPDIR:-/tmp}/gatecmd-client-tests.XXXXXX")
  logs+=("$log")
  case $n in
    # (an empty list would make pytest.sh run every file)
    0) if [ ${#guests[@]} -gt 0 ]; then ./scripts/pytest.sh "${guests[@]}"; fi >"$log" 2>&1 & ;;
    # (conformance runs even when pytest failed; either failing fails this job)
    1) (
      py=0
      if [ ${#others[@]} -gt 0 ]; then ./scripts/pytest.sh "${others[@]}" || py=$?; fi
      ./scripts/conformance.sh || exit $?
      exit "$py"
    ) >"$log" 2>&1 & ;;
    2) ./scripts/ts-tests.sh >"$log" 2>&1 & ;;
  esac
  pids+=($!)
done
rcs=()
for pid in "${pids[@]}"; do
  set +e
  wait "$pid"
  rcs+=($?)
  set -e
done
failed=0
for n in 0 1 2; do
  echo "--- ${names[$n]} (exit ${rcs[$n]}) ---"
  cat "${logs[$n]}"
  if [ "${rcs[$n]}" != 0 ]; then failed=1; fi
done
if [ "$failed" != 0 ]; then
  echo "client-tests: exits ${rcs[*]} (pytest guests, pytest others, TypeScript)" >&2
  exit 1
fi
