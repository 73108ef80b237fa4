//! Byte counts as people (and agents) read them in messages: `9.1 GB`, `64.0 MiB`.

/// `n` bytes in decimal units (kB, MB, GB, TB) with one decimal, as storage is sold: an
/// "8 GB" eMMC reads as 8.0 GB here, not 7.5 GiB.
pub fn human(n: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1000.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1000.0 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// `n` bytes in binary units (KiB, MiB, GiB), for chunk and transfer sizes.
pub fn human_bin(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_storage_is_sold() {
        assert_eq!(human(512), "512 bytes");
        assert_eq!(human(9_100_000_000), "9.1 GB");
        assert_eq!(human(8_000_000_000), "8.0 GB");
        assert_eq!(human_bin(4 << 20), "4.0 MiB");
        assert_eq!(human_bin(64 << 10), "64.0 KiB");
    }
}
