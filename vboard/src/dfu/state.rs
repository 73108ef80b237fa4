//! The DFU 1.1 device state machine (USB DFU 1.1, appendix A.1 and section 6), as pure
//! logic: a class request in, the reply and the work to do after it out. Request numbers,
//! states and status codes as dfu-util 0.11 uses them (`dfu.h`, `dfu.c`, `dfu_load.c`).
//!
//! How dfu-util 0.11 drives it:
//! - runtime mode (`main.c`): GETSTATUS (a stall reads as appIDLE), then DETACH(wValue 1000)
//!   when the state is appIDLE/appDETACH; with bitWillDetach it waits for the device to
//!   re-enumerate by itself, else it resets the bus.
//! - DFU mode, before anything: GETSTATUS; dfuERROR → CLRSTATUS, dfuDNLOAD-IDLE or
//!   dfuUPLOAD-IDLE → ABORT, until dfuIDLE.
//! - `-D` (`dfuload_do_dnload`): DNLOAD(block n, ≤ wTransferSize bytes) then GETSTATUS until
//!   the state is dfuDNLOAD-IDLE or dfuERROR, sleeping bwPollTimeout between polls; a status
//!   other than OK fails the download. Then a zero-length DNLOAD, GETSTATUS: dfuMANIFEST-SYNC
//!   or dfuMANIFEST → sleep, poll again; dfuMANIFEST-WAIT-RESET → bus reset; dfuIDLE → done.
//! - `-U` (`dfuload_do_upload`): UPLOAD(block n, wTransferSize) until a reply is shorter.
//!
//! This device is manifestation tolerant: after the zero-length DNLOAD it reports
//! dfuMANIFEST once (the manifestation: the image's length is recorded), then dfuIDLE.
//! A GETSTATUS's bState is the state the device enters after the reply (DFU 1.1 6.1.2).

/// bRequest values (DFU 1.1 table 3.2).
pub const DETACH: u8 = 0;
pub const DNLOAD: u8 = 1;
pub const UPLOAD: u8 = 2;
pub const GETSTATUS: u8 = 3;
pub const CLRSTATUS: u8 = 4;
pub const GETSTATE: u8 = 5;
pub const ABORT: u8 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    AppIdle = 0,
    AppDetach = 1,
    DfuIdle = 2,
    DnloadSync = 3,
    DnBusy = 4,
    DnloadIdle = 5,
    ManifestSync = 6,
    Manifest = 7,
    // 8, dfuMANIFEST-WAIT-RESET, is never entered: this device is manifestation tolerant.
    UploadIdle = 9,
    Error = 10,
}

impl State {
    /// dfu-util's names (`dfu_state_to_string`).
    pub fn name(self) -> &'static str {
        match self {
            State::AppIdle => "appIDLE",
            State::AppDetach => "appDETACH",
            State::DfuIdle => "dfuIDLE",
            State::DnloadSync => "dfuDNLOAD-SYNC",
            State::DnBusy => "dfuDNBUSY",
            State::DnloadIdle => "dfuDNLOAD-IDLE",
            State::ManifestSync => "dfuMANIFEST-SYNC",
            State::Manifest => "dfuMANIFEST",
            State::UploadIdle => "dfuUPLOAD-IDLE",
            State::Error => "dfuERROR",
        }
    }
}

/// bStatus values (DFU 1.1 6.1.2) this device reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0x00,
    ErrWrite = 0x03,
    ErrAddress = 0x08,
    ErrNotDone = 0x09,
    ErrUnknown = 0x0e,
    ErrStalledPkt = 0x0f,
}

/// A class request to the DFU interface (its OUT data is read only once the request is
/// accepted: a refused request is stalled before its data stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub request: u8,
    pub value: u16,
    pub length: u16,
}

/// How ep0 answers the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Accepted: an OUT request's status stage (its data, if any, was read through the
    /// reader given to [`Dfu::handle`]).
    Ack,
    /// The IN data stage.
    Data(Vec<u8>),
    /// A protocol error: ep0 stalls (and the state machine is in dfuERROR).
    Stall,
}

/// Work for the board after the reply went out (done off the control transfer, so a slow
/// flash never holds a request past dfu-util's 5 s timeout: the host is told to wait with
/// bwPollTimeout instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Write a downloaded block at `offset` in alt setting `alt`; `first`: a new download
    /// begins (the alt's recorded image is forgotten). Report with [`Dfu::written`].
    Write {
        alt: u8,
        offset: u64,
        data: Vec<u8>,
        first: bool,
    },
    /// Manifestation: the download into `alt` is complete at `len` bytes. Report with
    /// [`Dfu::manifested`].
    Manifest { alt: u8, len: u64 },
    /// An ABORT cut a download of `alt` after `len` bytes: record what is there.
    Abandon { alt: u8, len: u64 },
    /// DETACH in runtime mode: re-enumerate in DFU mode.
    Detach,
}

/// What the machine needs from the board's storage.
pub trait Targets {
    /// Bytes alt setting `alt` can hold (None: no such alt setting).
    fn capacity(&self, alt: u8) -> Option<u64>;
    /// Bytes of the last image downloaded into `alt` (what UPLOAD returns).
    fn image_len(&self, alt: u8) -> u64;
    /// Reads `buf.len()` bytes at `offset` of `alt`.
    fn read(&self, alt: u8, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

/// One DFU interface's protocol state (a new one per enumeration).
pub struct Dfu {
    state: State,
    status: Status,
    /// The DFU functional descriptor's wTransferSize: the largest DNLOAD/UPLOAD.
    transfer_size: u16,
    /// The flash's write speed in bytes per second (`--write-speed`): bwPollTimeout while a
    /// block is written is its share.
    write_speed: Option<u64>,
    alt: u8,
    offset: u64,
    next_block: u16,
    /// A block received and not yet written; `first` as in [`Work::Write`].
    pending: Option<(Vec<u8>, bool)>,
    manifested: bool,
}

impl Dfu {
    pub fn runtime() -> Dfu {
        Dfu::new(State::AppIdle, 0, None)
    }

    pub fn dfu_mode(transfer_size: u16, write_speed: Option<u64>) -> Dfu {
        Dfu::new(State::DfuIdle, transfer_size, write_speed)
    }

    fn new(state: State, transfer_size: u16, write_speed: Option<u64>) -> Dfu {
        Dfu {
            state,
            status: Status::Ok,
            transfer_size,
            write_speed,
            alt: 0,
            offset: 0,
            next_block: 0,
            pending: None,
            manifested: false,
        }
    }

    #[cfg(test)]
    pub fn state(&self) -> State {
        self.state
    }

    #[cfg(test)]
    pub fn status(&self) -> Status {
        self.status
    }

    /// The alt setting of the current (or last) transfer.
    #[cfg(test)]
    pub fn alt(&self) -> u8 {
        self.alt
    }

    /// A request that is not valid now: stalled, dfuERROR with errSTALLEDPKT (DFU 1.1 A.1).
    fn refuse(&mut self, req: u8, why: &str, log: &mut dyn FnMut(String)) -> Reply {
        log(format!(
            "dfu: {} in {}: {why}; stalled, now dfuERROR",
            request_name(req),
            self.state.name()
        ));
        self.error(Status::ErrStalledPkt)
    }

    fn error(&mut self, status: Status) -> Reply {
        self.state = State::Error;
        self.status = status;
        self.pending = None;
        Reply::Stall
    }

    /// GETSTATUS's six bytes: bStatus, bwPollTimeout (3 bytes LE), bState, iString.
    fn status_reply(&self, poll_ms: u32) -> Reply {
        let p = poll_ms.min(0xff_ffff).to_le_bytes();
        Reply::Data(vec![
            self.status as u8,
            p[0],
            p[1],
            p[2],
            self.state as u8,
            0,
        ])
    }

    /// Handles one request. `data` reads a DNLOAD's OUT data stage (called at most once,
    /// only for an accepted block). `current_alt` is asked only when a transfer starts (the
    /// host chose the alt setting with SET_INTERFACE before it). `log` hears protocol errors.
    pub fn handle(
        &mut self,
        req: Request,
        data: &mut dyn FnMut() -> Result<Vec<u8>, String>,
        current_alt: &mut dyn FnMut() -> u8,
        targets: &dyn Targets,
        log: &mut dyn FnMut(String),
    ) -> (Reply, Option<Work>) {
        let from = self.state;
        if matches!(from, State::AppIdle | State::AppDetach) {
            return match req.request {
                GETSTATUS => (self.status_reply(0), None),
                GETSTATE => (Reply::Data(vec![from as u8]), None),
                DETACH => {
                    self.state = State::AppDetach;
                    (Reply::Ack, Some(Work::Detach))
                }
                _ => {
                    // Runtime mode has no dfuERROR: the request is refused, nothing changes.
                    log(format!(
                        "dfu: {} in runtime mode (only DETACH, GETSTATUS, GETSTATE): stalled",
                        request_name(req.request)
                    ));
                    (Reply::Stall, None)
                }
            };
        }
        match (req.request, from) {
            (GETSTATE, _) => (Reply::Data(vec![from as u8]), None),
            (GETSTATUS, State::DnloadSync) => match self.pending.take() {
                Some((data, first)) => {
                    self.state = State::DnBusy;
                    let poll = self
                        .write_speed
                        .map_or(0, |b| (data.len() as u64 * 1000).div_ceil(b.max(1)) as u32);
                    let work = Work::Write {
                        alt: self.alt,
                        offset: self.offset,
                        data,
                        first,
                    };
                    (self.status_reply(poll), Some(work))
                }
                None => {
                    self.state = State::DnloadIdle;
                    (self.status_reply(0), None)
                }
            },
            (GETSTATUS, State::ManifestSync) if !self.manifested => {
                self.state = State::Manifest;
                let work = Work::Manifest {
                    alt: self.alt,
                    len: self.offset,
                };
                (self.status_reply(50), Some(work))
            }
            (GETSTATUS, State::ManifestSync) => {
                self.state = State::DfuIdle;
                (self.status_reply(0), None)
            }
            (GETSTATUS, _) => (self.status_reply(0), None),
            (CLRSTATUS, State::Error) => {
                self.state = State::DfuIdle;
                self.status = Status::Ok;
                (Reply::Ack, None)
            }
            (
                ABORT,
                State::DfuIdle
                | State::DnloadSync
                | State::DnloadIdle
                | State::ManifestSync
                | State::UploadIdle,
            ) => {
                let work = matches!(from, State::DnloadSync | State::DnloadIdle).then_some(
                    Work::Abandon {
                        alt: self.alt,
                        len: self.offset,
                    },
                );
                self.state = State::DfuIdle;
                self.pending = None;
                (Reply::Ack, work)
            }
            (DNLOAD, State::DfuIdle | State::DnloadIdle) => {
                let first = from == State::DfuIdle;
                if req.length == 0 {
                    if first {
                        // DFU 1.1 A.1: a zero-length DNLOAD in dfuIDLE is an error.
                        log("dfu: zero-length DNLOAD with no download in progress".into());
                        return (self.error(Status::ErrNotDone), None);
                    }
                    self.state = State::ManifestSync;
                    self.manifested = false;
                    return (Reply::Ack, None);
                }
                if req.length > self.transfer_size {
                    let why = format!(
                        "a block of {} bytes, wTransferSize is {}",
                        req.length, self.transfer_size
                    );
                    return (self.refuse(req.request, &why, log), None);
                }
                let block = match data() {
                    Ok(d) if d.len() == req.length as usize => d,
                    Ok(d) => {
                        log(format!(
                            "dfu: DNLOAD data stage gave {} of {} bytes",
                            d.len(),
                            req.length
                        ));
                        self.error(Status::ErrUnknown);
                        return (Reply::Ack, None);
                    }
                    Err(e) => {
                        log(format!("dfu: DNLOAD data stage failed: {e}"));
                        self.error(Status::ErrUnknown);
                        return (Reply::Ack, None);
                    }
                };
                if first {
                    self.alt = current_alt();
                    self.offset = 0;
                    self.next_block = req.value;
                }
                if req.value != self.next_block {
                    log(format!(
                        "dfu: DNLOAD block {} where {} was next (accepted)",
                        req.value, self.next_block
                    ));
                }
                self.next_block = req.value.wrapping_add(1);
                let Some(cap) = targets.capacity(self.alt) else {
                    log(format!(
                        "dfu: DNLOAD to alt setting {} that does not exist",
                        self.alt
                    ));
                    self.state = State::Error;
                    self.status = Status::ErrAddress;
                    return (Reply::Ack, None);
                };
                if self.offset + block.len() as u64 > cap {
                    log(format!(
                        "dfu: DNLOAD beyond alt {}'s end: {} + {} bytes > {cap}",
                        self.alt,
                        self.offset,
                        block.len()
                    ));
                    // The block is taken, the next GETSTATUS says errADDRESS (dfu-util
                    // then prints the status and stops).
                    self.state = State::Error;
                    self.status = Status::ErrAddress;
                    return (Reply::Ack, None);
                }
                self.pending = Some((block, first));
                self.state = State::DnloadSync;
                (Reply::Ack, None)
            }
            (UPLOAD, State::DfuIdle | State::UploadIdle) => {
                if from == State::DfuIdle {
                    self.alt = current_alt();
                    self.offset = 0;
                }
                if targets.capacity(self.alt).is_none() {
                    return (self.refuse(req.request, "no such alt setting", log), None);
                }
                let left = targets.image_len(self.alt).saturating_sub(self.offset);
                let n = left.min(req.length as u64) as usize;
                let mut buf = vec![0u8; n];
                if let Err(e) = targets.read(self.alt, self.offset, &mut buf) {
                    log(format!("dfu: UPLOAD read failed: {e}"));
                    return (self.error(Status::ErrUnknown), None);
                }
                self.offset += n as u64;
                // A short frame ends the upload (DFU 1.1 6.2).
                self.state = if n < req.length as usize {
                    State::DfuIdle
                } else {
                    State::UploadIdle
                };
                (Reply::Data(buf), None)
            }
            (r, _) => (self.refuse(r, "not valid in this state", log), None),
        }
    }

    /// The board wrote the block [`Work::Write`] asked for.
    pub fn written(&mut self, result: Result<u64, String>, log: &mut dyn FnMut(String)) {
        if self.state != State::DnBusy {
            return;
        }
        match result {
            Ok(n) => {
                self.offset += n;
                self.state = State::DnloadSync;
            }
            Err(e) => {
                log(format!("dfu: write failed: {e}; dfuERROR errWRITE"));
                self.state = State::Error;
                self.status = Status::ErrWrite;
            }
        }
    }

    /// The board did the [`Work::Manifest`] (tolerant: back to dfuMANIFEST-SYNC, whose
    /// next GETSTATUS goes to dfuIDLE).
    pub fn manifested(&mut self, result: Result<(), String>, log: &mut dyn FnMut(String)) {
        if self.state != State::Manifest {
            return;
        }
        match result {
            Ok(()) => {
                self.manifested = true;
                self.state = State::ManifestSync;
            }
            Err(e) => {
                log(format!("dfu: manifestation failed: {e}; dfuERROR"));
                self.state = State::Error;
                self.status = Status::ErrUnknown;
            }
        }
    }
}

pub fn request_name(r: u8) -> &'static str {
    match r {
        DETACH => "DETACH",
        DNLOAD => "DNLOAD",
        UPLOAD => "UPLOAD",
        GETSTATUS => "GETSTATUS",
        CLRSTATUS => "CLRSTATUS",
        GETSTATE => "GETSTATE",
        ABORT => "ABORT",
        _ => "an unknown request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two alt settings in memory: 16 KiB and 4 KiB.
    struct Mem {
        alts: Vec<Vec<u8>>,
        lens: Vec<u64>,
    }

    impl Targets for Mem {
        fn capacity(&self, alt: u8) -> Option<u64> {
            self.alts.get(alt as usize).map(|a| a.len() as u64)
        }
        fn image_len(&self, alt: u8) -> u64 {
            self.lens[alt as usize]
        }
        fn read(&self, alt: u8, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            let a = &self.alts[alt as usize];
            buf.copy_from_slice(&a[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
    }

    impl Mem {
        fn new() -> Mem {
            Mem {
                alts: vec![vec![0u8; 16384], vec![0u8; 4096]],
                lens: vec![0, 0],
            }
        }
        /// What the board does with the work.
        fn run(&mut self, dfu: &mut Dfu, work: Option<Work>) {
            match work {
                Some(Work::Write {
                    alt,
                    offset,
                    data,
                    first,
                }) => {
                    if first {
                        self.lens[alt as usize] = 0;
                    }
                    let a = &mut self.alts[alt as usize];
                    a[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                    dfu.written(Ok(data.len() as u64), &mut |_| {});
                }
                Some(Work::Manifest { alt, len }) => {
                    self.lens[alt as usize] = len;
                    dfu.manifested(Ok(()), &mut |_| {});
                }
                Some(Work::Abandon { alt, len }) => self.lens[alt as usize] = len,
                Some(Work::Detach) | None => {}
            }
        }
    }

    fn req(request: u8, value: u16, length: u16, data: &[u8]) -> (Request, Vec<u8>) {
        (
            Request {
                request,
                value,
                length,
            },
            data.to_vec(),
        )
    }

    /// Sends a request as dfu-util would, does the work, returns the reply.
    fn send(dfu: &mut Dfu, mem: &mut Mem, alt: u8, (r, data): (Request, Vec<u8>)) -> Reply {
        let mut data = Some(data);
        let mut reader = || data.take().ok_or_else(|| "data read twice".to_string());
        let (reply, work) = dfu.handle(r, &mut reader, &mut || alt, mem, &mut |_| {});
        mem.run(dfu, work);
        reply
    }

    fn get_status(dfu: &mut Dfu, mem: &mut Mem) -> (u8, u32, State) {
        match send(dfu, mem, 0, req(GETSTATUS, 0, 6, &[])) {
            Reply::Data(d) => {
                let poll = u32::from_le_bytes([d[1], d[2], d[3], 0]);
                let st = [
                    State::AppIdle,
                    State::AppDetach,
                    State::DfuIdle,
                    State::DnloadSync,
                    State::DnBusy,
                    State::DnloadIdle,
                    State::ManifestSync,
                    State::Manifest,
                    State::Error, // 8 (dfuMANIFEST-WAIT-RESET) never comes: caught below
                    State::UploadIdle,
                    State::Error,
                ][d[4] as usize];
                assert_ne!(d[4], 8, "a tolerant device never waits for a reset");
                (d[0], poll, st)
            }
            other => panic!("GETSTATUS answered {other:?}"),
        }
    }

    /// dfuload_do_dnload, step by step.
    fn download(dfu: &mut Dfu, mem: &mut Mem, alt: u8, image: &[u8]) -> Vec<State> {
        let mut seen = Vec::new();
        for (n, block) in image.chunks(4096).enumerate() {
            assert_eq!(
                send(
                    dfu,
                    mem,
                    alt,
                    req(DNLOAD, n as u16, block.len() as u16, block)
                ),
                Reply::Ack
            );
            loop {
                let (status, _, st) = get_status(dfu, mem);
                seen.push(st);
                if st == State::DnloadIdle || st == State::Error {
                    assert_eq!(status, 0, "status after block {n}");
                    break;
                }
            }
        }
        send(dfu, mem, alt, req(DNLOAD, 99, 0, &[]));
        loop {
            let (_, _, st) = get_status(dfu, mem);
            seen.push(st);
            if st == State::DfuIdle {
                break;
            }
            assert!(
                matches!(st, State::Manifest | State::ManifestSync),
                "{st:?}"
            );
        }
        seen
    }

    fn upload(dfu: &mut Dfu, mem: &mut Mem, alt: u8) -> Vec<u8> {
        let mut out = Vec::new();
        for n in 0.. {
            let Reply::Data(d) = send(dfu, mem, alt, req(UPLOAD, n, 4096, &[])) else {
                panic!("UPLOAD stalled")
            };
            out.extend(&d);
            if d.len() < 4096 {
                break;
            }
        }
        out
    }

    #[test]
    fn download_manifest_and_upload_round_trip() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, Some(1 << 20));
        let image: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
        let seen = download(&mut dfu, &mut mem, 0, &image);
        assert_eq!(seen[0], State::DnBusy, "a block is written while dfuDNBUSY");
        assert!(seen.contains(&State::Manifest), "{seen:?}");
        assert_eq!(dfu.state(), State::DfuIdle);
        assert_eq!(mem.lens[0], 10_000);
        assert_eq!(upload(&mut dfu, &mut mem, 0), image);
        assert_eq!(dfu.state(), State::DfuIdle);
        // An image of whole transfers ends with an empty frame.
        let mut dfu = Dfu::dfu_mode(4096, None);
        download(&mut dfu, &mut mem, 1, &[7u8; 4096]);
        assert_eq!(upload(&mut dfu, &mut mem, 1), vec![7u8; 4096]);
    }

    #[test]
    fn busy_poll_timeout_follows_the_write_speed() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, Some(4096)); // 4 KiB/s: a 4 KiB block takes 1 s
        send(&mut dfu, &mut mem, 0, req(DNLOAD, 0, 4096, &[1; 4096]));
        let (_, poll, st) = get_status(&mut dfu, &mut mem);
        assert_eq!((poll, st), (1000, State::DnBusy));
        let (_, poll, st) = get_status(&mut dfu, &mut mem);
        assert_eq!((poll, st), (0, State::DnloadIdle));
    }

    #[test]
    fn beyond_the_alt_end_reports_err_address_then_clrstatus_recovers() {
        // alt 1 holds 4096 bytes: a second block does not fit.
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, None);
        send(&mut dfu, &mut mem, 1, req(DNLOAD, 0, 4096, &[1; 4096]));
        get_status(&mut dfu, &mut mem);
        get_status(&mut dfu, &mut mem);
        send(&mut dfu, &mut mem, 1, req(DNLOAD, 1, 4096, &[1; 4096]));
        let (status, _, st) = get_status(&mut dfu, &mut mem);
        assert_eq!((st, status), (State::Error, Status::ErrAddress as u8));
        assert_eq!(
            send(&mut dfu, &mut mem, 1, req(CLRSTATUS, 0, 0, &[])),
            Reply::Ack
        );
        assert_eq!(dfu.state(), State::DfuIdle);
        assert_eq!(dfu.status(), Status::Ok);
    }

    #[test]
    fn invalid_requests_stall_into_dfu_error() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, None);
        // Zero-length DNLOAD with nothing downloaded.
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(DNLOAD, 0, 0, &[])),
            Reply::Stall
        );
        assert_eq!(
            (dfu.state(), dfu.status()),
            (State::Error, Status::ErrNotDone)
        );
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(CLRSTATUS, 0, 0, &[])),
            Reply::Ack
        );
        // DETACH in DFU mode, a too large block, CLRSTATUS outside dfuERROR.
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(DETACH, 1000, 0, &[])),
            Reply::Stall
        );
        assert_eq!(dfu.status(), Status::ErrStalledPkt);
        send(&mut dfu, &mut mem, 0, req(CLRSTATUS, 0, 0, &[]));
        // Refused before its data stage: the reader is not called.
        let (r, _) = req(DNLOAD, 0, 8192, &[]);
        let mut reader = || -> Result<Vec<u8>, String> { panic!("data read for a refused block") };
        let (reply, _) = dfu.handle(r, &mut reader, &mut || 0, &mem, &mut |_| {});
        assert_eq!(reply, Reply::Stall);
        send(&mut dfu, &mut mem, 0, req(CLRSTATUS, 0, 0, &[]));
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(CLRSTATUS, 0, 0, &[])),
            Reply::Stall
        );
        // GETSTATE answers in every state, without changing it.
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(GETSTATE, 0, 1, &[])),
            Reply::Data(vec![State::Error as u8])
        );
    }

    #[test]
    fn abort_mid_download_keeps_what_was_written() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, None);
        send(&mut dfu, &mut mem, 0, req(DNLOAD, 0, 4096, &[9; 4096]));
        get_status(&mut dfu, &mut mem);
        get_status(&mut dfu, &mut mem);
        assert_eq!(dfu.state(), State::DnloadIdle);
        assert_eq!(
            send(&mut dfu, &mut mem, 0, req(ABORT, 0, 0, &[])),
            Reply::Ack
        );
        assert_eq!((dfu.state(), mem.lens[0]), (State::DfuIdle, 4096));
    }

    #[test]
    fn runtime_mode_answers_status_and_detaches() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::runtime();
        let (status, _, st) = get_status(&mut dfu, &mut mem);
        assert_eq!((status, st), (0, State::AppIdle));
        let none = &mut || Err("no data stage".to_string());
        let (reply, work) = dfu.handle(
            req(DETACH, 1000, 0, &[]).0,
            none,
            &mut || 0,
            &mem,
            &mut |_| {},
        );
        assert_eq!((reply, work), (Reply::Ack, Some(Work::Detach)));
        assert_eq!(dfu.state(), State::AppDetach);
        let (reply, _) = dfu.handle(
            req(DNLOAD, 0, 4, &[0; 4]).0,
            none,
            &mut || 0,
            &mem,
            &mut |_| {},
        );
        assert_eq!(reply, Reply::Stall);
        assert_eq!(dfu.state(), State::AppDetach, "no dfuERROR in runtime mode");
    }

    #[test]
    fn the_alt_setting_is_taken_when_a_transfer_starts() {
        let mut mem = Mem::new();
        let mut dfu = Dfu::dfu_mode(4096, None);
        download(&mut dfu, &mut mem, 1, &[5u8; 100]);
        assert_eq!(dfu.alt(), 1);
        assert_eq!(mem.lens, [0, 100]);
        assert_eq!(upload(&mut dfu, &mut mem, 1), vec![5u8; 100]);
        assert_eq!(upload(&mut dfu, &mut mem, 0), Vec::<u8>::new());
    }
}
