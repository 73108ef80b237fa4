//! The capture task of one board: find the tty, open it raw at the baud rate, read
//! everything into the console's ring, and when the tty goes away (adapter unplugged or
//! re-enumerated: the read fails with EIO or ends) try again until it is back.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gatecmd_core::events::{Events, RecvError};
use tokio::io::unix::AsyncFd;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::board::{Console, ConsoleState};
use super::config::ConsoleSettings;
use super::tty;
use gatecmd_core::throttle::Throttle;
use gatecmd_devices::DeviceEvent;

/// Largest read per wake-up; a burst is drained in as many reads as it takes.
const READ_CHUNK: usize = 64 * 1024;
/// How long after an error (as opposed to an absence) the tty is tried again.
const ERROR_RETRY: Duration = Duration::from_secs(1);

/// Least time between two change announcements of one console: at most 10 per second,
/// however fast the board talks.
pub const ANNOUNCE_INTERVAL: Duration = gatecmd_core::throttle::TEN_PER_SECOND;

/// Starts capturing `console` until `stop` is cancelled. `devices` (the registry's events)
/// wakes a port-configured console when its port changes, instead of at the next retry.
/// Changes (output, state) are announced on `changes` as the board's name, coalesced.
pub fn spawn(
    console: Console,
    settings: ConsoleSettings,
    stop: CancellationToken,
    devices: Option<Events<DeviceEvent>>,
    changes: broadcast::Sender<String>,
) {
    tokio::spawn(announce(console.clone(), stop.clone(), changes));
    tokio::spawn(run(console, settings, stop, devices));
}

/// Sends the board's name after a change, at most once per [`ANNOUNCE_INTERVAL`]
/// ([`Throttle`]): what changes while one waits is that one announcement.
async fn announce(console: Console, stop: CancellationToken, changes: broadcast::Sender<String>) {
    let mut changed = console.subscribe();
    let mut throttle = Throttle::new(ANNOUNCE_INTERVAL);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            r = changed.changed() => if r.is_err() { return },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = throttle.pass() => {}
        }
        // An error only means nobody listens now.
        let _ = changes.send(console.board().to_string());
    }
}

/// How one attempt ended.
enum Ended {
    Stopped,
    /// Not there: try again after the usual retry.
    Absent,
    /// There but failing: try again later.
    Failed,
}

async fn run(
    console: Console,
    settings: ConsoleSettings,
    stop: CancellationToken,
    mut devices: Option<Events<DeviceEvent>>,
) {
    let port = console.config().port.clone();
    loop {
        let delay = match attempt(&console, &settings, &stop).await {
            Ended::Stopped => return,
            Ended::Absent => settings.retry,
            Ended::Failed => ERROR_RETRY.max(settings.retry),
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
            _ = port_changed(devices.as_mut(), port.as_deref()) => {}
        }
    }
}

/// Resolves once the registry reports an event on `port` (or lost some events); never
/// without a port or registry.
async fn port_changed(devices: Option<&mut Events<DeviceEvent>>, port: Option<&str>) {
    let (Some(rx), Some(port)) = (devices, port) else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(ev) if ev.id().to_string() == port => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

async fn attempt(console: &Console, settings: &ConsoleSettings, stop: &CancellationToken) -> Ended {
    let config = console.config();
    let path: PathBuf = match (&config.port, &config.path) {
        (Some(port), _) => match tty::find_by_port(&settings.sys_usb, port) {
            Some(p) => p,
            None => {
                let why = format!("no serial adapter with a tty on USB port {port}");
                console.set_closed(ConsoleState::Absent, None, why);
                return Ended::Absent;
            }
        },
        (None, Some(path)) => path.clone(),
        (None, None) => {
            let why = "neither port nor path is configured".to_string();
            console.set_closed(ConsoleState::Error, None, why);
            return Ended::Failed;
        }
    };
    let file = match tty::open_raw(&path, config.baud) {
        Ok(f) => f,
        Err(e) => {
            let (state, ended) = if e.is_absent() {
                (ConsoleState::Absent, Ended::Absent)
            } else {
                (ConsoleState::Error, Ended::Failed)
            };
            console.set_closed(state, Some(&path), e.to_string());
            return ended;
        }
    };
    // SAFETY: the File owns its descriptor and lives inside the AsyncFd until the AsyncFd
    // is dropped; nothing else closes or replaces it.
    let registered = unsafe { AsyncFd::register(file) };
    let fd = match registered {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            let why = format!("cannot watch {}: {e}", path.display());
            console.set_closed(ConsoleState::Error, Some(&path), why);
            return Ended::Failed;
        }
    };
    console.set_open(&path, fd.clone());
    let result = tokio::select! {
        _ = stop.cancelled() => None,
        r = pump(console, &fd) => Some(r),
    };
    match result {
        None => {
            console.set_closed(ConsoleState::Absent, Some(&path), "capture stopped".into());
            Ended::Stopped
        }
        // EIO is what a tty reads after a hang-up: the adapter (or the pty's master) went.
        Some(e)
            if e.raw_os_error() == Some(libc::EIO) || e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            let why = format!(
                "{} went away (hang-up); waiting for it to return",
                path.display()
            );
            console.set_closed(ConsoleState::Absent, Some(&path), why);
            Ended::Absent
        }
        Some(e) => {
            let why = format!("reading {} failed: {e}", path.display());
            console.set_closed(ConsoleState::Error, Some(&path), why);
            Ended::Failed
        }
    }
}

/// Reads until the tty fails; the error says why.
async fn pump(console: &Console, fd: &AsyncFd<std::fs::File>) -> io::Error {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let mut ready = match fd.readable().await {
            Ok(r) => r,
            Err(e) => return e,
        };
        match ready.try_io(|f| f.get_ref().read(&mut buf)) {
            Ok(Ok(0)) => return io::ErrorKind::UnexpectedEof.into(),
            Ok(Ok(n)) => console.append(&buf[..n]),
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return e,
            Err(_would_block) => {}
        }
    }
}
