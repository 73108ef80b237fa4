//! What a running child prints: each pipe read in 16 KiB chunks into a capped capture
//! (bytes past the cap are counted, not kept), and, only when someone watches, passed on
//! through a bounded queue and split into lines. Nothing here grows with the output: a
//! full queue makes the readers wait, which pushes back on the child through its pipe.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// Output chunks (16 KiB at most) in flight between the pipe readers and the line consumer:
/// at most 1 MiB per run. A full queue makes the readers wait, which pushes back on the child.
pub(crate) const CHUNK_QUEUE: usize = 64;

/// Longest line passed on (the rest of a longer line is cut, never buffered).
const MAX_LINE: usize = 64 * 1024;

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// What a reader has kept so far; shared so that an abandoned reader's output is not lost.
#[derive(Default)]
pub(crate) struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

pub(crate) type SharedCapture = Arc<Mutex<Captured>>;

async fn read_stream<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    kind: StreamKind,
    max: usize,
    chunks: Option<mpsc::Sender<(StreamKind, Vec<u8>)>>,
    out: SharedCapture,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        // A std mutex: held for one copy, never across an await.
        if let Ok(mut c) = out.lock() {
            let room = max.saturating_sub(c.kept.len());
            c.kept.extend_from_slice(&chunk[..room.min(n)]);
            c.dropped += n.saturating_sub(room) as u64;
        }
        // Waits while the queue is full: back-pressure on the child, not growth.
        if let Some(chunks) = &chunks
            && chunks.send((kind, chunk.to_vec())).await.is_err()
        {
            return;
        }
    }
}

/// How a run passes its output on, line by line.
pub enum LineTap<'a> {
    /// Every line, in order.
    Every(&'a mut (dyn FnMut(StreamKind, &str) + Send)),
    /// For a consumer that only wants the latest of something (a progress percentage): the
    /// lines of each chunk of output newest first, until `f` takes one (returns true). A
    /// flood of matching lines then costs one look per chunk, not one per line.
    Latest(&'a mut (dyn FnMut(StreamKind, &str) -> bool + Send)),
}

impl LineTap<'_> {
    fn take(&mut self, kind: StreamKind, line: &[u8]) -> bool {
        if line.is_empty() {
            return false;
        }
        let line = String::from_utf8_lossy(line);
        match self {
            LineTap::Every(f) => {
                f(kind, &line);
                false
            }
            LineTap::Latest(f) => f(kind, &line),
        }
    }
}

/// Splits chunks of output into lines (on `\n` and `\r`) per stream; a line that lies whole
/// inside one chunk is passed on where it lies, without a copy.
#[derive(Default)]
pub(crate) struct Lines {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Where the complete lines of the current chunk end (reused between chunks).
    ends: Vec<usize>,
}

impl Lines {
    pub(crate) fn feed(&mut self, kind: StreamKind, chunk: &[u8], tap: &mut LineTap<'_>) {
        let pending = match kind {
            StreamKind::Stdout => &mut self.stdout,
            StreamKind::Stderr => &mut self.stderr,
        };
        self.ends.clear();
        self.ends.extend(
            chunk
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n' || **b == b'\r')
                .map(|(i, _)| i),
        );
        let Some(&last_end) = self.ends.last() else {
            let room = MAX_LINE.saturating_sub(pending.len());
            pending.extend_from_slice(&chunk[..chunk.len().min(room)]);
            return;
        };
        // The first line continues what the previous chunk left unfinished.
        let first = self.ends[0];
        let room = MAX_LINE.saturating_sub(pending.len());
        pending.extend_from_slice(&chunk[..first.min(room)]);
        let starts = std::iter::once(0).chain(self.ends.iter().map(|e| e + 1));
        let inner: Vec<(usize, usize)> = starts.zip(self.ends.iter().copied()).skip(1).collect();
        match tap {
            LineTap::Every(_) => {
                tap.take(kind, pending);
                for &(a, b) in &inner {
                    tap.take(kind, &chunk[a..b]);
                }
            }
            LineTap::Latest(_) => {
                let taken = inner
                    .iter()
                    .rev()
                    .any(|&(a, b)| tap.take(kind, &chunk[a..b]));
                if !taken {
                    tap.take(kind, pending);
                }
            }
        }
        pending.clear();
        let tail = &chunk[last_end + 1..];
        pending.extend_from_slice(&tail[..tail.len().min(MAX_LINE)]);
    }

    /// The last line of each stream, if it did not end with a newline.
    pub(crate) fn finish(&mut self, tap: &mut LineTap<'_>) {
        for (kind, pending) in [
            (StreamKind::Stdout, &mut self.stdout),
            (StreamKind::Stderr, &mut self.stderr),
        ] {
            tap.take(kind, pending);
            pending.clear();
        }
    }
}

/// Spawns a reader for one pipe.
pub(crate) fn spawn_reader<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    r: Option<R>,
    kind: StreamKind,
    max: usize,
    lines: Option<&mpsc::Sender<(StreamKind, Vec<u8>)>>,
) -> Option<(tokio::task::JoinHandle<()>, SharedCapture)> {
    let r = r?;
    let out = SharedCapture::default();
    let task = tokio::spawn(read_stream(r, kind, max, lines.cloned(), out.clone()));
    Some((task, out))
}

/// The output a reader captured, once its pipe closed or `grace` passed.
pub(crate) async fn finish_reader(
    reader: Option<(tokio::task::JoinHandle<()>, SharedCapture)>,
    grace: Duration,
) -> (Vec<u8>, u64) {
    let Some((mut task, out)) = reader else {
        return (Vec::new(), 0);
    };
    // A process that left the group (setsid) may still hold the pipe; do not wait forever,
    // and keep what was read until then.
    if tokio::time::timeout(grace, &mut task).await.is_err() {
        task.abort();
    }
    match out.lock() {
        Ok(mut c) => (std::mem::take(&mut c.kept), c.dropped),
        Err(_) => (Vec::new(), 0),
    }
}
