//! A command's progress as its output says it: the percentage a line reports, from the
//! command's `progress:` regex (first capture group), escape sequences stripped. The MCP
//! notifications made of it are the MCP surface's (`gatecmd_mcp::calls::progress`).

use regex::Regex;

use gatecmd_core::output::strip_ansi;

/// The percentage a line reports, if the regex finds one (0–100). One capture group is
/// the percentage; a second makes the two a count of a total (`3/8` → 37.5): what a tool
/// that prints no percentage shows (fastboot's `Sending sparse 'boot' 3/8`).
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
    let first: f64 = caps.get(1)?.as_str().trim().parse().ok()?;
    let v = match caps.get(2) {
        Some(total) => {
            let total: f64 = total.as_str().trim().parse().ok()?;
            if total <= 0.0 {
                return None;
            }
            100.0 * first / total
        }
        None => first,
    };
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

    #[test]
    fn two_groups_are_a_count_of_a_total() {
        let re = Regex::new(r"Sending sparse '[^']+' (\d+)/(\d+)").expect("re");
        assert_eq!(
            parse_percent(
                &re,
                "Sending sparse 'boot' 3/8 (1020 KB)      OKAY [  0.137s]"
            ),
            Some(37.5)
        );
        assert_eq!(parse_percent(&re, "Sending sparse 'boot' 1/0 (1 KB)"), None);
        assert_eq!(parse_percent(&re, "Sending sparse 'boot' 9/8 (1 KB)"), None);
    }
}
