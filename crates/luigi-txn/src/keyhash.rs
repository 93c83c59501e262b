//! 64-bit key hashes, and the hashed tables keyed by client-chosen data.
//!
//! Two kinds, which must not be mixed up:
//!
//! - **Keyed per process** ([`key_hash`], [`HashKeyMap`], [`IdMap`], [`crate::Map`]): the
//!   leader's conflict bookkeeping (admission floors, hold queue, speculation) and every
//!   table keyed by keys or ids. Clients choose keys and ids; under a fixed hash they could
//!   choose ones that collide (hash flooding; or every transaction conflicting with theirs).
//!   Keyed by this process's seed (`luigi_store::hashing`), collisions are unpredictable.
//!   Such a hash never leaves its process, so another process's key does not matter.
//! - **Stable** ([`stable_key_hash`], [`fnv1a`]): the same in every process, build and
//!   platform, for what processes must agree on: which shard owns a key (every client and
//!   server), and the fast path's conflicts (`luigi_protocol::fast`), which replicas compare (see
//!   [`stable_key_hash`]).
//!
//! Tracking conflicts by hash avoids cloning every key into the queue and the floor maps. A
//! collision between two different keys only makes them look conflicting: a transaction may
//! wait or be bumped needlessly, which is safe (orders stay timestamp-consistent), never the
//! other way round.

use std::collections::HashMap;
use std::hash::Hasher;

use luigi_store::hashing::{process_keys, HashKeys};
pub use luigi_store::hashing::{seed_randomly, KeyedState};

use crate::types::TxnId;

/// The domain of [`key_hash`] under the process keys (apart from the tables' own hashes).
const CONFLICT_DOMAIN: u64 = 0x636f_6e66_6c69_6374;

/// The leader's 64-bit hash of `key` for conflicts (its floors, queue and speculation),
/// keyed per process: a client cannot choose keys that collide. One process's hashes are
/// consistent for its life; they are never sent, stored, nor compared with another's.
pub fn key_hash(key: &[u8]) -> u64 {
    key_hash_under(process_keys(), key)
}

/// [`key_hash`] under `keys` (tests: two seeds side by side).
pub fn key_hash_under(keys: &HashKeys, key: &[u8]) -> u64 {
    let mut h = keys.quality(CONFLICT_DOMAIN);
    h.write(key);
    h.finish()
}

/// FNV-1a of `bytes`, 64 bits: the one stable hash (the same in every process, build and
/// platform). Easy to make collide: only for what must agree across processes.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The stable hash of `key` ([`fnv1a`]), for what processes must agree on:
/// - placement: which shard owns a key (every client and server, `partition.rs`);
/// - the fast path's conflicts (`luigi_protocol::fast::hashed_keys`): a leader's F2 and a new
///   leader's R2 (and a follower's decisions, F0) must see the same conflicts. A collision
///   only one of them saw would let R2 skip a fast-committed transaction that F2 did not
///   order before the "conflicting" one. Chosen collisions cost the fast path only (those
///   transactions take the slow path), never the leader's queue, which uses [`key_hash`].
pub fn stable_key_hash(key: &[u8]) -> u64 {
    fnv1a(key)
}

/// A map keyed by key hashes (keyed per process, [`KeyedState`]: a stable hash chosen to
/// fill one bucket lands anywhere).
pub type HashKeyMap<V> = HashMap<u64, V, KeyedState>;

/// A map keyed by transaction ids (client-chosen, both halves), keyed per process like
/// [`crate::Map`]; the fast path's tables touch several per transaction and replica, and
/// foldhash mixes the two integers in one multiply. For tables whose iteration order
/// reaches no output of a replica that another must agree with.
pub type IdMap<V> = HashMap<TxnId, V, KeyedState>;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::*;

    static ONE: HashKeys = HashKeys::new(1);
    static TWO: HashKeys = HashKeys::new(2);

    #[test]
    fn distinct_keys_hash_apart() {
        let hashes: HashSet<u64> = (0..100_000u64).map(|i| key_hash(&i.to_be_bytes())).collect();
        assert_eq!(hashes.len(), 100_000);
        let stable: HashSet<u64> = (0..100_000u64).map(|i| stable_key_hash(&i.to_be_bytes())).collect();
        assert_eq!(stable.len(), 100_000);
    }

    #[test]
    fn key_hashes_are_keyed_by_the_seed_and_the_same_for_one_seed() {
        let key = b"warehouse 3";
        assert_ne!(key_hash_under(&ONE, key), key_hash_under(&TWO, key));
        assert_eq!(key_hash_under(&ONE, key), key_hash_under(&ONE, key));
        // This (unseeded) process: the default seed's keys, the same on every call.
        assert_eq!(key_hash(key), key_hash_under(process_keys(), key));
        let id = TxnId { client: 7, seq: 9 };
        assert_ne!(KeyedState::with_keys(&ONE).hash_one(id), KeyedState::with_keys(&TWO).hash_one(id));
        assert_eq!(KeyedState::with_keys(&ONE).hash_one(id), KeyedState::with_keys(&ONE).hash_one(id));
    }

    #[test]
    fn the_stable_hash_is_fnv1a_and_independent_of_the_process() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(stable_key_hash(b"a"), fnv1a(b"a"));
    }

    /// The table hasher `HashKeyMap` and `IdMap` had (a fixed multiply), to show what a
    /// client could make of it.
    #[derive(Default)]
    struct OldPrehashed(u64);

    impl Hasher for OldPrehashed {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, _: &[u8]) {
            unreachable!("u64s and ids only")
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    /// The bucket of a 2^16-bucket table (hashbrown takes the low bits).
    fn bucket(hash: u64) -> u64 {
        hash & 0xffff
    }

    /// The most hashes sharing a bucket.
    fn max_load(hashes: impl Iterator<Item = u64>) -> usize {
        let mut load = std::collections::HashMap::<u64, usize>::new();
        hashes.for_each(|h| *load.entry(bucket(h)).or_default() += 1);
        load.into_values().max().unwrap_or(0)
    }

    /// `n` three-byte keys whose FNV-1a hashes agree in their low 16 bits: the low bits of
    /// FNV-1a depend only on the low bits, so a plain search finds them.
    fn fnv_flood(n: usize) -> Vec<Vec<u8>> {
        let target = bucket(fnv1a(&[0, 0, 0]));
        (0..1u32 << 24).map(|i| i.to_be_bytes()[1..].to_vec()).filter(|k| bucket(fnv1a(k)) == target).take(n).collect()
    }

    #[test]
    fn keys_chosen_to_share_a_bucket_under_the_old_hashes_spread_under_the_keyed_ones() {
        let keys = fnv_flood(128);
        assert_eq!(keys.len(), 128);
        let old = |k: &Vec<u8>| {
            let mut h = OldPrehashed::default();
            h.write_u64(fnv1a(k));
            h.finish()
        };
        assert_eq!(max_load(keys.iter().map(old)), 128, "one bucket of the old key-hash table");
        for seed in [&ONE, &TWO, process_keys()] {
            let table = KeyedState::with_keys(seed);
            assert!(max_load(keys.iter().map(|k| key_hash_under(seed, k))) <= 3);
            assert!(max_load(keys.iter().map(|k| table.hash_one(key_hash_under(seed, k)))) <= 3);
            assert!(max_load(keys.iter().map(|k| table.hash_one(&k[..]))) <= 3, "the store's map");
        }
    }

    #[test]
    fn ids_chosen_to_share_a_bucket_under_the_old_hasher_spread_under_the_keyed_one() {
        // Client ids apart only in their high bits: the old hasher left them in 32 buckets.
        let ids: Vec<TxnId> = (0..512u64).map(|j| TxnId { client: j << 40, seq: 1 }).collect();
        let old = |id: &TxnId| std::hash::BuildHasherDefault::<OldPrehashed>::default().hash_one(id);
        assert!(max_load(ids.iter().map(old)) >= 512 / 32);
        for seed in [&ONE, &TWO, process_keys()] {
            let table = KeyedState::with_keys(seed);
            assert!(max_load(ids.iter().map(|id| table.hash_one(id))) <= 3);
        }
    }
}
