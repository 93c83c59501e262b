//! The file-system seam: every file operation of the WAL, the snapshot files and the Raft
//! storage goes through [`Fs`], so the same durability code runs on the real disk ([`RealFs`])
//! and under a simulator's crashes ([`SimFs`]).
//!
//! The interface is only what those callers need: directories (create, list, sync), whole-file
//! reads, files opened for positional reads and writes, truncation, `fdatasync`/`fsync`,
//! rename and remove. Errors are plain [`std::io::Error`]s; callers add the path and the
//! operation (see [`crate::WalError::Io`]). A "no space left on device" error (`ENOSPC`, or
//! [`std::io::ErrorKind::StorageFull`]) is what [`crate::WalError::is_disk_full`] recognizes.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

mod real;
mod sim;

pub use real::RealFs;
pub use sim::{SimFs, SimFsStats};

/// How [`Fs::open`] opens a file. Every handle can read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// The file must exist; its contents are kept.
    Existing,
    /// The file must not exist; it is created empty.
    CreateNew,
    /// The file is created if missing and truncated to zero bytes.
    CreateTruncate,
}

/// A file system: the operations the WAL, the snapshot files and the Raft storage use.
///
/// Durability rules every implementation follows (and [`SimFs`] enforces at
/// [`SimFs::crash`]): bytes written to a file are durable once [`FsFile::sync_data`] (or
/// [`FsFile::sync_all`]) returned `Ok`; the creation, rename or removal of a directory entry
/// (file or directory) is durable once [`Fs::sync_dir`] of the directory holding it returned
/// `Ok`.
pub trait Fs: Send + Sync + fmt::Debug {
    /// Creates `dir` and its missing parents (like `mkdir -p`). Not durable until the parents
    /// are synced (see [`ensure_dir`]).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` exists and is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// Whether `path` exists (file or directory).
    fn exists(&self, path: &Path) -> bool;
    /// Names of the entries of `dir`, in no particular order. Names that are not UTF-8 are
    /// left out (no file Luigi writes has one).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens a file for positional reads and writes.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FsFile>>;
    /// The whole contents of a file (error kind [`io::ErrorKind::NotFound`] if missing).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Renames a file or directory, replacing a file at `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file (error kind [`io::ErrorKind::NotFound`] if missing).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes the creations, renames and removals of entries of `dir` durable (`fsync` of the
    /// directory).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// An open file of an [`Fs`].
pub trait FsFile: Send + Sync + fmt::Debug {
    /// Current length in bytes.
    fn len_bytes(&self) -> io::Result<u64>;
    /// Fills `buf` from byte `offset` (an error if the file ends first).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset` (extending the file as needed). On error a prefix
    /// of `buf` may have been written.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Truncates or extends (with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fdatasync`: makes the file's bytes and length durable.
    fn sync_data(&self) -> io::Result<()>;
    /// `fsync`: as [`FsFile::sync_data`], plus the rest of the file's metadata.
    fn sync_all(&self) -> io::Result<()>;
    /// The whole contents.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len_bytes()?)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file larger than the address space"))?;
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// The directory whose entry `path` is (`"."` for a bare relative name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Creates `dir` (and parents) if missing and makes the new entries durable: every directory
/// holding a newly created one is synced, from the deepest existing ancestor down. Returns the
/// directory that failed with the error, for the caller's message.
pub fn ensure_dir(fs: &dyn Fs, dir: &Path) -> Result<(), (PathBuf, &'static str, io::Error)> {
    if fs.is_dir(dir) {
        return Ok(());
    }
    // Ancestors that do not exist yet, deepest first; their parents need a sync after creation.
    let mut missing = vec![dir.to_path_buf()];
    let mut cur = dir.to_path_buf();
    while let Some(p) = cur.parent().filter(|p| !p.as_os_str().is_empty()) {
        if fs.is_dir(p) {
            break;
        }
        missing.push(p.to_path_buf());
        cur = p.to_path_buf();
    }
    fs.create_dir_all(dir).map_err(|e| (dir.to_path_buf(), "create directory", e))?;
    for created in missing.iter().rev() {
        let parent = parent_dir(created);
        fs.sync_dir(&parent).map_err(|e| (parent, "fsync directory", e))?;
    }
    Ok(())
}
