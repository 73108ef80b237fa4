//! `power: {pdudaemon: {daemon, pdu, port, listener?, binary?}}`: the board hangs on an
//! outlet of a PDU that a pdudaemon drives (Debian's `pdudaemon`); gatecmd asks it with
//! pdudaemon's own client, `pduclient --daemon HOST --hostname PDU --port N --command
//! on|off` (Debian's `pdudaemon-client`). pdudaemon queues requests per PDU, so agents and
//! other users of the same PDU (LAVA, labgrid) never talk to it at once.
//!
//! pduclient exits 0 once the daemon acknowledged a request, which it does after running it
//! (1: the daemon was not reached; 127: it refused, e.g. a PDU it does not know). The
//! acknowledgement does not say whether the PDU's driver succeeded (pdudaemon logs a driver
//! that fails after its retries), so the state gatecmd records is the one it asked for. It
//! always dials the daemon's port 16421.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::super::values::parse_abs;
use super::backend::{Backend, Check, Context, SpecError};
use crate::exec::Spec;

/// Where pduclient is looked for when the section names no binary (Debian's
/// `pdudaemon-client`).
pub const DEFAULT_PDUCLIENT: &str = "/usr/bin/pduclient";

/// How long one request may take: pdudaemon answers once the PDU has switched, after any
/// request queued before it on that PDU, and a driver may retry.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The protocol the daemon listens with (its config's `daemon.listener`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    /// pduclient's default.
    Tcp,
    /// `pduclient --http` (Debian's shipped pdudaemon.conf listens so).
    Http,
}

/// `pdudaemon:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    daemon: String,
    pdu: String,
    port: u32,
    listener: Option<Listener>,
    binary: Option<String>,
}

/// An outlet of a PDU that pdudaemon drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdudaemon {
    /// The host pdudaemon runs on (`--daemon`).
    pub daemon: String,
    /// The PDU's name in pdudaemon's `pdus:` (`--hostname`).
    pub pdu: String,
    /// The PDU's outlet the board hangs on (`--port`).
    pub port: u32,
    /// How the daemon listens.
    pub listener: Listener,
    /// The pduclient binary (absolute).
    pub binary: PathBuf,
}

/// A host name or IPv4 address as pduclient connects to it: 1-253 of `A-Z a-z 0-9 . -`,
/// not starting with `-` (it is one argument, and never an option).
fn valid_host(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
}

/// A key of pdudaemon's `pdus:`: 1-64 of `A-Z a-z 0-9 _ . : -`, not starting with `-`.
/// Its TCP protocol splits a request at spaces, so a name with one could not be asked for.
fn valid_pdu(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

impl Backend for Pdudaemon {
    const NAME: &'static str = "pdudaemon";
    const FORM: &'static str = "pdudaemon: {daemon, pdu, port, listener?, binary?}";
    type Raw = Raw;

    fn check(raw: Raw, c: &mut Check<'_>) -> Option<Self> {
        let mut ok = true;
        if !valid_host(&raw.daemon) {
            let e = format!(
                "daemon {:?} is not a host name or IPv4 address: write the host pdudaemon runs on, as pduclient --daemon takes it (e.g. \"localhost\" or \"pdu-server.lab\")",
                raw.daemon
            );
            c.error("pdudaemon.daemon", e);
            ok = false;
        }
        if !valid_pdu(&raw.pdu) {
            let e = format!(
                "pdu {:?} cannot be a PDU of pdudaemon's config: write its key under \"pdus\" (1-64 of A-Z a-z 0-9 _ . : -, not starting with -)",
                raw.pdu
            );
            c.error("pdudaemon.pdu", e);
            ok = false;
        }
        if raw.port > u32::from(u16::MAX) {
            let e = format!("port {} is not an outlet number (0-65535)", raw.port);
            c.error("pdudaemon.port", e);
            ok = false;
        }
        let binary = match raw.binary {
            None => Some(PathBuf::from(DEFAULT_PDUCLIENT)),
            Some(b) => c.value(parse_abs(&b), "pdudaemon.binary"),
        };
        Some(Pdudaemon {
            daemon: raw.daemon,
            pdu: raw.pdu,
            port: raw.port,
            listener: raw.listener.unwrap_or(Listener::Tcp),
            binary: binary.filter(|_| ok)?,
        })
    }

    fn spec(&self, _: &Context<'_>, on: bool) -> Result<Spec, SpecError> {
        Ok(Spec {
            binary: self.binary.clone(),
            // Built from checked parts only (a host, a PDU name, a number).
            args: self.args(if on { "on" } else { "off" }),
            env: Default::default(),
            timeout: TIMEOUT,
            isolation: None,
            inherit: vec![],
            live_output: false,
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} {}",
            self.binary.display(),
            self.args("on|off").join(" ")
        )
    }
}

impl Pdudaemon {
    /// pduclient's arguments for `command`.
    fn args(&self, command: &str) -> Vec<String> {
        let http = (self.listener == Listener::Http).then(|| "--http".to_string());
        http.into_iter()
            .chain([
                "--daemon".into(),
                self.daemon.clone(),
                "--hostname".into(),
                self.pdu.clone(),
                "--port".into(),
                self.port.to_string(),
                "--command".into(),
                command.into(),
            ])
            .collect()
    }
}
