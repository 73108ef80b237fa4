#!/bin/sh
# Guest side of vboard/tests/usbvm.rs (runs as the VM's one program, busybox sh, root):
# gatecmd-vboard with one small board, driven by Debian's real rkdeveloptool and the
# console's host side (/dev/ttyACM*). Prints `STEP NAME rc=N` after each step and the
# tool's output between `BEGIN NAME` / `END NAME`; `GUEST DONE` at the end. The host test
# asserts on those lines.
set -u
D=/opt/vboard
VB=/usr/local/bin/gatecmd-vboard
RK=/usr/bin/rkdeveloptool
CTL=/run/vb.sock
export PATH=/usr/local/bin:/usr/bin:/bin:/sbin:/usr/sbin

step() { # NAME CMD... : runs CMD, shows its output, prints its status
  name=$1; shift
  echo "BEGIN $name"
  "$@" > /tmp/out.$name 2>&1
  rc=$?
  # db and wl byte by byte (\r, ESC visible): the capture is for docs/VBOARD.md
  case $name in db|wl) od -An -c /tmp/out.$name | tr -s ' ' | sed 's/^/| /';; esac
  echo "TEXT $name"
  tr '\r' '~' < /tmp/out.$name
  echo
  echo "END $name"
  echo "STEP $name rc=$rc t=$(cut -d' ' -f1 /proc/uptime)"
}

wait_ld() { # MODE: until rkdeveloptool ld shows it (10 s)
  n=0
  while [ $n -lt 100 ]; do
    $RK ld 2>&1 | grep -q "$1" && return 0
    n=$((n+1)); sleep 0.1
  done
  return 1
}

t0=$(cut -d' ' -f1 /proc/uptime)
mkdir -p /run
$VB serve --boards 2 --flash-size 64M --state-dir /run/vb --control $CTL > /tmp/vb.out &
VBPID=$!
n=0; while ! grep -q "ready" /tmp/vb.out 2>/dev/null; do n=$((n+1)); [ $n -gt 200 ] && break; sleep 0.05; done
cat /tmp/vb.out
echo "STEP ready rc=$(grep -q ready /tmp/vb.out; echo $?)"

# A second board on its own two UDCs: both listed, then vb2 off again (rkdeveloptool
# refuses every command but ld while two boards are attached).
step power_vb2 $VB power vb2 on --maskrom --control $CTL
step power_maskrom $VB power vb1 on --maskrom --control $CTL
step ld_two $RK ld
step power_vb2_off $VB power vb2 off --control $CTL
step ld_maskrom $RK ld
step db_garbage $RK db $D/garbage_loader.bin
step ld_after_garbage $RK ld
step db_badpayload $RK db $D/badpayload_loader.bin
sleep 0.5
step ld_after_badpayload $RK ld
step db $RK db $D/loader.bin
wait_ld Loader; echo "STEP wait_loader rc=$?"
step ld_loader $RK ld
step rid $RK rid
step rfi $RK rfi
step rci $RK rci
step ppt $RK ppt
step wl $RK wl 0x40 $D/image.img
step rl $RK rl 0x40 $(( $(stat -c %s $D/image.img) / 512 )) /tmp/readback.img
cmp $D/image.img /tmp/readback.img; echo "STEP rl_equal rc=$?"
sha256sum $D/image.img | sed 's/^/IMAGE_SHA /'

# The console's host side: find the ACM tty of the console port, capture it.
CPORT=$(grep '^board vb1 ' /tmp/vb.out | sed -n 's/.* console=[^ ]* port=\([^ ]*\) .*/\1/p')
ACM=$(ls /sys/bus/usb/devices/$CPORT:1.0/tty/ 2>/dev/null | head -1)
echo "CONSOLE port=$CPORT tty=$ACM"
stty -F /dev/$ACM raw -echo
( cat /dev/$ACM > /tmp/console.out & echo $! > /tmp/cat.pid )
sleep 0.2
step rd $RK rd
n=0; while ! grep -q "login:" /tmp/console.out; do n=$((n+1)); [ $n -gt 200 ] && break; sleep 0.05; done
echo "STEP login_prompt rc=$(grep -q 'login:' /tmp/console.out; echo $?) t=$(cut -d' ' -f1 /proc/uptime)"
printf 'root\r' > /dev/$ACM
n=0; while ! grep -q "root@vb1:~# " /tmp/console.out; do n=$((n+1)); [ $n -gt 100 ] && break; sleep 0.05; done
echo "STEP shell_prompt rc=$(grep -q 'root@vb1:~# ' /tmp/console.out; echo $?) t=$(cut -d' ' -f1 /proc/uptime)"
printf 'uname -a\r' > /dev/$ACM
sleep 0.5
printf 'nosuch\recho status=$?\r' > /dev/$ACM
sleep 0.5
echo "BEGIN console"
tr '\r' '~' < /tmp/console.out
echo
echo "END console"
step ld_running $RK ld

# Erase: power-cycle into MaskROM, db, ef (returns as MaskROM), db, rl shows zeros.
step power_off $VB power vb1 off --control $CTL
step ld_off $RK ld
step power_maskrom2 $VB power vb1 on --maskrom --control $CTL
step db2 $RK db $D/loader.bin
wait_ld Loader; echo "STEP wait_loader2 rc=$?"
step ld_loader2 $RK ld
step ef $RK ef
step ld_after_ef $RK ld
step wl_in_maskrom $RK wl 0x40 $D/image.img
step db3 $RK db $D/loader.bin
wait_ld Loader; echo "STEP wait_loader3 rc=$?"
step rl_erased $RK rl 0x40 8 /tmp/erased.img
cmp -n 4096 /tmp/erased.img /dev/zero; echo "STEP erased_zero rc=$?"
step status $VB status --control $CTL
echo "VBOARD STDERR"
true
kill $(cat /tmp/cat.pid) 2>/dev/null
kill $VBPID; wait $VBPID; echo "STEP vboard_exit rc=$?"
t1=$(cut -d' ' -f1 /proc/uptime)
echo "GUEST DONE uptime $t0 -> $t1"
