#!/usr/bin/env bash
# The server's `cargo test` for `make test`: every crate of the server built once, then the
# test binaries in two lanes side by side. Most of them wait (on a child process, a server,
# a VM's boot, a umockdev replay) far more than they compute, so two at a time on two cores
# take about half as long as cargo's one at a time. Each lane's output is printed whole
# after both end, so the two do not interleave. The root crate's integration tests are two
# binaries, one per lane (tests/server/main.rs and tests/hardware/main.rs, a module per
# topic: each links the whole server, so two links instead of one per file); a new topic
# is a file in one of those folders. A new crate under crates/ is in the workspace's unit
# tests by itself, and its tests/*.rs join a lane by themselves.
# (gatecmd-vboard's tests run on their own in `make test`: they boot VMs.)
set -euo pipefail
cd "$(dirname "$0")/.."
server=(--workspace --exclude gatecmd-vboard)
cargo test --locked "${server[@]}" --no-run --quiet
# The flashing engine's VM test (lane 1) runs the virtual board's binary, which `cargo test`
# of the other crates does not build: built here, same profile.
cargo build --locked -p gatecmd-vboard --bin gatecmd-vboard --quiet
# Every lane runs with the same package selection as the build above, so that cargo
# resolves the same features and builds nothing again (a lane of `-p gatecmd` alone would
# rebuild the crates below it without the dev-dependencies' features: minutes on a clean
# machine). Lane 1: every crate's unit tests, then the server's wire tests (tests/server);
# lane 2: the flashing engine's VM test (the longest), then the tests that need a device
# (tests/hardware). Which topic is in which binary keeps the two lanes about even
# (docs/PERFORMANCE.md, "CI time"). The other crates' tests/*.rs are dealt out in turn, and
# so would be a tests/*.rs of the root crate (its own binary: tests/server/test_binaries.rs
# asks for it to become a topic of a lane's binary).
lanes=("--lib --bins --test server" "--test usbvm --test hardware")
i=0
shopt -s nullglob
for f in tests/*.rs crates/*/tests/*.rs; do
  t=$(basename "$f" .rs)
  [ "$t" = usbvm ] && continue
  lanes[$((i % 2))]+=" --test $t"
  i=$((i + 1))
done
logs=()
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "${logs[@]}"' EXIT
for n in 0 1; do
  log=$(mktemp "${TMPDIR:-/tmp}/gatecmd-cargo-tests.XXXXXX")
  logs+=("$log")
  (
    # shellcheck disable=SC2086 # the lane is a list of cargo arguments
    cargo test --locked --no-fail-fast "${server[@]}" ${lanes[$n]}
  ) >"$log" 2>&1 &
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
for n in 0 1; do
  echo "--- cargo test, lane $((n + 1)) of 2 ---"
  cat "${logs[$n]}"
  if [ "${rcs[$n]}" != 0 ]; then failed=1; fi
done
# Doc tests cannot share a cargo invocation with other target selections.
cargo test --locked "${server[@]}" --doc --quiet
if [ "$failed" != 0 ]; then
  echo "cargo-tests: lane exits ${rcs[*]} (a failing test's name is in its lane's output above)" >&2
  exit 1
fi
