//! Durable storage for one replica: persists what [`crate::Ready`] asks for, and reads it back
//! at restart as the [`RecoveredState`] that [`crate::RaftLog::new`] takes. Plain blocking
//! code (call it from a blocking thread in an async shell) over a [`luigi_wal::fs::Fs`]: the
//! real file system ([`DiskStorage::open`]) or, in tests and simulations, a
//! [`luigi_wal::fs::SimFs`] whose crashes keep only what was synced ([`DiskStorage::open_with`]).
//!
//! One directory per replica holds:
//!
//! - the **log** in `luigi-wal` segments (`<20 digits>.wal`): each raft entry is one WAL record
//!   `(index, term, data)` with `data` as described in [`crate::codec`] (entry type, payload,
//!   context); a conflicting suffix is truncated (durably) before the entries replacing it
//!   are appended; [`DiskStorage::sync`] is the group commit;
//! - the **hard state** (term, vote, commit) in `raft-hardstate`, a 36-byte file
//!   `"LRHS" | version u32 LE (=1) | term u64 LE | vote u64 LE | commit u64 LE | CRC-32 u32 LE`
//!   (CRC of the first 32 bytes), replaced atomically: write `raft-hardstate.tmp`, fsync,
//!   rename, fsync the directory. It is rewritten only when the term or the vote changes or a
//!   snapshot is installed (the cases where Raft needs it durable before answering); a change of
//!   the commit index alone stays in memory until the next such write, because Raft never needs
//!   the commit index for safety, and a rename plus two fsyncs per commit would double the cost
//!   of every batch. After a restart a replica therefore hands back at once only what it knew
//!   committed at its last term/vote change, and the rest as soon as it hears from a leader.
//!   The log is always synced before the hard state is written, so the stored commit index
//!   never points past the durable log.
//!   The file is written (all zero) when the directory is created, before any log entry, so a
//!   log or snapshot without it means it was lost: [`DiskStorage::open`] refuses such a
//!   directory ([`DiskError::MissingHardState`]) rather than restart at term 0 with no vote
//!   (which could vote twice in a term).
//! - **snapshots** (`snapshot-<index>.snap`, `luigi-wal`'s format) with the membership as the
//!   metadata's extra bytes (voter ids as u64 LE).
//! - the fast path's **accept log** in `accepts/` (see [`crate::accepts`]), synced before the
//!   Raft log by [`DiskStorage::sync`] (nothing writes to it yet);
//! - `raft-rejoin`, while the replica is being rebuilt from its peers ([`prepare_rejoin`],
//!   [`RecoveredState::rejoining`]): it lost its vote and its log, and must not vote or
//!   campaign before it has caught up with a leader (see [`crate::RaftLog`], "Rejoining").
//!   Removed, after the hard state that records the end of the rebuild, by the
//!   [`DiskStorage::sync`] of the ready that says so ([`Ready::rejoined`]).
//! - `raft-damaged`, once the replica found it lost acknowledged entries at run time
//!   ([`DiskStorage::mark_damaged`]): every later [`DiskStorage::open`] refuses the directory
//!   ([`DiskError::Damaged`]) until it is rebuilt, instead of restarting into the same error.
//!
//! Installing a snapshot from the leader at index `S` runs: (1) truncate the log after `S`
//! (entries there cannot be committed: had this replica held a committed entry past `S`, its
//! log would match the leader's at `S` and raft would not have sent a snapshot), (2) save the
//! snapshot, (3) remove the rest of the log, (4) write the hard state. Recovery keeps log
//! entries after the snapshot only if the log holds the snapshot's own index with the
//! snapshot's term or starts right after it, so a crash between any two steps recovers a
//! consistent log.
//!
//! With [`Durability::None`] nothing is fsynced (benchmarks only: a power loss may lose
//! acknowledged entries and votes, which breaks Raft's guarantees).
//!
//! Size: over 600 lines, of which about 190 are documentation, most of it the on-disk
//! format above, which belongs beside the code that writes and reads it; the code is one
//! concept (a replica's durable state), its tests are in `tests/disk.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use luigi_wal::fs::{ensure_dir, Fs, OpenMode, RealFs};
use luigi_wal::{load_latest_snapshot_in, save_snapshot_in, Durability, SnapshotMeta, Wal, WalError, WalOptions};

use crate::accepts::{AcceptLog, FoundAccepts};
use crate::codec::{decode_hard_state, encode_hard_state, HardState, PersistEntry};
use crate::node::{Ready, RecoveredState, SnapshotData};

/// File name of the hard state.
pub const HARD_STATE_FILE: &str = "raft-hardstate";
/// File name of the marker of a replica being rebuilt from its peers.
pub const REJOIN_FILE: &str = "raft-rejoin";
/// File name of the marker of a replica that lost acknowledged log entries.
pub const DAMAGED_FILE: &str = "raft-damaged";
const HARD_STATE_TMP: &str = "raft-hardstate.tmp";

/// Errors of [`DiskStorage`].
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The write-ahead log or snapshot files failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// An I/O call on the hard-state file or the directory failed.
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes are not what was written, or do not fit together.
    #[error("corrupt raft state in {path}: {reason}")]
    Corrupt {
        /// The file (or directory) concerned.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A [`Ready`]'s entries do not continue the stored log (a bug in the caller: readies
    /// must be persisted in order, each exactly once).
    #[error("ready entries do not continue the stored log: {0}")]
    Sequence(String),
    /// The hard state file is missing beside a log or a snapshot: the replica's term and vote
    /// are lost.
    #[error(
        "the raft hard state {path} is missing beside a log holding entries up to index {last_index}: \
         this replica's term and vote are lost (it could vote twice in a term)"
    )]
    MissingHardState {
        /// The missing file.
        path: PathBuf,
        /// Last index of the log (or the snapshot) found beside it.
        last_index: u64,
    },
    /// The hard state says entries are committed that the log does not hold: entries this
    /// replica acknowledged were lost (a truncated log, deleted segments).
    #[error(
        "the raft log in {dir} ends at index {last_index} but its hard state says entries up to {commit} \
         are committed: this replica lost acknowledged log entries"
    )]
    LostEntries {
        /// The replica directory.
        dir: PathBuf,
        /// The stored commit index.
        commit: u64,
        /// The last index the log holds.
        last_index: u64,
    },
    /// The replica found earlier that it lost acknowledged entries
    /// ([`DiskStorage::mark_damaged`]).
    #[error("marked damaged in {path}: {reason}")]
    Damaged {
        /// The marker file.
        path: PathBuf,
        /// What was found, as recorded.
        reason: String,
    },
}

impl DiskError {
    /// Whether the directory's raft state is lost or damaged (as opposed to an I/O failure or
    /// a caller's bug): the replica cannot restart from it and must be rebuilt from its peers.
    pub fn needs_rebuild(&self) -> bool {
        matches!(
            self,
            DiskError::Corrupt { .. }
                | DiskError::MissingHardState { .. }
                | DiskError::LostEntries { .. }
                | DiskError::Damaged { .. }
                | DiskError::Wal(WalError::Corrupt { .. } | WalError::Gap { .. })
        )
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> DiskError + 'a {
    move |source| DiskError::Io { op, path: path.to_path_buf(), source }
}

fn fsync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), DiskError> {
    fs.sync_dir(dir).map_err(io_err("fsync directory", dir))
}

/// Creates `dir` if missing, durably (its parents are synced).
fn ensure_dir_durably(fs: &dyn Fs, dir: &Path) -> Result<(), DiskError> {
    ensure_dir(fs, dir).map_err(|(path, op, source)| DiskError::Io { op, path, source })
}

fn encode_voters(voters: &[u64]) -> Vec<u8> {
    voters.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn decode_voters(path: &Path, extra: &[u8]) -> Result<Vec<u64>, DiskError> {
    if !extra.chunks_exact(8).remainder().is_empty() {
        return Err(DiskError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("snapshot membership is {} bytes, not a multiple of 8", extra.len()),
        });
    }
    Ok(extra
        .chunks_exact(8)
        .map(|c| {
            u64::from_le_bytes({
                let mut x = [0u8; 8];
                x.copy_from_slice(c);
                x
            })
        })
        .collect())
}

/// The durable half of a replica: a [`Wal`] for the log, an atomically replaced file for the
/// hard state, snapshot files. See the module docs for the layout and the rules.
#[derive(Debug)]
pub struct DiskStorage {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    wal: Wal,
    fsync: bool,
    /// What the hard-state file holds.
    written_hs: HardState,
    /// The newest hard state handed in (its commit may be ahead of the file).
    latest_hs: HardState,
    /// The file must be rewritten at the next [`DiskStorage::sync`].
    hs_dirty: bool,
    snapshot_index: u64,
    /// The rejoin marker is there.
    rejoining: bool,
    /// A ready written since the last sync ended the rejoin: remove the marker after syncing.
    rejoin_done: bool,
    /// The fast path's accept log (see [`crate::accepts`]), synced with the Raft log.
    accepts: AcceptLog,
    /// The accepts found at open, until taken.
    accepts_found: FoundAccepts,
    /// The first record of the last rewrite of the accept log's live records, not synced
    /// yet: the next sync drops what came before it.
    accepts_compact_below: Option<u64>,
}

/// Refuses a replica directory marked damaged ([`DiskStorage::mark_damaged`]).
fn refuse_if_damaged(fs: &dyn Fs, dir: &Path) -> Result<(), DiskError> {
    let damaged = dir.join(DAMAGED_FILE);
    match fs.read(&damaged) {
        Ok(reason) => {
            let reason = String::from_utf8_lossy(&reason).trim().to_string();
            Err(DiskError::Damaged { path: damaged, reason })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("read", &damaged)(e)),
    }
}

/// The latest snapshot saved in `dir`, if any.
fn latest_snapshot(fs: &dyn Fs, dir: &Path) -> Result<Option<SnapshotData>, DiskError> {
    Ok(match load_latest_snapshot_in(fs, dir)? {
        Some((meta, data)) => {
            let path = luigi_wal::snapshot::snapshot_path(dir, meta.index);
            let voters = decode_voters(&path, &meta.extra)?;
            Some(SnapshotData { index: meta.index, term: meta.term, voters, data: data.into() })
        }
        None => None,
    })
}

/// The log's entries after the snapshot at `snap_index` (of `snap_term`), once the log is
/// made to continue it: a log that does not is dropped, the part the snapshot covers
/// compacted away (see the module docs). A log starting past the snapshot is corrupt.
fn log_after_snapshot(
    wal: &mut Wal,
    dir: &Path,
    snap_index: u64,
    snap_term: u64,
) -> Result<Vec<PersistEntry>, DiskError> {
    if let Some(first) = wal.first_index() {
        if first > snap_index + 1 {
            return Err(DiskError::Corrupt {
                path: dir.to_path_buf(),
                reason: format!("the log starts at {first} but the snapshot ends at {snap_index}"),
            });
        }
        // Keep the log after the snapshot only if it continues it (see the module docs).
        let continues = first == snap_index + 1 || wal.term(snap_index) == Some(snap_term);
        if !continues {
            wal.truncate_suffix(first)?;
        } else if snap_index > 0 {
            wal.compact_prefix(snap_index)?;
        }
    }
    let mut entries = Vec::new();
    if let Some(last) = wal.last_index() {
        if last > snap_index {
            for e in wal.read(snap_index + 1..last + 1)? {
                entries.push(PersistEntry { index: e.index, term: e.term, data: e.data });
            }
        }
    }
    Ok(entries)
}

impl DiskStorage {
    /// Opens (creating if needed) the replica directory `dir` and recovers its state: the
    /// newest snapshot, the log after it (a torn WAL tail is cut, see `luigi-wal`), the hard
    /// state. Leftovers of interrupted writes are removed.
    ///
    /// # Errors
    /// [`DiskError::Corrupt`] / [`DiskError::Wal`] for damaged or inconsistent files (naming
    /// the file), [`DiskError::Io`] for I/O failures.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<(DiskStorage, RecoveredState), DiskError> {
        DiskStorage::open_with(Arc::new(RealFs), dir, options)
    }

    /// [`DiskStorage::open`] on the file system `fs`: every file operation of the storage (log,
    /// hard state, snapshots, markers) goes through it. A simulator keeps a clone of its
    /// [`luigi_wal::fs::SimFs`], drops the storage at a crash, calls `SimFs::crash`, and opens
    /// the same directory again with this.
    ///
    /// # Errors
    /// As [`DiskStorage::open`].
    pub fn open_with(
        fs: Arc<dyn Fs>,
        dir: impl AsRef<Path>,
        options: WalOptions,
    ) -> Result<(DiskStorage, RecoveredState), DiskError> {
        let dir = dir.as_ref().to_path_buf();
        ensure_dir_durably(&*fs, &dir)?;
        refuse_if_damaged(&*fs, &dir)?;
        let rejoining = fs.exists(&dir.join(REJOIN_FILE));
        let fsync = options.durability == Durability::Fsync;
        let snapshot = latest_snapshot(&*fs, &dir)?;
        let (accepts, accepts_found) = AcceptLog::open_in(Arc::clone(&fs), &dir, options.clone())?;
        let (mut wal, _report) = Wal::open_in(Arc::clone(&fs), &dir, options)?;
        let hard_state = read_hard_state(&*fs, &dir)?;
        let fresh = hard_state.is_none();
        if fresh && (wal.last_index().is_some() || snapshot.is_some()) {
            let last_index = wal.last_index().into_iter().chain(snapshot.as_ref().map(|s| s.index)).max().unwrap_or(0);
            return Err(DiskError::MissingHardState { path: dir.join(HARD_STATE_FILE), last_index });
        }

        let (snap_index, snap_term) = snapshot.as_ref().map_or((0, 0), |s| (s.index, s.term));
        let entries = log_after_snapshot(&mut wal, &dir, snap_index, snap_term)?;
        let last_index = snap_index + entries.len() as u64;
        let mut hs = hard_state.unwrap_or_default();
        if hs.commit > last_index {
            if fsync {
                return Err(DiskError::LostEntries { dir, commit: hs.commit, last_index });
            }
            // Without fsync a power loss can lose a log tail the hard state covers.
            hs.commit = last_index;
        }
        let mut storage = DiskStorage {
            fs,
            dir,
            wal,
            fsync,
            written_hs: hs,
            latest_hs: hs,
            hs_dirty: false,
            snapshot_index: snap_index,
            rejoining,
            rejoin_done: false,
            accepts,
            accepts_found,
            accepts_compact_below: None,
        };
        if fresh {
            // Before any entry: from now on a log without a hard state means a lost file.
            storage.write_hard_state(hs)?;
        }
        Ok((storage, RecoveredState { hard_state: hs, snapshot, entries, applied: 0, rejoining }))
    }

    /// The file system it lives on.
    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    /// The replica directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// The newest hard state handed in (the file may hold an older commit index).
    pub fn hard_state(&self) -> HardState {
        self.latest_hs
    }

    /// Index of the newest snapshot saved (0: none).
    pub fn snapshot_index(&self) -> u64 {
        self.snapshot_index
    }

    /// Whether the replica is being rebuilt from its peers (the rejoin marker is there).
    pub fn is_rejoining(&self) -> bool {
        self.rejoining
    }

    /// Records durably that this replica lost acknowledged log entries (found at run time,
    /// e.g. [`crate::RaftError::LostEntries`]): every later [`DiskStorage::open`] of the
    /// directory fails with [`DiskError::Damaged`] and `reason`, so the replica is not
    /// restarted into the same failure over and over; it must be rebuilt from its peers.
    ///
    /// # Errors
    /// I/O errors.
    pub fn mark_damaged(&mut self, reason: &str) -> Result<(), DiskError> {
        write_file_durably(&*self.fs, &self.dir, DAMAGED_FILE, format!("{}\n", reason.replace('\n', " ")).as_bytes())
    }

    /// [`DiskStorage::write`] then [`DiskStorage::sync`]: after it returns, the ready's
    /// `persisted_messages` may be sent and [`crate::RaftLog::advance`] called.
    ///
    /// # Errors
    /// As [`DiskStorage::write`] and [`DiskStorage::sync`]. After an error the replica must
    /// stop (reopen the directory to recover).
    pub fn persist(&mut self, rd: &Ready) -> Result<(), DiskError> {
        self.write(rd)?;
        self.sync()
    }

    /// Stages a ready: a snapshot is installed durably right away (see the module docs), a
    /// conflicting log suffix is truncated durably, entries are buffered in the WAL, the hard
    /// state is noted. Nothing of the entries or the hard state is durable before
    /// [`DiskStorage::sync`]; several readies may be written and then synced once (group
    /// commit), in order.
    ///
    /// # Errors
    /// [`DiskError::Sequence`] if the entries do not continue the stored log; I/O errors.
    pub fn write(&mut self, rd: &Ready) -> Result<(), DiskError> {
        if let Some(snap) = &rd.snapshot {
            self.install_snapshot(snap)?;
        }
        if let Some(first) = rd.entries.first() {
            if first.index <= self.snapshot_index {
                return Err(DiskError::Sequence(format!(
                    "entry {} is covered by the snapshot at {}",
                    first.index, self.snapshot_index
                )));
            }
            if self.wal.last_index().is_some_and(|last| first.index <= last) {
                self.wal.truncate_suffix(first.index)?;
            }
            let expected = self.wal.last_index().map_or(self.snapshot_index + 1, |last| last + 1);
            if first.index != expected {
                return Err(DiskError::Sequence(format!("entry {} where {expected} was expected", first.index)));
            }
            let batch: Vec<(u64, u64, &[u8])> =
                rd.entries.iter().map(|e| (e.index, e.term, e.data.as_slice())).collect();
            self.wal.append(&batch)?;
        }
        if let Some(hs) = rd.hard_state {
            if hs.term != self.written_hs.term || hs.vote != self.written_hs.vote {
                self.hs_dirty = true;
            }
            self.latest_hs = hs;
        }
        if rd.rejoined && self.rejoining {
            self.rejoin_done = true;
            self.hs_dirty = true;
        }
        Ok(())
    }

    /// Makes everything written so far durable: one WAL group commit (write + fdatasync), then
    /// the hard-state file if the term or vote changed or a snapshot was installed.
    ///
    /// # Errors
    /// I/O errors; the replica must stop.
    pub fn sync(&mut self) -> Result<(), DiskError> {
        self.accepts.sync()?;
        if let Some(first) = self.accepts_compact_below.take() {
            // What came before a rewrite is decided or written again: durable now.
            self.accepts.compact_below(first)?;
        }
        self.wal.sync()?;
        if self.hs_dirty {
            self.write_hard_state(self.latest_hs)?;
        }
        if self.rejoin_done {
            // After the hard state that ends the rebuild (see `RaftLog`, "Rejoining").
            let marker = self.dir.join(REJOIN_FILE);
            self.fs.remove_file(&marker).map_err(io_err("remove", &marker))?;
            fsync_dir(&*self.fs, &self.dir)?;
            self.rejoining = false;
            self.rejoin_done = false;
        }
        Ok(())
    }

    /// Stages fast-path accept records (see [`crate::accepts`]), durable with the next
    /// [`DiskStorage::sync`]. With `rewrite`, `records` are every record still needed (the
    /// replica's undecided accepts, written again): once they are durable, the sync drops
    /// the records written before them, a segment at a time. Nothing to do for no records
    /// and no rewrite (most persists), so a shell calls it for every persist.
    ///
    /// # Errors
    /// I/O errors; the replica must stop.
    pub fn write_accepts(&mut self, records: &[Vec<u8>], rewrite: bool) -> Result<(), DiskError> {
        let first = self.accepts.last().map_or(1, |last| last + 1);
        if !records.is_empty() {
            self.accepts.append(records)?;
        }
        if rewrite {
            self.accepts_compact_below = Some(first);
        }
        Ok(())
    }

    /// The accept records found when the directory was opened, oldest first (taken once).
    pub fn take_found_accepts(&mut self) -> FoundAccepts {
        std::mem::take(&mut self.accepts_found)
    }

    /// Writes the hard state with the newest commit index now (e.g. at a clean shutdown, so a
    /// restart hands back everything committed without waiting for a leader).
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync_hard_state(&mut self) -> Result<(), DiskError> {
        self.wal.sync()?;
        self.write_hard_state(self.latest_hs)
    }

    /// Saves a snapshot made by [`crate::RaftLog::compact`] and deletes the WAL segments it
    /// covers entirely.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save_snapshot(&mut self, snap: &SnapshotData) -> Result<(), DiskError> {
        self.wal.sync()?;
        save_snapshot_in(&*self.fs, &self.dir, &snapshot_meta(snap), &snap.data)?;
        self.snapshot_index = snap.index;
        self.wal.compact_prefix(snap.index)?;
        Ok(())
    }

    /// A writer of snapshot files apart from this storage (see [`SnapshotWriter`]).
    pub fn snapshot_writer(&self) -> SnapshotWriter {
        SnapshotWriter { fs: Arc::clone(&self.fs), dir: self.dir.clone() }
    }

    /// The second half of [`DiskStorage::save_snapshot`] for a snapshot a [`SnapshotWriter`]
    /// made durable: deletes the WAL segments it covers entirely. A no-op if the storage
    /// holds a snapshot at or past `index` already (e.g. the leader's, installed meanwhile).
    ///
    /// # Errors
    /// I/O errors.
    pub fn snapshot_saved(&mut self, index: u64) -> Result<(), DiskError> {
        if index <= self.snapshot_index {
            return Ok(());
        }
        self.snapshot_index = index;
        self.wal.compact_prefix(index)?;
        Ok(())
    }

    /// A snapshot from the leader replaces the whole log (order explained in the module docs).
    fn install_snapshot(&mut self, snap: &SnapshotData) -> Result<(), DiskError> {
        self.wal.truncate_suffix(snap.index + 1)?;
        save_snapshot_in(&*self.fs, &self.dir, &snapshot_meta(snap), &snap.data)?;
        if let Some(first) = self.wal.first_index() {
            self.wal.truncate_suffix(first)?;
        }
        self.snapshot_index = snap.index;
        self.hs_dirty = true;
        Ok(())
    }

    fn write_hard_state(&mut self, hs: HardState) -> Result<(), DiskError> {
        let tmp = self.dir.join(HARD_STATE_TMP);
        let path = self.dir.join(HARD_STATE_FILE);
        let file = self.fs.open(&tmp, OpenMode::CreateTruncate).map_err(io_err("create", &tmp))?;
        file.write_all_at(&encode_hard_state(&hs), 0).map_err(io_err("write", &tmp))?;
        if self.fsync {
            file.sync_all().map_err(io_err("fsync", &tmp))?;
        }
        drop(file);
        self.fs.rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
        if self.fsync {
            fsync_dir(&*self.fs, &self.dir)?;
        }
        self.written_hs = hs;
        self.hs_dirty = false;
        Ok(())
    }
}

/// Writes a replica's snapshot files on any thread, apart from its [`DiskStorage`]: a large
/// store's image takes long to write and sync, and the log's writes need not wait for it.
/// [`DiskStorage::snapshot_saved`] then compacts the log behind it, in order with the log's
/// writes. The file is written atomically (temp file, fsync, rename, fsync the directory),
/// older snapshot files are removed, and recovery loads the newest, so a crash at any point
/// leaves either the old snapshot with the whole log, or the new one.
#[derive(Clone)]
pub struct SnapshotWriter {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
}

impl SnapshotWriter {
    /// Writes `snap` durably.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&self, snap: &SnapshotData) -> Result<(), DiskError> {
        save_snapshot_in(&*self.fs, &self.dir, &snapshot_meta(snap), &snap.data)?;
        Ok(())
    }
}

/// Writes `name` in `dir` atomically and durably (temp file, fsync, rename, fsync directory),
/// whatever the log's durability: markers are rare and must survive.
fn write_file_durably(fs: &dyn Fs, dir: &Path, name: &str, bytes: &[u8]) -> Result<(), DiskError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let file = fs.open(&tmp, OpenMode::CreateTruncate).map_err(io_err("create", &tmp))?;
    file.write_all_at(bytes, 0).map_err(io_err("write", &tmp))?;
    file.sync_all().map_err(io_err("fsync", &tmp))?;
    drop(file);
    fs.rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
    fsync_dir(fs, dir)
}

/// Prepares `dir` for a replica to be rebuilt from its peers: moves whatever is there aside to
/// `<dir>.discarded-<unix seconds>` (never deleted: an operator may still want it), creates an
/// empty `dir` holding only the rejoin marker ([`REJOIN_FILE`]), and returns where the old
/// directory went (`None` if there was none). The next [`DiskStorage::open`] recovers an empty
/// state with [`RecoveredState::rejoining`] set, which [`crate::RaftLog`] honours.
///
/// # Errors
/// I/O errors (the old directory is either where it was or moved aside, never half-moved).
pub fn prepare_rejoin(dir: &Path) -> Result<Option<PathBuf>, DiskError> {
    prepare_rejoin_in(&RealFs, dir)
}

/// [`prepare_rejoin`] on the file system `fs`.
///
/// # Errors
/// As [`prepare_rejoin`].
pub fn prepare_rejoin_in(fs: &dyn Fs, dir: &Path) -> Result<Option<PathBuf>, DiskError> {
    let mut discarded = None;
    if fs.exists(dir) {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let name = dir.file_name().map_or_else(|| "replica".into(), |n| n.to_string_lossy().into_owned());
        let mut to = dir.with_file_name(format!("{name}.discarded-{secs}"));
        let mut n = 1;
        while fs.exists(&to) {
            n += 1;
            to = dir.with_file_name(format!("{name}.discarded-{secs}-{n}"));
        }
        fs.rename(dir, &to).map_err(io_err("move aside", dir))?;
        discarded = Some(to);
    }
    fs.create_dir_all(dir).map_err(io_err("create directory", dir))?;
    fsync_dir(fs, &luigi_wal::fs::parent_dir(dir))?;
    write_file_durably(fs, dir, REJOIN_FILE, b"rebuilding from the replica's peers: no vote before caught up\n")?;
    Ok(discarded)
}

fn snapshot_meta(snap: &SnapshotData) -> SnapshotMeta {
    SnapshotMeta { index: snap.index, term: snap.term, extra: encode_voters(&snap.voters) }
}

/// Removes a leftover temp file, then reads the hard state (`None`: never written).
fn read_hard_state(fs: &dyn Fs, dir: &Path) -> Result<Option<HardState>, DiskError> {
    let tmp = dir.join(HARD_STATE_TMP);
    if fs.exists(&tmp) {
        fs.remove_file(&tmp).map_err(io_err("remove leftover", &tmp))?;
        fsync_dir(fs, dir)?;
    }
    let path = dir.join(HARD_STATE_FILE);
    let bytes = match fs.read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    decode_hard_state(&bytes).map(Some).map_err(|reason| DiskError::Corrupt { path, reason })
}
