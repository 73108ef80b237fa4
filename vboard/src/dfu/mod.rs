//! The DFU family: a USB DFU 1.1 device that Debian 12's `dfu-util` 0.11 lists (`-l`),
//! downloads to (`-D`), uploads from (`-U`) and detaches from runtime mode (`-e`).
//! `state` is the protocol (pure), `descriptors` the interface FunctionFS presents,
//! `targets` the alt settings in the board's flash, `board` the board.

pub mod board;
pub mod descriptors;
pub mod state;
pub mod targets;
