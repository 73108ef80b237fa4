#!/bin/sh
# make demo: two virtual RK3588 boards (gatecmd-vboard: rockusb over FunctionFS, a CDC-ACM
# console, a power switch) and gatecmd serving them with demo/gatecmd.yaml. Prints the URL,
# the token file and a first prompt for an agent (demo/banner.txt), then runs until Ctrl-C,
# which stops gatecmd and removes the boards.
#
# Where the boards run:
#   - on this machine's own USB stack when it can hold USB gadgets: Linux, root, a kernel
#     with dummy_hcd, libcomposite, FunctionFS (usb_f_fs), usb_f_acm and cdc_acm (Debian's
#     stock kernels have them all as modules) or those UDCs already there, not a container;
#   - otherwise in the project's own QEMU VM (tests/vm: Debian's kernel with dummy_hcd under
#     TCG, no KVM, no root), with this same script running the boards and gatecmd inside it
#     and gatecmd's port forwarded to this host (scripts/demo_vm.py). What the VM needs and
#     is missing is installed first (scripts/setup.sh --demo; apt-get, through sudo when not
#     root, saying so).
#
#   scripts/demo.sh           check, build, start
#   scripts/demo.sh --check   only check: exit 0 saying where the demo would run, otherwise
#                             one line saying why it cannot, exit 1
#
# Environment: GATECMD_DEMO_BIN_DIR (prebuilt gatecmd and gatecmd-vboard: no cargo build),
# GATECMD_DEMO_DIR (default /var/lib/gatecmd-demo as root, else
# ${XDG_STATE_HOME:-~/.local/state}/gatecmd-demo), GATECMD_DEMO_BIND (127.0.0.1:9222),
# GATECMD_DEMO_VM=1 (the VM even where this host could hold the gadgets: nothing loaded
# into its kernel; tests/python/test_demo.py uses it).
# POSIX sh on purpose: it also runs under busybox (inside the demo VM).
set -eu

BOARDS=2
UDCS_NEEDED=$((2 * BOARDS))
if [ -n "${GATECMD_DEMO_DIR:-}" ]; then
  DEMO_DIR=$GATECMD_DEMO_DIR
elif [ "$(id -u)" = 0 ]; then
  DEMO_DIR=/var/lib/gatecmd-demo
else
  DEMO_DIR=${XDG_STATE_HOME:-$HOME/.local/state}/gatecmd-demo
fi
BIND=${GATECMD_DEMO_BIND:-127.0.0.1:9222}
HERE=$(cd "$(dirname "$0")/.." && pwd)
# What the VM path needs on this host: command, Debian package.
VM_NEEDS="python3:python3 qemu-system-x86_64:qemu-system-x86 busybox:busybox-static cpio:cpio
depmod:kmod strip:binutils xz:xz-utils zstd:zstd rkdeveloptool:rkdeveloptool lsusb:usbutils"

refuse() {
  echo "make demo: cannot run here: $*" >&2
  exit 1
}

say() {
  echo "make demo: $*" >&2
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

# Why this host cannot hold the boards on its own USB stack; nothing when it can. The
# checks in the order a person fixes them; the first that fails is the reason.
host_why() {
  os=$(uname -s)
  [ "$os" = Linux ] || { echo "USB gadgets need Linux (configfs and dummy_hcd); this is $os"; return; }
  # UDCs already there (dummy_hcd loaded by the operator, or a real device controller) and
  # configfs mounted: nothing to load, so even a privileged container may go on.
  if [ "$(free_udcs)" -ge "$UDCS_NEEDED" ] && [ -d /sys/kernel/config/usb_gadget ]; then
    [ "$(id -u)" = 0 ] || echo "creating USB gadgets in configfs needs root (sudo make demo, after make build as yourself)"
    return
  fi
  if c=$(in_container); then
    echo "this is a container ($c), which cannot load dummy_hcd into the host kernel, and has no $UDCS_NEEDED free UDCs in /sys/class/udc"
    return
  fi
  [ "$(id -u)" = 0 ] || { echo "loading dummy_hcd and creating USB gadgets needs root (sudo make demo, after make build as yourself)"; return; }
  for m in dummy_hcd libcomposite usb_f_fs usb_f_acm cdc_acm; do
    has_module "$m" || { echo "kernel $(uname -r) has no $m module (Debian's stock linux-image-amd64 has it)"; return; }
  done
  if [ -d /sys/module/dummy_hcd ] && [ "$(free_udcs)" -lt "$UDCS_NEEDED" ]; then
    echo "dummy_hcd is loaded with fewer than $UDCS_NEEDED free UDCs ($(free_udcs)): modprobe -r dummy_hcd && modprobe dummy_hcd num=$UDCS_NEEDED"
    return
  fi
  grep -qw configfs /proc/filesystems || [ -d /sys/kernel/config ] || modprobe -n configfs >/dev/null 2>&1 \
    || echo "kernel $(uname -r) has no configfs (CONFIG_CONFIGFS_FS)"
}

# A command on PATH, or in the sbin directories a user's PATH on Debian leaves out.
have() {
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]
}

# The commands the VM path lacks, as the Debian packages that bring them.
vm_missing() {
  for pair in $VM_NEEDS; do
    have "${pair%%:*}" || printf '%s ' "${pair#*:}"
  done
}

# Why the VM path cannot run here (nothing when it can, perhaps after installing), with
# the reason the host path cannot ($1).
vm_why() {
  arch=$(uname -m)
  [ "$arch" = x86_64 ] || { echo "$1; the demo VM is x86-64 and runs this host's programs, and this is $arch"; return; }
  missing=$(vm_missing)
  [ -z "$missing" ] && return
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$1; the demo VM needs QEMU and tools this host lacks (Debian packages: ${missing% }): install them"
  elif [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "$1; the demo VM needs ${missing% }, and installing them needs root (no sudo here): apt-get install ${missing% } as root"
  fi
}

# gatecmd and gatecmd-vboard: prebuilt, or a release build (cargo as this user).
binaries() {
  if [ -n "${GATECMD_DEMO_BIN_DIR:-}" ]; then
    bin=$GATECMD_DEMO_BIN_DIR
  else
    if ! command -v cargo >/dev/null 2>&1; then
      refuse "cargo is not on PATH: install Rust with rustup (README.md), or build as the user who has it (make build) and run GATECMD_DEMO_BIN_DIR=$HERE/target/release make demo"
    fi
    say "building gatecmd and gatecmd-vboard (cargo build --release; minutes the first time)"
    (cd "$HERE" && cargo build --release --locked --bin gatecmd && cargo build --release --locked -p gatecmd-vboard)
    bin=$HERE/target/release
  fi
  for b in gatecmd gatecmd-vboard; do
    [ -x "$bin/$b" ] || refuse "$bin/$b is missing: build it (make build) or set GATECMD_DEMO_BIN_DIR"
  done
}

# The files an agent flashes, made once (the VM path makes them on this host and hands
# them to the VM): a loader from the vboard's own packer; demo.img, bootable when written
# at LBA 0x40 (the idbloader magic RKNS first, then random bytes); disk.img, the same as a
# whole-disk image (written from LBA 0, as flash_board writes: RKNS at byte 0x8000).
make_files() { # VBOARD
  mkdir -p "$DEMO_DIR/images" "$DEMO_DIR/state"
  chmod 0700 "$DEMO_DIR"
  [ -s "$DEMO_DIR/images/loader.bin" ] || "$1" make-loader --out "$DEMO_DIR/images/loader.bin" >/dev/null
  [ -s "$DEMO_DIR/images/demo.img" ] || { printf RKNS; head -c 1048572 /dev/urandom; } > "$DEMO_DIR/images/demo.img"
  [ -s "$DEMO_DIR/images/disk.img" ] || { head -c 32768 /dev/zero; cat "$DEMO_DIR/images/demo.img"; } > "$DEMO_DIR/images/disk.img"
  token=$DEMO_DIR/state/token
  if [ ! -s "$token" ]; then
    (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' > "$token")
  fi
}

# demo/banner.txt with its @…@ placeholders filled (the VM path fills the same file).
banner() { # URL WHERE STOP LOGS
  esc() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
  sed -e "s|@URL@|$(esc "$1")|g" -e "s|@PAGE@|$(esc "${1%/mcp}/")|g" \
      -e "s|@TOKEN@|$(esc "$DEMO_DIR/state/token")|g" -e "s|@IMAGES@|$(esc "$DEMO_DIR/images")|g" \
      -e "s|@WHERE@|$(esc "$2")|g" -e "s|@STOP@|$(esc "$3")|g" -e "s|@LOGS@|$(esc "$4")|g" \
      "$HERE/demo/banner.txt"
}

why=$(host_why)
if [ -z "$why" ] && [ "${GATECMD_DEMO_VM:-}" = 1 ]; then
  why="GATECMD_DEMO_VM=1 asks for the VM"
fi
if [ -n "$why" ]; then
  # ---- the VM path ------------------------------------------------------------------
  [ "$(uname -s)" = Linux ] || refuse "$why"
  vwhy=$(vm_why "$why")
  [ -z "$vwhy" ] || refuse "$vwhy"
  if [ "${1:-}" = --check ]; then
    missing=$(vm_missing)
    echo "make demo: this host runs the demo in a QEMU VM: $why${missing:+; it installs ${missing% } first}"
    exit 0
  fi
  # What is missing, installed as make test installs it (and, for a build from source,
  # what the build needs: scripts/setup.sh is idempotent and quick when nothing is).
  missing=$(vm_missing)
  if [ -n "$missing" ] || [ -z "${GATECMD_DEMO_BIN_DIR:-}" ]; then
    if [ -n "$missing" ] && [ "$(id -u)" = 0 ]; then
      say "installing what the demo VM needs: ${missing% } (scripts/setup.sh --demo)"
    elif [ -n "$missing" ]; then
      say "installing what the demo VM needs: ${missing% } (scripts/setup.sh --demo; that needs root: sudo may ask for your password)"
    fi
    "$HERE/scripts/setup.sh" --demo >&2 || true
    missing=$(vm_missing)
    [ -z "$missing" ] || refuse "$why; the demo VM needs ${missing% }, which could not be installed: apt-get install ${missing% } as root"
  fi
  say "this host cannot hold the USB gadgets itself ($why): the boards run in a QEMU VM"
  binaries
  make_files "$bin/gatecmd-vboard"
  export GATECMD_DEMO_BIN_DIR="$bin" GATECMD_DEMO_DIR="$DEMO_DIR" GATECMD_DEMO_BIND="$BIND"
  exec python3 "$HERE/scripts/demo_vm.py"
fi
if [ "${1:-}" = --check ]; then
  echo "make demo: this host can run the demo ($BOARDS virtual boards on $UDCS_NEEDED UDCs)"
  exit 0
fi

# ---- this machine's USB stack (and the inside of the demo VM) -----------------------------
[ -d /sys/module/dummy_hcd ] || modprobe dummy_hcd num=$UDCS_NEEDED
for m in libcomposite usb_f_fs usb_f_acm cdc_acm; do [ -d "/sys/module/$m" ] || modprobe "$m"; done
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs none /sys/kernel/config

binaries
# The demo's own directory, root's only: the binaries the config names by absolute path,
# the file root with a loader and the images to flash, gatecmd's state (token, audit log).
mkdir -p "$DEMO_DIR/bin" "$DEMO_DIR/vboard"
make_files "$bin/gatecmd-vboard"
cp "$bin/gatecmd" "$bin/gatecmd-vboard" "$DEMO_DIR/bin/"
VBOARD=$DEMO_DIR/bin/gatecmd-vboard

pids=""
cleanup() {
  trap - EXIT INT TERM
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the boards -------------------------------------------------------------------------
say "starting $BOARDS virtual boards (gatecmd-vboard)"
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

# ---- gatecmd ----------------------------------------------------------------------------
say "starting gatecmd on $BIND"
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
banner "$url" "" "" "$DEMO_DIR/gatecmd.log, $DEMO_DIR/vboard/log"
if [ "${USBVM:-}" = 1 ]; then
  # Inside the demo VM (tests/vm sets USBVM=1): the logs go to the VM's console, which the
  # host keeps (scripts/demo_vm.py names it in its banner).
  tail -n +1 -f "$DEMO_DIR/vboard/log" "$DEMO_DIR/gatecmd.log" &
  pids="$pids $!"
fi
wait
