//! A board's console as the tools meet it.
//!
//! - `console_access`: a board's console by name and who may use it, for the console
//!   tools and the console resource.
//! - `board_talk`: a leased board, its console and its key, and one command line at its
//!   shell or U-Boot prompt, shared by `board_run`, `uboot_run` and `boot_board`.

pub mod board_talk;
pub mod console_access;
