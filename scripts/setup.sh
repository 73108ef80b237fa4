#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test gatecmd.
# Idempotent: installs only missing packages. Needs a Rust toolchain (rustup) already.
#   scripts/setup.sh          build and run
#   scripts/setup.sh --deb    also what `make deb` needs (dpkg-dev, cargo-deb)
#   scripts/setup.sh --test   everything `make test` needs (the --deb part included:
#                             tests/server/deb_package.rs builds and installs the package)
#   scripts/setup.sh --demo   also what `make demo` needs to run its boards in the
#                             project's VM (scripts/demo.sh runs it; no cargo check: the
#                             demo may use prebuilt binaries, and checks cargo itself)
set -euo pipefail

packages=(pkg-config libudev-dev libusb-1.0-0-dev umockdev libumockdev-dev usbutils rkdeveloptool)
deb=false
case "${1:-}" in --deb | --test) deb=true ;; esac
# dpkg-shlibdeps (dpkg-dev): how cargo-deb finds the package's library dependencies.
if $deb; then packages+=(dpkg-dev); fi
if [ "${1:-}" = "--demo" ]; then
  # The demo VM (scripts/demo_vm.py on tests/vm): QEMU and what the harness packs into the
  # guest; Debian's real rkdeveloptool and lsusb run inside it.
  packages+=(python3 qemu-system-x86 busybox-static kmod xz-utils zstd cpio binutils)
fi
if [ "${1:-}" = "--test" ]; then
  # python3-venv: tests/python's .venv; npm: installs Node 22 and the conformance suites
  # project-locally (scripts/conformance.sh), which Debian 12's npm 9 / Node 18 can do.
  packages+=(python3-venv nodejs npm systemd)
  # The real-kernel tests (tests/hardware/console_usbvm.rs, the usbvm tests of every crate, the
  # Python benches) boot a QEMU VM with the repository's own harness, tests/vm
  # (GATECMD_VM_DIR overrides it); install what it needs here (as root, through sudo) and
  # let its prepare.sh cache Debian's kernel below.
  root=$(cd "$(dirname "$0")/.." && pwd)
  usbvm=$(cd "${GATECMD_VM_DIR:-$root/tests/vm}" && pwd)
  packages+=(qemu-system-x86 busybox-static kmod xz-utils zstd cpio binutils)
  # The service lane (tests/python/test_service_lane.py): a Debian 12 guest with systemd,
  # its root file system built by mmdebstrap (tests/vm/debian.py) into an ext4 image.
  packages+=(mmdebstrap e2fsprogs)
  # The bench page's browser test (tests/python/test_page.py): Debian's Chromium, driven by
  # Playwright from PyPI (its own browser downloads are never used); DejaVu for a readable
  # screenshot.
  packages+=(chromium fonts-dejavu-core)
  # prometheus: its promtool checks the /metrics scrape in tests/server/metrics.rs.
  packages+=(prometheus)
  # microcom: what `labgrid-client console` runs (tests/python/test_labgrid.py).
  packages+=(microcom)
  # The other families' real tools: fastboot and dfu-util run against gatecmd-vboard's
  # fastboot and DFU boards in the usbvm guest (vboard/tests/usbvm_families.rs); every
  # bundled recipe's binary is checked by `gatecmd check` (tests/server/recipes.rs).
  packages+=(fastboot dfu-util uuu sunxi-tools)
  # gcc: tests/server/exec.rs builds a C program that prints progress the way rkdeveloptool does.
  packages+=(gcc)
  # The pdudaemon power backend against Debian's real daemon and its client, pduclient
  # (tests/hardware/power_pdudaemon.rs).
  packages+=(pdudaemon pdudaemon-client)
  # flash_board's VM test makes its images with the real tools (tests/python/
  # test_flash_board_usbvm.py): bmaptool create, img2simg, zstd.
  packages+=(bmap-tools android-sdk-libsparse-utils zstd)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Tools that may come from elsewhere than Debian on this machine (pyenv Python, nvm Node).
if [ "${1:-}" = "--test" ]; then
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in
      python3-venv) python3 -c 'import venv, ensurepip' 2>/dev/null || filtered+=("$p") ;;
      nodejs|npm) command -v node >/dev/null && command -v npm >/dev/null || filtered+=("$p") ;;
      systemd) command -v systemd-analyze >/dev/null || filtered+=("$p") ;;
      prometheus) command -v promtool >/dev/null || filtered+=("$p") ;;
      *) filtered+=("$p") ;;
    esac
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${1:-}" != "--demo" ] && ! command -v cargo >/dev/null; then
  echo "setup: cargo not found. Install Rust (1.89 or newer) with rustup, then run this again." >&2
  exit 1
fi

# cargo-deb builds the Debian package (scripts/deb.sh). From crates.io, because Debian 12
# does not package it (its dh-cargo and debcargo package crates for Debian's own archive,
# not a workspace's binary with its unit and maintainer scripts). Pinned, with --locked,
# so that every machine builds the same tool; about 70 s here, once per machine.
cargo_deb_version=3.8.0
if $deb && [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $cargo_deb_version" ]; then
  echo "setup: installing cargo-deb $cargo_deb_version (cargo install, about a minute)"
  cargo install cargo-deb --version "$cargo_deb_version" --locked --quiet
fi

if [ "${1:-}" = "--test" ]; then
  # Idempotent: under a second once the kernel is cached in
  # ${GATECMD_VM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/gatecmd-vm}; the first time it
  # downloads Debian's kernel and udev .debs (about 110 MB, 20 s here). As this user, so
  # the cache is writable by the tests. A failure does not stop the other tests: the VM
  # tests fail under CI=true and skip elsewhere, saying why.
  echo "setup: preparing the test VM harness in $usbvm"
  "$usbvm/prepare.sh" || echo "setup: $usbvm/prepare.sh failed; the VM tests cannot boot their VM" >&2
  # The Debian guest's root file system: about a minute once (mmdebstrap from Debian's
  # packages), cached beside the kernel; nothing after that.
  python3 "$usbvm/debian.py" build >/dev/null ||
    echo "setup: $usbvm/debian.py build failed; the service lane cannot boot its guest" >&2
fi
