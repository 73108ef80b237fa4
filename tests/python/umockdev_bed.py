"""Owns a umockdev testbed for the Python tests and plugs boards on command.

Run it as a child process under the preload (the process that owns a testbed and sends
uevents must itself run under it; see tests/common/umockdev.rs):

    LD_PRELOAD=libumockdev-preload.so.0 python3 umockdev_bed.py

It prints `root DIR` (the testbed directory: start gatecmd with the same LD_PRELOAD and
`UMOCKDEV_DIR=DIR`), then reads one command per line on stdin and answers `ok` or
`error MESSAGE`:

    add FILE        add the devices of a umockdev-record file (emits `add` uevents)
    unplug SYSPATH  `remove` uevent + removal for the device and its children, deepest first
                    (umockdev 0.17 sends no remove uevent itself)
    quit

The pytest process itself stays outside the preload.
"""

import ctypes
import os
import sys


class GError(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_uint32), ("code", ctypes.c_int), ("message", ctypes.c_char_p)]


def load():
    um = ctypes.CDLL("libumockdev.so.0")
    glib = ctypes.CDLL("libglib-2.0.so.0")
    gobject = ctypes.CDLL("libgobject-2.0.so.0")
    um.umockdev_testbed_new.restype = ctypes.c_void_p
    um.umockdev_testbed_add_from_file.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(GError)),
    ]
    um.umockdev_testbed_add_from_file.restype = ctypes.c_int
    um.umockdev_testbed_uevent.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    um.umockdev_testbed_remove_device.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    um.umockdev_testbed_get_root_dir.argtypes = [ctypes.c_void_p]
    um.umockdev_testbed_get_root_dir.restype = ctypes.c_void_p
    glib.g_free.argtypes = [ctypes.c_void_p]
    glib.g_error_free.argtypes = [ctypes.POINTER(GError)]
    gobject.g_object_unref.argtypes = [ctypes.c_void_p]
    return um, glib, gobject


def devices_below(top):
    """`top` and every directory below it that is a device (has a `uevent` file); links
    (driver, subsystem, port, ...) point elsewhere and are not children."""
    out = []
    if os.path.isfile(os.path.join(top, "uevent")):
        out.append(top)
    try:
        entries = list(os.scandir(top))
    except OSError:
        return out
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            out.extend(devices_below(e.path))
    return out


def main():
    if "umockdev-preload" not in os.environ.get("LD_PRELOAD", ""):
        print("error run me with LD_PRELOAD=libumockdev-preload.so.0", flush=True)
        return 2
    um, glib, gobject = load()
    tb = um.umockdev_testbed_new()
    if not tb:
        print("error umockdev_testbed_new failed", flush=True)
        return 1
    raw = um.umockdev_testbed_get_root_dir(tb)
    root = ctypes.string_at(raw).decode()
    glib.g_free(raw)
    print(f"root {root}", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "add":
            err = ctypes.POINTER(GError)()
            if um.umockdev_testbed_add_from_file(tb, arg.encode(), ctypes.byref(err)):
                print("ok", flush=True)
            else:
                msg = err.contents.message.decode() if err else "unknown error"
                if err:
                    glib.g_error_free(err)
                print(f"error {msg}", flush=True)
        elif cmd == "unplug":
            top = os.path.join(root, arg.lstrip("/"))
            devs = sorted(devices_below(top), key=lambda p: -p.count("/"))
            if not devs:
                print(f"error no device at {arg}", flush=True)
                continue
            for d in devs:
                sys_path = "/" + os.path.relpath(d, root)
                um.umockdev_testbed_uevent(tb, sys_path.encode(), b"remove")
                um.umockdev_testbed_remove_device(tb, sys_path.encode())
            print("ok", flush=True)
        elif cmd == "quit":
            break
        else:
            print(f"error unknown command {cmd!r}", flush=True)
    gobject.g_object_unref(tb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
