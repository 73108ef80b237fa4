//! Why a labgrid coordinator session, a mirror call or a port of the bridge failed, as a
//! value; the session's end (`Ended::why`), the audit lines and the log render it.

/// A failure of the labgrid bridge.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("bad coordinator address: {0}")]
    BadAddress(tonic::transport::Error),
    #[error("cannot connect to {to}: {error}")]
    Connect {
        to: String,
        error: tonic::transport::Error,
    },
    #[error("coordinator: {0}")]
    Coordinator(tonic::transport::Error),
    /// The coordinator refused to open a stream (`which`: exporter or client).
    #[error("{which} stream refused: {message}")]
    StreamRefused {
        which: &'static str,
        message: String,
    },
    /// An open stream failed.
    #[error("{which} stream: {message}")]
    Stream {
        which: &'static str,
        message: String,
    },
    #[error("the coordinator ended the client stream")]
    ClientStreamEnded,
    /// A unary call answered with an error status; its message as the coordinator wrote it.
    #[error("{0}")]
    Call(String),
    #[error("{what}: no answer in {secs} s")]
    NoAnswer { what: String, secs: u64 },
    #[error("client stream queue full")]
    ClientQueueFull,
    #[error("the coordinator reads nothing (exporter queue full)")]
    ExporterQueueFull,
    /// A part of gatecmd the session listens to stopped.
    #[error("{0} stopped")]
    Stopped(&'static str),
    #[error("cannot listen on {bind} (labgrid.console_bind): {error}")]
    Listen { bind: String, error: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("gatecmd: board {0} has no console capture running")]
    NoCapture(String),
    #[error("gatecmd: {0}")]
    ConsoleWrite(#[from] gatecmd_domain::console::WriteError),
}
