//! Keyed hashing for tables keyed by client-chosen data (keys, transaction and client ids).
//!
//! A fixed hash lets a client choose inputs that collide: many keys in one bucket (a table
//! probe turns linear: hash flooding), or many keys with one conflict hash (every
//! transaction looks conflicting). The hashers here are foldhash keyed by a seed drawn once
//! per process ([`seed_randomly`], called first thing by the server and client binaries), so
//! a client cannot predict collisions, and any process's tables differ from every other's.
//!
//! Processes never seeded (the simulator, tests) use [`DEFAULT_SEED`]: a run, iteration
//! orders included, is the same every time, which the deterministic simulator needs. A
//! seed is fixed once per process, at its first use at the latest, so every table and hash
//! of one process agrees with every other of the same process.
//!
//! Nothing keyed here may leave the process: not in a message, on disk, nor compared with
//! another replica's (those use stable hashes: see `luigi_protocol::keyhash`).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use foldhash::SharedSeed;

/// The seed of a process that never chose one (the simulator, tests).
pub const DEFAULT_SEED: u64 = 0x6c75_6967_695f_6b76;

/// Everything foldhash needs from one 64-bit seed: its per-hasher seed and the larger shared
/// seed (costly to derive, so derived once).
pub struct HashKeys {
    per_hasher: u64,
    shared: SharedSeed,
}

impl HashKeys {
    /// The keys of `seed` (a `const fn`: tests make statics of their own seeds).
    pub const fn new(seed: u64) -> Self {
        HashKeys { per_hasher: seed, shared: SharedSeed::from_u64(seed) }
    }

    /// A fast hasher under these keys, `domain` separating independent uses (a table's hash
    /// and a conflict hash of the same key must not be one function).
    pub fn fast(&self, domain: u64) -> foldhash::fast::FoldHasher<'_> {
        foldhash::fast::FoldHasher::with_seed(self.per_hasher ^ domain, &self.shared)
    }

    /// As [`HashKeys::fast`], with foldhash's final mix: every output bit depends on every
    /// input bit, for a 64-bit hash that stands for its input (not just a bucket).
    pub fn quality(&self, domain: u64) -> foldhash::quality::FoldHasher<'_> {
        foldhash::quality::FoldHasher::with_seed(self.per_hasher ^ domain, &self.shared)
    }
}

impl std::fmt::Debug for HashKeys {
    /// Says nothing of the keys: whoever reads a log must not learn them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKeys(..)")
    }
}

static PROCESS_KEYS: OnceLock<HashKeys> = OnceLock::new();

/// This process's hash keys: those of its seed, or of [`DEFAULT_SEED`] when none was chosen
/// before the first use (which fixes them for the life of the process).
pub fn process_keys() -> &'static HashKeys {
    PROCESS_KEYS.get_or_init(|| HashKeys::new(DEFAULT_SEED))
}

/// Keys this process's hashing with `seed`. Returns false, changing nothing, when the keys
/// were fixed already (seeded before, or a keyed table or hash was made first): a process
/// must call this before anything hashes.
pub fn seed(seed: u64) -> bool {
    PROCESS_KEYS.set(HashKeys::new(seed)).is_ok()
}

/// Keys this process's hashing with a random seed (std's per-process random `RandomState`
/// keys, from the OS). What the server and client binaries call first: see [`seed`].
pub fn seed_randomly() -> bool {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    seed(h.finish())
}

/// A [`BuildHasher`] keyed by this process's keys ([`process_keys`]): what every table keyed
/// by client-chosen data uses (`HashMap::default()` picks it up). A table keeps the keys it
/// was made with; all tables of a process have the same.
#[derive(Clone, Copy)]
pub struct KeyedState {
    keys: &'static HashKeys,
}

impl KeyedState {
    /// A state under `keys` other than the process's (tests: two seeds side by side).
    pub fn with_keys(keys: &'static HashKeys) -> Self {
        KeyedState { keys }
    }
}

impl std::fmt::Debug for KeyedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedState(..)")
    }
}

impl Default for KeyedState {
    fn default() -> Self {
        KeyedState { keys: process_keys() }
    }
}

/// The domain of table hashes ([`KeyedState`]).
const TABLE_DOMAIN: u64 = 0;
/// The domain of the hash that picks a key's chunk of the store's map (`chunks.rs`).
const CHUNK_DOMAIN: u64 = 0x6368_756e_6b73;

impl KeyedState {
    /// Which of `chunks` holds `key`: a hash of its own domain, so that the keys of one chunk
    /// spread over the chunk's table as they would over one table.
    pub(crate) fn chunk_of(&self, key: &[u8], chunks: usize) -> usize {
        let mut h = self.keys.fast(CHUNK_DOMAIN);
        h.write(key);
        // Multiply-shift onto 0..chunks (the high bits of the product).
        ((u128::from(h.finish()) * chunks as u128) >> 64) as usize
    }
}

impl BuildHasher for KeyedState {
    type Hasher = foldhash::fast::FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.keys.fast(TABLE_DOMAIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ONE: HashKeys = HashKeys::new(1);
    static TWO: HashKeys = HashKeys::new(2);

    #[test]
    fn two_seeds_hash_one_key_apart_and_one_seed_the_same_every_time() {
        let key: &[u8] = b"warehouse 1, district 7";
        let (one, two) = (KeyedState::with_keys(&ONE), KeyedState::with_keys(&TWO));
        assert_ne!(one.hash_one(key), two.hash_one(key));
        assert_eq!(one.hash_one(key), KeyedState::with_keys(&ONE).hash_one(key));
        assert_ne!(one.hash_one(key), one.hash_one(&b"warehouse 1, district 8"[..]));
    }

    #[test]
    fn the_default_state_is_keyed_by_the_process_keys() {
        // Unseeded here (tests never seed): the default seed's keys.
        let keys = process_keys();
        let key: &[u8] = b"k";
        assert_eq!(KeyedState::default().hash_one(key), KeyedState::with_keys(keys).hash_one(key));
        assert!(!seed(3), "the keys are fixed once used");
        assert!(std::ptr::eq(process_keys(), keys));
    }
}
