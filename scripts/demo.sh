#!/bin/sh
# make demo: two virtual RK3588 boards (gatecmd-vboard: rockusb over FunctionFS, a CDC-ACM
# console, a power switch) on this machine's own USB stack, and gatecmd serving them with
# demo/gatecmd.yaml. Prints the URL, the token file and a first prompt for an agent, then
# runs until Ctrl-C (which removes the boards again).
#
#   scripts/demo.sh           check this host, build, start (needs root; see below)
#   scripts/demo.sh --check   only check this host: exit 0 when it can run the demo,
#                             otherwise one line saying why, exit 1
#
# Needs: Linux, root, and a kernel with dummy_hcd, libcomposite, FunctionFS (usb_f_fs),
# usb_f_acm and cdc_acm (Debian's stock kernels have them all as modules), or those UDCs
# already there. A container cannot load them into the host's kernel: it is refused.
# Environment: GATECMD_DEMO_BIN_DIR (prebuilt gatecmd and gatecmd-vboard: no cargo build),
# GATECMD_DEMO_DIR (default /var/lib/gatecmd-demo), GATECMD_DEMO_BIND (127.0.0.1:9222).
# POSIX sh on purpose: it also runs under busybox.
set -eu

BOARDS=2
UDCS_NEEDED=$((2 * BOARDS))
DEMO_DIR=${GATECMD_DEMO_DIR:-/var/lib/gatecmd-demo}
BIND=${GATECMD_DEMO_BIND:-127.0.0.1:9222}
HERE=$(cd "$(dirname "$0")/.." && pwd)

refuse() {
  echo "make demo: cannot run here: $*" >&2
  exit 1
}

free_udcs() {
  n=0
  [ -d /sys/class/udc ] || { echo 0; return; }
  for u in /sys/class/udc/*; do
    [ -e "$u" ] || continue
    name=${u##*/}
    # A UDC named in any gadget's UDC file is taken.
    if ! cat /sys/kernel/config/usb_gadget/*/UDC 2>/dev/null | grep -qx "$name"; then
      n=$((n + 1))
    fi
  done
  echo "$n"
}

in_container() {
  if [ -f /.dockerenv ]; then echo docker; return 0; fi
  if [ -f /run/.containerenv ]; then echo podman; return 0; fi
  if command -v systemd-detect-virt >/dev/null 2>&1; then
    v=$(systemd-detect-virt --container 2>/dev/null || true)
    if [ -n "$v" ] && [ "$v" != none ]; then echo "$v"; return 0; fi
  fi
  if grep -qaE '(docker|lxc|kubepods|containerd)' /proc/1/cgroup 2>/dev/null; then echo container; return 0; fi
  return 1
}

has_module() {
  # Loaded, built in, or loadable.
  [ -d "/sys/module/$1" ] && return 0
  grep -q "/$1.ko" "/lib/modules/$(uname -r)/modules.builtin" 2>/dev/null && return 0
  modprobe -n "$1" >/dev/null 2>&1
}

# The checks, in the order a person fixes them; the first that fails is the one line.
preflight() {
  os=$(uname -s)
  [ "$os" = Linux ] || refuse "USB gadgets need Linux (configfs and dummy_hcd); this is $os"
  # UDCs already there (dummy_hcd loaded by the operator, or a real device controller) and
  # configfs mounted: nothing to load, so even a privileged container may go on.
  if [ "$(free_udcs)" -ge "$UDCS_NEEDED" ] && [ -d /sys/kernel/config/usb_gadget ]; then
    [ "$(id -u)" = 0 ] || refuse "creating USB gadgets in configfs needs root: run sudo make demo (build first as yourself with make build)"
    return 0
  fi
  if c=$(in_container); then
    refuse "this is a container ($c): it cannot load dummy_hcd into the host kernel or create USB gadgets there (no $UDCS_NEEDED free UDCs in /sys/class/udc); run make demo on a Linux host or VM as root, or see the same boards in QEMU with make test (tests/python/test_vboard_usbvm.py)"
  fi
  [ "$(id -u)" = 0 ] || refuse "loading dummy_hcd and creating USB gadgets needs root: run sudo make demo (build first as yourself with make build)"
  for m in dummy_hcd libcomposite usb_f_fs usb_f_acm cdc_acm; do
    has_module "$m" || refuse "kernel $(uname -r) has no $m module (Debian's stock linux-image-amd64 has it: CONFIG_USB_DUMMY_HCD, CONFIG_USB_CONFIGFS_F_FS, CONFIG_USB_CONFIGFS_ACM, CONFIG_USB_ACM); boot such a kernel"
  done
  if [ -d /sys/module/dummy_hcd ] && [ "$(free_udcs)" -lt "$UDCS_NEEDED" ]; then
    refuse "dummy_hcd is loaded with fewer than $UDCS_NEEDED free UDCs ($(free_udcs)); reload it: modprobe -r dummy_hcd && modprobe dummy_hcd num=$UDCS_NEEDED"
  fi
  grep -qw configfs /proc/filesystems || [ -d /sys/kernel/config ] || modprobe -n configfs >/dev/null 2>&1 \
    || refuse "kernel $(uname -r) has no configfs (CONFIG_CONFIGFS_FS)"
}

preflight
if [ "${1:-}" = --check ]; then
  echo "make demo: this host can run the demo ($BOARDS virtual boards on $UDCS_NEEDED UDCs)"
  exit 0
fi

# ---- load what is missing ---------------------------------------------------------------
[ -d /sys/module/dummy_hcd ] || modprobe dummy_hcd num=$UDCS_NEEDED
for m in libcomposite usb_f_fs usb_f_acm cdc_acm; do [ -d "/sys/module/$m" ] || modprobe "$m"; done
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs none /sys/kernel/config

# ---- binaries ---------------------------------------------------------------------------
if [ -n "${GATECMD_DEMO_BIN_DIR:-}" ]; then
  bin=$GATECMD_DEMO_BIN_DIR
else
  command -v cargo >/dev/null 2>&1 \
    || refuse "cargo is not on root's PATH: build first as yourself (make build), then run sudo GATECMD_DEMO_BIN_DIR=$HERE/target/release make demo"
  (cd "$HERE" && cargo build --release --locked --bin gatecmd && cargo build --release --locked -p gatecmd-vboard)
  bin=$HERE/target/release
fi
for b in gatecmd gatecmd-vboard; do
  [ -x "$bin/$b" ] || refuse "$bin/$b is missing: build it (make build) or set GATECMD_DEMO_BIN_DIR"
done

# The demo's own directory, root's only: the binaries the config names by absolute path,
# the file root with a loader and an image to flash, gatecmd's state (token, audit log).
mkdir -p "$DEMO_DIR/bin" "$DEMO_DIR/images" "$DEMO_DIR/state" "$DEMO_DIR/vboard"
chmod 0700 "$DEMO_DIR"
cp "$bin/gatecmd" "$bin/gatecmd-vboard" "$DEMO_DIR/bin/"
VBOARD=$DEMO_DIR/bin/gatecmd-vboard
"$VBOARD" make-loader --out "$DEMO_DIR/images/loader.bin" >/dev/null
# A bootable 1 MiB image: the idbloader magic RKNS first (written at LBA 0x40, what the
# virtual board boots), then random bytes.
{ printf RKNS; head -c 1048572 /dev/urandom; } > "$DEMO_DIR/images/demo.img"

pids=""
cleanup() {
  trap - EXIT INT TERM
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the boards -------------------------------------------------------------------------
ready=$DEMO_DIR/vboard/ready
: > "$ready"
"$VBOARD" serve --boards $BOARDS --flash-size 1G --state-dir "$DEMO_DIR/vboard" > "$ready" 2> "$DEMO_DIR/vboard/log" &
pids="$!"
i=0
until grep -q '^gatecmd-vboard ready' "$ready"; do
  if ! kill -0 "$pids" 2>/dev/null; then
    refuse "gatecmd-vboard did not start: $(tail -n 1 "$DEMO_DIR/vboard/log")"
  fi
  i=$((i + 1))
  [ $i -le 300 ] || refuse "gatecmd-vboard was not ready after 30 s (log: $DEMO_DIR/vboard/log)"
  sleep 0.1
done
# `board vbK rockusb=UDC port=PORT console=UDC port=PORT …`: the host-side ports, which
# depend on how many USB buses this machine has.
port_of() { # board, 1 = rockusb, 2 = console
  awk -v b="$1" -v n="$2" '$1 == "board" && $2 == b { c = 0; for (i = 3; i <= NF; i++) if ($i ~ /^port=/) { c++; if (c == n) { sub(/^port=/, "", $i); print $i } } }' "$ready"
}
config=$DEMO_DIR/gatecmd.yaml
sed -e "s|@DEMO_DIR@|$DEMO_DIR|g" \
    -e "s|@VB1_USB@|$(port_of vb1 1)|g" -e "s|@VB1_CONSOLE@|$(port_of vb1 2)|g" \
    -e "s|@VB2_USB@|$(port_of vb2 1)|g" -e "s|@VB2_CONSOLE@|$(port_of vb2 2)|g" \
    "$HERE/demo/gatecmd.yaml" > "$config"
chmod 0600 "$config"
token=$DEMO_DIR/state/token
if [ ! -s "$token" ]; then
  (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$token")
fi

# ---- gatecmd ----------------------------------------------------------------------------
STATE_DIRECTORY=$DEMO_DIR/state "$DEMO_DIR/bin/gatecmd" serve --config "$config" --bind "$BIND" \
  2> "$DEMO_DIR/gatecmd.log" &
pids="$pids $!"
i=0
until grep -q '^gatecmd: listening on ' "$DEMO_DIR/gatecmd.log"; do
  i=$((i + 1))
  [ $i -le 300 ] || refuse "gatecmd did not start (log: $DEMO_DIR/gatecmd.log): $(tail -n 1 "$DEMO_DIR/gatecmd.log")"
  sleep 0.1
done
url=$(sed -n 's/^gatecmd: listening on //p' "$DEMO_DIR/gatecmd.log" | head -n 1)
cat <<EOF

gatecmd demo: 2 virtual RK3588 boards (vb1, vb2), flash 1 GiB each, consoles and power switches.
  MCP endpoint   $url
  bench page     ${url%/mcp}/
  token file     $DEMO_DIR/state/token   (Authorization: Bearer <its content>; the page's sign-in)
  files          $DEMO_DIR/images (loader.bin, demo.img)
  logs           $DEMO_DIR/gatecmd.log, $DEMO_DIR/vboard/log

A first prompt for an agent connected to it:

  Take a free RK3588 board with lock_board {match: {soc: rk3588}}, power it on with
  power_board, run rkdeveloptool ld (isolated: pass board), download loader.bin with db,
  wait_for_device until it is in Loader mode, write demo.img at LBA 0x40 with wl, reset it
  with rd, and read its console with console_read until "login:". Tell me the SHA-256 the
  boot log prints for the region you wrote, then unlock_device.

Ctrl-C stops gatecmd and removes the boards.
EOF
wait
