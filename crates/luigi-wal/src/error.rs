//! Errors of the write-ahead log and snapshot files.

use std::io;
use std::path::{Path, PathBuf};

/// Result alias of this crate.
pub type Result<T, E = WalError> = std::result::Result<T, E>;

/// Everything that can go wrong in the WAL or the snapshot files.
///
/// Every variant that concerns disk contents names the file, and where it makes sense the byte
/// offset inside it, so an operator can look at the exact spot. Bad disk contents never panic.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// An I/O call failed (other than "disk full").
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        /// The file or directory the call was made on.
        path: PathBuf,
        /// What was being done (`"write"`, `"fdatasync"`, `"rename"`, ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file system is full (`ENOSPC`). Nothing already synced was damaged; see
    /// [`crate::Wal::sync`] for the state the log is left in.
    #[error("disk full during {op} on {path}: {source}")]
    DiskFull {
        /// The file or directory the call was made on.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Bytes on disk are not what was written: bad checksum, impossible length, a bad record
    /// followed by valid ones, an unexpected file name, a bad snapshot header, ...
    #[error("corrupt data in {path} at byte offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the first bad byte or record in that file.
        offset: u64,
        /// What exactly is wrong.
        reason: String,
    },
    /// Log indexes on disk are not strictly consecutive (a missing or repeated index within a
    /// segment or between two segments).
    #[error("index gap in {path} at byte offset {offset}: expected index {expected}, found {found}")]
    Gap {
        /// The file where the unexpected index was found.
        path: PathBuf,
        /// Byte offset of the record (0 for a segment whose file name does not continue the log).
        offset: u64,
        /// The index that should have come next.
        expected: u64,
        /// The index that was found.
        found: u64,
    },
    /// The caller appended an entry whose index does not directly follow the last one.
    #[error("appended index {found} does not follow the log: expected {expected}")]
    NotConsecutive {
        /// `last_index() + 1`.
        expected: u64,
        /// The index passed in.
        found: u64,
    },
    /// A read asked for indexes outside `[first_index, last_index]`.
    #[error("read of indexes {lo}..{hi} outside the log ({first:?}..={last:?})")]
    OutOfRange {
        /// Requested start (inclusive).
        lo: u64,
        /// Requested end (exclusive).
        hi: u64,
        /// First index held, if any.
        first: Option<u64>,
        /// Last index held, if any.
        last: Option<u64>,
    },
    /// An entry is larger than a record can hold.
    #[error("entry {index} has {data_bytes} bytes of data; at most {data_bytes_max} fit in a record")]
    EntryTooLarge {
        /// Index of the entry.
        index: u64,
        /// Its data size in bytes.
        data_bytes: usize,
        /// The largest data size a record can hold.
        data_bytes_max: usize,
    },
    /// An earlier `fdatasync` (or the clean-up after a failed write) failed, so what is on disk
    /// is unknown. The `Wal` refuses further writes; drop it and reopen the directory, which
    /// re-verifies every record.
    #[error("the WAL is unusable after an earlier failure ({reason}); reopen it")]
    Poisoned {
        /// The failure that poisoned it.
        reason: String,
    },
}

impl WalError {
    /// Wraps an I/O error, turning "no space left on device" into [`WalError::DiskFull`].
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> WalError {
        if is_disk_full(&source) {
            WalError::DiskFull { path: path.to_path_buf(), op, source }
        } else {
            WalError::Io { path: path.to_path_buf(), op, source }
        }
    }

    /// True for [`WalError::DiskFull`].
    pub fn is_disk_full(&self) -> bool {
        matches!(self, WalError::DiskFull { .. })
    }
}

/// `ENOSPC` (28 on Linux) or [`io::ErrorKind::StorageFull`].
fn is_disk_full(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// Adds the file path and operation to an `io::Result`.
pub(crate) trait IoContext<T> {
    /// Maps the error with [`WalError::io`].
    fn ctx(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|e| WalError::io(op, path, e))
    }
}
