//! Reading a console: the text since a cursor, optionally after waiting for a regex to
//! appear in new output. Waiting holds no lock: it sleeps on the ring's end cursor (a
//! `watch`), so a reader wakes as soon as the capture task appends.

use std::time::Duration;

use regex::Regex;
use tokio_util::sync::CancellationToken;

use super::board::Console;
use crate::output::clean;

/// Bytes returned when no cursor is given and nothing is awaited: the recent past.
pub const DEFAULT_TAIL_BYTES: u64 = 4096;
/// How far back before the newest bytes a regex is tried again, so a match split across
/// two appends (or a line still being written) is found, without rescanning a long line.
const RESCAN_BYTES: u64 = 4096;

/// What to read.
#[derive(Debug, Clone)]
pub struct ReadSpec {
    /// Where to start; `None`: the last [`DEFAULT_TAIL_BYTES`], or with `wait_for`, the
    /// output from now on.
    pub cursor: Option<u64>,
    /// Most raw bytes returned; read on from `next_cursor`.
    pub max_bytes: usize,
    /// A regex awaited in the cleaned output from the cursor on.
    pub wait_for: Option<Regex>,
    /// Longest wait for `wait_for`.
    pub timeout: Duration,
}

/// What a read gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The output from `cursor` to `next_cursor`, cleaned (ANSI removed, `\r` applied).
    pub text: String,
    /// Cursor of the first byte of `text` (later than asked when the ring lost bytes).
    pub cursor: u64,
    /// Pass this as the next read's cursor.
    pub next_cursor: u64,
    /// Bytes between the asked cursor and `cursor` that the ring no longer held.
    pub dropped_bytes: u64,
    /// `wait_for` was found (false when nothing was awaited or the wait timed out).
    pub matched: bool,
    /// The text `wait_for` matched.
    pub match_text: Option<String>,
}

/// Why a read gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "cursor {cursor} is beyond the end of the console output ({end}); the server may have \
         restarted, or a reload changed this board's console, since you read it. Omit cursor \
         to read the latest output"
    )]
    CursorAhead { cursor: u64, end: u64 },
    #[error("the read was cancelled")]
    Cancelled,
}

impl Console {
    /// Reads per `spec`; with `wait_for`, waits (up to `spec.timeout`, or until `cancel`)
    /// for it to match in the output from the cursor on.
    pub async fn read(
        &self,
        spec: &ReadSpec,
        cancel: &CancellationToken,
    ) -> Result<Reading, ReadError> {
        // Subscribed before the ring is looked at: an append after this wakes the wait.
        let mut appended = self.subscribe();
        let (start, end) = self.bounds();
        let asked = match spec.cursor {
            Some(c) if c > end => return Err(ReadError::CursorAhead { cursor: c, end }),
            Some(c) => c,
            None if spec.wait_for.is_some() => end,
            None => end.saturating_sub(DEFAULT_TAIL_BYTES).max(start),
        };
        let mut found = None;
        if let Some(re) = &spec.wait_for {
            let deadline = tokio::time::Instant::now() + spec.timeout;
            // Bytes before `scanned` were searched already (less the rescan margin).
            let mut scanned = asked;
            loop {
                let (_, end) = self.bounds();
                if end > scanned {
                    let from = scanned.saturating_sub(RESCAN_BYTES).max(asked);
                    let s = self.slice(from, (end - from) as usize);
                    if let Some(m) = re.find(&clean(&s.bytes)) {
                        found = Some(m.as_str().to_string());
                        break;
                    }
                    scanned = s.to;
                }
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(ReadError::Cancelled),
                    changed = appended.changed() => {
                        if changed.is_err() {
                            break; // the console is gone; answer with what there is
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => break,
                }
            }
        }
        let s = self.slice(asked, spec.max_bytes);
        Ok(Reading {
            text: clean(&s.bytes),
            cursor: s.from,
            next_cursor: s.to,
            dropped_bytes: s.dropped,
            matched: found.is_some(),
            match_text: found,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::config::{ConsoleConfig, ConsoleSettings};

    fn console(ring: usize) -> Console {
        let config = ConsoleConfig {
            port: None,
            path: None,
            baud: 115200,
            buffer_bytes: ring,
        };
        Console::new("b", config, &ConsoleSettings::default())
    }

    fn spec(cursor: Option<u64>, wait_for: Option<&str>) -> ReadSpec {
        ReadSpec {
            cursor,
            max_bytes: 1 << 20,
            wait_for: wait_for.map(|w| Regex::new(w).expect("regex")),
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn reads_the_tail_cleaned_and_from_a_cursor() {
        let c = console(1 << 16);
        c.append(b"\x1b[1;32mU-Boot 2024.01\x1b[0m\r\nDRAM: 8 GiB\r\n");
        let never = CancellationToken::new();
        let r = c.read(&spec(None, None), &never).await.expect("read");
        assert_eq!(r.text, "U-Boot 2024.01\nDRAM: 8 GiB\n");
        assert_eq!((r.cursor, r.dropped_bytes, r.matched), (0, 0, false));
        c.append(b"more\r\n");
        let r2 = c
            .read(&spec(Some(r.next_cursor), None), &never)
            .await
            .expect("read");
        assert_eq!(r2.text, "more\n");
        assert!(matches!(
            c.read(&spec(Some(10_000), None), &never).await,
            Err(ReadError::CursorAhead { .. })
        ));
    }

    #[tokio::test]
    async fn a_cursor_the_ring_has_overwritten_reports_dropped_bytes() {
        let c = console(10);
        c.append(b"0123456789abcdef");
        let r = c
            .read(&spec(Some(2), None), &CancellationToken::new())
            .await
            .expect("read");
        assert_eq!(
            (r.cursor, r.dropped_bytes, r.text.as_str()),
            (6, 4, "6789abcdef")
        );
    }

    #[tokio::test]
    async fn waits_for_a_match_split_across_appends() {
        let c = console(1 << 16);
        c.append(b"old: Hit any key\r\n");
        let reader = {
            let c = c.clone();
            tokio::spawn(async move {
                c.read(
                    &spec(None, Some("Hit any key to stop")),
                    &CancellationToken::new(),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.append(b"Hit any ");
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.append(b"key to stop autoboot:  3 \x08\x08\x08 2");
        let r = reader.await.expect("join").expect("read");
        assert!(r.matched);
        assert_eq!(r.match_text.as_deref(), Some("Hit any key to stop"));
        assert!(
            r.text.starts_with("Hit any key to stop autoboot"),
            "{:?}",
            r.text
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_times_out_or_is_cancelled() {
        let c = console(1 << 16);
        let mut s = spec(None, Some("login:"));
        s.timeout = Duration::from_secs(3);
        c.append(b"booting\n");
        let r = c.read(&s, &CancellationToken::new()).await.expect("read");
        assert!(!r.matched && r.match_text.is_none());
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(matches!(
            c.read(&s, &cancel).await,
            Err(ReadError::Cancelled)
        ));
    }
}
