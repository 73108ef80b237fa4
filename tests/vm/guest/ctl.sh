#!/bin/sh
# The guest end of a gatecmd test VM's control channel (busybox sh; tests/vm/README.md has
# the protocol). One command per line on the serial port $1; each is answered by one
# final line, `ok VERB ...` or `err VERB ...`, after its data as `| ...` lines.
port=${1:-/dev/ttyS1}
gadgets=/sys/kernel/config/usb_gadget
exec 3<> "$port" || exit 1
stty raw -echo <&3 2> /dev/null

note() { read -r t _ < /proc/uptime; echo "[usbvm-ctl] T+${t}s $*" > /dev/console; }
say() { printf '%s\n' "$*" >&3; note "-> $*"; }

# until COND [TRIES]: polls every 20 ms until the shell condition holds.
until_true() {
	tries=${2:-500}
	while ! eval "$1"; do
		tries=$((tries - 1))
		[ "$tries" -le 0 ] && return 1
		sleep 0.02
	done
}

hex16() {
	case "$1" in
	0x*) v=${1#0x} ;;
	*) return 1 ;;
	esac
	[ -n "$v" ] && [ ${#v} -le 4 ] || return 1
	case "$v" in *[!0-9a-fA-F]*) return 1 ;; esac
}

# The host-side port of a UDC: dummy_udc.K is wired to dummy_hcd.K, whose root hub is
# usbB, so the gadget enumerates as B-1.
port_of() {
	for hub in /sys/devices/platform/dummy_hcd.${1##*.}/usb*; do
		[ -d "$hub" ] && echo "${hub##*/usb}-1" && return 0
	done
	return 1
}

bcd_seen() {
	set -- $(od -An -tx1 -j2 -N2 "/sys/bus/usb/devices/$1/descriptors" 2> /dev/null)
	echo "0x$2$1"
}

describe() {
	d=/sys/bus/usb/devices/$1
	echo "dev=$1 busnum=$(cat "$d/busnum") devnum=$(cat "$d/devnum") vid=$(cat "$d/idVendor") pid=$(cat "$d/idProduct") bcdUSB=$(bcd_seen "$1") version=$(tr -d ' ' < "$d/version")"
}

udc_free() {
	taken=" $(cat "$gadgets"/*/UDC 2> /dev/null | tr '\n' ' ') "
	for u in $(ls /sys/class/udc | sort); do
		case "$taken" in *" $u "*) ;; *) echo "$u" && return 0 ;; esac
	done
	return 1
}

# The composite layer decides bcdUSB itself on a high-speed UDC: 0x0201 when WebUSB (or
# LPM) is on, else 0x0200. Bit 0 of the request therefore switches webusb/use.
set_bcd() {
	echo "$2" > "$1/bcdUSB" || return 1
	[ -f "$1/webusb/use" ] && echo $(($2 & 1)) > "$1/webusb/use"
	return 0
}

teardown() {
	g=$gadgets/$1
	[ -d "$g" ] || return 0
	[ -n "$(cat "$g/UDC" 2> /dev/null)" ] && echo > "$g/UDC"
	for l in "$g"/configs/c.1/*.*; do [ -L "$l" ] && rm -f "$l"; done
	rmdir "$g/configs/c.1/strings/0x409" "$g/configs/c.1" 2> /dev/null
	for f in "$g"/functions/*; do rmdir "$f" 2> /dev/null; done
	rmdir "$g/strings/0x409" "$g" 2> /dev/null
	return 0
}

# attach NAME UDC BCD VERB: binds, waits for the interface and udev, checks bcdUSB.
attach() {
	dev=$(port_of "$2") || { say "err $4 $1 no host port for $2"; return 1; }
	echo "$2" > "$gadgets/$1/UDC" || { say "err $4 $1 bind to $2 failed"; return 1; }
	until_true "[ -e /sys/bus/usb/devices/$dev/$dev:1.0 ]" || { say "err $4 $1 device $dev did not enumerate"; return 1; }
	udevadm settle -t 5 > /dev/null 2>&1
	seen=$(bcd_seen "$dev")
	if [ $((seen)) != $(($3)) ]; then
		say "err $4 $1 host sees bcdUSB=$seen, requested $(printf 0x%04x $(($3))) (this kernel/UDC cannot present it)"
		return 1
	fi
	say "ok $4 $1 udc=$2 $(describe "$dev")"
}

detach() {
	udc=$(cat "$gadgets/$1/UDC")
	[ -n "$udc" ] || return 0
	dev=$(port_of "$udc")
	echo > "$gadgets/$1/UDC"
	[ -n "$dev" ] || return 0
	until_true "[ ! -e /sys/bus/usb/devices/$dev ]" || return 1
	udevadm settle -t 5 > /dev/null 2>&1
}

cmd_plug() {
	name=$1 vid=$2 pid=$3 bcd=$4
	if [ -z "$bcd" ]; then
		say "err plug usage: plug NAME VID PID BCDUSB [serial=S] [manufacturer=M] [product=P] [bcddevice=D] [function=sourcesink|acm]"
		return
	fi
	case "$name" in "" | *[!A-Za-z0-9_.-]*) say "err plug bad name '$name'" && return ;; esac
	for v in "$vid" "$pid" "$bcd"; do
		hex16 "$v" || { say "err plug $name bad hex value '$v' (want 0xNNNN)"; return; }
	done
	g=$gadgets/$name
	[ -d "$g" ] && { say "err plug $name already exists"; return; }
	udc=$(udc_free) || { say "err plug $name no free UDC (dummy_hcd num= limit)"; return; }
	mkdir "$g" || { say "err plug $name mkdir failed"; return; }
	echo "$vid" > "$g/idVendor"
	echo "$pid" > "$g/idProduct"
	echo 0x0100 > "$g/bcdDevice"
	set_bcd "$g" "$bcd" || { teardown "$name"; say "err plug $name bcdUSB $bcd rejected"; return; }
	shift 4
	fn=SourceSink.0
	for opt in "$@"; do
		val=${opt#*=}
		case "$opt" in
		serial=* | manufacturer=* | product=*)
			mkdir -p "$g/strings/0x409"
			key=${opt%%=*}
			[ "$key" = serial ] && key=serialnumber
			echo "$val" > "$g/strings/0x409/$key"
			;;
		bcddevice=*) echo "$val" > "$g/bcdDevice" ;;
		function=sourcesink) fn=SourceSink.0 ;;
		function=acm) fn=acm.$name ;;
		*) teardown "$name" && say "err plug $name unknown option '$opt'" && return ;;
		esac
	done
	mkdir "$g/configs/c.1"
	echo 500 > "$g/configs/c.1/MaxPower"
	mkdir "$g/functions/$fn" || { teardown "$name"; say "err plug $name function $fn unavailable (module loaded?)"; return; }
	ln -s "$g/functions/$fn" "$g/configs/c.1/"
	attach "$name" "$udc" "$bcd" plug || teardown "$name"
}

cmd_unplug() {
	[ -n "$1" ] && [ -d "$gadgets/$1" ] || { say "err unplug $1 no such gadget"; return; }
	detach "$1" || { say "err unplug $1 the device is still present"; return; }
	teardown "$1"
	say "ok unplug $1"
}

cmd_replug() {
	name=$1 bcd=${2:--} gap=${3:-0}
	g=$gadgets/$name
	[ -n "$name" ] && [ -d "$g" ] || { say "err replug $name no such gadget"; return; }
	[ "$bcd" = - ] && bcd=$(cat "$g/bcdUSB")
	hex16 "$bcd" || { say "err replug $name bad hex value '$bcd'"; return; }
	udc=$(cat "$g/UDC")
	if [ -n "$udc" ]; then
		detach "$name" || { say "err replug $name the device is still present"; return; }
	else
		udc=$(udc_free) || { say "err replug $name no free UDC"; return; }
	fi
	[ "$gap" -gt 0 ] 2> /dev/null && usleep $((gap * 1000))
	set_bcd "$g" "$bcd" || { say "err replug $name bcdUSB $bcd rejected"; return; }
	attach "$name" "$udc" "$bcd" replug
}

cmd_list() {
	count=0
	for g in "$gadgets"/*; do
		[ -d "$g" ] || continue
		udc=$(cat "$g/UDC")
		what=unbound
		if [ -n "$udc" ]; then
			dev=$(port_of "$udc") && [ -e "/sys/bus/usb/devices/$dev" ] && what=$(describe "$dev")
		fi
		printf '| %s udc=%s %s\n' "${g##*/}" "${udc:-none}" "$what" >&3
		count=$((count + 1))
	done
	say "ok list $count"
}

cmd_exec() {
	sh -c "$1" > /run/vm/exec.out 2>&1 < /dev/null
	rc=$?
	sed 's/^/| /' /run/vm/exec.out >&3
	say "ok exec rc=$rc"
}

cmd_poweroff() {
	say "ok poweroff"
	if [ -f /run/vm/prog.pid ]; then
		kill -TERM "$(cat /run/vm/prog.pid)" 2> /dev/null
		(sleep 10 && poweroff -f) &
	else
		sync
		poweroff -f
	fi
}

while IFS= read -r line <&3; do
	line=$(printf '%s' "$line" | tr -d '\r')
	[ -z "$line" ] && continue
	note "<- $line"
	set -f
	set -- $line
	set +f
	verb=$1
	shift
	case "$verb" in
	ping) say "ok pong $*" ;;
	plug) cmd_plug "$@" ;;
	unplug) cmd_unplug "$@" ;;
	replug) cmd_replug "$@" ;;
	list) cmd_list ;;
	exec) cmd_exec "${line#exec }" ;;
	start) touch /run/vm/start && say "ok start" ;;
	poweroff) cmd_poweroff ;;
	*) say "err $verb unknown command" ;;
	esac
done
note "control channel closed"
