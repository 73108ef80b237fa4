//! The fastboot family: an Android bootloader in fastboot mode that Debian 12's `fastboot`
//! (1:29.0.6) drives: `getvar`, `download`, `flash` (raw or sparse pieces, `sparse.rs`),
//! `erase`, `reboot`, `reboot-bootloader`, `continue`. `command` is the wire text,
//! `variables` the getvar answers, `partitions` the table, `session` one command against
//! the flash, `board` the board.

pub mod board;
pub mod command;
pub mod partitions;
pub mod session;
pub mod variables;
