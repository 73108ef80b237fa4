//! Flashing a leased board, as a call: the request checked against the `flash:` policy,
//! its files opened beneath the file roots, the client's command slot and the board taken
//! (on one configuration snapshot), the call held for an approval when a rule holds (the
//! files hashed once, for the approver; after the yes the policy checked again, the board
//! taken again and the files found unchanged without reading them again), and the flash run
//! as a job (the running list's row, the audit lines, the job's end with its answer). The
//! flash itself is [`crate::flash`]; the surface (`flash_board`) words the refusals, holds
//! the approval round trip and renders the answer.
//!
//! # Layout
//!
//! - `request`: what a flash call asks, why it may be refused, and the files it opened.
//! - `prepare`: everything checked and taken before the job (with the approval, if a
//!   rule holds).
//! - `approval`: holding the call for a person's yes: the files' SHA-256 and stamps, the
//!   request, the re-check after the yes.
//! - `launch`: the job: started, run, audited and ended with the surface's answer.

mod approval;
mod launch;
mod prepare;
mod request;

pub use approval::{Approve, Stamp};
pub use launch::{Answer, LineSink, Progress, launch};
pub use prepare::{DEFAULT_TIMEOUT_SECS, Prepared, audit_refused, prepare};
pub use request::{Ask, PairNames, Refused};

#[cfg(test)]
mod tests;
