//! Talking to a leased board over its serial console, shared by the console conversation
//! tools (`board_run`, `uboot_run`, `boot_board`): taking the board under the caller's
//! lease (`access`), one command line at its shell or U-Boot prompt (`command`, the whole
//! of `board_run` and `uboot_run` but for the prompt each names), who `board_run` logs in
//! as at a login prompt (`login`), and the refusals they share (`refusal`). The conversation itself (framing, prompts, waits on the ring) is the
//! domain's (`gatecmd_domain::console::session`).

mod access;
mod command;
mod login;
mod refusal;

pub use access::{Leased, take_board, take_leased, talk_refusal};
pub use command::{
    At, BoardRunRequest, BoardRunResult, DEFAULT_TIMEOUT_SECS, MAX_COMMAND_BYTES, MAX_OUTPUT_BYTES,
    MAX_TIMEOUT_SECS, run,
};
pub use login::CallerLogin;
pub use refusal::TalkRefusal;
