#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test gatecmd.
# Idempotent: installs only missing packages. Needs a Rust toolchain (rustup) already.
set -euo pipefail

packages=(pkg-config libudev-dev libusb-1.0-0-dev umockdev libumockdev-dev usbutils rkdeveloptool)
if [ "${1:-}" = "--test" ]; then
  # python3-venv: tests/python's .venv; npm: installs Node 22 and the conformance suites
  # project-locally (scripts/conformance.sh), which Debian 12's npm 9 / Node 18 can do.
  packages+=(python3-venv nodejs npm systemd)
  # prometheus: its promtool checks the /metrics scrape in tests/metrics.rs.
  packages+=(prometheus)
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

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found. Install Rust (1.88 or newer) with rustup, then run this again." >&2
  exit 1
fi
