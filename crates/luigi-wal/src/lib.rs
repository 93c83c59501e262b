//! Durable write-ahead log and snapshot files for a Luigi shard replica.
//!
//! Two pieces, both plain blocking code with no async runtime, so the sans-I/O replica core can
//! sit on top through a small trait and the runtime shell can call them from a blocking thread:
//!
//! - [`Wal`]: a segmented log of `(index, term, bytes)` entries with group commit (everything
//!   buffered since the last [`Wal::sync`] goes out in one `write` and one `fdatasync`), torn-tail
//!   repair at open, suffix truncation (Raft conflicts) and prefix compaction (after a snapshot).
//! - [`save_snapshot`] / [`load_latest_snapshot`]: whole-state snapshot files written with the
//!   temp-file, fsync, rename, fsync-directory dance, each protected by a checksum.
//!
//! Every file operation goes through the [`fs::Fs`] seam: [`fs::RealFs`] (`std::fs`, what
//! [`Wal::open`], [`save_snapshot`] and [`load_latest_snapshot`] use) or [`fs::SimFs`], an
//! in-memory file system with a seeded power-loss model ([`fs::SimFs::crash`]) and fault knobs,
//! on which tests and simulators run the same code ([`Wal::open_in`], [`save_snapshot_in`],
//! [`load_latest_snapshot_in`]).
//!
//! # On-disk format of the log
//!
//! A log directory holds segment files named by the index of their first entry, zero-padded to
//! 20 digits: `00000000000000000001.wal`. Other files in the directory are ignored (snapshots
//! may share it). A segment is a plain concatenation of records, with no file header:
//!
//! ```text
//! record  = len: u32 LE | crc: u32 LE | payload (len bytes)
//! payload = index: u64 LE | term: u64 LE | data (len - 16 bytes, opaque to the WAL)
//! crc     = CRC-32 (IEEE, as computed by crc32fast) of the payload bytes
//! ```
//!
//! so a record is `24 + data.len()` bytes. Indexes are strictly consecutive within a segment
//! and across segments; the first record of a segment carries the index in its file name.
//! Terms are stored, returned and kept in memory for [`Wal::term`], but not interpreted.
//!
//! # Recovery rules
//!
//! [`Wal::open`] reads every segment in index order and checks every record's length, CRC and
//! index. A bad record (short header, impossible length, CRC mismatch) in the **last** segment
//! is treated as a torn tail, cut off (the file is truncated at the record's offset and synced)
//! and reported in [`Recovered::torn_tail`], **unless** a valid record with a plausible index
//! appears anywhere after it, in which case it is mid-log corruption. A bad record in any other
//! segment, a valid record with the wrong index, or a segment that does not continue the
//! previous one, is an error ([`WalError::Corrupt`] / [`WalError::Gap`]); nothing is skipped.
//!
//! Limitation of that rule: if the machine loses power while a multi-page batch is being
//! written (before its `fdatasync` returned), and the disk persisted a later page of the batch
//! but not an earlier one, the result looks exactly like mid-log corruption and `open` refuses
//! it. That is the conservative choice for a Raft log: cutting data that may have been
//! acknowledged would break safety, refusing to start only costs a replica rebuild.
//!
//! # Snapshot file format
//!
//! See [`snapshot`]: a 32-byte header (magic, version, lengths, body CRC, header CRC), then the
//! metadata, then the data.
//!
//! # Concurrency
//!
//! One [`Wal`] per directory, owned by one thread (`&mut self` for writes, `&self` for reads).
//! Nothing prevents two processes from opening the same directory; the caller must not.

mod error;
pub mod fs;
mod fsutil;
mod log;
mod record;
pub mod snapshot;

pub use error::{Result, WalError};
pub use fs::{Fs, FsFile, OpenMode, RealFs, SimFs, SimFsStats};
pub use log::{Entry, Recovered, TornTail, Wal};
pub use record::{DATA_BYTES_MAX, RECORD_OVERHEAD_BYTES};
pub use snapshot::{load_latest_snapshot, load_latest_snapshot_in, save_snapshot, save_snapshot_in, SnapshotMeta};

/// Whether writes are forced to stable storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// `fdatasync` the segment after every batch write, `fsync` the directory after creating,
    /// removing or truncating files. What [`Wal::sync`] returned `Ok` for survives power loss.
    #[default]
    Fsync,
    /// Skip every `fdatasync`/`fsync` of the log (data still goes to the OS page cache, so it
    /// survives a process crash but not power loss). For benchmarks only; results must say
    /// which mode they used. Recovery at open still syncs its repairs.
    None,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Fsync => "fsync",
            Durability::None => "none",
        })
    }
}

/// Tuning of a [`Wal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// A new segment is started when the next batch would make the current one larger than
    /// this. A segment exceeds it only when a single batch is larger. Default 64 MiB.
    pub segment_bytes: u64,
    /// Upper bound on encoded bytes buffered by [`Wal::append`] and not yet written. When an
    /// append would exceed it, the buffer is synced first (as if [`Wal::sync`] were called), so
    /// after `append` returns the buffer holds at most this many bytes. Default 8 MiB.
    pub buffered_bytes_max: usize,
    /// Whether to fsync. Default [`Durability::Fsync`].
    pub durability: Durability,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions { segment_bytes: 64 << 20, buffered_bytes_max: 8 << 20, durability: Durability::Fsync }
    }
}
