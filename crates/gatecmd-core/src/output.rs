//! Turning a child's terminal output into text an agent can read.
//!
//! Flashing tools draw progress for a terminal: `rkdeveloptool` moves the cursor up and
//! erases the line (`ESC[1A ESC[2K`) before each update and colours errors
//! (`ESC[30;41m`). Replaying those few cursor moves collapses a thousand updates into the
//! final line; every other escape sequence is dropped.

/// Cleans terminal output: escape sequences removed, `\r` and cursor-up overwrites applied.
pub fn clean(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => lines.push(std::mem::take(&mut cur)),
            // A carriage return starts the line over; what follows overwrites it.
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    cur.clear();
                }
            }
            '\x1b' => match chars.next() {
                Some('[') => {
                    let mut params = String::new();
                    let mut fin = None;
                    for p in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&p) {
                            fin = Some(p);
                            break;
                        }
                        params.push(p);
                    }
                    match fin {
                        Some('A') => {
                            let n: usize = params.parse().unwrap_or(1).max(1);
                            for _ in 0..n {
                                match lines.pop() {
                                    Some(prev) => cur = prev,
                                    None => break,
                                }
                            }
                        }
                        Some('K') if params == "2" || params.is_empty() => cur.clear(),
                        _ => {}
                    }
                }
                // OSC: up to BEL or ESC \.
                Some(']') => {
                    while let Some(p) = chars.next() {
                        if p == '\x07' || (p == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            c if c.is_control() && c != '\t' => {}
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
        let mut s = lines.join("\n");
        if text.ends_with('\n') {
            s.push('\n');
        }
        return s;
    }
    let mut s = lines.join("\n");
    if !lines.is_empty() {
        s.push('\n');
    }
    s
}

/// [`clean`], measured after conversion: at most `max` bytes of text, cut at a character
/// boundary, and whether anything was cut. Invalid UTF-8 becomes U+FFFD (3 bytes for each
/// bad byte), so a cap on the raw bytes alone would let a megabyte of 0xFF become three.
pub fn clean_within(bytes: &[u8], max: usize) -> (String, bool) {
    let mut text = clean(bytes);
    if text.len() <= max {
        return (text, false);
    }
    text.truncate(floor_char_boundary(&text, max));
    (text, true)
}

/// A short text someone outside the operator's control chose (a USB descriptor string, a
/// labgrid user or place name), made safe for every sink that shows it to someone else:
/// control characters (newline, ESC, C1) and the bidirectional overrides that reorder
/// what a terminal shows become `?`; trimmed; at most `max_chars` characters.
pub fn one_line(raw: &str, max_chars: usize) -> String {
    let clean: String = raw
        .trim()
        .chars()
        .take(max_chars)
        .map(|c| {
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
            if c.is_control() || bidi { '?' } else { c }
        })
        .collect();
    clean.trim().to_string()
}

/// The largest index `<= at` that is a character boundary of `s`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Removes escape sequences from one line (for progress matching).
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if let Some('[') = chars.next() {
                for p in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&p) {
                        break;
                    }
                }
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_text_is_measured_after_conversion() {
        let raw = vec![0xffu8; 1000];
        assert_eq!(clean(&raw).len(), 3000);
        let (text, cut) = clean_within(&raw, raw.len());
        assert!(cut);
        assert!(text.len() <= 1000 && text.len() > 990, "{}", text.len());
        assert_eq!(clean_within(b"ok\n", 3), ("ok\n".to_string(), false));
    }

    #[test]
    fn rkdeveloptool_progress_collapses_to_last_line() {
        // The byte format rkdeveloptool 1.32 writes for `wl`.
        let raw = b"Write LBA from file (0%)\n\x1b[1A\x1b[2KWrite LBA from file (37%)\n\x1b[1A\x1b[2KWrite LBA from file (100%)\nWrite LBA from file OK.\n";
        assert_eq!(
            clean(raw),
            "Write LBA from file (100%)\nWrite LBA from file OK.\n"
        );
    }

    #[test]
    fn error_colours_are_removed() {
        let raw = b"\x1b[30;41mCreating Comm Object failed!\x1b[0m\n";
        assert_eq!(clean(raw), "Creating Comm Object failed!\n");
    }

    #[test]
    fn carriage_return_overwrites() {
        assert_eq!(clean(b"10%\r50%\r100%\ndone\n"), "100%\ndone\n");
        assert_eq!(clean(b"a\r\nb\r\n"), "a\nb\n");
        assert_eq!(clean(b"no newline"), "no newline");
        assert_eq!(clean(b""), "");
    }

    #[test]
    fn osc_and_other_controls_are_dropped() {
        assert_eq!(clean(b"\x1b]0;title\x07x\x08y\n"), "xy\n");
    }

    #[test]
    fn strip_line() {
        assert_eq!(
            strip_ansi("\x1b[1A\x1b[2KWrite LBA from file (42%)"),
            "Write LBA from file (42%)"
        );
    }
}
