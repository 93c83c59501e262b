//! Partitioning by warehouse: warehouse `w` (1-based) lives on shard `(w - 1) % shards`;
//! ITEM is replicated on every shard; any other key (the runtime's probe and key-value keys)
//! is hashed like [`luigi_txn::partition::HashPartitioner`].

use luigi_txn::keyhash::stable_key_hash;
use luigi_txn::partition::Partitioner;
use luigi_txn::types::ShardId;

use super::keys::{is_item_key, warehouse_of};

/// TPC-C's partitioner (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccPartitioner {
    shards: u32,
}

impl TpccPartitioner {
    /// Partitions over `shards` shards (at least 1).
    pub fn new(shards: u32) -> Self {
        Self { shards: shards.max(1) }
    }

    /// The shard that owns warehouse `w`.
    pub fn shard_of_warehouse(&self, w: u32) -> ShardId {
        w.wrapping_sub(1) % self.shards
    }

    /// True when shard `shard` owns warehouse `w`.
    pub fn owns(&self, shard: ShardId, w: u32) -> bool {
        self.shard_of_warehouse(w) == shard
    }
}

impl Partitioner for TpccPartitioner {
    fn shards(&self) -> u32 {
        self.shards
    }

    fn shard_of(&self, key: &[u8]) -> ShardId {
        match warehouse_of(key) {
            Some(w) => self.shard_of_warehouse(w),
            None => (stable_key_hash(key) % u64::from(self.shards)) as ShardId,
        }
    }

    fn is_replicated(&self, key: &[u8]) -> bool {
        is_item_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procedures::kv_key;
    use crate::tpcc::keys::{item_key, stock_key, warehouse_key};
    use luigi_txn::partition::HashPartitioner;

    #[test]
    fn warehouses_round_robin_items_replicated_others_hashed() {
        let p = TpccPartitioner::new(3);
        assert_eq!([1, 2, 3, 4].map(|w| p.shard_of(&warehouse_key(w))), [0, 1, 2, 0]);
        assert_eq!(p.shard_of(&stock_key(5, 9)), 1);
        assert!(p.is_replicated(&item_key(1)) && !p.is_replicated(&stock_key(1, 1)));
        let kv = kv_key(b"probe");
        assert_eq!(p.shard_of(&kv), HashPartitioner::new(3).shard_of(&kv));
        assert!(p.owns(1, 5));
    }
}
