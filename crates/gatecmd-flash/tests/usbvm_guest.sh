#!/bin/sh
# Guest side of crates/gatecmd-flash/tests/usbvm.rs (the VM's one program, busybox sh, root):
# gatecmd-vboard with one board, flashed by the engine's driver (flash_driver) and, for the
# figures, by Debian's rkdeveloptool in the same run. Prints per step:
#   STEP NAME rc=N secs=S       (wall time measured here)
#   OUT NAME: LINE              (the driver's RESULT / ERROR / TIME lines)
#   BEGIN boot_NAME .. END boot_NAME   (the console from a reset to the login prompt)
#   STATUS NAME {json}          (gatecmd-vboard status)
# and GUEST DONE at the end. The host test asserts on these lines.
set -u
D=/opt/flash
VB=/usr/local/bin/gatecmd-vboard
FD=/usr/local/bin/flash_driver
RK=/usr/bin/rkdeveloptool
CTL=/run/vb.sock
ST=/run/flash-state
P=1-1
export PATH=/usr/local/bin:/usr/bin:/bin:/sbin:/usr/sbin

up() { cut -d' ' -f1 /proc/uptime; }

step() { # NAME CMD... : runs CMD, prints its status, time and result lines
  name=$1; shift
  a=$(up)
  "$@" > /tmp/out.$name 2>&1
  rc=$?
  b=$(up)
  grep -E '^(RESULT|ERROR|TIME) ' /tmp/out.$name | sed "s/^/OUT $name: /"
  echo "STEP $name rc=$rc secs=$(awk "BEGIN{print $b - $a}")"
}

status() { echo "STATUS $1 $($VB status --control $CTL)"; }

start_vboard() { # [--write-speed S]
  $VB serve --boards 1 --flash-size 160M --state-dir /run/vb --control $CTL "$@" > /tmp/vb.out 2>>/tmp/vb.err &
  VBPID=$!
  n=0; while ! grep -q ready /tmp/vb.out 2>/dev/null; do n=$((n+1)); [ $n -gt 300 ] && break; sleep 0.05; done
  cat /tmp/vb.out
}

stop_vboard() {
  kill $CATPID 2>/dev/null
  kill $VBPID; wait $VBPID; echo "STEP vboard_exit rc=$?"
}

capture_console() { # the console port's host-side tty, captured to /tmp/console.out
  CPORT=$(grep '^board vb1 ' /tmp/vb.out | sed -n 's/.* console=[^ ]* port=\([^ ]*\) .*/\1/p')
  n=0; ACM=""
  while [ -z "$ACM" ] && [ $n -lt 100 ]; do
    ACM=$(ls /sys/bus/usb/devices/$CPORT:1.0/tty/ 2>/dev/null | head -1); n=$((n+1)); sleep 0.05
  done
  echo "CONSOLE port=$CPORT tty=$ACM"
  stty -F /dev/$ACM raw -echo
  touch /tmp/console.out
  cat /dev/$ACM >> /tmp/console.out &
  CATPID=$!
}

to_loader() { # power on into MaskROM (reset if running), download the loader
  step power_$1 $VB power vb1 on --maskrom --control $CTL
  step db_$1 $FD db --port $P --loader $D/loader.bin --wait-secs 15
}

flash_and_boot() { # NAME ARGS... : flash with --reset, then the console until the login prompt
  name=$1; shift
  before=$(stat -c %s /tmp/console.out)
  step $name $FD flash --port $P --board vb1 --state $ST --reset "$@"
  n=0
  while ! tail -c +$((before + 1)) /tmp/console.out | grep -q "login:"; do
    n=$((n+1)); [ $n -gt 2400 ] && break; sleep 0.05
  done
  echo "STEP boot_$name rc=$(tail -c +$((before + 1)) /tmp/console.out | grep -q 'login:'; echo $?) t=$(up)"
  echo "BEGIN boot_$name"
  tail -c +$((before + 1)) /tmp/console.out | tr -d '\r'
  echo
  echo "END boot_$name"
}

mkdir -p /run
echo "NPROC $(nproc)"
start_vboard
step power_maskrom $VB power vb1 on --maskrom --control $CTL
capture_console

# MaskROM: what the board is, and a write refused before a loader runs.
step info_maskrom $FD info --port $P
step flash_in_maskrom $FD flash --port $P --board vb1 --state $ST --image $D/raw.img
step db $FD db --port $P --loader $D/loader.bin --wait-secs 15
step info_loader $FD info --port $P

# (a) raw
flash_and_boot raw --image $D/raw.img
# (b) raw + bmap mapping a quarter of it
to_loader b
flash_and_boot bmap --image $D/bmap.img --bmap $D/bmap.bmap
# A bmap made for another image: refused, nothing written.
to_loader m
step bmap_mismatch $FD flash --port $P --board vb1 --state $ST --image $D/bmap.img --bmap $D/bmapz.bmap
status after_mismatch
# (c) zstd-compressed image + its bmap
flash_and_boot bmap_zstd --image $D/bmapz.img.zst --bmap $D/bmapz.bmap
# (d) Android sparse
to_loader d
flash_and_boot sparse --image $D/sparse.simg

# Figures: the same board, the same run, interleaved rounds.
to_loader bench
for i in 1 2 3; do
  step rk_dense_$i $RK wl 0 $D/dense64.img
  step fd_dense_$i $FD flash --port $P --board vb1 --state $ST --no-resume --image $D/dense64.img
  step fd_dense_big_$i $FD flash --port $P --board vb1 --state $ST --no-resume --no-verify --transfer 8192 --image $D/dense64.img
done
for i in 1 2 3; do
  step rk_bmapraw_$i $RK wl 0 $D/bench.img
  step fd_bmap_$i $FD flash --port $P --board vb1 --state $ST --no-resume --no-verify --image $D/bench.img --bmap $D/bench.bmap
  step fd_bmap_verify_$i $FD flash --port $P --board vb1 --state $ST --no-resume --image $D/bench.img --bmap $D/bench.bmap
done
stop_vboard

# A flash cut by a power-off, resumed: a slow flash (8 MiB/s) so the cut lands mid-write.
start_vboard --write-speed 8M
step power_cut $VB power vb1 on --maskrom --control $CTL
capture_console
step db_cut $FD db --port $P --loader $D/loader.bin --wait-secs 15
$FD flash --port $P --board vb1 --state $ST --image $D/resume.img > /tmp/out.cut 2>&1 &
FDPID=$!
n=0
while [ $n -lt 600 ]; do
  pct=$(grep '^PROGRESS write' /tmp/out.cut | tail -1 | awk '{ if ($4 > 0) print int($3 * 100 / $4); else print 0 }')
  [ -n "$pct" ] && [ "$pct" -ge 55 ] && break
  n=$((n+1)); sleep 0.05
done
echo "CUT at ${pct:-?}%"
step power_off_mid_write $VB power vb1 off --control $CTL
wait $FDPID; echo "STEP cut_flash rc=$?"
grep -E '^(RESULT|ERROR) ' /tmp/out.cut | sed 's/^/OUT cut_flash: /'
status after_cut
to_loader resume
flash_and_boot resume --image $D/resume.img
stop_vboard
echo "VBOARD STDERR"
grep -E 'rockusb|maskrom:|refused' /tmp/vb.err | tail -30
echo "GUEST DONE"
