//! The checksums and the scrambler of Rockchip's tools, transliterated from rkdeveloptool's
//! `crc.cpp` (v1.32): the mask ROM checks `CRC_CCITT` on what `db` sends, boot files end in
//! `CRC_32`, and entry data are scrambled with `P_RC4` (RC4 with a fixed key).
//! Also the standard CRC-32 (IEEE 802.3) that Android sparse images use for their CRC32
//! chunks (libsparse `sparse_crc32.cpp`).

/// `CRC_CCITT`: CRC-16/CCITT-FALSE (poly 0x1021, init 0xffff, MSB first, no final xor).
pub fn crc_ccitt(data: &[u8]) -> u16 {
    let mut crc: u16 = 0xffff;
    for &ch in data {
        // crc.cpp's CRC_Calculate, bit by bit: the same as the table-driven CCITT-FALSE.
        let mut bit = 0x80u8;
        while bit != 0 {
            let top = crc & 0x8000 != 0;
            crc <<= 1;
            if top {
                crc ^= 0x1021;
            }
            if ch & bit != 0 {
                crc ^= 0x1021;
            }
            bit >>= 1;
        }
    }
    crc
}

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = (n as u32) << 24;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ 0x04C1_0DB7
            } else {
                c << 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

static CRC32_TABLE: [u32; 256] = crc32_table();

/// `CRC_32`: poly 0x04C10DB7, MSB first, init 0, no final xor (not zlib's CRC-32).
pub fn crc32_rk(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |acc, &b| {
        (acc << 8) ^ CRC32_TABLE[((acc >> 24) as u8 ^ b) as usize]
    })
}

const fn crc32_ieee_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

static CRC32_IEEE_TABLE: [u32; 256] = crc32_ieee_table();

/// libsparse's `sparse_crc32(crc_in, buf, size)`: the reflected IEEE CRC-32 (zlib's), which
/// chains: `crc32_ieee(crc32_ieee(0, a), b) == crc32_ieee(0, a ++ b)`.
pub fn crc32_ieee(crc_in: u32, data: &[u8]) -> u32 {
    let crc = data.iter().fold(crc_in ^ !0, |acc, &b| {
        CRC32_IEEE_TABLE[((acc ^ b as u32) & 0xff) as usize] ^ (acc >> 8)
    });
    crc ^ !0
}

/// `P_RC4(buf, len)`: RC4 with Rockchip's fixed 16-byte key over the first `len` bytes.
/// `len` is an `unsigned short` there, so callers pass sizes truncated to 16 bits as the
/// C code does ([`rc4_len`]).
pub fn p_rc4(buf: &mut [u8], len: u16) {
    const KEY: [u8; 16] = [124, 78, 3, 4, 85, 5, 9, 7, 45, 44, 123, 56, 23, 13, 23, 17];
    let mut s = [0u8; 256];
    for (i, v) in s.iter_mut().enumerate() {
        *v = i as u8;
    }
    let mut j: usize = 0;
    for i in 0..256 {
        j = (j + s[i] as usize + KEY[i & 0x0f] as usize) % 256;
        s.swap(i, j);
    }
    let (mut i, mut j) = (0usize, 0usize);
    let n = (len as usize).min(buf.len());
    for b in buf.iter_mut().take(n) {
        i = (i + 1) % 256;
        j = (j + s[i] as usize) % 256;
        s.swap(i, j);
        let t = (s[i] as usize + s[j] as usize) % 256;
        *b ^= s[t];
    }
}

/// A buffer length as `P_RC4` sees it (truncated to 16 bits).
pub fn rc4_len(len: usize) -> u16 {
    (len & 0xffff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values: crc.cpp's own functions compiled with gcc and run on these inputs.
    #[test]
    fn ccitt_matches_rkdeveloptool() {
        assert_eq!(crc_ccitt(b"123456789"), 0x29b1);
        assert_eq!(crc_ccitt(&[0xA5; 4096]), 0x4ee4);
    }

    #[test]
    fn crc32_matches_rkdeveloptool() {
        assert_eq!(crc32_rk(b"123456789"), 0x889a_9615);
        assert_eq!(crc32_rk(&[0xA5; 4096]), 0xe034_68d6);
        assert_eq!(CRC32_TABLE[1], 0x04c1_0db7);
    }

    #[test]
    fn crc32_ieee_is_zlibs_and_chains() {
        assert_eq!(crc32_ieee(0, b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32_ieee(crc32_ieee(0, b"1234"), b"56789"), 0xcbf4_3926);
        assert_eq!(crc32_ieee(0, b""), 0);
    }

    #[test]
    fn rc4_matches_rkdeveloptool_and_is_its_own_inverse() {
        let mut b = [0u8; 16];
        p_rc4(&mut b, 16);
        assert_eq!(hex::encode(b), "6e262cf3be9f9d51ea3034ce20511f98");
        p_rc4(&mut b, 16);
        assert_eq!(b, [0u8; 16]);
        assert_eq!(rc4_len(0x1_0010), 0x10);
    }
}
