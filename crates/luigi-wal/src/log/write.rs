//! Writes of the log: buffering, group commit, suffix truncation, prefix compaction.

use super::scan::segment_path;
use super::{Pending, Segment, Slot, Wal};
use crate::error::{IoContext, Result, WalError};
use crate::fs::OpenMode;
use crate::fsutil::fsync_dir;
use crate::record::{self, DATA_BYTES_MAX, RECORD_OVERHEAD_BYTES};

impl Wal {
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

        let written = seg.file.write_all_at(&self.buf, offset);
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
                    if let Err(e) = self.fs.remove_file(&seg.path) {
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
        let file = self.fs.open(&path, OpenMode::CreateNew).ctx("create segment", &path)?;
        self.segments.push(Segment { first_index: first_pending, path, file, len_bytes: 0, entries: Vec::new() });
        if self.fsync_enabled() {
            if let Err(e) = fsync_dir(&*self.fs, &self.dir) {
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
            if let Err(e) = self.fs.remove_file(&seg.path) {
                // Memory and disk now disagree about this segment: refuse further writes.
                return Err(self.poison(WalError::io("remove segment", &seg.path, e)));
            }
            removed = true;
        }
        // The removals must be durable before the truncation below: otherwise a crash could bring
        // back a later segment that no longer continues the truncated one.
        if removed && fsync {
            if let Err(e) = fsync_dir(&*self.fs, &self.dir) {
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
            if let Err(e) = self.fs.remove_file(&seg.path) {
                return Err(self.poison(WalError::io("remove segment", &seg.path, e)));
            }
            deleted += 1;
        }
        if deleted > 0 && self.fsync_enabled() {
            if let Err(e) = fsync_dir(&*self.fs, &self.dir) {
                return Err(self.poison(e));
            }
        }
        Ok(deleted)
    }
}
