//! What a client or the server may hold at once: `permits`, a counting semaphore a
//! reload can resize (the children, each client's command slots); `quotas`, per-client
//! shares of what a client holds open (subscriptions, streams, answers, waiting reads).

pub mod permits;
pub mod quotas;
