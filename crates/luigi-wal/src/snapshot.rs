//! Snapshot files: the replica state up to a log index, written atomically.
//!
//! A snapshot lives in `<dir>/snapshot-<index, 20 digits>.snap`:
//!
//! ```text
//! offset  size  field
//!      0     8  magic "LUIGISNP"
//!      8     4  format version, u32 LE (= 1)
//!     12     4  meta_bytes, u32 LE (= 16 + extra.len())
//!     16     8  data_bytes, u64 LE
//!     24     4  body CRC-32 of meta || data, u32 LE
//!     28     4  header CRC-32 of bytes 0..28, u32 LE
//!     32        meta: index u64 LE | term u64 LE | extra (opaque)
//!               data (opaque)
//! ```
//!
//! The file must be exactly `32 + meta_bytes + data_bytes` long and its `index` must match its
//! name. [`save_snapshot`] writes `snapshot-<index>.snap.tmp`, fsyncs it, renames it into place,
//! fsyncs the directory, then deletes older snapshots. [`load_latest_snapshot`] removes leftover
//! `.tmp` files (a crash mid-save) and loads the newest snapshot; if that one is damaged it is an
//! error, not a silent fall-back to an older one, because the log may already be compacted past
//! the older one.

use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result, WalError};
use crate::fs::{Fs, OpenMode, RealFs};
use crate::fsutil::{ensure_dir, fsync_dir, parse_numbered_name};

const MAGIC: &[u8; 8] = b"LUIGISNP";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const META_FIXED_BYTES: usize = 16;
const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".snap";
const TMP_SUFFIX: &str = ".snap.tmp";

/// What a snapshot covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnapshotMeta {
    /// Last log index included in the snapshot.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// Opaque caller bytes stored with the metadata (e.g. the Raft membership).
    pub extra: Vec<u8>,
}

/// Path of the snapshot file for `index` in `dir`.
pub fn snapshot_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{index:020}{SUFFIX}"))
}

fn encode_header(meta: &SnapshotMeta, data: &[u8]) -> Result<Vec<u8>> {
    let meta_bytes = u32::try_from(META_FIXED_BYTES + meta.extra.len()).map_err(|_| WalError::EntryTooLarge {
        index: meta.index,
        data_bytes: meta.extra.len(),
        data_bytes_max: u32::MAX as usize - META_FIXED_BYTES,
    })?;
    let mut meta_buf = Vec::with_capacity(meta_bytes as usize);
    meta_buf.extend_from_slice(&meta.index.to_le_bytes());
    meta_buf.extend_from_slice(&meta.term.to_le_bytes());
    meta_buf.extend_from_slice(&meta.extra);
    let mut body = crc32fast::Hasher::new();
    body.update(&meta_buf);
    body.update(data);
    let mut out = Vec::with_capacity(HEADER_BYTES + meta_buf.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&meta_bytes.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&body.finalize().to_le_bytes());
    let header_crc = crc32fast::hash(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(&meta_buf);
    Ok(out)
}

/// Writes a snapshot durably and deletes older ones; returns its path. Always fsyncs (a
/// snapshot is rare and the log may be compacted right after it).
///
/// Steps: write `snapshot-<index>.snap.tmp`, fsync it, rename it to `snapshot-<index>.snap`
/// (replacing a snapshot of the same index), fsync the directory, delete snapshots with a
/// smaller index, fsync the directory again. A crash at any point leaves either the old or the
/// new snapshot loadable.
pub fn save_snapshot(dir: impl AsRef<Path>, meta: &SnapshotMeta, data: &[u8]) -> Result<PathBuf> {
    save_snapshot_in(&RealFs, dir.as_ref(), meta, data)
}

/// [`save_snapshot`] on the file system `fs`.
///
/// # Errors
/// As [`save_snapshot`]: I/O errors naming the file and the operation. If the error comes from
/// a step after the rename (syncing the directory, removing older snapshots), the new snapshot
/// may or may not survive a crash; the older one is still there until its removal is durable.
pub fn save_snapshot_in(fs: &dyn Fs, dir: &Path, meta: &SnapshotMeta, data: &[u8]) -> Result<PathBuf> {
    ensure_dir(fs, dir)?;
    let header = encode_header(meta, data)?;
    let tmp = dir.join(format!("{PREFIX}{:020}{TMP_SUFFIX}", meta.index));
    let path = snapshot_path(dir, meta.index);
    let written = (|| {
        let file = fs.open(&tmp, OpenMode::CreateTruncate).ctx("create", &tmp)?;
        file.write_all_at(&header, 0).ctx("write", &tmp)?;
        file.write_all_at(data, header.len() as u64).ctx("write", &tmp)?;
        file.sync_all().ctx("fsync", &tmp)
    })();
    if let Err(e) = written {
        let _ = fs.remove_file(&tmp); // best effort; load_latest_snapshot removes it otherwise
        return Err(e);
    }
    fs.rename(&tmp, &path).ctx("rename", &tmp)?;
    fsync_dir(fs, dir)?;
    let mut removed = false;
    for (index, old) in list_snapshots(fs, dir)? {
        if index < meta.index {
            fs.remove_file(&old).ctx("remove old snapshot", &old)?;
            removed = true;
        }
    }
    if removed {
        fsync_dir(fs, dir)?;
    }
    Ok(path)
}

/// Snapshot files of `dir` (`snapshot-<20 digits>.snap`), sorted by index.
fn list_snapshots(fs: &dyn Fs, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for name in fs.list_dir(dir).ctx("list directory", dir)? {
        if !(name.starts_with(PREFIX) && name.ends_with(SUFFIX)) {
            continue;
        }
        match parse_numbered_name(&name, PREFIX, SUFFIX) {
            Some(index) => out.push((index, dir.join(&name))),
            None => {
                return Err(WalError::Corrupt {
                    path: dir.join(&name),
                    offset: 0,
                    reason: "snapshot file name is not snapshot-<20-digit index>.snap".into(),
                })
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Removes leftover temp files of interrupted saves, then loads the newest snapshot of `dir`.
/// `Ok(None)` if there is none (or `dir` does not exist).
///
/// # Errors
/// [`WalError::Corrupt`] naming the file if the newest snapshot is damaged (bad magic, version,
/// header or body CRC, wrong length, index not matching the name). Older snapshots are not
/// tried: see the module docs.
pub fn load_latest_snapshot(dir: impl AsRef<Path>) -> Result<Option<(SnapshotMeta, Vec<u8>)>> {
    load_latest_snapshot_in(&RealFs, dir.as_ref())
}

/// [`load_latest_snapshot`] on the file system `fs`.
///
/// # Errors
/// As [`load_latest_snapshot`].
pub fn load_latest_snapshot_in(fs: &dyn Fs, dir: &Path) -> Result<Option<(SnapshotMeta, Vec<u8>)>> {
    if !fs.is_dir(dir) {
        return Ok(None);
    }
    let mut removed = false;
    for name in fs.list_dir(dir).ctx("list directory", dir)? {
        if name.starts_with(PREFIX) && name.ends_with(TMP_SUFFIX) {
            let path = dir.join(&name);
            fs.remove_file(&path).ctx("remove leftover temp snapshot", &path)?;
            removed = true;
        }
    }
    if removed {
        fsync_dir(fs, dir)?;
    }
    let Some((index, path)) = list_snapshots(fs, dir)?.pop() else { return Ok(None) };
    let bytes = fs.read(&path).ctx("read", &path)?;
    decode(&path, index, &bytes).map(Some)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn decode(path: &Path, name_index: u64, bytes: &[u8]) -> Result<(SnapshotMeta, Vec<u8>)> {
    let corrupt = |offset: u64, reason: String| WalError::Corrupt { path: path.to_path_buf(), offset, reason };
    if bytes.len() < HEADER_BYTES {
        return Err(corrupt(0, format!("file has {} bytes, shorter than the {HEADER_BYTES}-byte header", bytes.len())));
    }
    if &bytes[..8] != MAGIC {
        return Err(corrupt(0, "bad magic (not a Luigi snapshot)".into()));
    }
    let stored_header_crc = u32_at(bytes, 28);
    let header_crc = crc32fast::hash(&bytes[..28]);
    if stored_header_crc != header_crc {
        return Err(corrupt(
            28,
            format!("header CRC mismatch (stored {stored_header_crc:#010x}, computed {header_crc:#010x})"),
        ));
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(corrupt(8, format!("unsupported snapshot format version {version}")));
    }
    let meta_bytes = u32_at(bytes, 12) as u64;
    let data_bytes = u64_at(bytes, 16);
    if meta_bytes < META_FIXED_BYTES as u64 {
        return Err(corrupt(12, format!("metadata length {meta_bytes} below {META_FIXED_BYTES}")));
    }
    let expected_len = (HEADER_BYTES as u64).checked_add(meta_bytes).and_then(|n| n.checked_add(data_bytes));
    if expected_len != Some(bytes.len() as u64) {
        return Err(corrupt(
            bytes.len().min(HEADER_BYTES) as u64,
            format!(
                "file has {} bytes, header says {HEADER_BYTES} + {meta_bytes} + {data_bytes} (truncated or extended)",
                bytes.len()
            ),
        ));
    }
    let body = &bytes[HEADER_BYTES..];
    let stored_body_crc = u32_at(bytes, 24);
    let body_crc = crc32fast::hash(body);
    if stored_body_crc != body_crc {
        return Err(corrupt(
            HEADER_BYTES as u64,
            format!("body CRC mismatch (stored {stored_body_crc:#010x}, computed {body_crc:#010x})"),
        ));
    }
    let meta_bytes = meta_bytes as usize;
    let meta = SnapshotMeta {
        index: u64_at(body, 0),
        term: u64_at(body, 8),
        extra: body[META_FIXED_BYTES..meta_bytes].to_vec(),
    };
    if meta.index != name_index {
        return Err(corrupt(
            HEADER_BYTES as u64,
            format!("snapshot index {} does not match its file name (index {name_index})", meta.index),
        ));
    }
    Ok((meta, body[meta_bytes..].to_vec()))
}
