//! The declared keys of a transaction over one table (the key-value table's, YCSB's
//! usertable), one copy for both: each point key on its shard, and the table's prefix as an
//! intention lock (see `procedures::Kv`).

use std::collections::BTreeMap;

use luigi_store::Key;
use luigi_txn::types::{KeySet, ShardId, ShardPiece};

/// A point operation's declared key: on its shard, read or written.
pub(crate) struct PointKey {
    pub shard: ShardId,
    pub key: Key,
    pub write: bool,
}

/// The pieces of a transaction over one table: each point key on its shard, and the table's
/// `prefix` as an intention lock: a read beside point operations, a write on every one of the
/// `shards` shards when the transaction `scans`; a read there instead when the client reads
/// at a snapshot (`scans_at_snapshot`) and nothing is written.
pub(crate) fn table_pieces(
    points: impl IntoIterator<Item = PointKey>,
    shards: u32,
    prefix: &Key,
    scans: bool,
    scans_at_snapshot: bool,
) -> Vec<ShardPiece> {
    let mut by_shard: BTreeMap<ShardId, (Vec<Key>, Vec<Key>)> = BTreeMap::new();
    for point in points {
        let piece = by_shard.entry(point.shard).or_default();
        match point.write {
            true => piece.1.push(point.key),
            false => piece.0.push(point.key),
        }
    }
    if scans {
        let reads_only = by_shard.values().all(|(_, writes)| writes.is_empty());
        for shard in 0..shards {
            let piece = by_shard.entry(shard).or_default();
            match scans_at_snapshot && reads_only {
                true => piece.0.push(prefix.clone()),
                false => piece.1.push(prefix.clone()),
            }
        }
    } else {
        for (reads, _) in by_shard.values_mut() {
            reads.push(prefix.clone());
        }
    }
    by_shard.into_iter().map(|(shard, (r, w))| ShardPiece { shard, keys: KeySet::new(r, w) }).collect()
}

/// True when `key` itself (not a prefix of it) is declared on this shard, read or write.
pub(crate) fn declared_exactly(keys: &KeySet, key: &[u8]) -> bool {
    let has = |list: &[Key]| list.binary_search_by(|k| k.as_slice().cmp(key)).is_ok();
    has(&keys.writes) || has(&keys.reads)
}
