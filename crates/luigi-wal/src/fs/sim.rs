//! [`SimFs`]: an in-memory file system with one seeded crash model.
//!
//! # Crash model
//!
//! Every file has durable bytes and the bytes written since its last sync; every directory
//! has durable entries and the entry changes (creations, renames, removals) made since its last
//! sync, in order. [`SimFs::crash`] is a power loss:
//!
//! - each directory keeps its durable entries plus a seeded prefix of its unsynced changes
//!   (possibly none, possibly all); one rename is one change, so it is atomic;
//! - each file changed since its last sync keeps its durable bytes, or the bytes it agreed on
//!   with them plus a seeded prefix of what was written after, whose last bytes may be garbled
//!   (a torn write);
//! - what is no longer reachable from the root is gone; handles opened before the crash fail.
//!
//! Synced bytes and synced directory entries always survive. The same seed and the same calls
//! give the same result.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Fs, FsFile, OpenMode};

/// Counters of a [`SimFs`], for tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimFsStats {
    /// Successful `fdatasync`/`fsync` calls on files.
    pub file_syncs: u64,
    /// Successful directory syncs.
    pub dir_syncs: u64,
    /// Syncs failed on purpose ([`SimFs::fail_syncs`], [`SimFs::fail_dir_syncs`]).
    pub failed_syncs: u64,
    /// Bytes written to files (including the part of a write that hit the capacity).
    pub bytes_written: u64,
    /// Calls of [`SimFs::crash`].
    pub crashes: u64,
}

/// A directory entry: a file or a directory, by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir(u64),
}

/// One atomic change of a directory: names set to a node or removed.
type DirOp = Vec<(String, Option<Node>)>;

#[derive(Clone, Debug, Default)]
struct Dir {
    durable: BTreeMap<String, Node>,
    current: BTreeMap<String, Node>,
    /// Changes since the last sync, in order.
    ops: Vec<DirOp>,
}

#[derive(Clone, Debug, Default)]
struct FileData {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Lowest byte offset changed since the last sync (`None`: `data == durable`). The two
    /// agree on every byte before it.
    dirty_from: Option<usize>,
}

impl FileData {
    fn touch(&mut self, from: usize) {
        self.dirty_from = Some(self.dirty_from.map_or(from, |d| d.min(from)));
    }
}

#[derive(Debug)]
struct State {
    /// SplitMix64 state.
    rng: u64,
    /// Bumped at every crash: handles of an older epoch are stale.
    epoch: u64,
    next_id: u64,
    /// Directories by id; 0 is the root.
    dirs: BTreeMap<u64, Dir>,
    /// Files by id, including unlinked ones until the next crash.
    files: BTreeMap<u64, FileData>,
    capacity: Option<u64>,
    failing_syncs: u64,
    failing_dir_syncs: u64,
    stats: SimFsStats,
}

fn err(kind: io::ErrorKind, msg: &str) -> io::Error {
    io::Error::new(kind, format!("{msg} (simulated file system)"))
}

fn not_found() -> io::Error {
    err(io::ErrorKind::NotFound, "no such file or directory")
}

fn disk_full() -> io::Error {
    io::Error::from_raw_os_error(28) // ENOSPC
}

/// The names along `path`; the root, `.` and a leading prefix are skipped, so `/a/b`, `a/b`
/// and `./a/b` are the same path.
fn names(path: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => match n.to_str() {
                Some(s) => out.push(s.to_owned()),
                None => return Err(err(io::ErrorKind::InvalidInput, "path is not UTF-8")),
            },
            Component::ParentDir => return Err(err(io::ErrorKind::InvalidInput, "`..` in a path is not supported")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

impl State {
    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn upto(&mut self, max: usize) -> usize {
        (self.next_u64() % (max as u64 + 1)) as usize
    }

    fn lookup(&self, path: &Path) -> io::Result<Option<Node>> {
        let mut node = Node::Dir(0);
        for name in names(path)? {
            let Node::Dir(d) = node else { return Ok(None) };
            match self.dirs[&d].current.get(&name) {
                Some(n) => node = *n,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    /// The directory holding `path` and the entry's name.
    fn split(&self, path: &Path) -> io::Result<(u64, String)> {
        let mut names = names(path)?;
        let Some(name) = names.pop() else {
            return Err(err(io::ErrorKind::InvalidInput, "the root is not a directory entry"));
        };
        let mut dir = 0;
        for n in names {
            match self.dirs[&dir].current.get(&n) {
                Some(Node::Dir(d)) => dir = *d,
                Some(Node::File(_)) => return Err(err(io::ErrorKind::InvalidInput, "a file is used as a directory")),
                None => return Err(not_found()),
            }
        }
        Ok((dir, name))
    }

    fn file_id(&self, path: &Path) -> io::Result<u64> {
        match self.lookup(path)? {
            Some(Node::File(f)) => Ok(f),
            Some(Node::Dir(_)) => Err(err(io::ErrorKind::InvalidInput, "is a directory")),
            None => Err(not_found()),
        }
    }

    fn change(&mut self, dir: u64, op: DirOp) {
        let d = self.dirs.get_mut(&dir).expect("directory ids stay valid until a crash");
        for (name, node) in &op {
            match node {
                Some(n) => d.current.insert(name.clone(), *n),
                None => d.current.remove(name),
            };
        }
        d.ops.push(op);
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Bytes of the files named in some directory.
    fn used_bytes(&self) -> u64 {
        let named: BTreeSet<u64> = self
            .dirs
            .values()
            .flat_map(|d| d.current.values())
            .filter_map(|n| match n {
                Node::File(f) => Some(*f),
                Node::Dir(_) => None,
            })
            .collect();
        named.iter().map(|f| self.files[f].data.len() as u64).sum()
    }

    /// How many more bytes fit (`u64::MAX`: no capacity set).
    fn room(&self) -> u64 {
        self.capacity.map_or(u64::MAX, |c| c.saturating_sub(self.used_bytes()))
    }

    fn take_sync_failure(&mut self, dir: bool) -> io::Result<()> {
        let failing =
            if dir && self.failing_dir_syncs > 0 { &mut self.failing_dir_syncs } else { &mut self.failing_syncs };
        if *failing > 0 {
            *failing -= 1;
            self.stats.failed_syncs += 1;
            return Err(err(io::ErrorKind::Other, "injected fsync failure (EIO)"));
        }
        Ok(())
    }

    fn crash(&mut self) {
        self.epoch += 1;
        self.stats.crashes += 1;
        self.failing_syncs = 0;
        self.failing_dir_syncs = 0;
        // Directories: durable entries plus a seeded prefix of the unsynced changes.
        let ids: Vec<u64> = self.dirs.keys().copied().collect();
        let mut entries = BTreeMap::new();
        for id in ids {
            let n = self.dirs[&id].ops.len();
            let keep = self.upto(n);
            let d = &self.dirs[&id];
            let mut m = d.durable.clone();
            for op in &d.ops[..keep] {
                for (name, node) in op {
                    match node {
                        Some(x) => m.insert(name.clone(), *x),
                        None => m.remove(name),
                    };
                }
            }
            entries.insert(id, m);
        }
        // What is reachable from the root survives.
        let (mut dirs, mut files) = (BTreeSet::new(), BTreeSet::new());
        let mut stack = vec![0u64];
        while let Some(d) = stack.pop() {
            if !dirs.insert(d) {
                continue;
            }
            for node in entries[&d].values() {
                match node {
                    Node::Dir(c) => stack.push(*c),
                    Node::File(f) => {
                        files.insert(*f);
                    }
                }
            }
        }
        self.dirs = dirs
            .iter()
            .map(|&d| {
                let m = entries.remove(&d).unwrap_or_default();
                (d, Dir { durable: m.clone(), current: m, ops: Vec::new() })
            })
            .collect();
        let old = std::mem::take(&mut self.files);
        for (id, mut f) in old {
            if !files.contains(&id) {
                continue;
            }
            if let Some(from) = f.dirty_from {
                let bytes = if self.next_u64().is_multiple_of(3) {
                    f.durable
                } else {
                    let k = self.upto(f.data.len() - from);
                    let mut kept = f.data[..from + k].to_vec();
                    if k > 0 && self.next_u64().is_multiple_of(2) {
                        let torn = 1 + self.upto(k.min(8) - 1);
                        let end = kept.len();
                        for b in &mut kept[end - torn..] {
                            *b = self.next_u64() as u8;
                        }
                    }
                    kept
                };
                f = FileData { data: bytes.clone(), durable: bytes, dirty_from: None };
            }
            self.files.insert(id, f);
        }
    }
}

/// An in-memory, deterministic file system with the crash model described in the module docs,
/// and fault knobs: failing syncs, a capacity. Cloning gives another handle to the same file
/// system, so a test or a simulator can keep one, [`SimFs::crash`] it, and reopen the WAL or
/// the Raft storage over it.
#[derive(Clone, Debug)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl SimFs {
    /// An empty file system (only the root directory `/` exists) whose crashes are seeded with
    /// `seed`. No capacity limit, no failing syncs.
    pub fn new(seed: u64) -> SimFs {
        let mut dirs = BTreeMap::new();
        dirs.insert(0, Dir::default());
        SimFs {
            state: Arc::new(Mutex::new(State {
                rng: seed ^ 0x2545_f491_4f6c_dd1d,
                epoch: 0,
                next_id: 0,
                dirs,
                files: BTreeMap::new(),
                capacity: None,
                failing_syncs: 0,
                failing_dir_syncs: 0,
                stats: SimFsStats::default(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Power loss: see the module docs. Open handles become stale (their calls fail); pending
    /// sync failures are cleared.
    pub fn crash(&self) {
        self.lock().crash();
    }

    /// The next `n` syncs (file or directory) fail with an I/O error; what they should have
    /// made durable stays unsynced.
    pub fn fail_syncs(&self, n: u64) {
        self.lock().failing_syncs = n;
    }

    /// The next `n` directory syncs fail with an I/O error (file syncs are not affected).
    pub fn fail_dir_syncs(&self, n: u64) {
        self.lock().failing_dir_syncs = n;
    }

    /// Limits the bytes of all named files together; a write or extension past it fails with
    /// `ENOSPC` after writing what fits. `None`: no limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// Bytes of all named files together.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// The counters.
    pub fn stats(&self) -> SimFsStats {
        self.lock().stats
    }

    /// Whether any file or directory has changes not yet synced (which a crash may lose).
    pub fn has_unsynced_changes(&self) -> bool {
        let st = self.lock();
        st.dirs.values().any(|d| !d.ops.is_empty()) || st.files.values().any(|f| f.dirty_from.is_some())
    }
}

impl Fs for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let mut cur = 0;
        for name in names(dir)? {
            match st.dirs[&cur].current.get(&name) {
                Some(Node::Dir(d)) => cur = *d,
                Some(Node::File(_)) => return Err(err(io::ErrorKind::AlreadyExists, "a file is in the way")),
                None => {
                    let id = st.new_id();
                    st.dirs.insert(id, Dir::default());
                    st.change(cur, vec![(name, Some(Node::Dir(id)))]);
                    cur = id;
                }
            }
        }
        Ok(())
    }

    fn is_dir(&self, path: &Path) -> bool {
        matches!(self.lock().lookup(path), Ok(Some(Node::Dir(_))))
    }

    fn exists(&self, path: &Path) -> bool {
        matches!(self.lock().lookup(path), Ok(Some(_)))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = self.lock();
        match st.lookup(dir)? {
            Some(Node::Dir(d)) => Ok(st.dirs[&d].current.keys().cloned().collect()),
            Some(Node::File(_)) => Err(err(io::ErrorKind::InvalidInput, "not a directory")),
            None => Err(not_found()),
        }
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FsFile>> {
        let mut st = self.lock();
        let existing = st.lookup(path)?;
        let id = match (mode, existing) {
            (_, Some(Node::Dir(_))) => return Err(err(io::ErrorKind::InvalidInput, "is a directory")),
            (OpenMode::Existing, None) => return Err(not_found()),
            (OpenMode::CreateNew, Some(_)) => return Err(err(io::ErrorKind::AlreadyExists, "file exists")),
            (OpenMode::Existing, Some(Node::File(f))) => f,
            (OpenMode::CreateTruncate, Some(Node::File(f))) => {
                let file = st.files.get_mut(&f).expect("named files exist");
                if !file.data.is_empty() {
                    file.data.clear();
                    file.touch(0);
                }
                f
            }
            (OpenMode::CreateNew | OpenMode::CreateTruncate, None) => {
                let (dir, name) = st.split(path)?;
                let id = st.new_id();
                st.files.insert(id, FileData::default());
                st.change(dir, vec![(name, Some(Node::File(id)))]);
                id
            }
        };
        Ok(Box::new(SimFile { state: Arc::clone(&self.state), id, epoch: st.epoch }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let st = self.lock();
        let f = st.file_id(path)?;
        Ok(st.files[&f].data.clone())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let (from_dir, from_name) = st.split(from)?;
        let (to_dir, to_name) = st.split(to)?;
        let Some(node) = st.dirs[&from_dir].current.get(&from_name).copied() else { return Err(not_found()) };
        if (from_dir, &from_name) == (to_dir, &to_name) {
            return Ok(());
        }
        match (node, st.dirs[&to_dir].current.get(&to_name)) {
            (_, Some(Node::Dir(_))) => return Err(err(io::ErrorKind::AlreadyExists, "target is a directory")),
            (Node::Dir(_), Some(Node::File(_))) => return Err(err(io::ErrorKind::AlreadyExists, "target is a file")),
            _ => {}
        }
        if let Node::Dir(_) = node {
            let (a, b) = (names(from)?, names(to)?);
            if b.starts_with(&a) {
                return Err(err(io::ErrorKind::InvalidInput, "cannot move a directory into itself"));
            }
        }
        if from_dir == to_dir {
            st.change(from_dir, vec![(from_name, None), (to_name, Some(node))]);
        } else {
            st.change(to_dir, vec![(to_name, Some(node))]);
            st.change(from_dir, vec![(from_name, None)]);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let (dir, name) = st.split(path)?;
        match st.dirs[&dir].current.get(&name) {
            Some(Node::File(_)) => {
                st.change(dir, vec![(name, None)]);
                Ok(())
            }
            Some(Node::Dir(_)) => Err(err(io::ErrorKind::InvalidInput, "is a directory")),
            None => Err(not_found()),
        }
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        let Some(Node::Dir(d)) = st.lookup(dir)? else { return Err(not_found()) };
        st.take_sync_failure(true)?;
        let d = st.dirs.get_mut(&d).expect("looked up");
        d.durable = d.current.clone();
        d.ops.clear();
        st.stats.dir_syncs += 1;
        Ok(())
    }
}

/// An open file of a [`SimFs`].
#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    id: u64,
    epoch: u64,
}

impl SimFile {
    /// Runs `f` on the file, unless the file system crashed since it was opened.
    fn with<T>(&self, f: impl FnOnce(&mut State, u64) -> io::Result<T>) -> io::Result<T> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.epoch != self.epoch || !st.files.contains_key(&self.id) {
            return Err(err(io::ErrorKind::Other, "stale file handle: the file system crashed since it was opened"));
        }
        f(&mut st, self.id)
    }
}

impl FsFile for SimFile {
    fn len_bytes(&self) -> io::Result<u64> {
        self.with(|st, id| Ok(st.files[&id].data.len() as u64))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|st, id| {
            let data = &st.files[&id].data;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            match start.checked_add(buf.len()) {
                Some(end) if end <= data.len() => {
                    buf.copy_from_slice(&data[start..end]);
                    Ok(())
                }
                _ => Err(err(io::ErrorKind::UnexpectedEof, "read past the end of the file")),
            }
        })
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.with(|st, id| {
            let room = st.room();
            let file = st.files.get_mut(&id).expect("checked");
            let len = file.data.len() as u64;
            let end = offset.saturating_add(buf.len() as u64);
            let limit = len.saturating_add(room);
            let fit =
                if end <= limit { buf.len() } else { limit.saturating_sub(offset).min(buf.len() as u64) as usize };
            if fit > 0 {
                let start = offset as usize;
                file.touch(start.min(file.data.len()));
                if file.data.len() < start + fit {
                    file.data.resize(start + fit, 0);
                }
                file.data[start..start + fit].copy_from_slice(&buf[..fit]);
            }
            st.stats.bytes_written += fit as u64;
            if fit < buf.len() {
                return Err(disk_full());
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|st, id| {
            let room = st.room();
            let file = st.files.get_mut(&id).expect("checked");
            let old = file.data.len() as u64;
            if len > old && len - old > room {
                return Err(disk_full());
            }
            if len != old {
                let new = usize::try_from(len)
                    .map_err(|_| err(io::ErrorKind::InvalidInput, "length larger than the address space"))?;
                file.touch(new.min(file.data.len()));
                file.data.resize(new, 0);
            }
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|st, id| {
            st.take_sync_failure(false)?;
            let file = st.files.get_mut(&id).expect("checked");
            if let Some(from) = file.dirty_from.take() {
                file.durable.truncate(from);
                file.durable.extend_from_slice(&file.data[from..]);
            }
            st.stats.file_syncs += 1;
            Ok(())
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
}
