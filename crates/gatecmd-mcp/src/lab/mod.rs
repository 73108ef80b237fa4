//! One lab for agents (docs/LAB.md, "One lab for agents"): this host's agents reach the
//! boards of the other gatecmd hosts of the lab (`labgrid.peers`) through their own host.
//!
//! - `answers`: what a lab-wide `lock_board` asks of each host, its answers made the agent's.
//! - `names`: `HOST/BOARD` and `HOST/LEASE`, split and made.
//! - `peer_link`: one tool call on a peer, as its `peer: true` client acting for an agent,
//!   bounded in time and bytes; its failures (`host_unreachable`).
//! - `boards`: `list_boards {scope: "lab"}`, every host's boards, asked of all peers at once.
//! - `directory`: the coordinator's listing of the lab's boards joined to the peers' answers.
//! - `hosts`: a host of the lab as `list_boards {scope: "lab"}` shows it.
//! - `lock`: `lock_board {scope: "lab"}`, a matching board here first, else on a peer.
//! - `queue`: its wait, queued on every host at once (first come, first served lab-wide).
//! - `forward`: a board tool on `HOST/BOARD` (`HOST/LEASE`, `HOST/JOB`) sent to that host.
//! - `flash`: `flash_board` on `HOST/BOARD`, a job there followed from here.
//! - `upload`: a file of this host sent to a peer's staging (a remote flash's image).
//! - `jobs`: a peer's job named `HOST/JOB` in its answers.
//! - `queued_here`: a lab waiter another host queued here, by its arrival there, and
//!   registered so that host can withdraw it.
//! - `same_file`: a file the board's host holds already, byte for byte (not sent again).
//! - `wait_link`: another host's lab wait routes: withdrawing this host's agent's wait
//!   there, claiming a waiter of that host for a board freed here.
//! - `scope`: the `scope` argument (`host`, the default, or `lab`).

pub mod answers;
pub mod boards;
pub mod directory;
pub mod flash;
pub mod forward;
pub mod hosts;
pub mod jobs;
pub mod lock;
pub mod names;
pub mod peer_link;
pub mod queue;
pub mod queued_here;
pub mod same_file;
pub mod scope;
pub mod upload;
pub mod wait_link;
