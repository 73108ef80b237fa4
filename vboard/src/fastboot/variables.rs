//! `getvar`: the variables fastboot 29 asks for and what it expects back. Names and answer
//! forms follow fastbootd (`device/variables.cpp`, `device/commands.cpp GetVarHandler`):
//! `version` 0.4, sizes as `0x%X`, `yes`/`no`, an unknown variable is
//! `FAIL Unknown variable`, `all` is one `INFO name:value` (or `name:arg:value`) per
//! variable and argument, then `OKAY`. What the host does with them (`fastboot.cpp`):
//! `max-download-size` decides when an image is sent as sparse pieces (parsed with
//! `ParseUint`, so `0x…` works), `has-slot:P`/`slot-count`/`current-slot` decide partition
//! suffixes (`no`/`0`/empty: none), `is-logical:P` = `yes` would make it resize first,
//! `partition-type:P` picks a filesystem generator for `format` (`raw`: none).

use super::partitions::Table;

/// What the answers are made of.
pub struct Vars<'a> {
    pub product: &'a str,
    pub serial: &'a str,
    pub max_download: u32,
    pub table: &'a Table,
}

/// The variables `getvar all` lists, in this order; each with its per-partition form.
const SIMPLE: &[&str] = &[
    "version",
    "version-bootloader",
    "product",
    "serialno",
    "secure",
    "unlocked",
    "max-download-size",
    "current-slot",
    "slot-count",
    "is-userspace",
];
const PER_PARTITION: &[&str] = &["has-slot", "partition-size", "partition-type", "is-logical"];

impl Vars<'_> {
    /// The answer to `getvar:NAME[:ARGS]`: `Ok(value)` for OKAY, `Err(text)` for FAIL.
    pub fn get(&self, name: &str, args: &[String]) -> Result<String, String> {
        let partition = || {
            let p = args.first().ok_or("Missing argument")?;
            self.table.get(p).ok_or_else(|| {
                format!(
                    "Partition not found: {p} (this board has {})",
                    self.table.names()
                )
            })
        };
        Ok(match name {
            "version" => "0.4".into(),
            "version-bootloader" => "vboard-2024.01".into(),
            "product" => self.product.into(),
            "serialno" => self.serial.into(),
            "secure" => "no".into(),
            "unlocked" => "yes".into(),
            "max-download-size" => format!("0x{:X}", self.max_download),
            "current-slot" => String::new(),
            "slot-count" => "0".into(),
            "is-userspace" => "no".into(),
            "has-slot" => {
                partition()?;
                "no".into()
            }
            "partition-size" => format!("0x{:X}", partition()?.bytes()),
            "partition-type" => {
                partition()?;
                "raw".into()
            }
            "is-logical" => {
                partition()?;
                "no".into()
            }
            _ => return Err("Unknown variable".into()),
        })
    }

    /// `getvar all`: the INFO texts.
    pub fn all(&self) -> Vec<String> {
        let mut out = Vec::new();
        for name in SIMPLE {
            if let Ok(v) = self.get(name, &[]) {
                out.push(format!("{name}:{v}"));
            }
        }
        for name in PER_PARTITION {
            for p in self.table.iter() {
                if let Ok(v) = self.get(name, &[p.name.to_string()]) {
                    out.push(format!("{name}:{}:{v}", p.name));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(t: &Table) -> Vars<'_> {
        Vars {
            product: "vboard",
            serial: "vboard-vb1",
            max_download: 1 << 20,
            table: t,
        }
    }

    #[test]
    fn answers_have_the_forms_fastboot_parses() {
        let t = Table::for_flash(131072);
        let v = vars(&t);
        assert_eq!(v.get("version", &[]), Ok("0.4".into()));
        assert_eq!(v.get("product", &[]), Ok("vboard".into()));
        assert_eq!(v.get("max-download-size", &[]), Ok("0x100000".into()));
        assert_eq!(v.get("slot-count", &[]), Ok("0".into()));
        assert_eq!(v.get("current-slot", &[]), Ok(String::new()));
        let boot = ["boot".to_string()];
        assert_eq!(v.get("partition-size", &boot), Ok("0x800000".into()));
        assert_eq!(v.get("has-slot", &boot), Ok("no".into()));
        assert_eq!(v.get("is-logical", &boot), Ok("no".into()));
        assert_eq!(v.get("partition-type", &boot), Ok("raw".into()));
        assert_eq!(v.get("nosuch", &[]), Err("Unknown variable".into()));
        let e = v
            .get("partition-size", &["vbmeta".into()])
            .expect_err("none");
        assert!(e.contains("boot, system, userdata"), "{e}");
        assert_eq!(v.get("is-logical", &[]), Err("Missing argument".into()));
    }

    #[test]
    fn all_lists_partition_sizes_as_fastboots_regex_reads_them() {
        let t = Table::for_flash(131072);
        let all = vars(&t).all();
        // FastBootDriver::Partitions: partition-size:NAME:0xHEX
        assert!(
            all.contains(&"partition-size:boot:0x800000".to_string()),
            "{all:?}"
        );
        assert!(all.contains(&"version:0.4".to_string()));
        assert!(all.contains(&"current-slot:".to_string()));
        assert!(all.iter().all(|l| l.len() + 4 <= 256));
    }
}
