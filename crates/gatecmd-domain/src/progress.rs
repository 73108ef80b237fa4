//! A command's progress as its output says it: the percentage a line reports, from the
//! command's `progress:` regex (first capture group), escape sequences stripped. The MCP
//! notifications made of it are the MCP surface's (`gatecmd_mcp::progress`).

use regex::Regex;

use gatecmd_core::output::strip_ansi;

/// The percentage a line reports, if the regex finds one (0–100).
pub fn parse_percent(re: &Regex, line: &str) -> Option<f64> {
    // Most lines carry no escape sequence: match them where they lie.
    let clean = if line
        .bytes()
        .any(|b| b < 0x20 && b != b'\t' || b == 0x7f || b == 0xc2)
    {
        std::borrow::Cow::Owned(strip_ansi(line))
    } else {
        std::borrow::Cow::Borrowed(line)
    };
    let caps = re.captures(&clean)?;
    let v: f64 = caps.get(1)?.as_str().trim().parse().ok()?;
    (0.0..=100.0).contains(&v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_from_rkdeveloptool_lines() {
        let re = Regex::new(r"\((\d+)%\)").expect("re");
        assert_eq!(
            parse_percent(&re, "\x1b[1A\x1b[2KWrite LBA from file (42%)"),
            Some(42.0)
        );
        assert_eq!(parse_percent(&re, "Write LBA from file OK."), None);
        assert_eq!(parse_percent(&re, "weird (400%)"), None);
    }
}
