//! Small file-system helpers over [`Fs`].

use std::path::Path;

use crate::error::{IoContext, Result, WalError};
use crate::fs::Fs;

/// Makes creations, renames and removals of entries of `dir` durable.
pub(crate) fn fsync_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    fs.sync_dir(dir).ctx("fsync directory", dir)
}

/// Creates `dir` (and parents) if missing and makes the new directory entries durable (see
/// [`crate::fs::ensure_dir`]).
pub(crate) fn ensure_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    crate::fs::ensure_dir(fs, dir).map_err(|(path, op, e)| WalError::io(op, &path, e))
}

/// Parses `<prefix><20 digits><suffix>` into the number; `None` if the name has another shape.
pub(crate) fn parse_numbered_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
