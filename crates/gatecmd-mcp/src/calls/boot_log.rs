//! The boot log in a flash's text: its last lines, saying how many more the structured
//! answer holds (a local `flash_board` and one on another lab host answer alike).

/// Lines of the boot log the text shows; `flashed.boot_log` has all of it.
const BOOT_LOG_LINES: usize = 8;

/// The boot log's last lines (blank ones left out), saying how many more the structured
/// answer holds: the text does not repeat the whole log (issue 47, each fact once).
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let from = lines.len().saturating_sub(BOOT_LOG_LINES);
    let head = if from == 0 {
        "\nboot log:".to_string()
    } else {
        format!(
            "\nboot log, its last {} of {} lines (flashed.boot_log has all):",
            lines.len() - from,
            lines.len()
        )
    };
    format!("{head}\n{}", lines[from..].join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_shows_the_boot_logs_last_lines_once() {
        let log: String = (1..=20).map(|i| format!("line {i}\n\r\n")).collect();
        let shown = tail(&log);
        assert!(
            shown.starts_with("\nboot log, its last 8 of 20 lines"),
            "{shown}"
        );
        assert!(
            shown.ends_with(
                "line 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20"
            ),
            "{shown}"
        );
        assert!(!shown.contains("line 12\n"), "{shown}");
        assert_eq!(tail("a\nb"), "\nboot log:\na\nb");
    }
}
