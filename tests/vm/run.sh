#!/bin/sh
# Runs one program in a gatecmd test VM (tests/vm/README.md):
#   run.sh --bin PATH [--port N|HOST:GUEST|ADDR:HOST:GUEST]... [--timeout S] [--ctl SOCK] [--workdir DIR]
#          [--hold] [--env K=V]... [--file SRC[:DST]]... [--udcs N] [--mem MB] [--smp N]
#          [--host-timeout S] [--quiet] -- ARGS...
# Exit status: the program's in the guest; 124 host-side timeout; 125 the VM never ran it.
exec python3 "$(dirname "$0")/vmctl.py" run "$@"
