//! Small file-system helpers.

use std::fs::File;
use std::path::Path;

use crate::error::{IoContext, Result};

/// Makes creations, renames and removals of entries of `dir` durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).ctx("open directory", dir)?.sync_all().ctx("fsync directory", dir)
}

/// Creates `dir` (and parents) if missing; when it had to be created, fsyncs its parent so the
/// new directory entry is durable.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).ctx("create directory", dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fsync_dir(parent)?;
    }
    Ok(())
}

/// Parses `<prefix><20 digits><suffix>` into the number; `None` if the name has another shape.
pub(crate) fn parse_numbered_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
