#!/bin/sh
# Guest side of vboard/tests/usbvm_families.rs (the VM's one program, busybox sh, root):
# gatecmd-vboard with a fastboot board (vb1) and a DFU board (vb2), driven by Debian's real
# fastboot and dfu-util and the consoles' host side (/dev/ttyACM*). Prints `STEP NAME rc=N`
# after each step and the tool's output between `TEXT NAME` / `END NAME`; for the captured
# writes also the raw bytes (`HEX NAME`, xxd -p) and when each read of the tool's output
# returned (`STAMPS NAME`); `GUEST DONE` at the end. The host test asserts on those.
set -u
D=/opt/vboard
VB=/usr/local/bin/gatecmd-vboard
CTL=/run/vb.sock
export PATH=/usr/local/bin:/usr/bin:/bin:/sbin:/usr/sbin

now() { cut -d' ' -f1 /proc/uptime; }

show() { # NAME RC: the output of a step, then its status
  echo "TEXT $1"
  tr '\r' '~' < /tmp/out.$1
  echo
  echo "END $1"
  echo "STEP $1 rc=$2 t=$(now)"
}

step() { # NAME CMD...
  name=$1; shift
  "$@" > /tmp/out.$name 2>&1
  show $name $?
}

# Stamps each read(2) of its input with the uptime it returned at: what a reader of the
# tool's pipe gets and when (\r shown as ~, \n as |). One dd per read, so pieces the tool
# writes faster than this loop reads come together, with the later stamp.
stamp() {
  while :; do
    dd bs=65536 count=1 of=/tmp/chunk 2>/dev/null
    [ -s /tmp/chunk ] || break
    printf '%s %s\n' "$(now)" "$(tr '\r\n' '~|' < /tmp/chunk)"
  done
}

capture() { # NAME pipe|pty CMD...: a step whose output is also kept raw and stamped
  name=$1; mode=$2; shift 2
  t0=$(now)
  if [ "$mode" = pty ]; then
    # util-linux script: the tool's stdout and stderr are a pseudo-terminal.
    script -qfc "$*; echo \$? > /tmp/rc.$name" /dev/null 2>&1 | tee /tmp/out.$name | stamp > /tmp/ts.$name
  else
    { "$@" 2>&1; echo $? > /tmp/rc.$name; } | tee /tmp/out.$name | stamp > /tmp/ts.$name
  fi
  t1=$(now)
  echo "HEX $name"; xxd -p /tmp/out.$name; echo "ENDHEX $name"
  echo "STAMPS $name"; echo "$t0 <start>"; cat /tmp/ts.$name; echo "$t1 <end>"; echo "ENDSTAMPS $name"
  show $name "$(cat /tmp/rc.$name 2>/dev/null || echo 255)"
}

console_of() { # BOARD: the host-side tty of the board's console adapter
  port=$(grep "^board $1 " /tmp/vb.out | sed -n 's/.* console=[^ ]* port=\([^ ]*\) .*/\1/p')
  ls /sys/bus/usb/devices/$port:1.0/tty/ 2>/dev/null | head -1
}

watch_console() { # BOARD FILE: captures the board's console into FILE (background)
  acm=$(console_of $1)
  stty -F /dev/$acm raw -echo
  cat /dev/$acm > $2 &
  echo $! >> /tmp/cat.pids
}

wait_for() { # FILE TEXT: until TEXT is in FILE (10 s)
  n=0; while ! grep -q "$2" $1 2>/dev/null; do n=$((n+1)); [ $n -gt 200 ] && return 1; sleep 0.05; done
}

show_console() { # NAME FILE
  echo "BEGIN console $1"; tr '\r' '~' < $2; echo; echo "END console $1"
}

t_start=$(now)
mkdir -p /run
$VB serve --board fastboot --board dfu --flash-size 64M --state-dir /run/vb --control $CTL \
  --write-speed 1M --max-download-size 1M > /tmp/vb.out 2> /tmp/vb.err &
VBPID=$!
wait_for /tmp/vb.out ready
cat /tmp/vb.out
echo "STEP ready rc=$(grep -q ready /tmp/vb.out; echo $?)"

# ---- fastboot (vb1) -------------------------------------------------------------------
step fb_power $VB power vb1 on --recovery --control $CTL
step fb_devices fastboot devices
step fb_getvar fastboot getvar product
step fb_getvar_size fastboot getvar partition-size:boot
step fb_flash_small fastboot flash userdata $D/small.img
step fb_erase fastboot erase userdata
step fb_flash_nopart fastboot flash recovery $D/small.img
capture fb_flash pipe fastboot flash boot $D/boot.img
capture fb_flash_pty pty fastboot flash boot $D/boot.img
step fb_reboot_bootloader fastboot reboot-bootloader
step fb_getvar_again fastboot getvar product
watch_console vb1 /tmp/console.vb1
sleep 0.2
step fb_reboot fastboot reboot
wait_for /tmp/console.vb1 "vb1 login:"; echo "STEP fb_login rc=$? t=$(now)"
step fb_devices_running fastboot devices
show_console vb1 /tmp/console.vb1

# ---- DFU (vb2) ------------------------------------------------------------------------
step dfu_power $VB power vb2 on --recovery --control $CTL
step dfu_list dfu-util -l
capture dfu_download pipe dfu-util -a u-boot -D $D/uboot.bin
step dfu_upload dfu-util -a u-boot -U /tmp/uboot.back
cmp $D/uboot.bin /tmp/uboot.back; echo "STEP dfu_upload_equal rc=$?"
capture dfu_download_pty pty dfu-util -a u-boot -D $D/uboot.bin
step dfu_off $VB power vb2 off --control $CTL
watch_console vb2 /tmp/console.vb2
sleep 0.2
step dfu_on $VB power vb2 on --control $CTL
step dfu_list_runtime dfu-util -l
step dfu_detach_download dfu-util -E 3 -a rootfs -D $D/rootfs.bin
step dfu_upload_rootfs dfu-util -a rootfs -U /tmp/rootfs.back
cmp $D/rootfs.bin /tmp/rootfs.back; echo "STEP dfu_rootfs_equal rc=$?"
show_console vb2 /tmp/console.vb2

step status $VB status --control $CTL
for p in $(cat /tmp/cat.pids); do kill $p 2>/dev/null; done
kill $VBPID; wait $VBPID; echo "STEP vboard_exit rc=$?"
echo "BEGIN vboard stderr"; cat /tmp/vb.err; echo "END vboard stderr"
echo "GUEST DONE uptime $t_start -> $(now)"
