//! A small safe wrapper over libumockdev's C API, for tests only (it must never
//! link into the gatecmd binary).
//!
//! Rules learnt the hard way (see TESTING.md): the testbed must exist before any
//! udev monitor or libusb context; the process owning it must itself run under
//! `LD_PRELOAD=libumockdev-preload.so.0` (use [`rerun_under_preload`]); and
//! umockdev 0.17 sends no `remove` uevent on removal, so [`Testbed::unplug`] sends
//! them itself, deepest device first, like the kernel.

#![allow(dead_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;

#[repr(C)]
struct GError {
    domain: u32,
    code: c_int,
    message: *mut c_char,
}

#[link(name = "umockdev")]
#[link(name = "gobject-2.0")]
#[link(name = "glib-2.0")]
unsafe extern "C" {
    fn umockdev_testbed_new() -> *mut c_void;
    fn umockdev_testbed_add_from_string(
        testbed: *mut c_void,
        data: *const c_char,
        error: *mut *mut GError,
    ) -> c_int;
    fn umockdev_testbed_uevent(testbed: *mut c_void, devpath: *const c_char, action: *const c_char);
    fn umockdev_testbed_remove_device(testbed: *mut c_void, syspath: *const c_char);
    fn umockdev_testbed_set_attribute(
        testbed: *mut c_void,
        devpath: *const c_char,
        name: *const c_char,
        value: *const c_char,
    );
    fn umockdev_testbed_get_root_dir(testbed: *mut c_void) -> *mut c_char;
    fn g_object_unref(object: *mut c_void);
    fn g_free(mem: *mut c_void);
    fn g_error_free(error: *mut GError);
}

/// Env var telling a test body that it is the re-executed run under the preload.
pub const INNER_MARKER: &str = "GATECMD_UMOCKDEV_INNER";

/// True inside the re-executed, preloaded run of a test.
pub fn is_inner_run() -> bool {
    std::env::var_os(INNER_MARKER).is_some()
}

/// Re-executes this test binary for one test only, under the umockdev preload,
/// prints its output and asserts that it passed. `module` is the caller's `module_path!()`
/// and `name` the test function's name: a test binary holds many modules (tests/*.rs are a
/// few binaries, one module per topic), and `--exact` wants the test's whole path.
pub fn rerun_under_preload(module: &str, name: &str) {
    let test_name = crate::harness::test_path(module, name);
    let test_name = test_name.as_str();
    let exe = std::env::current_exe().expect("test binary path");
    let output = Command::new(exe)
        .args([test_name, "--exact", "--test-threads=1", "--nocapture"])
        .env("LD_PRELOAD", "libumockdev-preload.so.0")
        .env(INNER_MARKER, "1")
        .env_remove("UMOCKDEV_DIR")
        .output()
        .expect("re-running the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Without the preload the child would watch the real /sys and fail in confusing ways.
    assert!(
        !stderr.contains("cannot be preloaded"),
        "{test_name}: libumockdev-preload.so.0 could not be preloaded; install umockdev \
         (scripts/setup.sh --test):\n{stderr}"
    );
    println!("--- {test_name} under umockdev: stdout ---\n{stdout}");
    eprintln!("--- {test_name} under umockdev: stderr ---\n{stderr}");
    assert!(
        output.status.success(),
        "{test_name} failed under umockdev ({})",
        output.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{test_name} did not run exactly one test under umockdev"
    );
}

/// A umockdev testbed: a fake /sys and /dev for this process.
pub struct Testbed {
    raw: *mut c_void,
}

impl Testbed {
    /// Creates the testbed and points `UMOCKDEV_DIR` at it. Call before creating
    /// any udev monitor or libusb context.
    pub fn new() -> Self {
        assert!(
            is_inner_run(),
            "a Testbed needs the umockdev preload: call rerun_under_preload first"
        );
        // SAFETY: plain constructor; returns a new GObject reference we own.
        let raw = unsafe { umockdev_testbed_new() };
        assert!(!raw.is_null(), "umockdev_testbed_new failed");
        Testbed { raw }
    }

    /// Adds devices from umockdev-record text; emits an `add` uevent for each.
    pub fn add_from_string(&self, text: &str) {
        let text = CString::new(text).expect("fixture without NUL bytes");
        let mut error: *mut GError = std::ptr::null_mut();
        // SAFETY: valid testbed and C string; `error` is an out-pointer we free.
        let ok = unsafe { umockdev_testbed_add_from_string(self.raw, text.as_ptr(), &mut error) };
        if ok == 0 {
            let message = if error.is_null() {
                "unknown error".to_owned()
            } else {
                // SAFETY: a set GError has a valid message; freed right after.
                let m = unsafe { CStr::from_ptr((*error).message) }
                    .to_string_lossy()
                    .into_owned();
                unsafe { g_error_free(error) };
                m
            };
            panic!("umockdev_testbed_add_from_string: {message}");
        }
    }

    /// Sends a uevent (`add`, `remove`, `change`, `bind`, `unbind`) for a
    /// `/sys/devices/…` path.
    pub fn uevent(&self, syspath: &str, action: &str) {
        let path = CString::new(syspath).expect("syspath without NUL");
        let action = CString::new(action).expect("action without NUL");
        // SAFETY: valid testbed and C strings.
        unsafe { umockdev_testbed_uevent(self.raw, path.as_ptr(), action.as_ptr()) };
    }

    /// Rewrites a sysfs attribute of a `/sys/devices/…` path (no uevent: send `change`
    /// yourself, as the kernel would).
    pub fn set_attribute(&self, syspath: &str, name: &str, value: &str) {
        let path = CString::new(syspath).expect("syspath without NUL");
        let name = CString::new(name).expect("name without NUL");
        let value = CString::new(value).expect("value without NUL");
        // SAFETY: valid testbed and C strings; umockdev copies them.
        unsafe {
            umockdev_testbed_set_attribute(self.raw, path.as_ptr(), name.as_ptr(), value.as_ptr())
        };
    }

    /// Unplugs a device like the kernel does: `remove` for each child and then
    /// the device, deepest first, each followed by its removal from the testbed.
    pub fn unplug(&self, syspath: &str) {
        let top = self.root_dir().join(syspath.trim_start_matches('/'));
        let mut devices = Vec::new();
        collect_devices(&top, &mut devices);
        devices.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for dir in devices {
            let rel = dir
                .strip_prefix(self.root_dir())
                .expect("under the testbed");
            let sys = format!("/{}", rel.display());
            self.uevent(&sys, "remove");
            let c = CString::new(sys).expect("syspath without NUL");
            // SAFETY: valid testbed and C string.
            unsafe { umockdev_testbed_remove_device(self.raw, c.as_ptr()) };
        }
    }

    /// The testbed directory (holds `sys/` and `dev/`).
    pub fn root_dir(&self) -> PathBuf {
        // SAFETY: returns a newly allocated string we free with g_free.
        unsafe {
            let raw = umockdev_testbed_get_root_dir(self.raw);
            assert!(!raw.is_null(), "testbed without root dir");
            let path = PathBuf::from(CStr::from_ptr(raw).to_string_lossy().into_owned());
            g_free(raw.cast());
            path
        }
    }
}

impl Default for Testbed {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference.
        unsafe { g_object_unref(self.raw) };
    }
}

/// `dir` and every directory below it that is a device (has a `uevent` file).
fn collect_devices(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.join("uevent").is_file() {
        out.push(dir.to_owned());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Links (driver, subsystem, port, …) point elsewhere: not children.
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if is_dir {
            collect_devices(&path, out);
        }
    }
}

/// The RK3588 MaskROM fixture (tests/fixtures/rk3588-maskrom-1-2.umockdev) moved to port
/// `1-<port>` (1 < port < 1000): its sysfs path, device node, numbers and serial follow.
pub fn rk3588_maskrom_at(port: u32) -> String {
    include_str!("../fixtures/rk3588-maskrom-1-2.umockdev")
        .replace("usb1/1-2", &format!("usb1/1-{port}"))
        .replace("1-2:1.0", &format!("1-{port}:1.0"))
        .replace("bus/usb/001/002", &format!("bus/usb/001/{port:03}"))
        .replace("DEVNUM=002", &format!("DEVNUM={port:03}"))
        .replace("devnum=2\n", &format!("devnum={port}\n"))
        .replace("devpath=2\n", &format!("devpath={port}\n"))
        .replace("RK3588-EVB-0001", &format!("RK3588-EVB-{port:04}"))
}

/// A device at port `1-{port}` with the given ids and interface classes, in umockdev's
/// text form: the attributes sysfs shows and the `descriptors` blob (device descriptor,
/// one configuration, each interface with two bulk endpoints) the kernel and libusb read.
pub fn device_at(
    port: u32,
    vid: u16,
    pid: u16,
    bcd_usb: u16,
    bcd_device: u16,
    interfaces: &[(u8, u8, u8)],
) -> String {
    let le = |v: u16| [(v & 0xff) as u8, (v >> 8) as u8];
    let mut d: Vec<u8> = vec![18, 1];
    d.extend(le(bcd_usb));
    d.extend([0, 0, 0, 64]);
    d.extend(le(vid));
    d.extend(le(pid));
    d.extend(le(bcd_device));
    d.extend([1, 2, 3, 1]);
    let total = 9 + interfaces.len() * (9 + 14);
    d.extend([9, 2]);
    d.extend(le(total as u16));
    d.extend([interfaces.len() as u8, 1, 0, 0x80, 0xfa]);
    for (i, (c, s, p)) in interfaces.iter().enumerate() {
        d.extend([9, 4, i as u8, 0, 2, *c, *s, *p, 0]);
        d.extend([7, 5, 0x81 + i as u8, 2, 0, 2, 0]);
        d.extend([7, 5, 0x01 + i as u8, 2, 0, 2, 0]);
    }
    let hex: String = d.iter().map(|b| format!("{b:02X}")).collect();
    format!(
        "P: /devices/pci0000:00/0000:00:14.0/usb1/1-{port}\n\
         N: bus/usb/001/{port:03}\n\
         E: DEVNAME=/dev/bus/usb/001/{port:03}\n\
         E: DEVTYPE=usb_device\n\
         E: DRIVER=usb\n\
         E: PRODUCT={vid:x}/{pid:x}/{bcd_device:x}\n\
         E: BUSNUM=001\n\
         E: DEVNUM={port:03}\n\
         E: MAJOR=189\n\
         E: MINOR={port}\n\
         E: SUBSYSTEM=usb\n\
         A: bConfigurationValue=1\n\
         A: bNumInterfaces= {n}\n\
         A: bcdDevice={bcd_device:04x}\n\
         A: busnum=1\n\
         A: devnum={port}\n\
         A: devpath={port}\n\
         A: idProduct={pid:04x}\n\
         A: idVendor={vid:04x}\n\
         A: speed=480\n\
         A: version={major:2x}.{minor:02x}\n\
         H: descriptors={hex}\n",
        n = interfaces.len(),
        major = bcd_usb >> 8,
        minor = bcd_usb & 0xff,
    )
}
