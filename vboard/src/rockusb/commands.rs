//! One CBW's command, device side: the data phase, the flash access, the CSW. The transport
//! is a trait so the host-side tests drive it from memory; on the board it is the
//! FunctionFS bulk endpoint files.

use std::io;

use super::Mode;
use super::cbw::{self, Cbw};
use crate::flash::{Flash, SECTOR};

/// The bulk pipe pair. `read` returns one transfer of at most `max` bytes (a short packet
/// or `max` bytes); `write` sends `data` as one transfer.
pub trait Bulk {
    fn read(&mut self, max: usize) -> io::Result<Vec<u8>>;
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
}

/// What the board must do once the CSW is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    /// `DEVICE_RESET` with this subcode (0 and anything not below: reboot from flash; 3:
    /// into MaskROM).
    Reset(u8),
    /// `DEVICE_RESET` subcode 2: the SoC powers itself off.
    PowerOff,
    /// An erase reached the flash's last sector: the whole flash is blank.
    ErasedToEnd,
}

/// The largest single read of a data phase (a FunctionFS read allocates it in the kernel).
const PIECE: usize = 64 * 1024;
/// `READ_FLASH_INFO`: block 1024 sectors (512 KiB), page 4 sectors, ECC 0, access time 40,
/// manufacturer 0 (SAMSUNG), chip select 0.
const BLOCK_SECTORS: u16 = 1024;
/// 16 bytes of chip version, each 4-byte group reversed as a ROM keeps it.
pub const CHIP_INFO: &[u8; 16] = b"8853001V\0\0\0\0\0\0\0\0";
/// `READ_CAPABILITY` as a real RK3588 usbplug (v1.11) answers it, `3f 07 00 …`: byte 0
/// direct LBA (so `ef` erases by `ERASE_LBA`), vendor storage, first 4M access, read LBA, new
/// vendor storage, read com log; byte 1 new IDB, switch storage, LBA parity. rkdeveloptool
/// 1.32 looks only at direct LBA (`ef`) and new IDB (`ul`, refused in Loader mode anyway);
/// the `rockusb` crate reads every bit (`capability()`), and its `switch_storage`/`storage`
/// are answered below.
const CAPABILITY: [u8; 8] = [0x3f, 0x07, 0, 0, 0, 0, 0, 0];
/// `READ_STORAGE` (rockusb `GetStorageMedia`): a one-hot u32, bit = U-Boot's `BOOT_TYPE_*`
/// index; the board's flash is its eMMC (index 1).
const STORAGE_EMMC: u8 = 1;
/// `DEVICE_RESET` subcodes (rkdeveloptool `rd N`, the `rockusb` crate's `ResetOpcode`).
const RESET_MSC: u8 = 1;
const RESET_POWER_OFF: u8 = 2;
const RESET_DISCONNECT: u8 = 4;

/// Runs one command. `log` gets one line per protocol error, saying what was expected.
pub fn serve(
    c: &Cbw,
    mode: Mode,
    flash: &Flash,
    io: &mut dyn Bulk,
    log: &mut dyn FnMut(String),
) -> io::Result<After> {
    let name = cbw::opcode_name(c.opcode);
    let allowed_in_rom = matches!(c.opcode, cbw::TEST_UNIT_READY | cbw::READ_CHIP_INFO);
    if mode == Mode::MaskRom && !allowed_in_rom {
        log(format!(
            "rockusb: {name} (0x{:02x}) in MaskROM: the mask ROM has no flash driver; run `rkdeveloptool db LOADER` first",
            c.opcode
        ));
        return fail(c, io);
    }
    match c.opcode {
        cbw::TEST_UNIT_READY => ok(c, io, After::Nothing),
        cbw::READ_FLASH_ID => reply(c, io, b"EMMC "),
        cbw::READ_CHIP_INFO => reply(c, io, CHIP_INFO),
        cbw::READ_CAPABILITY => reply(c, io, &CAPABILITY),
        cbw::READ_FLASH_INFO => {
            let mut info = Vec::with_capacity(11);
            info.extend((flash.sectors() as u32).to_le_bytes());
            info.extend(BLOCK_SECTORS.to_le_bytes());
            info.extend([4, 0, 40, 0, 1]);
            reply(c, io, &info)
        }
        cbw::READ_LBA => read_lba(c, flash, io, log),
        cbw::WRITE_LBA => write_lba(c, flash, io, log),
        cbw::ERASE_LBA => {
            let (lba, n) = (c.address as u64, c.length as u64);
            match flash.erase(lba, n) {
                Ok(()) => {
                    let after = if lba + n == flash.sectors() {
                        After::ErasedToEnd
                    } else {
                        After::Nothing
                    };
                    ok(c, io, after)
                }
                Err(e) => {
                    log(format!("rockusb: ERASE_LBA refused: {e}"));
                    fail(c, io)
                }
            }
        }
        cbw::READ_STORAGE => reply(c, io, &(1u32 << STORAGE_EMMC).to_le_bytes()),
        cbw::CHANGE_STORAGE => {
            // As a real loader: the command has no failure status for a medium that is not
            // there (the `rockusb` crate reads `READ_STORAGE` back to see what happened).
            if c.subcode != STORAGE_EMMC {
                log(format!(
                    "rockusb: CHANGE_STORAGE to storage index {} refused quietly: the vboard has only eMMC (index {STORAGE_EMMC}); READ_STORAGE still says eMMC",
                    c.subcode
                ));
            }
            ok(c, io, After::Nothing)
        }
        cbw::DEVICE_RESET => match c.subcode {
            RESET_POWER_OFF => ok(c, io, After::PowerOff),
            RESET_MSC | RESET_DISCONNECT => {
                log(format!(
                    "rockusb: DEVICE_RESET subcode {} ({}) is not emulated: rebooting from flash as subcode 0",
                    c.subcode,
                    if c.subcode == RESET_MSC {
                        "into USB mass storage"
                    } else {
                        "disconnect"
                    }
                ));
                ok(c, io, After::Reset(0))
            }
            sub => ok(c, io, After::Reset(sub)),
        },
        op => {
            log(format!(
                "rockusb: {name} (0x{op:02x}) is not implemented by the vboard (it serves TEST_UNIT_READY, READ_FLASH_ID, READ_FLASH_INFO, READ_CHIP_INFO, READ_CAPABILITY, READ_STORAGE, CHANGE_STORAGE, READ_LBA, WRITE_LBA, ERASE_LBA, DEVICE_RESET)"
            ));
            fail(c, io)
        }
    }
}

fn ok(c: &Cbw, io: &mut dyn Bulk, after: After) -> io::Result<After> {
    io.write(&cbw::csw(c.tag, false))?;
    Ok(after)
}

/// A failed CSW after the data phase the CBW announced: the host's OUT data are drained,
/// an IN data phase is sent as zeros. rkdeveloptool has no timeouts and reads exactly
/// what it asked for, then the CSW: anything shorter (a bare CSW, a zero-length packet)
/// leaves it blocked or leaves our CSW to answer its next command; a stall would stay
/// until re-enumeration, since rkdeveloptool never clears a halt.
fn fail(c: &Cbw, io: &mut dyn Bulk) -> io::Result<After> {
    if c.is_in() {
        let mut left = (c.transfer_len as usize).min(MAX_ZEROS);
        let zeros = vec![0u8; left.min(PIECE)];
        while left > 0 {
            let n = left.min(PIECE);
            io.write(&zeros[..n])?;
            left -= n;
        }
    } else {
        drain(io, c.transfer_len as usize)?;
    }
    io.write(&cbw::csw(c.tag, true))?;
    Ok(After::Nothing)
}

/// The most a refused IN command is answered with (65535 sectors, the CB's limit).
const MAX_ZEROS: usize = 65535 * 512;

fn drain(io: &mut dyn Bulk, mut left: usize) -> io::Result<()> {
    while left > 0 {
        let got = io.read(left.min(PIECE))?;
        if got.is_empty() {
            break;
        }
        left = left.saturating_sub(got.len());
        if got.len() % 512 != 0 {
            break; // a short packet ends the host's transfer
        }
    }
    Ok(())
}

fn reply(c: &Cbw, io: &mut dyn Bulk, data: &[u8]) -> io::Result<After> {
    io.write(data)?;
    ok(c, io, After::Nothing)
}

fn read_lba(
    c: &Cbw,
    flash: &Flash,
    io: &mut dyn Bulk,
    log: &mut dyn FnMut(String),
) -> io::Result<After> {
    let (lba, n) = (c.address as u64, c.length as u64);
    if n == 0 {
        log("rockusb: READ_LBA of 0 sectors (expected at least 1)".into());
        return fail(c, io);
    }
    let mut at = lba;
    let end = lba + n;
    let mut buf = vec![0u8; PIECE];
    // Bounds first: a refusal's data phase is all zeros.
    if let Err(e) = check_range(flash, lba, n) {
        log(format!("rockusb: READ_LBA refused: {e}"));
        return fail(c, io);
    }
    while at < end {
        let k = ((end - at) * SECTOR).min(PIECE as u64) as usize;
        if let Err(e) = flash.read_as_loader(at, &mut buf[..k]) {
            log(format!("rockusb: READ_LBA failed: {e}"));
            return fail(c, io);
        }
        io.write(&buf[..k])?;
        at += k as u64 / SECTOR;
    }
    ok(c, io, After::Nothing)
}

fn check_range(flash: &Flash, lba: u64, n: u64) -> Result<(), crate::flash::FlashError> {
    match lba.checked_add(n) {
        Some(end) if end <= flash.sectors() => Ok(()),
        _ => Err(crate::flash::FlashError::OutOfRange {
            lba,
            sectors: n,
            total: flash.sectors(),
        }),
    }
}

fn write_lba(
    c: &Cbw,
    flash: &Flash,
    io: &mut dyn Bulk,
    log: &mut dyn FnMut(String),
) -> io::Result<After> {
    let (lba, n) = (c.address as u64, c.length as u64);
    let want = (n * SECTOR) as usize;
    if c.transfer_len as usize != want {
        log(format!(
            "rockusb: WRITE_LBA of {n} sectors announces {} bytes of data (expected {want})",
            c.transfer_len
        ));
        return fail(c, io);
    }
    if let Err(e) = check_range(flash, lba, n) {
        log(format!("rockusb: WRITE_LBA refused: {e}"));
        return fail(c, io);
    }
    let mut at = lba;
    let mut left = want;
    while left > 0 {
        let piece = io.read(left.min(PIECE))?;
        if piece.is_empty() || piece.len() % SECTOR as usize != 0 {
            log(format!(
                "rockusb: WRITE_LBA data phase ended after {} of {want} bytes (expected whole sectors)",
                want - left + piece.len()
            ));
            io.write(&cbw::csw(c.tag, true))?;
            return Ok(After::Nothing);
        }
        if let Err(e) = flash.write(at, &piece) {
            log(format!("rockusb: WRITE_LBA failed: {e}"));
            drain(io, left - piece.len())?;
            io.write(&cbw::csw(c.tag, true))?;
            return Ok(After::Nothing);
        }
        at += piece.len() as u64 / SECTOR;
        left -= piece.len();
    }
    ok(c, io, After::Nothing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// The host's transfers queued in order; what the device sent, recorded.
    struct Host {
        to_device: VecDeque<Vec<u8>>,
        from_device: Vec<Vec<u8>>,
    }

    impl Bulk for Host {
        fn read(&mut self, max: usize) -> io::Result<Vec<u8>> {
            let mut t = self.to_device.pop_front().unwrap_or_default();
            if t.len() > max {
                let rest = t.split_off(max);
                self.to_device.push_front(rest);
            }
            Ok(t)
        }
        fn write(&mut self, data: &[u8]) -> io::Result<()> {
            self.from_device.push(data.to_vec());
            Ok(())
        }
    }

    fn cbw(opcode: u8, address: u32, length: u16, flags: u8) -> Cbw {
        let transfer_len = match opcode {
            cbw::READ_LBA | cbw::WRITE_LBA => length as u32 * 512,
            _ => 0,
        };
        Cbw {
            tag: 0xabcd,
            transfer_len,
            flags,
            lun: 0,
            cb_len: 0x0a,
            opcode,
            subcode: 0,
            address,
            length,
        }
    }

    fn flash() -> (tempfile::TempDir, Flash) {
        let dir = tempfile::tempdir().expect("tmp");
        let f = Flash::open(&dir.path().join("f"), 1 << 20).expect("flash");
        (dir, f)
    }

    fn run(
        c: &Cbw,
        mode: Mode,
        f: &Flash,
        data: Vec<Vec<u8>>,
    ) -> (After, Vec<Vec<u8>>, Vec<String>) {
        let mut host = Host {
            to_device: data.into(),
            from_device: Vec::new(),
        };
        let mut logs = Vec::new();
        let after = serve(c, mode, f, &mut host, &mut |l| logs.push(l)).expect("io");
        (after, host.from_device, logs)
    }

    fn status(sent: &[Vec<u8>]) -> u8 {
        let csw = sent.last().expect("a CSW");
        assert_eq!(csw.len(), 13);
        assert_eq!(&csw[0..4], b"USBS");
        csw[12]
    }

    #[test]
    fn write_then_read_back_in_loader_mode() {
        let (_d, f) = flash();
        let data: Vec<u8> = (0..128 * 512).map(|i| (i % 251) as u8).collect();
        let (_, sent, logs) = run(
            &cbw(cbw::WRITE_LBA, 0x40, 128, 0),
            Mode::Loader,
            &f,
            vec![data.clone()],
        );
        assert_eq!(status(&sent), 0, "{logs:?}");
        let (_, sent, _) = run(
            &cbw(cbw::READ_LBA, 0x40, 128, 0x80),
            Mode::Loader,
            &f,
            vec![],
        );
        assert_eq!(status(&sent), 0);
        assert_eq!(sent[..sent.len() - 1].concat(), data);
    }

    #[test]
    fn flash_info_describes_the_flash_as_rkdeveloptool_reads_it() {
        let (_d, f) = flash();
        let (_, sent, _) = run(
            &cbw(cbw::READ_FLASH_INFO, 0, 0, 0x80),
            Mode::Loader,
            &f,
            vec![],
        );
        let info = &sent[0];
        assert_eq!(info.len(), 11);
        // uiFlashSize in sectors: rfi prints it / 2 / 1024 as MB.
        assert_eq!(
            u32::from_le_bytes([info[0], info[1], info[2], info[3]]),
            2048
        );
        assert_ne!(
            u16::from_le_bytes([info[4], info[5]]),
            0,
            "block size 0 fails GetFlashInfo"
        );
        assert_ne!(info[6], 0, "page size 0 fails GetFlashInfo");
    }

    #[test]
    fn beyond_the_end_fails_after_draining_the_data() {
        let (_d, f) = flash();
        let (_, sent, logs) = run(
            &cbw(cbw::WRITE_LBA, 2040, 128, 0),
            Mode::Loader,
            &f,
            vec![vec![0u8; 128 * 512], b"next".to_vec()],
        );
        assert_eq!(status(&sent), 1);
        assert!(logs[0].contains("beyond the flash end"), "{logs:?}");
        let (_, sent, _) = run(&cbw(cbw::READ_LBA, 2047, 2, 0x80), Mode::Loader, &f, vec![]);
        // The data phase the host waits for (zeros), then the failed CSW.
        assert_eq!(sent[..sent.len() - 1].concat(), vec![0u8; 1024]);
        assert_eq!(status(&sent), 1);
    }

    #[test]
    fn maskrom_refuses_flash_commands_but_answers_chip_info() {
        let (_d, f) = flash();
        let (_, sent, logs) = run(
            &cbw(cbw::WRITE_LBA, 0x40, 1, 0),
            Mode::MaskRom,
            &f,
            vec![vec![1u8; 512]],
        );
        assert_eq!(status(&sent), 1);
        assert!(logs[0].contains("db LOADER"), "{logs:?}");
        let mut info = cbw(cbw::READ_FLASH_INFO, 0, 0, 0x80);
        info.transfer_len = 11;
        let (_, sent, _) = run(&info, Mode::MaskRom, &f, vec![]);
        assert_eq!(
            sent[0],
            vec![0u8; 11],
            "zeros: GetFlashInfo then sees block size 0"
        );
        assert_eq!(status(&sent), 1);
        let (_, sent, _) = run(
            &cbw(cbw::READ_CHIP_INFO, 0, 0, 0x80),
            Mode::MaskRom,
            &f,
            vec![],
        );
        assert_eq!(sent[0], CHIP_INFO.to_vec());
        assert_eq!(status(&sent), 0);
    }

    #[test]
    fn erase_to_the_end_and_reset_tell_the_board() {
        let (_d, f) = flash();
        let (after, sent, _) = run(&cbw(cbw::ERASE_LBA, 0, 2048, 0), Mode::Loader, &f, vec![]);
        assert_eq!((after, status(&sent)), (After::ErasedToEnd, 0));
        let (after, _, _) = run(&cbw(cbw::ERASE_LBA, 0, 100, 0), Mode::Loader, &f, vec![]);
        assert_eq!(after, After::Nothing);
        let mut rd = cbw(cbw::DEVICE_RESET, 0, 0, 0);
        rd.subcode = 3;
        let (after, _, _) = run(&rd, Mode::Loader, &f, vec![]);
        assert_eq!(after, After::Reset(3));
    }

    #[test]
    fn storage_and_capability_answer_as_an_rk3588_usbplug() {
        let (_d, f) = flash();
        let mut cap = cbw(cbw::READ_CAPABILITY, 0, 0, 0x80);
        cap.transfer_len = 8;
        let (_, sent, _) = run(&cap, Mode::Loader, &f, vec![]);
        assert_eq!(sent[0], vec![0x3f, 0x07, 0, 0, 0, 0, 0, 0]);
        let mut st = cbw(cbw::READ_STORAGE, 0, 0, 0x80);
        st.transfer_len = 4;
        let (_, sent, _) = run(&st, Mode::Loader, &f, vec![]);
        assert_eq!(sent[0], 2u32.to_le_bytes().to_vec(), "eMMC, one-hot bit 1");
        assert_eq!(status(&sent), 0);
        let mut sw = cbw(cbw::CHANGE_STORAGE, 0, 0, 0);
        sw.subcode = 2; // SD: not there, no failure status, logged
        let (_, sent, logs) = run(&sw, Mode::Loader, &f, vec![]);
        assert_eq!(status(&sent), 0);
        assert!(logs[0].contains("only eMMC"), "{logs:?}");
        let (_, sent, _) = run(&st, Mode::MaskRom, &f, vec![]);
        assert_eq!(status(&sent), 1, "the mask ROM has no storage commands");
    }

    #[test]
    fn reset_subcodes_map_to_what_the_board_does() {
        let (_d, f) = flash();
        let mut rd = cbw(cbw::DEVICE_RESET, 0, 0, 0);
        for (sub, want) in [
            (0, After::Reset(0)),
            (1, After::Reset(0)),
            (2, After::PowerOff),
            (3, After::Reset(3)),
            (4, After::Reset(0)),
        ] {
            rd.subcode = sub;
            let (after, sent, _) = run(&rd, Mode::Loader, &f, vec![]);
            assert_eq!((after, status(&sent)), (want, 0), "subcode {sub}");
        }
    }

    #[test]
    fn an_unknown_opcode_is_logged_and_failed() {
        let (_d, f) = flash();
        let (_, sent, logs) = run(&cbw(0x23, 0, 0, 0), Mode::Loader, &f, vec![]);
        assert_eq!(status(&sent), 1);
        assert!(
            logs[0].contains("WRITE_NEW_EFUSE") || logs[0].contains("0x23"),
            "{logs:?}"
        );
    }
}
