//! A replica's fast-accept log (DESIGN.md, "The fast path"): the
//! accepts a follower must not forget before it answers `FastAccept`, in their own
//! `luigi-wal` log (`accepts/` under the replica's directory), group-committed with the Raft
//! log by [`crate::disk::DiskStorage::sync`]. Records are opaque bytes numbered from 1 (the
//! protocol encodes them). A leader writes its votes here too. The replica rewrites its
//! live records now and then; the records before a durable rewrite are dropped
//! ([`AcceptLog::compact_below`], called by [`crate::disk::DiskStorage::sync`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use luigi_wal::fs::Fs;
use luigi_wal::{Wal, WalError, WalOptions};

/// The subdirectory of a replica's directory that holds its accept log.
pub const ACCEPTS_DIR: &str = "accepts";

/// Accept records as found on disk: (number, bytes), oldest first.
pub type FoundAccepts = Vec<(u64, Vec<u8>)>;

/// Accept records, numbered from 1, durable once synced.
#[derive(Debug)]
pub struct AcceptLog {
    wal: Wal,
}

impl AcceptLog {
    /// Opens (creating if needed) the accept log of the replica directory `dir` on `fs`, and
    /// returns it with every record it holds, oldest first (a torn tail is cut, as for the
    /// Raft log).
    ///
    /// # Errors
    /// A damaged log (naming the file) or an I/O failure.
    pub fn open_in(fs: Arc<dyn Fs>, dir: &Path, options: WalOptions) -> Result<(Self, FoundAccepts), WalError> {
        let (wal, _report) = Wal::open_in(fs, Self::path(dir), options)?;
        let records = match (wal.first_index(), wal.last_index()) {
            (Some(first), Some(last)) => wal.read(first..last + 1)?.into_iter().map(|e| (e.index, e.data)).collect(),
            _ => Vec::new(),
        };
        Ok((AcceptLog { wal }, records))
    }

    /// The accept log's directory under the replica directory `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(ACCEPTS_DIR)
    }

    /// Buffers `records`; returns the number of the last one (durable after
    /// [`AcceptLog::sync`]).
    ///
    /// # Errors
    /// I/O failures (the log is unusable after one).
    pub fn append(&mut self, records: &[Vec<u8>]) -> Result<u64, WalError> {
        let next = self.wal.last_index().map_or(1, |last| last + 1);
        let batch: Vec<(u64, u64, &[u8])> =
            records.iter().enumerate().map(|(i, r)| (next + i as u64, 0, r.as_slice())).collect();
        self.wal.append(&batch)?;
        Ok(next + records.len() as u64 - 1)
    }

    /// Makes every appended record durable (one write and one fdatasync).
    ///
    /// # Errors
    /// I/O failures.
    pub fn sync(&mut self) -> Result<(), WalError> {
        self.wal.sync()
    }

    /// Drops whole segments holding only records numbered below `number` (decided ones);
    /// returns how many segments went.
    ///
    /// # Errors
    /// I/O failures.
    pub fn compact_below(&mut self, number: u64) -> Result<usize, WalError> {
        self.wal.compact_prefix(number.saturating_sub(1))
    }

    /// The number of the last record appended, if any.
    pub fn last(&self) -> Option<u64> {
        self.wal.last_index()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_wal::fs::SimFs;
    use luigi_wal::Durability;

    const DIR: &str = "/r";

    /// A simulated disk (kept to crash it) and an accept log opened on it, with what it found.
    fn open(seed: u64) -> (SimFs, Arc<dyn Fs>, AcceptLog, FoundAccepts) {
        let sim = SimFs::new(seed);
        let fs: Arc<dyn Fs> = Arc::new(sim.clone());
        let (log, found) = reopen(&fs);
        (sim, fs, log, found)
    }

    fn reopen(fs: &Arc<dyn Fs>) -> (AcceptLog, FoundAccepts) {
        let options = WalOptions { segment_bytes: 256, durability: Durability::Fsync, ..WalOptions::default() };
        AcceptLog::open_in(Arc::clone(fs), Path::new(DIR), options).unwrap()
    }

    #[test]
    fn synced_accepts_survive_a_crash_and_unsynced_ones_do_not() {
        let (sim, fs, mut log, found) = open(7);
        assert!(found.is_empty());
        assert_eq!(log.append(&[b"a".to_vec(), b"b".to_vec()]).unwrap(), 2);
        log.sync().unwrap();
        assert_eq!(log.append(&[b"c".to_vec()]).unwrap(), 3);
        drop(log);
        sim.crash();
        let (log, found) = reopen(&fs);
        assert_eq!(found, vec![(1, b"a".to_vec()), (2, b"b".to_vec())], "the unsynced third is gone");
        assert_eq!(log.last(), Some(2));
    }

    #[test]
    fn decided_accepts_are_dropped_a_segment_at_a_time_and_numbering_goes_on() {
        let (_sim, fs, mut log, _) = open(8);
        for i in 0..40u8 {
            log.append(&[vec![i; 40]]).unwrap();
            log.sync().unwrap();
        }
        assert!(log.compact_below(30).unwrap() > 0, "small segments: some hold only records below 30");
        drop(log);
        let (mut log, found) = reopen(&fs);
        let numbers: Vec<u64> = found.iter().map(|(n, _)| *n).collect();
        assert!(numbers.first().is_some_and(|n| *n > 1 && *n <= 30), "{numbers:?}");
        assert_eq!(numbers.last(), Some(&40));
        assert_eq!(log.append(&[b"next".to_vec()]).unwrap(), 41);
    }
}
