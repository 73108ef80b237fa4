//! A plan run as a JUnit XML report, the form CI systems read: one `testsuite` named for
//! the plan, one `testcase` per step (`classname` the board) with its time in seconds, a
//! `failure` for a failed step, an `error` for one that could not run, `skipped` for one
//! not run, and the counts on the suite. The faults seen on the console are a `failure` of
//! a last testcase, `console`, so a reader that counts testcases counts them too. Every
//! text and attribute is XML-escaped, and characters XML 1.0 cannot hold are replaced.

use std::fmt::Write;

use super::verdict::{Fault, StepResult, Verdict};

/// The JUnit XML text of a plan run.
pub fn junit(plan: &str, board: &str, steps: &[StepResult], faults: &[Fault]) -> String {
    let count = |v: Verdict| steps.iter().filter(|s| s.verdict == v).count();
    let console_case = !faults.is_empty();
    let tests = steps.len() + usize::from(console_case);
    let failures = count(Verdict::Fail) + usize::from(console_case);
    let secs = |ms: u64| format!("{:.3}", ms as f64 / 1000.0);
    let total: u64 = steps.iter().map(|s| s.ms).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites><testsuite name=\"{}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
        esc(plan),
        count(Verdict::Error),
        count(Verdict::Skipped),
        secs(total)
    );
    for s in steps {
        let _ = write!(
            x,
            "  <testcase name=\"{}\" classname=\"{}\" time=\"{}\">",
            esc(&s.name),
            esc(board),
            secs(s.ms)
        );
        let message = esc(s.message.as_deref().unwrap_or_default());
        match s.verdict {
            Verdict::Pass => {}
            Verdict::Fail => {
                let _ = write!(x, "<failure message=\"{message}\" type=\"fail\"/>");
            }
            Verdict::Error => {
                let _ = write!(x, "<error message=\"{message}\" type=\"error\"/>");
            }
            Verdict::Skipped => {
                let _ = write!(x, "<skipped message=\"{message}\"/>");
            }
        }
        if !s.output.is_empty() {
            let _ = write!(x, "<system-out>{}</system-out>", esc(&s.output));
        }
        x.push_str("</testcase>\n");
    }
    if console_case {
        let lines: Vec<String> = faults
            .iter()
            .map(|f| format!("{}: {}", f.kind, f.line))
            .collect();
        let _ = writeln!(
            x,
            "  <testcase name=\"console\" classname=\"{}\" time=\"0.000\"><failure message=\"{}\" type=\"fault\">{}</failure></testcase>",
            esc(board),
            esc(&lines[0]),
            esc(&lines.join("\n"))
        );
    }
    x.push_str("</testsuite></testsuites>\n");
    x
}

/// `s` as XML character data or attribute value: `& < > " '` escaped, line ends kept as
/// character references in attributes, characters XML 1.0 forbids replaced by U+FFFD.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_escapes() {
        let mut fail = StepResult::skipped("b<&>", "");
        fail.verdict = Verdict::Fail;
        fail.message = Some("expected \"0\" got 1".into());
        fail.output = "x\u{1}y\n".into();
        let mut pass = StepResult::skipped("a", "");
        pass.verdict = Verdict::Pass;
        pass.message = None;
        let steps = [pass, fail, StepResult::skipped("c", "after b")];
        let x = junit("p'1", "sim", &steps, &[]);
        assert!(
            x.contains("name=\"p&apos;1\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""),
            "{x}"
        );
        assert!(x.contains("name=\"b&lt;&amp;&gt;\""), "{x}");
        assert!(x.contains("x\u{FFFD}y&#10;"), "{x}");
        let fault = Fault {
            kind: "kernel_panic".into(),
            line: "Kernel panic - not syncing: <x>".into(),
            step: None,
        };
        let x = junit("p", "sim", &steps[..1], &[fault]);
        assert!(x.contains("tests=\"2\" failures=\"1\""), "{x}");
        assert!(
            x.contains("kernel_panic: Kernel panic - not syncing: &lt;x&gt;"),
            "{x}"
        );
    }
}
