//! What is written from the table elsewhere, held equal to it: docs/FAMILIES.md's id
//! table and udev-rules/60-gatecmd.rules' families block. On a difference the test prints
//! what the file should hold between its markers; copy it there.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::{ModeRule, PidRule, ROWS, Row};

const FAMILIES_MD: &str = include_str!("../../../../docs/FAMILIES.md");
const RULES: &str = include_str!("../../../../udev-rules/60-gatecmd.rules");

/// The part of `text` between the line `begin` and the line `end`.
fn between<'a>(text: &'a str, begin: &str, end: &str) -> &'a str {
    let start = text
        .find(begin)
        .unwrap_or_else(|| panic!("no line {begin:?}"))
        + begin.len();
    let stop = text[start..]
        .find(end)
        .unwrap_or_else(|| panic!("no line {end:?}"))
        + start;
    text[start..stop].trim_matches('\n')
}

fn id(row: &Row) -> String {
    let vid = row
        .vid
        .map_or_else(|| "any".to_string(), |v| format!("{v:04x}"));
    let pid = match row.pid {
        PidRule::Exact(p) => format!("{p:04x}"),
        PidRule::Range(a, b) => format!("{a:04x}–{b:04x}"),
        PidRule::Any => "any".into(),
    };
    let bcd = row
        .bcd_device
        .map(|(a, b)| format!(" (bcdDevice {a:04x}–{b:04x})"))
        .unwrap_or_default();
    format!("{vid}:{pid}{bcd}")
}

fn mode(row: &Row) -> &'static str {
    match row.mode {
        ModeRule::Fixed(m) => m,
        ModeRule::RockusbBcdUsb => "maskrom / loader (bcdUSB bit 0)",
        ModeRule::Unknown => "— (the id does not say)",
    }
}

/// docs/FAMILIES.md's id table: every row, grouped by family in table order.
fn id_table() -> String {
    let mut s = String::from(
        "| family | mode | vid:pid | interface | SoC / hint | tool | Debian 12 | source |\n|---|---|---|---|---|---|---|---|\n",
    );
    for family in super::families() {
        for r in ROWS.iter().filter(|r| r.family == family) {
            let class = r.class.map(|c| c.to_string()).unwrap_or_default();
            let soc = r.soc.or(r.hint).unwrap_or("");
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {class} | {soc} | {} | {} | {} |",
                r.family,
                mode(r),
                id(r),
                r.tool.replace('|', "\\|"),
                r.debian.replace('|', "\\|"),
                r.source.replace('|', "\\|"),
            );
        }
    }
    s
}

/// A range this wide is granted by vendor id alone (udev matches globs, not ranges).
const WIDEST_LISTED_RANGE: u16 = 16;

/// The udev rules of the families: by interface class for the class rows (any vendor),
/// then one line per vendor (or vendor and product) of each family.
fn udev_block() -> String {
    let mut s = String::new();
    let classes: BTreeSet<String> = ROWS
        .iter()
        .filter(|r| r.vid.is_none())
        .filter_map(|r| r.class)
        .map(|c| format!("{:02x}{:02x}{:02x}", c.class, c.subclass, c.protocol))
        .collect();
    s.push_str("# Any vendor's device with a fastboot or DFU interface (udev's usb_id builtin lists\n# a device's interfaces in ID_USB_INTERFACES as :ccsspp:).\n");
    for c in &classes {
        let _ = writeln!(
            s,
            "ENV{{ID_USB_INTERFACES}}==\"*:{c}:*\", MODE=\"0660\", GROUP=\"gatecmd\""
        );
    }
    for family in super::families() {
        let mut lines: BTreeSet<(u16, Option<u16>)> = BTreeSet::new();
        for r in ROWS.iter().filter(|r| r.family == family) {
            let Some(vid) = r.vid else { continue };
            match r.pid {
                PidRule::Exact(p) => {
                    lines.insert((vid, Some(p)));
                }
                PidRule::Range(a, b) if b - a < WIDEST_LISTED_RANGE => {
                    lines.extend((a..=b).map(|p| (vid, Some(p))));
                }
                PidRule::Range(..) | PidRule::Any => {
                    lines.insert((vid, None));
                }
            }
        }
        // A vendor granted whole makes its products' lines redundant.
        let whole: BTreeSet<u16> = lines
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(v, _)| *v)
            .collect();
        lines.retain(|(v, p)| p.is_none() || !whole.contains(v));
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(s, "# {family}");
        for (vid, pid) in lines {
            match pid {
                Some(p) => {
                    let _ = writeln!(
                        s,
                        "ATTR{{idVendor}}==\"{vid:04x}\", ATTR{{idProduct}}==\"{p:04x}\", MODE=\"0660\", GROUP=\"gatecmd\""
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "ATTR{{idVendor}}==\"{vid:04x}\", MODE=\"0660\", GROUP=\"gatecmd\""
                    );
                }
            }
        }
    }
    s
}

#[test]
fn the_families_page_lists_every_row_of_the_table() {
    let written = between(
        FAMILIES_MD,
        "<!-- id table: generated from crates/gatecmd-devices/src/families/table.rs -->",
        "<!-- end of id table -->",
    );
    let want = id_table();
    assert!(
        written == want.trim_matches('\n'),
        "docs/FAMILIES.md's id table differs from the families table; it should read:\n\n{want}"
    );
}

#[test]
fn the_udev_rules_grant_every_family_s_ids() {
    let written = between(
        RULES,
        "# --- families: generated from crates/gatecmd-devices/src/families/table.rs ---",
        "# --- end of families ---",
    );
    let want = udev_block();
    assert!(
        written == want.trim_matches('\n'),
        "udev-rules/60-gatecmd.rules' families block differs from the families table; it should read:\n\n{want}"
    );
}
