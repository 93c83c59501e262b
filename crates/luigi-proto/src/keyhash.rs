//! 64-bit key hashes for the leader's conflict bookkeeping. Tracking conflicts by hash avoids
//! cloning every key into the queue and the floor maps. A collision between two different keys
//! only makes them look conflicting: a transaction may wait or be bumped needlessly, which is
//! safe (orders stay timestamp-consistent), never the other way round.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::types::TxnId;

/// FNV-1a of `key`, 64 bits.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A hasher for keys that are already well-mixed u64 hashes (mixes once more, cheaply).
#[derive(Default, Clone, Copy)]
pub struct PrehashedHasher(u64);

impl Hasher for PrehashedHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// A map keyed by key hashes.
pub type HashKeyMap<V> = HashMap<u64, V, BuildHasherDefault<PrehashedHasher>>;

/// A map keyed by transaction ids (two integers, a client's and its counter), mixed as
/// cheaply as key hashes: the fast path's tables touch several per transaction and replica.
/// Deterministic, like [`crate::Map`]; for tables whose iteration order reaches no output.
pub type IdMap<V> = HashMap<TxnId, V, BuildHasherDefault<PrehashedHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_hash_apart() {
        let hashes: std::collections::HashSet<u64> = (0..100_000u64).map(|i| key_hash(&i.to_be_bytes())).collect();
        assert_eq!(hashes.len(), 100_000);
    }
}
