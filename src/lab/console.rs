//! Each board's captured console on a TCP port (labgrid's `NetworkSerialPort`, protocol
//! raw), for the labgrid place that holds the board: output from the capture ring as it
//! arrives, input written to the board. Anyone else who connects is told why and closed.
//! The port is bound on `labgrid.console_bind` (loopback by default: people reach it
//! through labgrid's SSH proxy).

use super::error::LabError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Lab;
use crate::config::LabSettings;
use crate::state::AppState;

/// Connections one board's console port serves at once (a person's console, a logger);
/// more are refused with a line saying so.
const MAX_CONNECTIONS: usize = 4;
/// Bytes sent per write from the ring.
const CHUNK: usize = 16 << 10;
/// How often a connection checks that its place still holds the board.
const RECHECK: Duration = Duration::from_millis(500);

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

/// Accepts connections until `shutdown`.
pub async fn serve(lab: Arc<Lab>, l: Listener, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (mut sock, peer) = tokio::select! {
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let _ = sock
                .write_all(
                    format!(
                        "gatecmd: console of {} has {MAX_CONNECTIONS} connections already\r\n",
                        l.board
                    )
                    .as_bytes(),
                )
                .await;
            continue;
        };
        let lab = lab.clone();
        let board = l.board.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let outcome = connection(&lab, &board, &mut sock, stop).await;
            let (place, written, why) = match outcome {
                Ok((place, written, why)) => (Some(place), written, why),
                Err(e) => {
                    let why = e.to_string();
                    let _ = sock.write_all(format!("{why}\r\n").as_bytes()).await;
                    (None, 0, why)
                }
            };
            lab.audit(
                "labgrid_console",
                serde_json::json!({"board": board, "peer": peer.to_string(), "place": place, "bytes_written": written, "closed": why}),
            );
            drop(slot);
        });
    }
}

/// Serves one connection while the board's place holds it; returns the place, the bytes
/// written to the board and why it ended.
async fn connection(
    lab: &Lab,
    board: &str,
    sock: &mut TcpStream,
    shutdown: CancellationToken,
) -> Result<(String, u64, String), LabError> {
    let Some(hold) = lab.holds.get(board) else {
        return Err(LabError::NotAcquired(board.to_string()));
    };
    let Some(console) = lab.state.consoles.get(board) else {
        return Err(LabError::NoCapture(board.to_string()));
    };
    let mut end = console.subscribe();
    let (_, mut cursor) = console.bounds();
    let (mut rd, mut wr) = sock.split();
    let mut buf = vec![0u8; 4096];
    let mut telnet = Telnet::default();
    let mut written: u64 = 0;
    let mut recheck = tokio::time::interval(RECHECK);
    loop {
        tokio::select! {
            n = rd.read(&mut buf) => {
                let n = n?;
                if n == 0 {
                    return Ok((hold.place, written, "closed by the client".into()));
                }
                let data = telnet.strip(&buf[..n]);
                if !data.is_empty() {
                    console.write(&data).await?;
                    written += data.len() as u64;
                }
            }
            changed = end.changed() => {
                if changed.is_err() {
                    return Ok((hold.place, written, "console capture stopped".into()));
                }
                loop {
                    let s = console.slice(cursor, CHUNK);
                    if s.bytes.is_empty() { break; }
                    cursor = s.to;
                    wr.write_all(&s.bytes).await?;
                }
            }
            _ = recheck.tick() => {
                if lab.holds.get(board).map(|h| h.lease) != Some(hold.lease.clone()) {
                    let _ = wr.write_all(b"\r\ngatecmd: the place released the board\r\n").await;
                    return Ok((hold.place, written, "the place released the board".into()));
                }
            }
            _ = shutdown.cancelled() => return Ok((hold.place, written, "gatecmd stopping".into())),
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
