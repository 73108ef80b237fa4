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
/// control characters (newline, ESC, C1) and the invisible format characters that reorder
/// or hide what a terminal or a browser shows ([`is_invisible`]) become `?`; trimmed; at
/// most `max_chars` characters.
pub fn one_line(raw: &str, max_chars: usize) -> String {
    let clean: String = raw
        .trim()
        .chars()
        .take(max_chars)
        .map(|c| {
            if c.is_control() || is_invisible(c) {
                '?'
            } else {
                c
            }
        })
        .collect();
    clean.trim().to_string()
}

/// Whether `c` is a character a person cannot see but that changes what they read: the
/// Unicode format characters (general category Cf: the bidirectional embeddings,
/// overrides, isolates and marks that reorder a line — U+202A–U+202E, U+2066–U+2069,
/// U+200E/F, U+061C —, zero-width spaces and joiners, the word joiner and invisible
/// operators, the byte-order mark, interlinear annotation, tag characters), the line and
/// paragraph separators, and the fillers and joiners that render as nothing (U+034F,
/// U+115F, U+1160, U+3164, U+FFA0, variation selectors). Control characters are
/// [`char::is_control`]'s. The list follows Unicode 15's Cf set; a newer format character
/// missing here is still never typed into a board's shell (see the callers).
pub fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891
        | 0x08E2 | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F | 0x200B..=0x200F
        | 0x2028..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

/// Text shown to a person who decides on it (an approval's command line or console text,
/// a boot report's line), as it will act: every control character and every invisible
/// format character ([`is_invisible`]) written out visibly — `\n`, `\r`, `\t`, and
/// `<U+202E>` for the rest — so that nothing reorders, hides or fakes what is read (issue
/// 46: a `dd` displayed after a `#` as if commented out). Everything else is kept as it is.
pub fn visible(text: &str) -> String {
    use std::fmt::Write;
    if !text.chars().any(|c| c.is_control() || is_invisible(c)) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_invisible(c) => {
                let _ = write!(out, "<U+{:04X}>", c as u32);
            }
            c => out.push(c),
        }
    }
    out
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
    fn what_a_person_decides_on_is_shown_as_it_acts() {
        // The red team's text: `dd` displayed after a `#` as if commented out.
        let attack = "echo ok # \u{202e}\u{2066}dd if=/dev/zero of=/dev/mmcblk0\u{2069}\u{202c}";
        let shown = visible(attack);
        assert_eq!(
            shown,
            "echo ok # <U+202E><U+2066>dd if=/dev/zero of=/dev/mmcblk0<U+2069><U+202C>"
        );
        assert!(!shown.chars().any(is_invisible));
        assert_eq!(
            visible("a\r\n\tb\u{1b}[0m\u{200b}"),
            "a\\r\\n\\tb<U+001B>[0m<U+200B>"
        );
        // Plain text, accents and other scripts pass as they are.
        assert_eq!(visible("uname -a; café ✓ 中文"), "uname -a; café ✓ 中文");
        assert_eq!(one_line("x\u{2067}y\u{feff}", 10), "x?y?");
    }

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
