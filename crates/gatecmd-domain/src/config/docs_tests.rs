//! docs/CONFIG.md's tables of settings are the declarations' (`declare.rs`), row for row:
//! a key, its default or its meaning changed in one place and not the other fails here.

use super::{Setting, settings};

const CONFIG_MD: &str = include_str!("../../../../docs/CONFIG.md");

/// The rows of the first table after the line `heading` (header and separator left out).
fn table_after<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    doc.lines()
        .skip_while(|l| *l != heading)
        .skip_while(|l| !l.starts_with('|'))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect()
}

/// The heading of a section's table: the top level's, or `` ### `limits` ``.
fn heading(section: &str) -> String {
    if section.is_empty() {
        "## Top level".into()
    } else {
        format!("### `{section}`")
    }
}

#[test]
fn docs_config_tables_are_the_declarations() {
    let all = settings();
    let mut sections: Vec<&str> = Vec::new();
    for s in &all {
        if !sections.contains(&s.section()) {
            sections.push(s.section());
        }
    }
    let mut wrong = Vec::new();
    for section in sections {
        let rows: Vec<String> = all
            .iter()
            .filter(|s| s.section() == section)
            .map(Setting::row)
            .collect();
        let h = heading(section);
        if table_after(CONFIG_MD, &h) != rows {
            wrong.push(format!(
                "{h}\n\n| key | default | meaning |\n|---|---|---|\n{}\n",
                rows.join("\n")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/CONFIG.md's tables differ from the declarations; they should read:\n\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_section_of_plain_settings_is_declared() {
    let keys: Vec<String> = settings().into_iter().map(|s| s.key).collect();
    for section in [
        "limits",
        "leases",
        "monitor",
        "isolation",
        "audit",
        "staging",
        "page",
        "metrics",
        "jobs",
        "flash",
        "labgrid",
    ] {
        assert!(
            keys.iter().any(|k| k.starts_with(&format!("{section}."))),
            "{section}: no declared keys"
        );
    }
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "a key declared twice");
}
