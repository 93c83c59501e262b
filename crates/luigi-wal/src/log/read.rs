//! Reads of the log: written entries are read back from the segment files and verified again,
//! buffered ones come from memory.

use std::ops::Range;

use super::{Entry, Segment, Wal};
use crate::error::{IoContext, Result, WalError};
use crate::record::{self, RECORD_OVERHEAD_BYTES};

impl Wal {
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
