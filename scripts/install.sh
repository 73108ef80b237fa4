#!/usr/bin/env bash
# Installs gatecmd as a systemd service: binary, unit, udev rules, sysusers entry, the
# serial drivers' modules-load.d entry, an example configuration, and the `gatecmd` user
# and group (what the Debian package installs, under /etc and the prefix).
#
#   scripts/install.sh [--root DIR] [--prefix DIR] [--binary PATH]
#
#   --root DIR     install into DIR instead of / (also: DESTDIR=DIR). Users are created
#                  there only if DIR/etc/passwd exists (a system image); a bare staging
#                  directory gets the sysusers.d entry, which creates them at boot.
#   --prefix DIR   where the binary and shared files go (default /usr/local, or $PREFIX).
#   --binary PATH  the gatecmd binary to install (default target/release/gatecmd).
#
# Idempotent: running it again changes nothing that is already in place, and it never
# overwrites an existing /etc/gatecmd/allowed_commands.yaml.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
root="${DESTDIR:-}"
prefix="${PREFIX:-/usr/local}"
binary=""

die() { echo "install: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --root) [ $# -ge 2 ] || die "--root needs a directory"; root="$2"; shift 2 ;;
    --root=*) root="${1#--root=}"; shift ;;
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary="$2"; shift 2 ;;
    --binary=*) binary="${1#--binary=}"; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

case "$prefix" in /*) ;; *) die "--prefix must be absolute, not $prefix" ;; esac
# An empty root and "/" both mean the running system.
root="${root%/}"
if [ -n "$root" ]; then
  mkdir -p "$root"
  root="$(cd "$root" && pwd)"
  [ "$root" = / ] && root=""
fi
live=false
[ -z "$root" ] && live=true

if [ -z "$binary" ]; then
  binary="${CARGO_TARGET_DIR:-$repo/target}/release/gatecmd"
fi
[ -x "$binary" ] || die "no gatecmd binary at $binary: run \`cargo build --release\` (or \`make install\`), or pass --binary PATH"

if $live && [ "$(id -u)" != 0 ]; then
  die "installing into / needs root: run it with sudo, or pass --root DIR to try it in a directory"
fi

bindir="$prefix/bin"
sharedir="$prefix/share/gatecmd"
docdir="$prefix/share/doc/gatecmd"
unitdir=/etc/systemd/system
rulesdir=/etc/udev/rules.d
sysusersdir=/etc/sysusers.d
modulesdir=/etc/modules-load.d
confdir=/etc/gatecmd
config="$confdir/allowed_commands.yaml"

changed=0
# put MODE SRC DEST: installs SRC as $root/DEST with MODE, and says whether anything changed.
put() {
  local mode="$1" src="$2" dest="$root$3"
  mkdir -p "$(dirname "$dest")"
  if [ -f "$dest" ] && cmp -s "$src" "$dest" && [ "$(stat -c %a "$dest")" = "${mode#0}" ]; then
    echo "  unchanged  $3"
  else
    install -m "$mode" "$src" "$dest"
    echo "  installed  $3"
    changed=1
  fi
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "install: gatecmd into ${root:-/} (prefix $prefix)"
put 0755 "$binary" "$bindir/gatecmd"

# The unit names the binary's real path, so a --prefix other than /usr/local still works.
sed -e "s#/usr/local/bin/gatecmd#$bindir/gatecmd#g" \
    -e "s#/usr/local/share/doc/gatecmd#$docdir#g" \
    "$repo/packaging/gatecmd.service" >"$tmp/gatecmd.service"
put 0644 "$tmp/gatecmd.service" "$unitdir/gatecmd.service"
put 0644 "$repo/udev-rules/60-gatecmd.rules" "$rulesdir/60-gatecmd.rules"
put 0644 "$repo/packaging/gatecmd.sysusers" "$sysusersdir/gatecmd.conf"
# The USB serial drivers, loaded at boot before the unit starts: systemd resolves its
# DeviceAllow=char-ttyACM/char-ttyUSB to majors once, at start (the file says more).
put 0644 "$repo/packaging/modules-load.d/gatecmd.conf" "$modulesdir/gatecmd.conf"
put 0644 "$repo/allowed_commands.yaml" "$sharedir/allowed_commands.yaml.example"
for recipe in "$repo"/recipes/*.yaml; do
  put 0644 "$recipe" "$sharedir/recipes/$(basename "$recipe")"
done
put 0644 "$repo/README.md" "$docdir/README.md"

# The user and group (the udev rules grant the group access to the boards).
if $live; then
  if getent passwd gatecmd >/dev/null && getent group gatecmd >/dev/null; then
    echo "  unchanged  user and group gatecmd"
  elif command -v systemd-sysusers >/dev/null; then
    systemd-sysusers "$sysusersdir/gatecmd.conf"
    echo "  created    user and group gatecmd (systemd-sysusers)"
  else
    getent group gatecmd >/dev/null || groupadd --system gatecmd
    getent passwd gatecmd >/dev/null || useradd --system --gid gatecmd \
      --home-dir /var/lib/gatecmd --no-create-home --shell /usr/sbin/nologin \
      --comment "gatecmd MCP command gateway" gatecmd
    echo "  created    user and group gatecmd (useradd)"
  fi
elif [ -f "$root/etc/passwd" ] && command -v systemd-sysusers >/dev/null; then
  if grep -q '^gatecmd:' "$root/etc/passwd" && grep -q '^gatecmd:' "$root/etc/group" 2>/dev/null; then
    echo "  unchanged  user and group gatecmd in $root/etc/passwd"
  else
    systemd-sysusers --root "$root" "$root$sysusersdir/gatecmd.conf" >/dev/null
    echo "  created    user and group gatecmd in $root/etc/passwd"
  fi
else
  echo "  skipped    user and group: $root has no etc/passwd; systemd-sysusers creates them at boot from $sysusersdir/gatecmd.conf"
fi

# Configuration: directory readable by the service's group; the file owned by gatecmd and
# owner-only, because gatecmd refuses a config that holds a token and is readable by others.
# (The service cannot change it: ProtectSystem=strict makes /etc read-only for it.)
mkdir -p "$root$confdir"
chmod 0750 "$root$confdir"
if [ -e "$root$config" ]; then
  echo "  kept       $config (exists; the current example is $sharedir/allowed_commands.yaml.example)"
else
  install -m 0600 "$repo/allowed_commands.yaml" "$root$config"
  echo "  installed  $config (example)"
  changed=1
fi
if $live; then
  chown root:gatecmd "$confdir"
  # Only a file we just created, or one still owned by root, is handed to gatecmd.
  if [ "$(stat -c %U "$config")" = root ]; then
    chown gatecmd:gatecmd "$config"
  fi
fi

if $live; then
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    # The drivers now, not only at the next boot (as the package's postinst does; the
    # service skips itself where modules cannot be loaded, a container).
    systemctl restart systemd-modules-load.service >/dev/null 2>&1 || true
  fi
  if command -v udevadm >/dev/null && [ -d /run/udev ]; then
    udevadm control --reload || true
  fi
fi

[ "$changed" = 1 ] || echo "install: everything was already in place"
cat <<EOF

Next steps:
  1. Edit $config: commands, file_roots, clients (docs/CONFIG.md),
     then validate it:  $bindir/gatecmd check --config $config
     File roots outside /var/lib/gatecmd must be writable for the service:
     \`systemctl edit gatecmd\` and add  [Service] ReadWritePaths=/your/root
  2. Let the group gatecmd open the boards (plug them in again, or):
       udevadm control --reload && udevadm trigger --subsystem-match=usb
  3. Start it:          systemctl enable --now gatecmd
  4. With no clients configured, the first start generates a token:
       cat /var/lib/gatecmd/token
  5. Watch it:          journalctl -u gatecmd -f
     Audit log:         /var/lib/gatecmd/audit.log
     After editing the config:  systemctl reload gatecmd  (an invalid file is refused; the log says why)
EOF
