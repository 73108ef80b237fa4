//! Reading a console: the text since a cursor, optionally after waiting for a regex to
//! appear in new output. Waiting holds no lock: it sleeps on the ring's end cursor (a
//! `watch`), so a reader wakes as soon as the capture task appends.

use std::time::Duration;

use regex::Regex;
use tokio_util::sync::CancellationToken;

use super::board::Console;
use gatecmd_core::output::clean;

/// Bytes returned when no cursor is given and nothing is awaited: the recent past.
pub const DEFAULT_TAIL_BYTES: u64 = 4096;
/// How far back before the newest bytes a regex is tried again, so a match split across
/// two appends (or a line still being written) is found, without rescanning a long line.
const RESCAN_BYTES: u64 = 4096;
/// Shortest time between two scans of one waiting read: a burst of appends costs each
/// waiting reader one scan of the new bytes, not one scan per append.
const SCAN_GAP: Duration = Duration::from_millis(20);

/// What to read.
#[derive(Debug, Clone)]
pub struct ReadSpec {
    /// Where to start; `None`: the newest bytes (the last [`DEFAULT_TAIL_BYTES`], or the
    /// last `max_bytes` when fewer), or with `wait_for`, the output from now on.
    pub cursor: Option<u64>,
    /// Most raw bytes returned; read on from `next_cursor`. Without a cursor, the newest
    /// this many (at most [`DEFAULT_TAIL_BYTES`] unless `tail_bytes` says more).
    pub max_bytes: usize,
    /// Without a cursor or `wait_for`: how far back from the end the read starts (`None`:
    /// [`DEFAULT_TAIL_BYTES`]); never more than `max_bytes`, so the read ends at the end.
    pub tail_bytes: Option<u64>,
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
            None => {
                let tail = spec
                    .tail_bytes
                    .unwrap_or(DEFAULT_TAIL_BYTES)
                    .min(spec.max_bytes as u64);
                end.saturating_sub(tail).max(start)
            }
        };
        let mut found = None;
        if let Some(re) = &spec.wait_for {
            let deadline = tokio::time::Instant::now() + spec.timeout;
            // Bytes before `scanned` were searched already; `carry` is where the line still
            // being written at `scanned` began: the next scan starts there (a match split
            // across appends is found), so a scan costs the new bytes plus one open line
            // (at most RESCAN_BYTES), not a fixed window per append.
            let mut scanned = asked;
            let mut carry = asked;
            let mut last_scan = tokio::time::Instant::now();
            loop {
                let (_, end) = self.bounds();
                if end > scanned {
                    let from = carry.max(scanned.saturating_sub(RESCAN_BYTES)).max(asked);
                    let s = self.slice(from, (end - from) as usize);
                    if let Some(m) = re.find(&clean(&s.bytes)) {
                        found = Some(m.as_str().to_string());
                        break;
                    }
                    carry = match s.bytes.iter().rposition(|&b| b == b'\n') {
                        Some(i) => s.from + i as u64 + 1,
                        None => s.from,
                    };
                    scanned = s.to;
                    last_scan = tokio::time::Instant::now();
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
                // Appends in a burst wake a reader once per SCAN_GAP, not once each.
                let next = (last_scan + SCAN_GAP).min(deadline);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(ReadError::Cancelled),
                    _ = tokio::time::sleep_until(next) => {}
                }
            }
        }
        let (s, text) = self.slice_within(asked, spec.max_bytes);
        Ok(Reading {
            text,
            cursor: s.from,
            next_cursor: s.to,
            dropped_bytes: s.dropped,
            matched: found.is_some(),
            match_text: found,
        })
    }
}

impl Console {
    /// The slice from `asked` whose cleaned text is at most `max` bytes (measured after
    /// conversion: invalid UTF-8 triples in size), and that text. `next_cursor` then
    /// follows the raw bytes the text came from, so nothing is skipped.
    fn slice_within(&self, asked: u64, max: usize) -> (super::ring::Slice, String) {
        let mut raw = max;
        // Each round shrinks the raw length by the text's overshoot; three rounds cover
        // the worst case (every byte invalid); the last one cuts the text itself.
        for _ in 0..4 {
            let s = self.slice(asked, raw);
            let text = clean(&s.bytes);
            if text.len() <= max || raw <= 1 {
                return (s, text);
            }
            raw = (raw * max / text.len()).clamp(1, raw - 1);
        }
        let s = self.slice(asked, raw);
        let (text, _) = gatecmd_core::output::clean_within(&s.bytes, max);
        (s, text)
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
            tail_bytes: None,
            wait_for: wait_for.map(|w| Regex::new(w).expect("regex")),
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn without_a_cursor_max_bytes_takes_the_newest_bytes() {
        let c = console(1 << 16);
        c.append(b"oldest line\nmiddle line\nnewest line\n");
        let never = CancellationToken::new();
        let newest = ReadSpec {
            max_bytes: 12,
            ..spec(None, None)
        };
        let r = c.read(&newest, &never).await.expect("read");
        assert_eq!(r.text, "newest line\n");
        assert_eq!(r.next_cursor, 36);
        // A cursor keeps its meaning: the oldest bytes from there.
        let from = ReadSpec {
            max_bytes: 12,
            ..spec(Some(0), None)
        };
        let r = c.read(&from, &never).await.expect("read");
        assert_eq!(r.text, "oldest line\n");
        // A tail longer than the default when the caller asks for more.
        let long = ReadSpec {
            max_bytes: 24,
            tail_bytes: Some(24),
            ..spec(None, None)
        };
        let r = c.read(&long, &never).await.expect("read");
        assert_eq!(r.text, "middle line\nnewest line\n");
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
