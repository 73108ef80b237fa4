//! Lane 2 of scripts/cargo-tests.sh, after the flashing engine's VM test: what needs a device
//! (umockdev testbeds re-run under the preload, pty boards, the usbvm guests): devices, boards,
//! consoles, boot reports, isolation, leases.
//!
//! One test binary, a module per topic (tests/hardware/<topic>.rs): the suite links
//! once per lane, not once per file (README.md, "Development"). A new topic is a
//! file in tests/hardware/ and its `mod` line here (tests/server/test_binaries.rs checks both).

// The modules every topic may use, in tests/<name>/mod.rs.
#[path = "../common/mod.rs"]
mod common;
#[path = "../harness/mod.rs"]
mod harness;
#[path = "../sim_board/mod.rs"]
mod sim_board;
#[path = "../usbvm/mod.rs"]
mod usbvm;

mod board_console;
mod board_login;
mod board_release;
mod board_shell;
mod boards;
mod boot_reports;
mod command_modes;
mod console;
mod console_usbvm;
mod devices;
mod devices_e2e;
mod families;
mod isolation_e2e;
mod isolation_view;
mod jobs_leases;
mod locks_mcp;
mod power_pdudaemon;
mod usbvm_hotplug;
