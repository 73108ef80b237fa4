//! Each board's captured console on a TCP port (labgrid's `NetworkSerialPort`, protocol
//! raw), for the labgrid place that holds the board and only for the listed person who
//! acquired it, from one of their accounts (`admission.rs`): output from the capture ring as it arrives, input written
//! to the board. Anyone else is told in one line that it is not theirs (naming no account)
//! and closed at once, so a refused
//! peer holds nothing. Every byte in either direction is checked against the hold first,
//! and a hold that ends closes the connection at that moment, a write to a client that
//! stopped reading included (its unsent bytes are discarded, not delivered later).

use super::admission::{Admitted, PortRefusal};
use super::error::LabError;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::Lab;
use gatecmd_domain::audit::LabgridEvent;
use gatecmd_domain::config::LabSettings;
use gatecmd_domain::locks::LeaseId;
use gatecmd_domain::state::AppState;

/// Connections the holder of a board may have open on its console port at once (a
/// person's console, a logger). Counted per hold: nobody else can take them.
const MAX_CONNECTIONS: usize = 4;
/// Bytes sent per write from the ring.
const CHUNK: usize = 16 << 10;
/// The hold is re-checked on every lock event; this is the backstop between events (a
/// place update that names another user, say).
const RECHECK: Duration = Duration::from_millis(250);

/// One bound console port.
pub struct Listener {
    pub board: String,
    pub port: u16,
    listener: TcpListener,
}

/// Binds a port for every board with a console.
pub async fn bind(
    state: &AppState,
    lab: &LabSettings,
) -> Result<HashMap<String, Listener>, LabError> {
    let mut out = HashMap::new();
    for b in state.config().boards.iter().filter(|b| b.console.is_some()) {
        let (listener, port) = super::bind_port(lab).await?;
        out.insert(
            b.name.clone(),
            Listener {
                board: b.name.clone(),
                port,
                listener,
            },
        );
    }
    Ok(out)
}

/// Open connections per hold (by lease): a new hold starts with all its slots free even
/// while the last holder's connections are still closing.
#[derive(Default)]
struct Slots(Mutex<HashMap<LeaseId, usize>>);

struct Slot {
    slots: Arc<Slots>,
    lease: LeaseId,
}

impl Slots {
    fn take(self: &Arc<Self>, lease: &LeaseId) -> Option<Slot> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(lease.clone()).or_default();
        if *n >= MAX_CONNECTIONS {
            return None;
        }
        *n += 1;
        Some(Slot {
            slots: self.clone(),
            lease: lease.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.slots.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.lease) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.lease);
            }
        }
    }
}

/// Tells a refused peer why, without waiting for it (a peer that does not read gets
/// nothing), and closes.
fn refuse(sock: TcpStream, why: &str) {
    let _ = sock.try_write(format!("{why}\r\n").as_bytes());
}

/// Accepts connections until `shutdown`. Admission happens here, before anything is
/// spawned: a refused connection is closed within the accept, so no number of them can
/// pile up, and an admitted one belongs to the holder.
pub async fn serve(lab: Arc<Lab>, l: Listener, shutdown: CancellationToken) {
    let slots = Arc::new(Slots::default());
    let local = match l.listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(board = %l.board, error = %e, "labgrid console: no local address");
            return;
        }
    };
    loop {
        let (sock, peer) = tokio::select! {
            r = l.listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(board = %l.board, error = %e, "labgrid console: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        // A wildcard bind: the address this connection reached.
        let local = sock.local_addr().unwrap_or(local);
        let admitted = match lab.admit(&l.board, peer, local) {
            Ok(a) => a,
            Err(why) => {
                refused(&lab, &l.board, peer, &why);
                refuse(sock, &why.to_string());
                continue;
            }
        };
        let Some(slot) = slots.take(&admitted.hold.lease) else {
            let why = format!(
                "gatecmd: console of {} has {MAX_CONNECTIONS} connections of this hold already",
                l.board
            );
            refuse(sock, &why);
            continue;
        };
        let lab = lab.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut sock = sock;
            let mut written = 0;
            let ended = connection(&lab, &admitted, &mut sock, &mut written, stop).await;
            let why = match &ended {
                Ok(e) => e.to_string(),
                Err(e) => e.to_string(),
            };
            if let Ok(Ended::Lost(_)) = ended {
                // Reset, not closed: what the kernel still buffers for a client that
                // stopped reading is discarded instead of delivered after the hold.
                let _ = sock.set_zero_linger();
            } else {
                let _ = sock.try_write(format!("{why}\r\n").as_bytes());
            }
            lab.audit(LabgridEvent::Console {
                board: &admitted.board,
                peer: peer.to_string(),
                user: &admitted.peer.name,
                place: &admitted.hold.place,
                bytes_written: written,
                closed: &why,
            });
            drop(slot);
        });
    }
}

/// The operator hears why (with the names the peer is not told).
fn refused(lab: &Lab, board: &str, peer: SocketAddr, why: &PortRefusal) {
    let reason = why.for_operator();
    tracing::info!(board = %board, %peer, why = %reason, "labgrid console: connection refused");
    lab.audit(LabgridEvent::ConsoleRefused {
        board,
        peer: peer.to_string(),
        reason: &reason,
    });
}

/// Resolves when the admitted connection may no longer act; checks on every lock event
/// and every [`RECHECK`].
async fn hold_lost(
    lab: &Lab,
    a: &Admitted,
    events: &mut gatecmd_core::events::Events<gatecmd_domain::locks::LockEvent>,
) -> PortRefusal {
    let mut tick = tokio::time::interval(RECHECK);
    let mut open = true;
    loop {
        if let Err(why) = lab.still_admitted(a) {
            return why;
        }
        tokio::select! {
            ev = events.recv(), if open => {
                // Closed: only at shutdown; the tick goes on checking meanwhile.
                open = !matches!(ev, Err(gatecmd_core::events::RecvError::Closed));
            }
            _ = tick.tick() => {}
        }
    }
}

/// Why an admitted console connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("closed by the client")]
    Client,
    #[error("console capture stopped")]
    Capture,
    #[error("gatecmd stopping")]
    Stopping,
    /// The hold ended or changed hands: the connection is reset.
    #[error("{0}")]
    Lost(PortRefusal),
}

/// Serves one admitted connection while its hold lasts, counting the bytes written to
/// the board in `written`; returns why it ended.
async fn connection(
    lab: &Lab,
    a: &Admitted,
    sock: &mut TcpStream,
    written: &mut u64,
    shutdown: CancellationToken,
) -> Result<Ended, LabError> {
    let Some(console) = lab.state.consoles.get(&a.board) else {
        return Err(LabError::NoCapture(a.board.clone()));
    };
    let mut events = lab.state.locks.subscribe();
    let mut end = console.subscribe();
    // From now on: nothing printed before the connection is sent.
    let (_, mut cursor) = console.bounds();
    let (mut rd, mut wr) = sock.split();
    let mut buf = vec![0u8; 4096];
    let mut telnet = Telnet::default();
    loop {
        tokio::select! {
            n = rd.read(&mut buf) => {
                let n = n?;
                if n == 0 {
                    return Ok(Ended::Client);
                }
                // Bytes typed earlier may be read only now: the hold decides at the write.
                if let Err(why) = lab.still_admitted(a) {
                    return Ok(Ended::Lost(why));
                }
                let data = telnet.strip(&buf[..n]);
                if !data.is_empty() {
                    console.write(&data).await?;
                    *written += data.len() as u64;
                }
            }
            changed = end.changed() => {
                if changed.is_err() {
                    return Ok(Ended::Capture);
                }
                loop {
                    // Sliced before the check: these bytes were captured while it held.
                    let s = console.slice(cursor, CHUNK);
                    if s.bytes.is_empty() { break; }
                    if let Err(why) = lab.still_admitted(a) {
                        return Ok(Ended::Lost(why));
                    }
                    cursor = s.to;
                    // A client that stops reading blocks this write; the hold ending
                    // ends it.
                    tokio::select! {
                        r = wr.write_all(&s.bytes) => r?,
                        why = hold_lost(lab, a, &mut events) => return Ok(Ended::Lost(why)),
                        _ = shutdown.cancelled() => return Ok(Ended::Stopping),
                    }
                }
            }
            why = hold_lost(lab, a, &mut events) => return Ok(Ended::Lost(why)),
            _ = shutdown.cancelled() => return Ok(Ended::Stopping),
        }
    }
}

/// Drops telnet commands from what a client sends (labgrid-client's microcom -t and
/// telnet negotiate options; the port is raw and answers none), keeping `IAC IAC` as one
/// 0xFF and a CR's NUL padding out.
#[derive(Default)]
struct Telnet {
    state: TState,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum TState {
    #[default]
    Data,
    Cr,
    Iac,
    Option,
    Sub,
    SubIac,
}

const IAC: u8 = 255;
const SB: u8 = 250;
const SE: u8 = 240;

impl Telnet {
    fn strip(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            self.state = match (self.state, b) {
                (TState::Data | TState::Cr, IAC) => TState::Iac,
                (TState::Cr, 0) => TState::Data,
                (TState::Data | TState::Cr, b'\r') => {
                    out.push(b);
                    TState::Cr
                }
                (TState::Data | TState::Cr, _) => {
                    out.push(b);
                    TState::Data
                }
                (TState::Iac, IAC) => {
                    out.push(IAC);
                    TState::Data
                }
                (TState::Iac, SB) => TState::Sub,
                // WILL, WONT, DO, DONT take one option byte.
                (TState::Iac, 251..=254) => TState::Option,
                (TState::Iac, _) => TState::Data,
                (TState::Option, _) => TState::Data,
                (TState::Sub, IAC) => TState::SubIac,
                (TState::Sub, _) => TState::Sub,
                (TState::SubIac, SE) => TState::Data,
                (TState::SubIac, _) => TState::Sub,
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Telnet;

    #[test]
    fn telnet_negotiation_is_dropped_and_data_kept() {
        let mut t = Telnet::default();
        // DO ECHO, WILL SGA, a subnegotiation, then "ls\r\0", an escaped 0xFF.
        let input = [
            255, 253, 1, 255, 251, 3, 255, 250, 44, 1, 0, 255, 240, b'l', b's', b'\r', 0, 255, 255,
        ];
        assert_eq!(t.strip(&input), vec![b'l', b's', b'\r', 255]);
        // State carries across reads: IAC at the end of one, its option in the next.
        assert_eq!(t.strip(&[b'a', 255]), vec![b'a']);
        assert_eq!(t.strip(&[253, 1, b'b']), vec![b'b']);
    }
}
