#!/bin/sh
# Prepares gatecmd's test VM (tests/vm/README.md): installs QEMU and the tools it needs
# where they are missing (as root), downloads Debian's newest amd64 kernel and udev with
# apt-get download and unpacks them into the cache ($GATECMD_VM_CACHE, else
# ${XDG_CACHE_HOME:-~/.cache}/gatecmd-vm). Idempotent; `make test-setup` runs it.
exec python3 "$(dirname "$0")/vmctl.py" prepare "$@"
