//! Images: what a file handle holds (detected by magic, never by name), its logical size and
//! the bytes it maps, and its content as a stream of runs for the writer.
//!
//! - `magic` — compression container and layout from the first bytes.
//! - `decompress` — reading the handle at explicit offsets; gzip, zstd, xz decoders.
//! - `sparse` — Android sparse images.
//! - `bmap` — bmaptool's block maps.
//! - `check` — the pre-pass before any write (bmap checksums, compressed sizes).
//! - `stream` — the runs the writer reads, one implementation per layout.

pub mod bmap;
pub mod check;
pub mod decompress;
pub mod magic;
pub mod sparse;
pub mod stream;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use serde::Serialize;

use crate::error::FlashError;
use crate::progress::Control;
use crate::units::{human, human_bin};
use bmap::{Bmap, BmapSummary};
pub use check::SizeLimit;
use check::{CheckReport, stream_fault};
pub use magic::{Compression, Layout};
use sparse::{SparseCounts, SparseFault, SparseHeader, SparseReader};
use stream::{BmapSegments, RawSegments, Segments, SparseSegments, sparse_err};

/// What is known of an image.
#[derive(Debug, Clone, Serialize)]
pub struct ImageInfo {
    /// The compression container.
    pub compression: Compression,
    /// The layout inside it.
    pub layout: Layout,
    /// Bytes of the file as handed over.
    pub file_size: u64,
    /// Bytes of the disk image it expands to; `None` for a compressed image until
    /// [`Image::check`] has run.
    pub logical_size: Option<u64>,
    /// Bytes that will be written (all of a raw image, a bmap's ranges, a sparse image's RAW
    /// and FILL chunks); `None` until known, as `logical_size`.
    pub mapped_bytes: Option<u64>,
    /// The bmap, when one was given.
    pub bmap: Option<BmapSummary>,
    /// The sparse header, for an Android sparse image.
    pub sparse: Option<SparseHeader>,
    /// The sparse chunks, counted (at open when uncompressed, after the check otherwise).
    pub sparse_chunks: Option<SparseCounts>,
}

/// An image to flash: the caller's open file (and bmap), never a path.
pub struct Image {
    file: Arc<File>,
    bmap: Option<Bmap>,
    info: ImageInfo,
    check: Option<CheckReport>,
    needs_check: bool,
}

fn read_err(what: &'static str) -> impl Fn(std::io::Error) -> FlashError {
    move |source| FlashError::ImageRead {
        what,
        source,
        written: "nothing was written".into(),
    }
}

fn sparse_open_err(e: SparseFault, c: Compression) -> FlashError {
    stream_fault(sparse_err(c, e), 0)
}

impl Image {
    /// Looks at an image handed over as an open file (and optionally its bmap): detects the
    /// compression and layout by magic, parses the bmap, walks an uncompressed sparse
    /// image's chunk headers. Cheap: the data are read by [`check`](Self::check) (when
    /// needed) and by the writer. The file's own offset is never used or moved.
    pub fn open(image: File, bmap: Option<File>) -> Result<Image, FlashError> {
        Image::open_with(image, bmap, &Control::none())
    }

    /// As [`open`](Self::open), stopping with [`FlashError::Cancelled`] (nothing written)
    /// once `ctl`'s cancel flag is up: it is read every few thousand XML events of the
    /// bmap, every few thousand chunk headers of an uncompressed sparse image, and (a
    /// [`Control::with_flag`]) by the decoder that finds a compressed image's layout.
    pub fn open_with(image: File, bmap: Option<File>, ctl: &Control) -> Result<Image, FlashError> {
        // A decoder stopped by the shared flag inside a read fails as a read: it was the stop.
        match Image::open_checked(image, bmap, ctl) {
            Err(e) if ctl.cancelled() && !matches!(e, FlashError::Cancelled { .. }) => {
                Err(check::cancelled_at_open())
            }
            r => r,
        }
    }

    fn open_checked(image: File, bmap: Option<File>, ctl: &Control) -> Result<Image, FlashError> {
        let file_size = image
            .metadata()
            .map_err(read_err("image's metadata"))?
            .len();
        let file = Arc::new(image);
        let mut head = [0u8; magic::PROBE_LEN];
        let n = read_head(&file, &mut head).map_err(read_err("image header"))?;
        let compression = magic::compression(&head[..n])?;
        let layout = if compression == Compression::None {
            magic::layout(&head[..n])
        } else {
            let mut d =
                decompress::Decoded::counted(file.clone(), compression, None, ctl.shared_flag())
                    .map_err(|e| {
                        stream_fault(
                            stream::StreamError::Decompress {
                                format: compression.name(),
                                at: 0,
                                reason: e.to_string(),
                            },
                            0,
                        )
                    })?;
            let mut inner = [0u8; 4];
            let k = decompress::read_full(&mut d, &mut inner).map_err(|e| {
                stream_fault(
                    stream::StreamError::Decompress {
                        format: compression.name(),
                        at: 0,
                        reason: e.to_string(),
                    },
                    0,
                )
            })?;
            magic::layout(&inner[..k])
        };
        let bmap = match bmap {
            Some(f) => Some(read_bmap(f, ctl)?),
            None => None,
        };
        if bmap.is_some() && layout == Layout::AndroidSparse {
            return Err(FlashError::BmapWithSparse {
                layout: layout.name(),
            });
        }
        let mut info = ImageInfo {
            compression,
            layout,
            file_size,
            logical_size: None,
            mapped_bytes: None,
            bmap: bmap.as_ref().map(Bmap::summary),
            sparse: None,
            sparse_chunks: None,
        };
        let mut needs_check = compression != Compression::None;
        match (compression, layout) {
            (Compression::None, Layout::Raw) => {
                info.logical_size = Some(file_size);
                match &bmap {
                    Some(b) => {
                        // The cheapest mismatch first: the sizes.
                        if b.image_size != file_size {
                            return Err(FlashError::BmapSizeMismatch {
                                bmap: human(b.image_size),
                                bmap_bytes: b.image_size,
                                image: human(file_size),
                                image_bytes: file_size,
                            });
                        }
                        info.mapped_bytes = Some(b.mapped_bytes());
                        needs_check = b.ranges.iter().any(|r| r.checksum.is_some());
                    }
                    None => info.mapped_bytes = Some(file_size),
                }
            }
            (Compression::None, Layout::AndroidSparse) => {
                let r = SparseReader::new(decompress::FileAt::new(file.clone(), 0))
                    .map_err(|e| sparse_open_err(e, compression))?;
                let h = *r.header();
                let counts = sparse::walk_file(&file, &h, &|| ctl.cancelled())
                    .map_err(|e| sparse_open_err(e, compression))?;
                info.sparse = Some(h);
                info.sparse_chunks = Some(counts);
                info.logical_size = Some(h.logical_size());
                info.mapped_bytes = Some(counts.mapped_bytes);
            }
            (_, Layout::AndroidSparse) => {
                let d = decompress::Decoded::counted(
                    file.clone(),
                    compression,
                    None,
                    ctl.shared_flag(),
                )
                .map_err(read_err("image"))?;
                let r = SparseReader::new(d).map_err(|e| sparse_open_err(e, compression))?;
                let h = *r.header();
                info.sparse = Some(h);
                info.logical_size = Some(h.logical_size());
            }
            (_, Layout::Raw) => {}
        }
        Ok(Image {
            file,
            bmap,
            info,
            check: None,
            needs_check,
        })
    }

    /// What is known of the image.
    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    /// Bytes of the disk image (known after [`check`](Self::check) for a compressed image).
    pub fn logical_size(&self) -> Option<u64> {
        self.info.logical_size
    }

    /// Bytes that will be written.
    pub fn mapped_bytes(&self) -> Option<u64> {
        self.info.mapped_bytes
    }

    /// Whether [`check`](Self::check) still has to run before the image can be written.
    pub fn needs_check(&self) -> bool {
        self.needs_check
    }

    /// The pre-pass's report, once it ran.
    pub fn check_report(&self) -> Option<&CheckReport> {
        self.check.as_ref()
    }

    /// The pre-pass before any write (see the [`check`] module): bmap range checksums, the
    /// decompressed size of a compressed image, a compressed sparse image's structure. A
    /// mismatch or a damaged file is refused here, with nothing written, and so is an image
    /// larger than `limit` (as soon as its header declares it or its decoder produced it).
    /// `ctl`'s cancel flag is read between buffers and chunk headers. Runs once; later
    /// calls return the first report.
    pub fn check(
        &mut self,
        ctl: &mut Control,
        limit: &SizeLimit,
    ) -> Result<CheckReport, FlashError> {
        if let Some(r) = &self.check {
            return Ok(r.clone());
        }
        if !self.needs_check {
            let r = CheckReport {
                file_bytes_read: 0,
                image_bytes: 0,
                ranges_checked: 0,
                secs: 0.0,
            };
            self.check = Some(r.clone());
            return Ok(r);
        }
        let c = check::run(
            &self.file,
            self.info.compression,
            self.info.layout,
            self.bmap.as_ref(),
            self.info.file_size,
            limit,
            ctl,
        )?;
        self.info.logical_size = Some(c.logical_size);
        self.info.mapped_bytes = Some(c.mapped_bytes);
        if c.sparse.is_some() {
            self.info.sparse_chunks = c.sparse;
        }
        self.needs_check = false;
        self.check = Some(c.report.clone());
        Ok(c.report)
    }

    /// Block size the image's runs are aligned to (the sparse or bmap block size; 1 for a
    /// raw image, which is one run from 0).
    pub(crate) fn alignment(&self) -> u64 {
        match (&self.bmap, &self.info.sparse) {
            (Some(b), _) => b.block_size,
            (None, Some(h)) => h.block_size as u64,
            _ => 1,
        }
    }

    /// A fresh stream of the image's runs, from its start. Its long walks between two runs
    /// (a compressed bmap image's gaps, sparse chunks without data) stop once `stop` is
    /// raised (the writer raises it when it stops).
    pub(crate) fn segments(
        &self,
        stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Box<dyn Segments>, FlashError> {
        let c = self.info.compression;
        let s: Box<dyn Segments> = match (self.info.layout, &self.bmap) {
            (Layout::AndroidSparse, _) => Box::new(
                SparseSegments::new(self.file.clone(), c, stop.clone())
                    .map_err(|e| stream_fault(e, 0))?,
            ),
            (Layout::Raw, Some(b)) => Box::new(
                BmapSegments::new(
                    self.file.clone(),
                    c,
                    b.byte_ranges().collect(),
                    stop.clone(),
                )
                .map_err(|e| stream_fault(e, 0))?,
            ),
            (Layout::Raw, None) => {
                let size = self.info.logical_size.unwrap_or(0);
                Box::new(
                    RawSegments::new(self.file.clone(), c, size, stop.clone())
                        .map_err(|e| stream_fault(e, 0))?,
                )
            }
        };
        Ok(s)
    }
}

fn read_head(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn read_bmap(f: File, ctl: &Control) -> Result<Bmap, FlashError> {
    let read_error = |e: std::io::Error| FlashError::ImageRead {
        what: "bmap file",
        source: e,
        written: "nothing was written".into(),
    };
    let too_large = || FlashError::BmapInvalid {
        reason: bmap::BmapError::Limit {
            what: format!("more than {}", human_bin(bmap::MAX_BMAP_BYTES)),
            limit: human_bin(bmap::MAX_BMAP_BYTES),
        }
        .to_string(),
    };
    // Refused from its length, before a byte is read.
    let len = f.metadata().map_err(read_error)?.len();
    if len > bmap::MAX_BMAP_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // `take`: a file that grows while it is read stops at the bound all the same.
    f.take(bmap::MAX_BMAP_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > bmap::MAX_BMAP_BYTES {
        return Err(too_large());
    }
    let text = String::from_utf8(bytes).map_err(|_| FlashError::BmapInvalid {
        reason: "it is not UTF-8 text".into(),
    })?;
    Bmap::parse_with(&text, &|| ctl.cancelled()).map_err(|e| match e {
        bmap::BmapError::FileChecksum { expected, got } => {
            FlashError::BmapFileChecksum { expected, got }
        }
        bmap::BmapError::Cancelled => check::cancelled_at_open(),
        other => FlashError::BmapInvalid {
            reason: other.to_string(),
        },
    })
}
