//! Which shard owns a key, and splitting a transaction's keys into per-shard pieces.

use std::collections::BTreeMap;

use luigi_store::Key;

use crate::types::{KeySet, ShardId, ShardPiece};

/// Maps keys to shards. Must be the same function on every client.
pub trait Partitioner: Send + Sync {
    /// Number of shards.
    fn shards(&self) -> u32;
    /// The shard that owns `key` (for a replicated key: the copy a write would go to).
    fn shard_of(&self, key: &[u8]) -> ShardId;
    /// True when `key` belongs to a read-only table copied on every shard (e.g. TPC-C's
    /// ITEM): reading it never makes another shard a participant, each participant reads its
    /// own copy.
    fn is_replicated(&self, key: &[u8]) -> bool {
        let _ = key;
        false
    }
}

/// Hash partitioning (64-bit FNV-1a of the whole key, modulo the shard count): the default.
/// A stable hash ([`crate::keyhash::stable_key_hash`]): every client and server must place a
/// key alike, in every process and build.
#[derive(Clone, Copy, Debug)]
pub struct HashPartitioner {
    shards: u32,
}

impl HashPartitioner {
    /// Partitions over `shards` shards.
    pub fn new(shards: u32) -> Self {
        assert!(shards > 0, "at least one shard");
        Self { shards }
    }
}

impl Partitioner for HashPartitioner {
    fn shards(&self) -> u32 {
        self.shards
    }

    fn shard_of(&self, key: &[u8]) -> ShardId {
        (crate::keyhash::stable_key_hash(key) % u64::from(self.shards)) as ShardId
    }
}

/// Splits read and write keys into one piece per owning shard, sorted by shard. Reads of
/// replicated keys are added to every participant's piece and add no participant of their
/// own (unless the transaction has no other key, then they go to their home shard).
pub fn split(p: &dyn Partitioner, reads: Vec<Key>, writes: Vec<Key>) -> Vec<ShardPiece> {
    let mut by_shard: BTreeMap<ShardId, (Vec<Key>, Vec<Key>)> = BTreeMap::new();
    let mut replicated = Vec::new();
    for k in reads {
        if p.is_replicated(&k) {
            replicated.push(k);
        } else {
            by_shard.entry(p.shard_of(&k)).or_default().0.push(k);
        }
    }
    for k in writes {
        by_shard.entry(p.shard_of(&k)).or_default().1.push(k);
    }
    if by_shard.is_empty() {
        for k in replicated.drain(..) {
            by_shard.entry(p.shard_of(&k)).or_default().0.push(k);
        }
    }
    for (r, _) in by_shard.values_mut() {
        r.extend(replicated.iter().cloned());
    }
    by_shard.into_iter().map(|(shard, (r, w))| ShardPiece { shard, keys: KeySet::new(r, w) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_partitioner_spreads_and_is_stable() {
        let p = HashPartitioner::new(4);
        let mut counts = [0u32; 4];
        for i in 0..4000u64 {
            counts[p.shard_of(&i.to_be_bytes()) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(p.shard_of(b"k"), HashPartitioner::new(4).shard_of(b"k"));
    }

    /// Keys starting with byte 9 are a replicated table.
    struct WithReplicated(HashPartitioner);
    impl Partitioner for WithReplicated {
        fn shards(&self) -> u32 {
            self.0.shards()
        }
        fn shard_of(&self, key: &[u8]) -> ShardId {
            self.0.shard_of(key)
        }
        fn is_replicated(&self, key: &[u8]) -> bool {
            key.first() == Some(&9)
        }
    }

    #[test]
    fn replicated_reads_go_to_every_participant_and_add_none() {
        let p = WithReplicated(HashPartitioner::new(4));
        let a = vec![1u8, 1];
        let b = (0..=255u8).map(|x| vec![1, x]).find(|k| p.shard_of(k) != p.shard_of(&a)).unwrap();
        let item = vec![9u8, 42];
        let pieces = split(&p, vec![item.clone()], vec![a.clone(), b.clone()]);
        assert_eq!(pieces.len(), 2, "the replicated read adds no participant");
        assert!(pieces.iter().all(|x| x.keys.reads == vec![item.clone()]));
        let alone = split(&p, vec![item.clone()], vec![]);
        assert_eq!(alone.len(), 1);
        assert_eq!(alone[0].shard, p.shard_of(&item));
    }

    #[test]
    fn split_groups_keys_by_shard() {
        let p = HashPartitioner::new(3);
        let keys: Vec<Key> = (0..30u64).map(|i| i.to_be_bytes().to_vec()).collect();
        let pieces = split(&p, keys[..15].to_vec(), keys[15..].to_vec());
        assert!(pieces.windows(2).all(|w| w[0].shard < w[1].shard));
        assert_eq!(pieces.iter().map(|x| x.keys.len()).sum::<usize>(), 30);
        for piece in &pieces {
            assert!(piece.keys.entries().all(|(k, _)| p.shard_of(k) == piece.shard));
        }
    }
}
