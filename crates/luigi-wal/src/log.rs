//! The segmented log: [`Wal`].

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, WalError};
use crate::fsutil::{ensure_dir, fsync_dir, parse_numbered_name};
use crate::record::{self, DATA_BYTES_MAX, RECORD_OVERHEAD_BYTES};
use crate::{Durability, WalOptions};

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
    file: File,
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

/// Test-only fault injection (see the unit tests at the bottom of this file).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// The next batch write writes this many bytes, then fails with `ENOSPC`.
    WriteFailsAfter(usize),
    /// The next `fdatasync` fails with `ENOSPC` (some file systems report it only there).
    SyncFails,
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
    #[cfg(test)]
    fault: Option<Fault>,
}

fn segment_path(dir: &Path, first_index: u64) -> PathBuf {
    dir.join(format!("{first_index:020}.wal"))
}

/// Segment files of `dir`, sorted by first index.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for dirent in fs::read_dir(dir).ctx("list directory", dir)? {
        let dirent = dirent.ctx("list directory", dir)?;
        let path = dirent.path();
        let name = dirent.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".wal") {
            continue;
        }
        match parse_numbered_name(name, "", ".wal") {
            Some(first) => out.push((first, path)),
            None => {
                return Err(WalError::Corrupt {
                    path,
                    offset: 0,
                    reason: "segment file name is not <20-digit first index>.wal".into(),
                })
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Result of scanning one segment's bytes.
struct Scan {
    entries: Vec<Slot>,
    /// Bytes of valid records.
    valid_bytes: u64,
    /// First bad record of the last segment: offset and reason (a torn tail to cut).
    torn: Option<(u64, String)>,
}

/// Verifies every record of a segment. See the crate docs for the rules.
fn scan_segment(path: &Path, bytes: &[u8], first_index: u64, is_last: bool) -> Result<Scan> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    let mut expected = Some(first_index);
    while at < bytes.len() {
        match record::parse(bytes, at) {
            Ok(rec) => {
                let Some(exp) = expected else {
                    return Err(WalError::Corrupt {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        reason: "record after index u64::MAX".into(),
                    });
                };
                if rec.index != exp {
                    return Err(WalError::Gap {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        expected: exp,
                        found: rec.index,
                    });
                }
                entries.push(Slot { offset: at as u64, term: rec.term });
                at += rec.record_bytes;
                expected = exp.checked_add(1);
            }
            Err(reason) => {
                if !is_last {
                    return Err(WalError::Corrupt {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        reason: format!("{reason} (in a segment that is not the last one)"),
                    });
                }
                if let Some((later, index)) = expected.and_then(|e| record::find_valid_after(bytes, at + 1, e)) {
                    return Err(WalError::Corrupt {
                        path: path.to_path_buf(),
                        offset: at as u64,
                        reason: format!(
                            "{reason}; a valid record (index {index}) follows at byte offset {later}, \
                             so this is not a torn tail"
                        ),
                    });
                }
                return Ok(Scan { entries, valid_bytes: at as u64, torn: Some((at as u64, reason)) });
            }
        }
    }
    Ok(Scan { entries, valid_bytes: at as u64, torn: None })
}

/// Positional write of a whole buffer (one `pwrite` unless the kernel writes short).
fn write_all_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    file.write_all_at(buf, offset)
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
        let dir = dir.as_ref().to_path_buf();
        ensure_dir(&dir)?;
        let names = list_segments(&dir)?;
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
            let mut file = OpenOptions::new().read(true).write(true).open(&path).ctx("open", &path)?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).ctx("read", &path)?;
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
                    fs::remove_file(&path).ctx("remove empty segment", &path)?;
                    fsync_dir(&dir)?;
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
        let wal = Wal {
            dir,
            options,
            segments,
            pending: Vec::new(),
            buf: Vec::new(),
            poisoned: None,
            #[cfg(test)]
            fault: None,
        };
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

    /// Buffers entries, given as `(index, term, data)`. Indexes must be consecutive and follow
    /// [`Wal::last_index`] (any start index is accepted when the log is empty). The whole call is
    /// validated before anything is buffered. Index `u64::MAX` is not accepted.
    ///
    /// If buffering an entry would take [`WalOptions::buffered_bytes_max`] over its limit, what is
    /// buffered is synced first (group commit, as [`Wal::sync`]); after `append` returns, at most
    /// `buffered_bytes_max` bytes are buffered. So `append` may do I/O.
    ///
    /// # Errors
    /// [`WalError::NotConsecutive`] / [`WalError::EntryTooLarge`] (nothing buffered), or an I/O
    /// error from such a sync, in which case a prefix of `entries` may have been accepted:
    /// [`Wal::last_index`] says which.
    pub fn append<D: AsRef<[u8]>>(&mut self, entries: &[(u64, u64, D)]) -> Result<()> {
        self.check_usable()?;
        let Some(first) = entries.first() else { return Ok(()) };
        let mut next = match self.last_index() {
            Some(last) => {
                Some(last.checked_add(1).ok_or(WalError::NotConsecutive { expected: u64::MAX, found: first.0 })?)
            }
            None => None,
        };
        for (index, _, data) in entries {
            if let Some(expected) = next {
                if *index != expected {
                    return Err(WalError::NotConsecutive { expected, found: *index });
                }
            }
            let data = data.as_ref();
            if data.len() > DATA_BYTES_MAX {
                return Err(WalError::EntryTooLarge {
                    index: *index,
                    data_bytes: data.len(),
                    data_bytes_max: DATA_BYTES_MAX,
                });
            }
            next = Some(index.checked_add(1).ok_or(WalError::NotConsecutive { expected: u64::MAX, found: u64::MAX })?);
        }
        for (index, term, data) in entries {
            let data = data.as_ref();
            let record_bytes = RECORD_OVERHEAD_BYTES + data.len();
            if !self.buf.is_empty() && self.buf.len() + record_bytes > self.options.buffered_bytes_max {
                self.sync()?;
            }
            self.pending.push(Pending { index: *index, term: *term, buf_offset: self.buf.len() });
            record::encode(&mut self.buf, *index, *term, data);
        }
        if self.buf.len() > self.options.buffered_bytes_max {
            self.sync()?;
        }
        Ok(())
    }

    /// [`Wal::append`] then [`Wal::sync`].
    pub fn append_and_sync<D: AsRef<[u8]>>(&mut self, entries: &[(u64, u64, D)]) -> Result<()> {
        self.append(entries)?;
        self.sync()
    }

    /// Writes everything buffered with one positional `write` and, under [`Durability::Fsync`],
    /// one `fdatasync` (group commit). If the current segment would grow past
    /// [`WalOptions::segment_bytes`], the batch goes to a new segment file named by its first
    /// index, and the directory is fsynced before the write. A no-op when nothing is buffered.
    ///
    /// # Errors
    /// - The write fails (e.g. [`WalError::DiskFull`]): the segment is truncated back to its
    ///   previous length, the buffer is kept, the log stays usable; `sync` may be retried.
    /// - An `fdatasync`/directory fsync fails, or the truncation after a failed write fails: the
    ///   log is poisoned (every later write returns [`WalError::Poisoned`]); reopen it. Entries
    ///   synced before are intact either way.
    pub fn sync(&mut self) -> Result<()> {
        self.check_usable()?;
        let Some(first_pending) = self.pending.first().map(|p| p.index) else {
            return Ok(());
        };
        self.prepare_segment(first_pending)?;
        let fsync = self.fsync_enabled();
        let seg = self.segments.last_mut().expect("prepare_segment leaves a segment");
        let offset = seg.len_bytes;

        #[cfg(test)]
        let written = match self.fault.take() {
            Some(Fault::WriteFailsAfter(n)) => {
                let n = n.min(self.buf.len());
                write_all_at(&seg.file, &self.buf[..n], offset)
                    .and_then(|()| Err(std::io::Error::from_raw_os_error(28)))
            }
            other => {
                self.fault = other;
                write_all_at(&seg.file, &self.buf, offset)
            }
        };
        #[cfg(not(test))]
        let written = write_all_at(&seg.file, &self.buf, offset);

        if let Err(e) = written {
            let err = WalError::io("write", &seg.path, e);
            // Undo a partial write so a later batch does not land behind garbage.
            if let Err(e2) = seg.file.set_len(offset) {
                let path = seg.path.clone();
                self.poison(WalError::io("truncate after failed write", &path, e2));
            }
            return Err(err);
        }
        if fsync {
            #[cfg(test)]
            let synced = match self.fault.take() {
                Some(Fault::SyncFails) => Err(std::io::Error::from_raw_os_error(28)),
                other => {
                    self.fault = other;
                    seg.file.sync_data()
                }
            };
            #[cfg(not(test))]
            let synced = seg.file.sync_data();
            if let Err(e) = synced {
                let err = WalError::io("fdatasync", &seg.path, e);
                return Err(self.poison(err));
            }
        }
        seg.entries.extend(self.pending.drain(..).map(|p| Slot { offset: offset + p.buf_offset as u64, term: p.term }));
        seg.len_bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Makes sure the last segment is the one the batch starting at `first_pending` goes to:
    /// creates the first segment, rolls to a new one, or replaces an empty segment whose name no
    /// longer matches.
    fn prepare_segment(&mut self, first_pending: u64) -> Result<()> {
        let batch_bytes = self.buf.len() as u64;
        let need_new = match self.segments.last() {
            None => true,
            Some(seg) if seg.len_bytes == 0 => {
                if seg.first_index == first_pending {
                    false
                } else {
                    let seg = self.segments.pop().expect("checked above");
                    drop(seg.file);
                    if let Err(e) = fs::remove_file(&seg.path) {
                        return Err(self.poison(WalError::io("remove empty segment", &seg.path, e)));
                    }
                    true
                }
            }
            Some(seg) => seg.len_bytes.saturating_add(batch_bytes) > self.options.segment_bytes,
        };
        if !need_new {
            return Ok(());
        }
        let path = segment_path(&self.dir, first_pending);
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(&path).ctx("create segment", &path)?;
        self.segments.push(Segment { first_index: first_pending, path, file, len_bytes: 0, entries: Vec::new() });
        if self.fsync_enabled() {
            if let Err(e) = fsync_dir(&self.dir) {
                return Err(self.poison(e));
            }
        }
        Ok(())
    }

    /// Removes every entry with index `>= from_index` (a Raft log conflict), durably: whole
    /// segments starting at or after it are deleted (newest first, then the directory is
    /// fsynced), and the segment containing it is truncated and fsynced. Buffered entries are
    /// dropped from the buffer. A no-op if `from_index > last_index()`.
    ///
    /// # Errors
    /// I/O errors; a failed fsync poisons the log (see [`Wal::sync`]).
    pub fn truncate_suffix(&mut self, from_index: u64) -> Result<()> {
        self.check_usable()?;
        let Some(last) = self.last_index() else { return Ok(()) };
        if from_index > last {
            return Ok(());
        }
        if let Some(first) = self.pending.first() {
            if from_index >= first.index {
                let keep = (from_index - first.index) as usize;
                self.buf.truncate(self.pending[keep].buf_offset);
                self.pending.truncate(keep);
                return Ok(());
            }
        }
        self.pending.clear();
        self.buf.clear();
        let fsync = self.fsync_enabled();
        let mut removed = false;
        while self.segments.last().is_some_and(|s| s.first_index >= from_index) {
            let seg = self.segments.pop().expect("checked above");
            drop(seg.file);
            if let Err(e) = fs::remove_file(&seg.path) {
                // Memory and disk now disagree about this segment: refuse further writes.
                return Err(self.poison(WalError::io("remove segment", &seg.path, e)));
            }
            removed = true;
        }
        // The removals must be durable before the truncation below: otherwise a crash could bring
        // back a later segment that no longer continues the truncated one.
        if removed && fsync {
            if let Err(e) = fsync_dir(&self.dir) {
                return Err(self.poison(e));
            }
        }
        if let Some(seg) = self.segments.last_mut() {
            let keep = (from_index - seg.first_index) as usize;
            if keep < seg.entries.len() {
                let offset = seg.entries[keep].offset;
                let path = seg.path.clone();
                let result = seg.file.set_len(offset).ctx("truncate", &path).and_then(|()| {
                    if fsync {
                        seg.file.sync_all().ctx("fsync", &path)
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = result {
                    return Err(self.poison(e));
                }
                seg.entries.truncate(keep);
                seg.len_bytes = offset;
            }
        }
        Ok(())
    }

    /// Deletes the oldest segments whose entries are all `<= up_to_index` (after a snapshot
    /// covering them), oldest first, then fsyncs the directory. The last segment is never
    /// deleted, so the log keeps its position; entries `<= up_to_index` in a partly covered
    /// segment stay readable, i.e. [`Wal::first_index`] may remain `<= up_to_index`. Returns how
    /// many segments were deleted.
    ///
    /// # Errors
    /// I/O errors; a failed removal or fsync poisons the log.
    pub fn compact_prefix(&mut self, up_to_index: u64) -> Result<usize> {
        self.check_usable()?;
        let mut deleted = 0;
        // `segments[1]` empty means it is the last segment and was created by a failed write:
        // keep `segments[0]`, the last one holding entries, so the log keeps its position.
        while self.segments.len() > 1
            && !self.segments[1].entries.is_empty()
            && self.segments[1].first_index - 1 <= up_to_index
        {
            let seg = self.segments.remove(0);
            drop(seg.file);
            if let Err(e) = fs::remove_file(&seg.path) {
                return Err(self.poison(WalError::io("remove segment", &seg.path, e)));
            }
            deleted += 1;
        }
        if deleted > 0 && self.fsync_enabled() {
            if let Err(e) = fsync_dir(&self.dir) {
                return Err(self.poison(e));
            }
        }
        Ok(deleted)
    }

    /// Entries with indexes in `range` (written or buffered). Every record read from disk is
    /// checked again (CRC and index).
    ///
    /// # Errors
    /// [`WalError::OutOfRange`] unless `first_index <= range.start <= range.end <= last_index + 1`
    /// (an empty range is always fine); [`WalError::Corrupt`] if a record went bad since open.
    pub fn read(&self, range: Range<u64>) -> Result<Vec<Entry>> {
        self.read_bounded(range, u64::MAX)
    }

    /// Like [`Wal::read`], but stops before the entry that would take the total data size over
    /// `data_bytes_max`; always returns at least one entry for a non-empty range.
    pub fn read_bounded(&self, range: Range<u64>, data_bytes_max: u64) -> Result<Vec<Entry>> {
        let Range { start: lo, end: hi } = range;
        if lo >= hi {
            if lo == hi {
                return Ok(Vec::new());
            }
            return Err(self.out_of_range(lo, hi));
        }
        match (self.first_index(), self.last_index()) {
            (Some(first), Some(last)) if first <= lo && hi - 1 <= last => {}
            _ => return Err(self.out_of_range(lo, hi)),
        }
        let mut out = Vec::new();
        let mut data_bytes = 0u64;
        let mut index = lo;
        let written_end = self.last_synced_index().map_or(0, |l| l.saturating_add(1));
        while index < hi && index < written_end {
            let seg = self.segment_of(index).expect("index within the written log");
            let a = (index - seg.first_index) as usize;
            let b_max = ((hi.min(written_end) - seg.first_index) as usize).min(seg.entries.len());
            let mut b = a;
            let mut full = false;
            while b < b_max {
                let len = seg.record_end(b) - seg.entries[b].offset - RECORD_OVERHEAD_BYTES as u64;
                if data_bytes.saturating_add(len) > data_bytes_max && !(out.is_empty() && b == a) {
                    full = true;
                    break;
                }
                data_bytes = data_bytes.saturating_add(len);
                b += 1;
            }
            if b > a {
                self.read_from_segment(seg, a, b, &mut out)?;
            }
            index = seg.first_index + b as u64;
            if full {
                return Ok(out);
            }
        }
        while index < hi {
            let first = self.pending[0].index;
            let i = (index - first) as usize;
            let start = self.pending[i].buf_offset;
            let end = self.pending.get(i + 1).map_or(self.buf.len(), |p| p.buf_offset);
            let len = (end - start - RECORD_OVERHEAD_BYTES) as u64;
            if data_bytes.saturating_add(len) > data_bytes_max && !out.is_empty() {
                break;
            }
            data_bytes = data_bytes.saturating_add(len);
            let rec = record::parse(&self.buf[..end], start).expect("buffer holds records we encoded");
            out.push(Entry { index: rec.index, term: rec.term, data: rec.data.to_vec() });
            index += 1;
        }
        Ok(out)
    }

    fn out_of_range(&self, lo: u64, hi: u64) -> WalError {
        WalError::OutOfRange { lo, hi, first: self.first_index(), last: self.last_index() }
    }

    /// Reads entries number `a..b` of `seg` with one positional read and verifies them.
    fn read_from_segment(&self, seg: &Segment, a: usize, b: usize, out: &mut Vec<Entry>) -> Result<()> {
        let start = seg.entries[a].offset;
        let end = seg.record_end(b - 1);
        let mut bytes = vec![0; (end - start) as usize];
        seg.file.read_exact_at(&mut bytes, start).ctx("read", &seg.path)?;
        let mut at = 0usize;
        for i in a..b {
            let expected = seg.first_index + i as u64;
            let offset = start + at as u64;
            let rec = record::parse(&bytes, at).map_err(|reason| WalError::Corrupt {
                path: seg.path.clone(),
                offset,
                reason: format!("{reason} (detected on read)"),
            })?;
            if rec.index != expected {
                return Err(WalError::Gap { path: seg.path.clone(), offset, expected, found: rec.index });
            }
            out.push(Entry { index: rec.index, term: rec.term, data: rec.data.to_vec() });
            at += rec.record_bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> WalOptions {
        WalOptions { segment_bytes: 4096, ..WalOptions::default() }
    }

    fn batch(range: Range<u64>, term: u64) -> Vec<(u64, u64, Vec<u8>)> {
        range.map(|i| (i, term, format!("entry-{i}").into_bytes())).collect()
    }

    fn check_entries(wal: &Wal, range: Range<u64>) {
        let got = wal.read(range.clone()).unwrap();
        assert_eq!(got.len() as u64, range.end - range.start);
        for (e, i) in got.iter().zip(range) {
            assert_eq!(e.index, i);
            assert_eq!(e.data, format!("entry-{i}").into_bytes());
        }
    }

    #[test]
    fn disk_full_on_write_keeps_synced_data_and_allows_retry() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append_and_sync(&batch(1..11, 1)).unwrap();
        let seg_path = segment_path(dir.path(), 1);
        let synced_len = fs::metadata(&seg_path).unwrap().len();

        wal.append(&batch(11..21, 1)).unwrap();
        wal.fault = Some(Fault::WriteFailsAfter(37)); // a partial record reaches the file
        let err = wal.sync().unwrap_err();
        assert!(err.is_disk_full(), "{err}");
        assert!(err.to_string().contains("disk full") && err.to_string().contains("00000000000000000001.wal"));
        // The partial write was undone, the buffer kept, the log still usable.
        assert_eq!(fs::metadata(&seg_path).unwrap().len(), synced_len);
        assert_eq!(wal.last_synced_index(), Some(10));
        assert_eq!(wal.last_index(), Some(20));
        check_entries(&wal, 1..21);

        // A crash now loses only the unsynced batch.
        drop(wal);
        let (mut wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert_eq!(rec.torn_tail, None);
        assert_eq!(rec.last_index, Some(10));
        check_entries(&wal, 1..11);

        // Retry after the disk has room again.
        wal.append(&batch(11..21, 1)).unwrap();
        wal.fault = Some(Fault::WriteFailsAfter(0));
        assert!(wal.sync().unwrap_err().is_disk_full());
        wal.sync().unwrap();
        drop(wal);
        let (wal, _) = Wal::open(dir.path(), opts()).unwrap();
        check_entries(&wal, 1..21);
    }

    #[test]
    fn disk_full_on_fdatasync_poisons_without_losing_synced_data() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append_and_sync(&batch(1..6, 1)).unwrap();
        wal.append(&batch(6..9, 1)).unwrap();
        wal.fault = Some(Fault::SyncFails);
        let err = wal.sync().unwrap_err();
        assert!(err.is_disk_full(), "{err}");
        assert!(matches!(wal.append(&batch(9..10, 1)), Err(WalError::Poisoned { .. })));
        assert!(matches!(wal.sync(), Err(WalError::Poisoned { .. })));
        assert!(matches!(wal.truncate_suffix(2), Err(WalError::Poisoned { .. })));
        drop(wal);
        // Whatever the kernel kept of the failed batch, the synced prefix is there and valid.
        let (wal, _) = Wal::open(dir.path(), opts()).unwrap();
        assert!(wal.last_index().unwrap() >= 5);
        check_entries(&wal, 1..6);
    }

    #[test]
    fn disk_full_on_first_write_of_new_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions { segment_bytes: 200, ..opts() }).unwrap();
        wal.append_and_sync(&batch(1..6, 1)).unwrap(); // one segment, > 200 bytes
        wal.append(&batch(6..8, 1)).unwrap();
        wal.fault = Some(Fault::WriteFailsAfter(10));
        assert!(wal.sync().unwrap_err().is_disk_full());
        assert_eq!(wal.segment_count(), 2); // the new, empty segment 6
                                            // Raft truncates the unsynced entries and appends others: the empty segment is reused.
        wal.truncate_suffix(6).unwrap();
        wal.append_and_sync(&batch(6..7, 2)).unwrap();
        drop(wal);
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert_eq!((rec.segments, rec.last_index, rec.torn_tail), (2, Some(6), None));
        assert_eq!(wal.term(6), Some(2));
    }
}
