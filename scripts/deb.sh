#!/usr/bin/env bash
# Builds the Debian package of gatecmd with cargo-deb ([package.metadata.deb] in Cargo.toml,
# maintainer scripts in packaging/deb/) and prints the .deb's path on its last line.
#
#   scripts/deb.sh [--binary PATH] [--output DIR] [--fast] [--gzip] [--revision N]
#
#   (no --binary)  `make deb`: cargo-deb builds the release binary (LTO: minutes) and
#                  packages it.
#   --binary PATH  package this already-built gatecmd instead, building nothing (the test
#                  in tests/server/deb_package.rs packages the debug binary it was built with: a
#                  release build would cost CI minutes). It is staged as the release
#                  product of a private target directory, which is all cargo-deb reads.
#   --output DIR   where the .deb goes (default: $CARGO_TARGET_DIR/debian, or target/debian).
#   --fast         lighter xz compression (a larger file, built sooner).
#   --gzip         gzip instead of xz (a larger file, unpacked in half the time: the
#                  service lane's guest under QEMU TCG unpacks it twice).
#   --revision N   the Debian revision (default 1): the service lane builds the same tree
#                  again as revision 2 to install it as an upgrade.
#
# The unit in packaging/ names /usr/local paths (scripts/install.sh's default prefix, which
# rewrites them for its own); the package installs the binary as /usr/bin/gatecmd and the
# docs under /usr/share/doc/gatecmd, so the unit is rewritten here the same way, into the
# target directory, where the asset `target/release/deb/gatecmd.service` finds it.
# Plain `cargo deb` without this script therefore stops at that missing asset.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
binary=""
output=""
fast=()
revision=()
compress=()

die() { echo "deb: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary="$2"; shift 2 ;;
    --binary=*) binary="${1#--binary=}"; shift ;;
    --output) [ $# -ge 2 ] || die "--output needs a directory"; output="$2"; shift 2 ;;
    --output=*) output="${1#--output=}"; shift ;;
    --fast) fast=(--fast); shift ;;
    --gzip) compress=(--compress-type gz --compress-system); shift ;;
    --revision) [ $# -ge 2 ] || die "--revision needs a number"; revision=(--deb-revision "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

command -v cargo-deb >/dev/null ||
  die "cargo-deb is not installed: run \`scripts/setup.sh --deb\` (cargo install cargo-deb from crates.io)"

target="${CARGO_TARGET_DIR:-$repo/target}"
[ -n "$output" ] || output="$target/debian"
mkdir -p "$output"
output="$(cd "$output" && pwd)"

stage=""
trap '[ -z "$stage" ] || rm -rf "$stage"' EXIT
args=(-p gatecmd --locked --output "$output")
if [ -n "$binary" ]; then
  [ -x "$binary" ] || die "no executable at $binary"
  stage="$(mktemp -d "${TMPDIR:-/tmp}/gatecmd-deb.XXXXXX")"
  mkdir -p "$stage/release"
  # A hard link where the file system allows it (a debug binary is a few hundred MB).
  ln "$binary" "$stage/release/gatecmd" 2>/dev/null || cp "$binary" "$stage/release/gatecmd"
  target="$stage"
  # --strip: cargo-deb takes the staged binary for a release build, whose profile already
  # left out debug info (`strip = "debuginfo"`); a debug binary has it.
  args+=(--no-build --strip)
else
  # The release binary as `make build` builds it, then packaged without a build: cargo-deb's
  # own build changes the workspace crates' symbol hashes, so link/hot-code.order would not
  # match and the package's idle RSS would be 6.2 MiB instead of 3.5 (docs/PERFORMANCE.md,
  # "Idle RSS beside the peer").
  CARGO_TARGET_DIR="$target" cargo build --release --locked -p gatecmd --bin gatecmd
  args+=(--no-build --strip)
fi

mkdir -p "$target/release/deb"
sed -e "s#/usr/local/bin/gatecmd#/usr/bin/gatecmd#g" \
    -e "s#/usr/local/share/doc/gatecmd#/usr/share/doc/gatecmd#g" \
    -e "s#Installed by scripts/install.sh (\`make install\`)#Installed by the Debian package gatecmd (scripts/deb.sh)#" \
    packaging/gatecmd.service >"$target/release/deb/gatecmd.service"
grep -q '^ExecStart=/usr/bin/gatecmd serve --config /etc/gatecmd/allowed_commands.yaml$' \
  "$target/release/deb/gatecmd.service" ||
  die "packaging/gatecmd.service's ExecStart= no longer has the form this script rewrites"

CARGO_TARGET_DIR="$target" cargo deb "${args[@]}" "${fast[@]+"${fast[@]}"}" "${revision[@]+"${revision[@]}"}" \
  "${compress[@]+"${compress[@]}"}"
