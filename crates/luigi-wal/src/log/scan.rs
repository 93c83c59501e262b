//! Segment files: names, listing, verification of their records at open.

use std::path::{Path, PathBuf};

use super::Slot;
use crate::error::{IoContext, Result, WalError};
use crate::fs::Fs;
use crate::fsutil::parse_numbered_name;
use crate::record;

pub(super) fn segment_path(dir: &Path, first_index: u64) -> PathBuf {
    dir.join(format!("{first_index:020}.wal"))
}

/// Segment files of `dir`, sorted by first index.
pub(super) fn list_segments(fs: &dyn Fs, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for name in fs.list_dir(dir).ctx("list directory", dir)? {
        if !name.ends_with(".wal") {
            continue;
        }
        let path = dir.join(&name);
        match parse_numbered_name(&name, "", ".wal") {
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
pub(super) struct Scan {
    pub entries: Vec<Slot>,
    /// Bytes of valid records.
    pub valid_bytes: u64,
    /// First bad record of the last segment: offset and reason (a torn tail to cut).
    pub torn: Option<(u64, String)>,
}

/// Verifies every record of a segment. See the crate docs for the rules.
pub(super) fn scan_segment(path: &Path, bytes: &[u8], first_index: u64, is_last: bool) -> Result<Scan> {
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
