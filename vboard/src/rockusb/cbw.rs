//! Command and status wrappers (`RKComm.h`: `CBW`, `CBWCB`, `CSW`; packed, little-endian,
//! except the CB's address and length, which are big-endian as in SCSI).

pub const CBW_LEN: usize = 31;
pub const CSW_LEN: usize = 13;
pub const CBW_SIGN: u32 = 0x4342_5355; // "USBC"
pub const CSW_SIGN: u32 = 0x5342_5355; // "USBS"

pub const TEST_UNIT_READY: u8 = 0x00;
pub const READ_FLASH_ID: u8 = 0x01;
pub const ERASE_FORCE: u8 = 0x0B;
pub const READ_LBA: u8 = 0x14;
pub const WRITE_LBA: u8 = 0x15;
pub const READ_FLASH_INFO: u8 = 0x1A;
pub const READ_CHIP_INFO: u8 = 0x1B;
pub const ERASE_LBA: u8 = 0x25;
pub const CHANGE_STORAGE: u8 = 0x2A;
pub const READ_STORAGE: u8 = 0x2B;
pub const READ_CAPABILITY: u8 = 0xAA;
pub const DEVICE_RESET: u8 = 0xFF;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cbw {
    pub tag: u32,
    pub transfer_len: u32,
    /// 0x80 = data IN (device to host).
    pub flags: u8,
    pub lun: u8,
    pub cb_len: u8,
    pub opcode: u8,
    /// `ucReserved`: the subcode (`rd N`, `RWMETHOD_*`).
    pub subcode: u8,
    pub address: u32,
    pub length: u16,
}

/// Why 31 bytes are not a CBW.
#[derive(Debug, PartialEq, Eq)]
pub enum CbwError {
    Length(usize),
    Signature(u32),
}

impl std::fmt::Display for CbwError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CbwError::Length(n) => write!(f, "{n} bytes where a CBW has {CBW_LEN}"),
            CbwError::Signature(s) => write!(
                f,
                "bad CBW signature 0x{s:08x} (expected 0x{CBW_SIGN:08x} \"USBC\")"
            ),
        }
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl Cbw {
    pub fn parse(b: &[u8]) -> Result<Cbw, CbwError> {
        if b.len() != CBW_LEN {
            return Err(CbwError::Length(b.len()));
        }
        let sign = le32(&b[0..4]);
        if sign != CBW_SIGN {
            return Err(CbwError::Signature(sign));
        }
        let cb = &b[15..31];
        Ok(Cbw {
            tag: le32(&b[4..8]),
            transfer_len: le32(&b[8..12]),
            flags: b[12],
            lun: b[13],
            cb_len: b[14],
            opcode: cb[0],
            subcode: cb[1],
            address: u32::from_be_bytes([cb[2], cb[3], cb[4], cb[5]]),
            length: u16::from_be_bytes([cb[7], cb[8]]),
        })
    }

    /// The host's side (`InitializeCBW` + the fields each `RKU_*` sets), for tests.
    #[cfg(test)]
    pub fn to_bytes(self) -> [u8; CBW_LEN] {
        let mut b = [0u8; CBW_LEN];
        b[0..4].copy_from_slice(&CBW_SIGN.to_le_bytes());
        b[4..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..12].copy_from_slice(&self.transfer_len.to_le_bytes());
        b[12] = self.flags;
        b[13] = self.lun;
        b[14] = self.cb_len;
        b[15] = self.opcode;
        b[16] = self.subcode;
        b[17..21].copy_from_slice(&self.address.to_be_bytes());
        b[22..24].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    pub fn is_in(&self) -> bool {
        self.flags & 0x80 != 0
    }
}

/// A CSW answering `tag` (`UFI_CHECK_SIGN` checks the signature and the tag).
pub fn csw(tag: u32, failed: bool) -> [u8; CSW_LEN] {
    let mut b = [0u8; CSW_LEN];
    b[0..4].copy_from_slice(&CSW_SIGN.to_le_bytes());
    b[4..8].copy_from_slice(&tag.to_le_bytes());
    b[12] = u8::from(failed);
    b
}

/// The name rkdeveloptool's `USB_OPERATION_CODE` gives an opcode, for logs.
pub fn opcode_name(op: u8) -> &'static str {
    match op {
        TEST_UNIT_READY => "TEST_UNIT_READY",
        READ_FLASH_ID => "READ_FLASH_ID",
        0x03 => "TEST_BAD_BLOCK",
        0x04 => "READ_SECTOR",
        0x05 => "WRITE_SECTOR",
        0x06 => "ERASE_NORMAL",
        ERASE_FORCE => "ERASE_FORCE",
        READ_LBA => "READ_LBA",
        WRITE_LBA => "WRITE_LBA",
        0x16 => "ERASE_SYSTEMDISK",
        0x17 => "READ_SDRAM",
        0x18 => "WRITE_SDRAM",
        0x19 => "EXECUTE_SDRAM",
        READ_FLASH_INFO => "READ_FLASH_INFO",
        READ_CHIP_INFO => "READ_CHIP_INFO",
        0x1E => "SET_RESET_FLAG",
        0x1F => "WRITE_EFUSE",
        0x20 => "READ_EFUSE",
        0x21 => "READ_SPI_FLASH",
        0x22 => "WRITE_SPI_FLASH",
        ERASE_LBA => "ERASE_LBA",
        CHANGE_STORAGE => "CHANGE_STORAGE",
        READ_STORAGE => "READ_STORAGE",
        READ_CAPABILITY => "READ_CAPABILITY",
        DEVICE_RESET => "DEVICE_RESET",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_lba_cbw_round_trips_with_big_endian_cb_fields() {
        let c = Cbw {
            tag: 0x1234_5678,
            transfer_len: 128 * 512,
            flags: 0,
            lun: 0,
            cb_len: 0x0a,
            opcode: WRITE_LBA,
            subcode: 0,
            address: 0x40,
            length: 128,
        };
        let b = c.to_bytes();
        // The CB's LBA at bytes 17..21, big-endian, as EndianU32_LtoB leaves it.
        assert_eq!(&b[17..21], &[0, 0, 0, 0x40]);
        assert_eq!(&b[22..24], &[0, 128]);
        assert_eq!(Cbw::parse(&b), Ok(c));
    }

    #[test]
    fn not_a_cbw_says_why() {
        assert_eq!(Cbw::parse(&[0u8; 13]), Err(CbwError::Length(13)));
        let e = Cbw::parse(&[0u8; 31]).expect_err("signature");
        assert!(e.to_string().contains("expected 0x43425355"), "{e}");
    }

    #[test]
    fn csw_carries_the_tag_and_status() {
        let s = csw(7, true);
        assert_eq!(&s[0..4], b"USBS");
        assert_eq!(u32::from_le_bytes([s[4], s[5], s[6], s[7]]), 7);
        assert_eq!(s[12], 1);
    }
}
