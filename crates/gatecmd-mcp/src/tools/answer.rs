//! How a tool answer's text and structured content share it (issue 22, docs/TOOLS.md
//! "Answers"): the structured content is the answer in full; the text content renders the
//! same facts for people and is bounded to [`TEXT_BYTES`]. A longer rendering keeps its
//! head and tail and says, where it was cut, how much is missing and that
//! `structuredContent` has all of it. So no content is sent twice at full size: a
//! megabyte of command output is a megabyte in `structuredContent` plus at most 16 KiB of
//! text, where it used to be two megabytes.
//!
//! MCP (2025-06-18 and later) says a tool returning structured content SHOULD also return
//! it as text "for backwards compatibility"; a SHOULD, which a bounded rendering keeps
//! for every answer of ordinary size.

use gatecmd_core::output::floor_char_boundary;

/// Most bytes of one answer's text content.
pub const TEXT_BYTES: usize = 16 * 1024;
/// Of which the tail kept after the cut (the end of a command's output is often its verdict).
const TAIL_BYTES: usize = 4 * 1024;

/// `text`, or its head and tail with a note between when it is longer than [`TEXT_BYTES`].
pub fn bounded_text(text: String) -> String {
    if text.len() <= TEXT_BYTES {
        return text;
    }
    let head_end = floor_char_boundary(&text, TEXT_BYTES - TAIL_BYTES - 160);
    let mut tail_start = text.len() - TAIL_BYTES;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = tail_start - head_end;
    format!(
        "{}\n[... {cut} bytes of this text cut here; structuredContent holds the whole answer ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_keeps_head_and_tail_within_the_bound() {
        let text: String = "é".repeat(40_000) + "verdict: OK";
        let out = bounded_text(text.clone());
        assert!(out.len() <= TEXT_BYTES, "{}", out.len());
        assert!(out.starts_with("éé") && out.ends_with("verdict: OK"));
        assert!(out.contains("structuredContent holds the whole answer"));
        assert_eq!(bounded_text("short".into()), "short");
    }
}
