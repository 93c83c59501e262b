//! The segmented log: [`Wal`]. Opening and recovery here, writes in `write.rs`, reads in
//! `read.rs`, the segment files' names and verification in `scan.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result, WalError};
use crate::fs::{Fs, FsFile, OpenMode, RealFs};
use crate::fsutil::{ensure_dir, fsync_dir};
use crate::{Durability, WalOptions};

mod read;
mod scan;
mod write;

use scan::{list_segments, scan_segment};

/// One log entry as returned by [`Wal::read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Log index.
    pub index: u64,
    /// Term it was proposed in (stored, not interpreted).
    pub term: u64,
    /// The caller's bytes.
    pub data: Vec<u8>,
}

/// What [`Wal::open`] found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Segment files in use after recovery.
    pub segments: usize,
    /// Entries in the log after recovery.
    pub entries: u64,
    /// First index after recovery (`None`: empty log).
    pub first_index: Option<u64>,
    /// Last index after recovery (`None`: empty log).
    pub last_index: Option<u64>,
    /// The torn tail cut from the last segment, if there was one.
    pub torn_tail: Option<TornTail>,
    /// Segment files removed because they held no entry (a crash right after a segment was
    /// created, or a tail cut that left nothing).
    pub removed_empty_segments: Vec<PathBuf>,
}

/// A torn tail cut at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file that was truncated.
    pub path: PathBuf,
    /// Its new length: the byte offset of the first bad record.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes_cut: u64,
    /// Why the first cut record was bad.
    pub reason: String,
}

/// In-memory position of a written entry.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Byte offset of its record in the segment.
    offset: u64,
    term: u64,
}

/// A segment file and the positions of its entries.
#[derive(Debug)]
struct Segment {
    first_index: u64,
    path: PathBuf,
    file: Box<dyn FsFile>,
    /// Bytes written to the file (and synced, under [`Durability::Fsync`]).
    len_bytes: u64,
    entries: Vec<Slot>,
}

impl Segment {
    /// Index the next entry of this segment would have.
    fn next_index(&self) -> Option<u64> {
        self.first_index.checked_add(self.entries.len() as u64)
    }

    fn last_index(&self) -> Option<u64> {
        if self.entries.is_empty() {
            None
        } else {
            Some(self.first_index + self.entries.len() as u64 - 1)
        }
    }

    /// Byte offset just past the record of entry number `i` of this segment.
    fn record_end(&self, i: usize) -> u64 {
        self.entries.get(i + 1).map_or(self.len_bytes, |s| s.offset)
    }
}

/// A buffered entry not yet written.
#[derive(Clone, Copy, Debug)]
struct Pending {
    index: u64,
    term: u64,
    /// Offset of its record in the buffer.
    buf_offset: usize,
}

/// A durable, segmented log of `(index, term, data)` entries. See the crate docs for the
/// on-disk format and the recovery rules.
///
/// Writes are two-step: [`Wal::append`] validates and buffers, [`Wal::sync`] writes everything
/// buffered with one `write` and one `fdatasync` (group commit). Reads see buffered entries too,
/// so a leader can send entries to followers while its own sync is in flight; only
/// [`Wal::last_synced_index`] is durable.
///
/// Dropping a `Wal` does not sync: buffered entries are lost, as in a crash.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    options: WalOptions,
    /// Segments in index order. Only the last may hold no entries (created, write failed).
    segments: Vec<Segment>,
    pending: Vec<Pending>,
    /// Encoded records of `pending`, in order.
    buf: Vec<u8>,
    poisoned: Option<String>,
    fs: Arc<dyn Fs>,
}

impl Wal {
    /// Opens (creating if needed) the log in `dir`, verifying every record and repairing a torn
    /// tail of the last segment (see the crate docs). Returns the log and a report of what was
    /// found.
    ///
    /// # Errors
    /// [`WalError::Corrupt`] or [`WalError::Gap`] naming the file and offset for damage that is
    /// not a torn tail; [`WalError::Io`] / [`WalError::DiskFull`] for I/O failures.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<(Wal, Recovered)> {
        Wal::open_in(Arc::new(RealFs), dir, options)
    }

    /// [`Wal::open`] on the file system `fs` (e.g. a [`crate::fs::SimFs`] in tests and
    /// simulations); every later file operation of the log goes through it.
    ///
    /// # Errors
    /// As [`Wal::open`].
    pub fn open_in(fs: Arc<dyn Fs>, dir: impl AsRef<Path>, options: WalOptions) -> Result<(Wal, Recovered)> {
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(&*fs, &dir)?;
        let names = list_segments(&*fs, &dir)?;
        let mut recovered = Recovered::default();
        let mut segments: Vec<Segment> = Vec::with_capacity(names.len());
        let count = names.len();
        for (i, (first_index, path)) in names.into_iter().enumerate() {
            let is_last = i + 1 == count;
            if let Some(prev) = segments.last() {
                let expected = prev.next_index().unwrap_or(u64::MAX);
                if first_index != expected {
                    return Err(WalError::Gap { path, offset: 0, expected, found: first_index });
                }
            }
            let file = fs.open(&path, OpenMode::Existing).ctx("open", &path)?;
            let bytes = file.read_all().ctx("read", &path)?;
            let scan = scan_segment(&path, &bytes, first_index, is_last)?;
            if let Some((offset, reason)) = scan.torn {
                file.set_len(offset).ctx("truncate torn tail", &path)?;
                file.sync_all().ctx("fsync", &path)?;
                recovered.torn_tail =
                    Some(TornTail { path: path.clone(), offset, bytes_cut: bytes.len() as u64 - offset, reason });
            }
            if scan.entries.is_empty() {
                if is_last {
                    drop(file);
                    fs.remove_file(&path).ctx("remove empty segment", &path)?;
                    fsync_dir(&*fs, &dir)?;
                    recovered.removed_empty_segments.push(path);
                    continue;
                }
                // An empty segment that is not the last one cannot continue the log: the next
                // segment would need the same file name.
                return Err(WalError::Corrupt {
                    path,
                    offset: 0,
                    reason: "empty segment that is not the last one".into(),
                });
            }
            segments.push(Segment { first_index, path, file, len_bytes: scan.valid_bytes, entries: scan.entries });
        }
        let wal = Wal { dir, options, segments, pending: Vec::new(), buf: Vec::new(), poisoned: None, fs };
        recovered.segments = wal.segments.len();
        recovered.entries = wal.segments.iter().map(|s| s.entries.len() as u64).sum();
        recovered.first_index = wal.first_index();
        recovered.last_index = wal.last_index();
        Ok((wal, recovered))
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file system it lives on.
    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    /// The options it was opened with.
    pub fn options(&self) -> &WalOptions {
        &self.options
    }

    /// Number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Encoded bytes buffered by [`Wal::append`] and not yet written.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// First index held (written or buffered); `None` if the log is empty.
    pub fn first_index(&self) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| !s.entries.is_empty())
            .map(|s| s.first_index)
            .or_else(|| self.pending.first().map(|p| p.index))
    }

    /// Last index held, including buffered entries; `None` if the log is empty.
    pub fn last_index(&self) -> Option<u64> {
        self.pending.last().map(|p| p.index).or_else(|| self.last_synced_index())
    }

    /// Last index that [`Wal::sync`] completed for: durable under [`Durability::Fsync`], handed
    /// to the OS under [`Durability::None`].
    pub fn last_synced_index(&self) -> Option<u64> {
        self.segments.iter().rev().find_map(Segment::last_index)
    }

    /// The term of entry `index`, if the log holds it (written or buffered).
    pub fn term(&self, index: u64) -> Option<u64> {
        if let Some(first) = self.pending.first() {
            if index >= first.index {
                return self.pending.get((index - first.index) as usize).map(|p| p.term);
            }
        }
        let seg = self.segment_of(index)?;
        seg.entries.get((index - seg.first_index) as usize).map(|s| s.term)
    }

    /// The segment whose index range would contain `index`.
    fn segment_of(&self, index: u64) -> Option<&Segment> {
        let n = self.segments.partition_point(|s| s.first_index <= index);
        self.segments.get(n.checked_sub(1)?)
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(WalError::Poisoned { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn poison(&mut self, err: WalError) -> WalError {
        self.poisoned = Some(err.to_string());
        err
    }

    fn fsync_enabled(&self) -> bool {
        self.options.durability == Durability::Fsync
    }
}
