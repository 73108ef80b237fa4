//! The fastboot board's fixed partition table: `boot`, `system`, `userdata` laid end to end
//! from sector 0 of the board's flash file, sized from `--flash-size` (1/8, 1/2, the rest),
//! so a small test flash still has all three. No A/B slots.

use crate::flash::SECTOR;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: &'static str,
    pub lba: u64,
    pub sectors: u64,
}

impl Partition {
    pub fn bytes(&self) -> u64 {
        self.sectors * SECTOR
    }

    pub fn end(&self) -> u64 {
        self.lba + self.sectors
    }
}

#[derive(Debug, Clone)]
pub struct Table(Vec<Partition>);

impl Table {
    pub fn for_flash(sectors: u64) -> Table {
        let boot = sectors / 8;
        let system = sectors / 2;
        let userdata = sectors - boot - system;
        let mut at = 0;
        let mut v = Vec::new();
        for (name, n) in [("boot", boot), ("system", system), ("userdata", userdata)] {
            v.push(Partition {
                name,
                lba: at,
                sectors: n,
            });
            at += n;
        }
        Table(v)
    }

    pub fn get(&self, name: &str) -> Option<&Partition> {
        self.0.iter().find(|p| p.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Partition> {
        self.0.iter()
    }

    pub fn names(&self) -> String {
        self.0.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
    }

    /// `[start, end)` sectors cut at partition boundaries: (partition, start, end) pieces.
    pub fn split(&self, start: u64, end: u64) -> Vec<(&Partition, u64, u64)> {
        self.0
            .iter()
            .filter_map(|p| {
                let (a, b) = (start.max(p.lba), end.min(p.end()));
                (a < b).then_some((p, a, b))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_covers_the_flash_end_to_end() {
        let t = Table::for_flash(131072); // 64 MiB
        let boot = t.get("boot").expect("boot");
        assert_eq!((boot.lba, boot.bytes()), (0, 8 << 20));
        let system = t.get("system").expect("system");
        assert_eq!((system.lba, system.bytes()), (16384, 32 << 20));
        let data = t.get("userdata").expect("userdata");
        assert_eq!((data.lba, data.end()), (81920, 131072));
        assert!(t.get("vbmeta").is_none());
        assert_eq!(t.names(), "boot, system, userdata");
    }

    #[test]
    fn a_range_splits_at_partition_boundaries() {
        let t = Table::for_flash(2048);
        let parts: Vec<_> = t
            .split(200, 1100)
            .into_iter()
            .map(|(p, a, b)| (p.name, a, b))
            .collect();
        assert_eq!(parts, [("boot", 200, 256), ("system", 256, 1100)]);
    }
}
