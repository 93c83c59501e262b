//! The fast path's order bookkeeping (DESIGN.md, "The fast path"): what followers accept,
//! and what a new leader recovers (R1-R3).
//!
//! - [`RecentOrder`]: per key hash, the recent transactions a replica knows, and the *order
//!   hash* of a transaction over them (the XOR of a mix of `(id, ts)` over the distinct
//!   conflicting entries before it). A leader fills it with what it executes; a follower with
//!   what it accepts and what its log prepares. Equal order hashes on every replica mean the
//!   same recent conflicting predecessors everywhere.
//! - [`Acceptor`]: a follower's accept rule (F0): a transaction is accepted at the
//!   coordinator's timestamp when it arrives before it and nothing conflicting the follower
//!   knows is above it; a follower never moves a timestamp. Bounded; kept until the log
//!   decides each accept (a `PREPARE` of it, an `Applied` marker at or above it, or a
//!   conflicting `PREPARE` above it).
//!
//! Sans-I/O like the rest of the protocol: the caller passes its clock and the log records.

use std::collections::BTreeSet;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::log::LogRecord;
use luigi_txn::keyhash::{stable_key_hash, HashKeyMap, IdMap};
use luigi_txn::types::{Access, KeySet, ShardId, Timestamp, Txn, TxnId};
use luigi_txn::Map;

/// Accepts a follower keeps undecided at most (past it, it accepts nothing more: those
/// transactions take rule 14's path).
pub const ACCEPTS_MAX: usize = 1 << 16;

/// Bytes of transactions (arguments and keys) a follower keeps in undecided accepts at most:
/// a transaction may carry 4 MiB of arguments, so the entry bound alone allowed 256 GiB.
pub const ACCEPT_BYTES_MAX: usize = 256 << 20;

/// What an accept of `txn` holds, for [`ACCEPT_BYTES_MAX`]: its arguments, its keys and a
/// fixed share for the rest.
pub fn accept_bytes(txn: &Txn) -> usize {
    let keys: usize = txn.pieces.iter().flat_map(|p| p.keys.entries()).map(|(k, _)| k.len() + 16).sum();
    txn.args.len() + txn.procedure.len() + keys + 128
}

/// Predecessors an order hash covers at most: a transaction with more is not fast (a leader
/// marks no hash, a follower does not accept), which bounds the work of each answer. That
/// many recent conflicting predecessors (transitively, before the next `Applied` marker)
/// is contention under which few commit fast anyway; TPC-C's hot district rows walked 256
/// on every sampled transaction (2026-11-26).
pub const PREDECESSORS_MAX: usize = 64;

/// The order hash of a set of entries (as [`RecentOrder::predecessors`] returns them): the
/// XOR of their [`entry_hash`]es, so the order they are found in does not matter.
pub fn hash_of(entries: &[(TxnId, Timestamp)]) -> u64 {
    entries.iter().fold(0, |hash, (id, ts)| hash ^ entry_hash(*id, *ts))
}

/// The mix of one entry of an order hash: `(id, ts)` through SplitMix64's finalizer, so that
/// XORs of different sets collide only by chance.
pub fn entry_hash(id: TxnId, ts: Timestamp) -> u64 {
    let mut z = id.client.rotate_left(32) ^ id.seq ^ ts.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A transaction's keys as (hash, access) pairs. The stable hash, not the per-process one:
/// F0, F2 and R2 on different replicas must see the same conflicts (see
/// [`stable_key_hash`]).
pub fn hashed_keys(keys: &KeySet) -> Vec<(u64, Access)> {
    keys.entries().map(|(k, a)| (stable_key_hash(k), a)).collect()
}

/// Whether two transactions' hashed keys conflict on some key (write-write or read-write).
fn keys_conflict(a: &[(u64, Access)], b: &[(u64, Access)]) -> bool {
    a.iter().any(|(k, x)| b.iter().any(|(l, y)| k == l && x.conflicts(*y)))
}

type Pos = (Timestamp, TxnId);

/// One key's recent entries: most keys have one or two, held inline (no allocation).
type KeyEntries = SmallVec<[(Pos, Access); 2]>;

/// Per key hash, the recent transactions a replica knows and how they touch the key.
#[derive(Debug, Default)]
pub struct RecentOrder {
    per_key: HashKeyMap<KeyEntries>,
    /// Each entry's keys, to move or drop it.
    keys: IdMap<(Timestamp, Vec<(u64, Access)>)>,
    /// Entries by position, to prune.
    by_pos: BTreeSet<Pos>,
}

impl RecentOrder {
    /// Records `id` at `ts` on `keys` (again: moved to `ts`). Two keys of `id` with one hash
    /// make one entry with the stronger access (a collision only adds conflicts).
    pub fn record(&mut self, id: TxnId, ts: Timestamp, keys: Vec<(u64, Access)>) {
        self.remove(id);
        for (k, a) in &keys {
            let list = self.per_key.entry(*k).or_default();
            match list.iter_mut().find(|(p, _)| p.1 == id) {
                Some((_, held)) => *held = if held.conflicts(*a) { Access::Write } else { *held },
                None => list.push(((ts, id), *a)),
            }
        }
        self.by_pos.insert((ts, id));
        self.keys.insert(id, (ts, keys));
    }

    /// Forgets `id`.
    pub fn remove(&mut self, id: TxnId) {
        let Some((ts, keys)) = self.keys.remove(&id) else { return };
        self.by_pos.remove(&(ts, id));
        self.unlist(id, &keys);
    }

    /// Takes `id` off the lists of its `keys` (one lookup per key, which drops a list left
    /// empty).
    fn unlist(&mut self, id: TxnId, keys: &[(u64, Access)]) {
        for (k, _) in keys {
            if let std::collections::hash_map::Entry::Occupied(mut list) = self.per_key.entry(*k) {
                list.get_mut().retain(|(p, _)| p.1 != id);
                if list.get().is_empty() {
                    list.remove();
                }
            }
        }
    }

    /// The entries other than `id` that conflict with `keys` and come before `(ts, id)`
    /// (its direct predecessors; an entry on several of the keys once per key).
    pub fn conflicting_below<'a>(
        &'a self,
        id: TxnId,
        ts: Timestamp,
        keys: &'a [(u64, Access)],
    ) -> impl Iterator<Item = TxnId> + 'a {
        keys.iter().flat_map(move |(k, a)| {
            self.per_key
                .get(k)
                .into_iter()
                .flatten()
                .filter(move |(p, b)| p.1 != id && *p < (ts, id) && a.conflicts(*b))
                .map(|(p, _)| p.1)
        })
    }

    /// Forgets every entry at or below `ts` (an `Applied` marker covers them).
    pub fn prune_to(&mut self, ts: Timestamp) {
        while self.by_pos.first().is_some_and(|(at, _)| *at <= ts) {
            let (_, id) = self.by_pos.pop_first().expect("just seen");
            let (_, keys) = self.keys.remove(&id).expect("an entry's keys are kept with it");
            self.unlist(id, &keys);
        }
    }

    /// What `id` at `ts` on `keys` depends on here: the entries that conflict with it and
    /// come before `(ts, id)`, and, when `transitive`, the entries before those that conflict
    /// with them, and so on (rule H: a recovered `T` re-executes on what its predecessors
    /// wrote, so every replica must know their predecessors too). `None` past
    /// [`PREDECESSORS_MAX`]. Each once, in no particular order.
    pub fn predecessors(
        &self,
        id: TxnId,
        ts: Timestamp,
        keys: &[(u64, Access)],
        transitive: bool,
    ) -> Option<Vec<(TxnId, Timestamp)>> {
        self.predecessors_unless(id, ts, keys, transitive, |_| false)
    }

    /// [`RecentOrder::predecessors`], or `None` as soon as one is found that `stop` refuses
    /// (a leader stops at the first unclean one: rule C then marks nothing).
    fn predecessors_unless(
        &self,
        id: TxnId,
        ts: Timestamp,
        keys: &[(u64, Access)],
        transitive: bool,
        stop: impl Fn(TxnId) -> bool,
    ) -> Option<Vec<(TxnId, Timestamp)>> {
        let mut found: IdMap<Timestamp> = IdMap::default();
        let mut frontier: Vec<(Pos, &[(u64, Access)])> = vec![((ts, id), keys)];
        while let Some((pos, keys)) = frontier.pop() {
            for (k, a) in keys {
                for ((at, other), b) in self.per_key.get(k).into_iter().flatten() {
                    if (*at, *other) >= pos || !a.conflicts(*b) || found.contains_key(other) {
                        continue;
                    }
                    if found.len() == PREDECESSORS_MAX || stop(*other) {
                        return None;
                    }
                    found.insert(*other, *at);
                    if transitive {
                        let (_, theirs) = self.keys.get(other).expect("an entry's keys are kept with it");
                        frontier.push(((*at, *other), theirs));
                    }
                }
            }
        }
        Some(found.into_iter().collect())
    }

    /// [`RecentOrder::predecessors`] of `id` at `ts` on the keys it was recorded with, or
    /// `None` as soon as one is found that `stop` refuses (also when `id` is not recorded).
    pub fn predecessors_of_unless(
        &self,
        id: TxnId,
        ts: Timestamp,
        transitive: bool,
        stop: impl Fn(TxnId) -> bool,
    ) -> Option<Vec<(TxnId, Timestamp)>> {
        let (_, keys) = self.keys.get(&id)?;
        self.predecessors_unless(id, ts, keys, transitive, stop)
    }

    /// Whether `id` is recorded.
    pub fn holds(&self, id: TxnId) -> bool {
        self.keys.contains_key(&id)
    }

    /// The order hash of `id` at `ts` on `keys`: the XOR of [`entry_hash`] over its
    /// [`RecentOrder::predecessors`] (transitive unless the mutation `direct` is set). `None`
    /// when there are too many to hash: not fast.
    pub fn order_hash(&self, id: TxnId, ts: Timestamp, keys: &[(u64, Access)], direct: bool) -> Option<u64> {
        Some(hash_of(&self.predecessors(id, ts, keys, !direct)?))
    }

    /// Whether an entry other than `id` conflicts with `keys` and comes after `(ts, id)`.
    pub fn conflict_above(&self, id: TxnId, ts: Timestamp, keys: &[(u64, Access)]) -> bool {
        keys.iter().any(|(k, a)| {
            self.per_key.get(k).into_iter().flatten().any(|(p, b)| p.1 != id && *p > (ts, id) && a.conflicts(*b))
        })
    }

    /// The keys `id` was recorded with, if it is held.
    pub fn keys_of(&self, id: TxnId) -> Option<Vec<(u64, Access)>> {
        self.keys.get(&id).map(|(_, keys)| keys.clone())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A follower's answer to a transaction it accepted on the fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The transaction.
    pub id: TxnId,
    /// The coordinator's timestamp, unmoved.
    pub ts: Timestamp,
    /// Its order hash here.
    pub order: u64,
}

/// Why a follower did not accept (the transaction takes rule 14's path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAccepted {
    /// It arrived at or after its timestamp on the follower's clock.
    Late,
    /// A conflicting transaction the follower knows is above it: accepting would need a
    /// move, which only the leader may make.
    Overtaken,
    /// The follower holds [`ACCEPTS_MAX`] undecided accepts.
    Full,
    /// It has more than [`PREDECESSORS_MAX`] predecessors here to hash.
    Tangled,
    /// Already accepted (the first answer stands; it is sent again).
    Again(Accepted),
}

/// An accept the log has not decided yet: its timestamp, order hash and the transaction
/// (what a new leader's recovery may prepare). Its keys are in the order table.
type Undecided = (Timestamp, u64, Arc<Txn>);

/// What a follower writes to its accept log before it answers `FastAccept`: the transaction
/// (a new leader may have to prepare it) and the timestamp it was accepted at.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct AcceptRecord {
    /// The transaction.
    pub txn: Arc<Txn>,
    /// The coordinator's timestamp.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub ts: Timestamp,
}

impl AcceptRecord {
    /// The record's bytes (postcard).
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("an accept record always encodes")
    }

    /// A record from its bytes.
    ///
    /// # Errors
    /// The bytes are not an accept record.
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

/// A follower's fast-path accept rule and its undecided accepts.
#[derive(Debug, Default)]
pub struct Acceptor {
    order: RecentOrder,
    /// Accepted and not yet decided by the log.
    accepts: IdMap<Undecided>,
    /// [`accept_bytes`] of every undecided accept.
    bytes: usize,
    /// The mutation `Mutations::fast_hashes_direct_predecessors`.
    direct_hash: bool,
}

impl Acceptor {
    /// An empty acceptor; `direct_hash` is the mutation
    /// `Mutations::fast_hashes_direct_predecessors` (the default, `false`, is rule H).
    pub fn new(direct_hash: bool) -> Self {
        Acceptor { direct_hash, ..Acceptor::default() }
    }

    /// Rule F0: `txn` at the coordinator's timestamp, its piece `keys` here, arriving at
    /// `now` on this follower's clock, is accepted when it arrives before its timestamp and
    /// no conflicting transaction this follower knows comes after it. The transaction is
    /// kept for a new leader's recovery ([`Acceptor::undecided_records`]).
    pub fn offer(&mut self, now: Timestamp, txn: &Arc<Txn>, keys: &KeySet) -> Result<Accepted, NotAccepted> {
        let (id, ts) = (txn.id, txn.ts);
        if let Some((at, order, ..)) = self.accepts.get(&id) {
            return Err(NotAccepted::Again(Accepted { id, ts: *at, order: *order }));
        }
        if now >= ts {
            return Err(NotAccepted::Late);
        }
        let bytes = accept_bytes(txn);
        if self.accepts.len() >= ACCEPTS_MAX || self.bytes + bytes > ACCEPT_BYTES_MAX {
            return Err(NotAccepted::Full);
        }
        let keys = hashed_keys(keys);
        if self.order.conflict_above(id, ts, &keys) {
            return Err(NotAccepted::Overtaken);
        }
        let Some(order) = self.order.order_hash(id, ts, &keys, self.direct_hash) else {
            return Err(NotAccepted::Tangled);
        };
        self.order.record(id, ts, keys);
        self.insert(id, (ts, order, txn.clone()));
        Ok(Accepted { id, ts, order })
    }

    /// An accept found in the accept log at restart: undecided again, with its order hash
    /// over what is known now (only the first answer's matters, and it was sent already).
    pub fn restore(&mut self, record: &AcceptRecord, keys: &KeySet) {
        let (id, ts) = (record.txn.id, record.ts);
        let keys = hashed_keys(keys);
        // Past the bound the hash is moot: the first answer went out already.
        let order = self.order.order_hash(id, ts, &keys, self.direct_hash).unwrap_or(0);
        self.order.record(id, ts, keys);
        self.insert(id, (ts, order, record.txn.clone()));
    }

    /// The undecided accepts, for a new leader's recovery.
    pub fn undecided_records(&self) -> Vec<AcceptRecord> {
        let mut out: Vec<AcceptRecord> =
            self.accepts.values().map(|(ts, _, txn)| AcceptRecord { txn: txn.clone(), ts: *ts }).collect();
        out.sort_by_key(|r| (r.ts, r.txn.id));
        out
    }

    /// The follower's *committed* log prepared `id` at `ts` on `keys` (or decided it there):
    /// it is known at that timestamp, and an accept of it is decided (the log wins, rule
    /// R1). An accept of another transaction below it that conflicts is decided too: had
    /// that one been answered fast, its `PREPARE` would have come first (F2). Only committed
    /// records decide: an uncommitted one may be replaced by a later leader's log, which
    /// may answer the accepted transaction fast after all.
    pub fn on_prepared(&mut self, id: TxnId, ts: Timestamp, keys: &KeySet) {
        self.decide(id, ts, hashed_keys(keys));
    }

    /// Keeps an undecided accept, counting its bytes (one written again replaces itself).
    fn insert(&mut self, id: TxnId, undecided: Undecided) {
        self.bytes += accept_bytes(&undecided.2);
        if let Some(old) = self.accepts.insert(id, undecided) {
            self.bytes -= accept_bytes(&old.2);
        }
    }

    /// Drops the undecided accept of `id`, if any.
    fn drop_accept(&mut self, id: TxnId) -> bool {
        let Some((_, _, txn)) = self.accepts.remove(&id) else { return false };
        self.bytes -= accept_bytes(&txn);
        true
    }

    /// Bytes held by undecided accepts (see [`ACCEPT_BYTES_MAX`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn decide(&mut self, id: TxnId, ts: Timestamp, keys: Vec<(u64, Access)>) {
        self.drop_accept(id);
        // The order table holds every undecided accept at its timestamp on its keys: the
        // overtaken ones are found per key, not by a scan of every accept.
        let mut overtaken: Vec<TxnId> =
            self.order.conflicting_below(id, ts, &keys).filter(|other| self.accepts.contains_key(other)).collect();
        overtaken.sort_unstable();
        overtaken.dedup();
        for other in overtaken {
            self.drop_accept(other);
            self.order.remove(other);
        }
        self.order.record(id, ts, keys);
    }

    /// The committed log decided `id` at `ts` (a `DECIDE` raised it): as [`Acceptor::on_prepared`]
    /// with the keys its `PREPARE` had.
    pub fn on_decided(&mut self, id: TxnId, ts: Timestamp) {
        let Some(keys) = self.order.keys_of(id) else { return };
        self.decide(id, ts, keys);
    }

    /// The committed log refused or aborted `id`: it will not run here.
    pub fn on_dropped(&mut self, id: TxnId) {
        self.drop_accept(id);
        self.order.remove(id);
    }

    /// A committed `LogRecord` of `shard`'s log, whatever it is.
    pub fn on_committed(&mut self, shard: ShardId, record: &LogRecord) {
        match record {
            LogRecord::Prepare { txn, ts, .. } => {
                if let Some(keys) = txn.piece(shard) {
                    self.on_prepared(txn.id, *ts, keys);
                }
            }
            LogRecord::Decide { id, ts } => self.on_decided(*id, *ts),
            LogRecord::Abort { id } | LogRecord::Refuse { id, .. } => self.on_dropped(*id),
            LogRecord::Applied { ts } => self.on_applied(*ts),
            LogRecord::Floor { .. } | LogRecord::PeerApplied { .. } => {}
        }
    }

    /// A committed `Applied` marker at `ts`: everything at or below it was executed by the
    /// leader; an accept there without a `PREPARE` before the marker was not, and never
    /// will be.
    pub fn on_applied(&mut self, ts: Timestamp) {
        let mut freed = 0;
        self.accepts.retain(|_, (at, _, txn)| {
            let keep = *at > ts;
            if !keep {
                freed += accept_bytes(txn);
            }
            keep
        });
        self.bytes -= freed;
        self.order.prune_to(ts);
    }

    /// The undecided accepts, for a new leader's recovery (rules R1-R3), in `(ts, id)` order.
    pub fn undecided(&self) -> Vec<(Timestamp, TxnId)> {
        let mut out: Vec<(Timestamp, TxnId)> = self.accepts.iter().map(|(id, (ts, ..))| (*ts, *id)).collect();
        out.sort();
        out
    }

    /// The order table (for its order hashes).
    pub fn order(&self) -> &RecentOrder {
        &self.order
    }
}

/// One replica's undecided accept, as a new leader reads it: the transaction and the
/// timestamp it was accepted at.
pub type AcceptedTxn = (Arc<Txn>, Timestamp);

/// Rules R1-R3 (DESIGN.md, the fast path): which transactions a new leader of `shard` must
/// prepare at their accepted timestamps before it serves, given the undecided accepts of a
/// majority of its group (`sets`, its own among them) and its whole log (`log`, committed or
/// not: it commits all of it), in `(ts, id)` order.
///
/// - R1: a transaction with a `PREPARE` (or a refusal) in the log, or that `known` says the
///   state rebuilt from the log answered, is the log's (rule 8).
/// - R2: one the log shows overtaken (a conflicting `PREPARE` or `DECIDE` above its
///   timestamp, or an `Applied` marker at or above it) was not fast-committed.
/// - R3: any other one found in every set at the same timestamp may have been: prepared.
pub fn to_recover<'a>(
    shard: ShardId,
    sets: &[Vec<AcceptedTxn>],
    log: impl IntoIterator<Item = &'a LogRecord>,
    known: impl Fn(TxnId) -> bool,
) -> Vec<AcceptedTxn> {
    let Some((first, rest)) = sets.split_first() else { return Vec::new() };
    let mut prepared: Map<TxnId, (Timestamp, Vec<(u64, Access)>)> = Map::default();
    let mut refused: Map<TxnId, ()> = Map::default();
    let mut applied: Timestamp = 0;
    for record in log {
        match record {
            LogRecord::Prepare { txn, ts, .. } => {
                let keys = txn.piece(shard).map(hashed_keys).unwrap_or_default();
                prepared.insert(txn.id, (*ts, keys));
            }
            LogRecord::Decide { id, ts } => {
                if let Some(p) = prepared.get_mut(id) {
                    p.0 = p.0.max(*ts);
                }
            }
            LogRecord::Applied { ts } => applied = applied.max(*ts),
            LogRecord::Abort { id } | LogRecord::Refuse { id, .. } => {
                refused.insert(*id, ());
            }
            LogRecord::Floor { .. } | LogRecord::PeerApplied { .. } => {}
        }
    }
    let mut out: Vec<AcceptedTxn> = first
        .iter()
        .filter(|(txn, ts)| rest.iter().all(|set| set.iter().any(|(t, at)| t.id == txn.id && at == ts)))
        .filter(|(txn, _)| !prepared.contains_key(&txn.id) && !refused.contains_key(&txn.id) && !known(txn.id))
        .filter(|(txn, ts)| {
            let keys = txn.piece(shard).map(hashed_keys).unwrap_or_default();
            let overtaken = prepared.values().any(|(at, theirs)| at > ts && keys_conflict(&keys, theirs));
            *ts > applied && !overtaken
        })
        .cloned()
        .collect();
    out.sort_by_key(|(txn, ts)| (*ts, txn.id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> TxnId {
        TxnId { client: 1, seq }
    }

    fn writes(keys: &[&str]) -> KeySet {
        KeySet::new(vec![], keys.iter().map(|k| k.as_bytes().to_vec()).collect())
    }

    fn reads(keys: &[&str]) -> KeySet {
        KeySet::new(keys.iter().map(|k| k.as_bytes().to_vec()).collect(), vec![])
    }

    #[test]
    fn the_order_hash_covers_the_distinct_conflicting_entries_before_a_transaction() {
        let mut o = RecentOrder::default();
        o.record(id(1), 10, hashed_keys(&writes(&["a", "b"])));
        o.record(id(2), 20, hashed_keys(&reads(&["a"])));
        o.record(id(3), 30, hashed_keys(&writes(&["c"])));
        o.record(id(4), 50, hashed_keys(&writes(&["a"])));
        let t = hashed_keys(&writes(&["a", "b"]));
        // 1 conflicts on two keys and counts once; 2's read conflicts with a write; 3 touches
        // another key; 4 comes after.
        assert_eq!(o.order_hash(id(9), 40, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
        // A reader does not conflict with 2's read.
        assert_eq!(o.order_hash(id(9), 40, &hashed_keys(&reads(&["a"])), false), Some(entry_hash(id(1), 10)));
        assert!(o.conflict_above(id(9), 40, &t), "4 writes a after 40");
        assert!(!o.conflict_above(id(9), 60, &t));
        // A moved entry hashes at its new timestamp; pruning forgets what a marker covers.
        o.record(id(2), 45, hashed_keys(&reads(&["a"])));
        assert_eq!(o.order_hash(id(9), 40, &t, false), Some(entry_hash(id(1), 10)));
        o.prune_to(30);
        assert_eq!(o.order_hash(id(9), 60, &t, false), Some(entry_hash(id(2), 45) ^ entry_hash(id(4), 50)));
        assert_eq!(o.len(), 2);
    }

    #[test]
    fn a_hash_differs_when_a_predecessor_differs_in_id_or_timestamp() {
        let keys = hashed_keys(&writes(&["k"]));
        let hash_with = |entries: &[(u64, Timestamp)]| {
            let mut o = RecentOrder::default();
            for (seq, ts) in entries {
                o.record(id(*seq), *ts, keys.clone());
            }
            o.order_hash(id(99), 100, &keys, false).expect("few predecessors")
        };
        let base = hash_with(&[(1, 10), (2, 20)]);
        assert_eq!(base, hash_with(&[(2, 20), (1, 10)]), "order of learning does not matter");
        assert_ne!(base, hash_with(&[(1, 10), (2, 21)]));
        assert_ne!(base, hash_with(&[(1, 10), (3, 20)]));
        assert_ne!(base, hash_with(&[(1, 10)]));
        assert_eq!(hash_with(&[]), 0);
    }

    #[test]
    fn the_order_hash_covers_predecessors_of_predecessors_and_gives_up_past_the_bound() {
        // q writes x; w reads x and writes k; t writes k. t conflicts only with w, but w's
        // result depends on q (rule H).
        let mut o = RecentOrder::default();
        o.record(id(1), 10, hashed_keys(&writes(&["x"])));
        o.record(id(2), 20, hashed_keys(&KeySet::new(vec![b"x".to_vec()], vec![b"k".to_vec()])));
        o.record(id(3), 25, hashed_keys(&writes(&["y"])));
        let t = hashed_keys(&writes(&["k"]));
        assert_eq!(o.order_hash(id(9), 30, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
        assert_eq!(o.order_hash(id(9), 30, &t, true), Some(entry_hash(id(2), 20)), "the mutation: direct only");
        // Only what comes before each step counts: a writer of x above w is not w's.
        o.record(id(4), 22, hashed_keys(&writes(&["x"])));
        assert_eq!(o.order_hash(id(9), 30, &t, false), Some(entry_hash(id(1), 10) ^ entry_hash(id(2), 20)));
        let mut long = RecentOrder::default();
        for seq in 0..=PREDECESSORS_MAX as u64 {
            long.record(id(seq + 100), seq + 1, t.clone());
        }
        assert_eq!(long.order_hash(id(9), 1_000_000, &t, false), None, "too many to hash: not fast");
        long.prune_to(1);
        assert!(long.order_hash(id(9), 1_000_000, &t, false).is_some());
    }

    #[test]
    fn a_follower_accepts_only_early_and_unovertaken_and_never_moves_a_timestamp() {
        let mut f = Acceptor::default();
        assert_eq!(offered(&mut f, 100, 1, 100, &writes(&["a"])), Err(NotAccepted::Late));
        let first = offered(&mut f, 50, 1, 100, &writes(&["a"])).unwrap();
        assert_eq!((first.ts, first.order), (100, 0));
        assert_eq!(offered(&mut f, 60, 1, 300, &writes(&["a"])), Err(NotAccepted::Again(first)), "no second timestamp");
        // Below a conflicting accept: refused. Above it: accepted, with it in its hash.
        assert_eq!(offered(&mut f, 60, 2, 90, &writes(&["a"])), Err(NotAccepted::Overtaken));
        let second = offered(&mut f, 60, 3, 120, &reads(&["a"])).unwrap();
        assert_eq!(second.order, entry_hash(id(1), 100));
        // Another key: no conflict either way.
        assert_eq!(offered(&mut f, 60, 4, 90, &writes(&["b"])).unwrap().order, 0);
        // A conflicting PREPARE from the log counts like an accept.
        f.on_prepared(id(5), 200, &writes(&["c"]));
        assert_eq!(offered(&mut f, 70, 6, 150, &reads(&["c"])), Err(NotAccepted::Overtaken));
        assert_eq!(f.undecided(), vec![(90, id(4)), (100, id(1)), (120, id(3))]);
    }

    #[test]
    fn the_log_decides_accepts_by_their_prepare_an_applied_marker_or_a_conflicting_prepare_above() {
        let mut f = Acceptor::default();
        for (seq, ts, key) in [(1, 100, "a"), (2, 110, "b"), (3, 120, "c"), (4, 130, "d")] {
            offered(&mut f, 0, seq, ts, &writes(&[key])).unwrap();
        }
        // R1: its own PREPARE (here moved to 105).
        f.on_prepared(id(1), 105, &writes(&["a"]));
        // R2: a conflicting PREPARE above an accept overtakes it (the moved-`X` case).
        f.on_prepared(id(9), 115, &writes(&["b"]));
        assert_eq!(f.undecided(), vec![(120, id(3)), (130, id(4))]);
        // An Applied marker at or above an accept decides it too.
        f.on_applied(120);
        assert_eq!(f.undecided(), vec![(130, id(4))]);
        assert_eq!(f.order().len(), 1, "the marker pruned the order table up to 120");
    }

    #[test]
    fn a_prepare_overtakes_only_the_accepts_below_it_that_conflict_on_some_key() {
        let mut f = Acceptor::default();
        offered(&mut f, 0, 1, 100, &reads(&["r"])).unwrap();
        offered(&mut f, 0, 2, 101, &KeySet::new(vec![], vec![b"x".to_vec(), b"y".to_vec()])).unwrap();
        offered(&mut f, 0, 3, 300, &writes(&["y"])).unwrap();
        // A reader above a reader does not conflict; a writer of y above 2 overtakes it through
        // its second key, and leaves 3 (above it) undecided.
        f.on_prepared(id(8), 200, &reads(&["r"]));
        f.on_prepared(id(9), 200, &writes(&["y"]));
        assert_eq!(f.undecided(), vec![(100, id(1)), (300, id(3))]);
        f.on_prepared(id(10), 150, &writes(&["r"]));
        assert_eq!(f.undecided(), vec![(300, id(3))]);
    }

    #[test]
    fn two_keys_of_one_transaction_with_one_hash_keep_the_stronger_access() {
        let mut o = RecentOrder::default();
        o.record(id(1), 10, vec![(7, Access::Read), (7, Access::Write)]);
        assert!(o.conflict_above(id(2), 5, &[(7, Access::Read)]), "a collision only adds conflicts");
        o.remove(id(1));
        assert!(o.is_empty() && !o.conflict_above(id(2), 5, &[(7, Access::Write)]));
    }

    #[test]
    fn accepts_are_bounded() {
        let mut f = Acceptor::default();
        for seq in 0..ACCEPTS_MAX as u64 {
            offered(&mut f, 0, seq, 10 + seq, &writes(&[&format!("k{seq}")])).unwrap();
        }
        assert_eq!(offered(&mut f, 0, u64::MAX, 5, &writes(&["new"])), Err(NotAccepted::Full));
    }

    /// Issue 26: the bound counted entries only, and one accept may carry 4 MiB.
    #[test]
    fn accepts_are_bounded_in_bytes_and_decided_ones_free_theirs() {
        let mut f = Acceptor::default();
        let big = |seq: u64, ts| {
            Arc::new(Txn { args: vec![0; 4 << 20], ..(*txn(seq, ts, &format!("k{seq}"), true)).clone() })
        };
        let fits = ACCEPT_BYTES_MAX / accept_bytes(&big(0, 1));
        for seq in 0..fits as u64 {
            let t = big(seq, 10 + seq);
            f.offer(0, &t, t.piece(0).unwrap()).unwrap();
        }
        assert!(fits < 100 && f.bytes() <= ACCEPT_BYTES_MAX, "{fits} accepts, {} bytes", f.bytes());
        let one_more = big(1_000, 5_000);
        assert_eq!(f.offer(0, &one_more, one_more.piece(0).unwrap()), Err(NotAccepted::Full));
        f.on_dropped(id(0));
        f.on_applied(12);
        assert_eq!(f.undecided().len(), fits - 3);
        let left: usize = (3..fits as u64).map(|seq| accept_bytes(&big(seq, 10 + seq))).sum();
        assert_eq!(f.bytes(), left);
        assert!(f.offer(0, &one_more, one_more.piece(0).unwrap()).is_ok(), "room again");
    }

    fn txn(seq: u64, ts: Timestamp, key: &str, write: bool) -> Arc<Txn> {
        txn_on(seq, ts, if write { writes(&[key]) } else { reads(&[key]) })
    }

    /// Transaction `seq` at `ts` with its piece `keys` on shard 0.
    fn txn_on(seq: u64, ts: Timestamp, keys: KeySet) -> Arc<Txn> {
        let pieces = vec![luigi_txn::types::ShardPiece { shard: 0, keys }];
        Arc::new(Txn { id: id(seq), procedure: "kv".into(), args: vec![], pieces, ts })
    }

    /// `f` is offered transaction `seq` at `ts` on `keys`, arriving at `now`.
    fn offered(
        f: &mut Acceptor,
        now: Timestamp,
        seq: u64,
        ts: Timestamp,
        keys: &KeySet,
    ) -> Result<Accepted, NotAccepted> {
        f.offer(now, &txn_on(seq, ts, keys.clone()), keys)
    }

    fn prepare(t: &Arc<Txn>, ts: Timestamp) -> LogRecord {
        LogRecord::Prepare { txn: t.clone(), ts, arrival_delta_us: 0, acked_below: 0 }
    }

    fn seqs(out: &[AcceptedTxn]) -> Vec<(u64, Timestamp)> {
        out.iter().map(|(t, ts)| (t.id.seq, *ts)).collect()
    }

    #[test]
    fn recovery_prepares_what_every_set_read_holds_unless_the_log_decided_or_overtook_it() {
        let (a, b, c, d) =
            (txn(1, 100, "a", true), txn(2, 200, "b", true), txn(3, 300, "c", true), txn(4, 400, "d", true));
        let both = vec![(a.clone(), 100), (b.clone(), 200), (c.clone(), 300), (d.clone(), 400)];
        let one_only = vec![(a.clone(), 100), (b.clone(), 200), (c.clone(), 310), (d.clone(), 400)];
        // R3: in every set at the same timestamp; c differs in timestamp: not fast-committed.
        assert_eq!(seqs(&to_recover(0, &[both.clone(), one_only], &[], |_| false)), vec![(1, 100), (2, 200), (4, 400)]);
        // R1: a's PREPARE is in the log (even moved): the log wins.
        let log = [prepare(&a, 150)];
        assert_eq!(
            seqs(&to_recover(0, &[both.clone(), both.clone()], &log, |_| false)),
            vec![(2, 200), (3, 300), (4, 400)]
        );
        // R2: an Applied marker at 200 covers a and b.
        let log = [LogRecord::Applied { ts: 200 }];
        assert_eq!(seqs(&to_recover(0, &[both.clone(), both.clone()], &log, |_| false)), vec![(3, 300), (4, 400)]);
        assert!(to_recover(0, &[], &log, |_| false).is_empty(), "nothing read, nothing recovered");
        // R1 from the state rebuilt from the log (an answered or refused transaction).
        assert_eq!(
            seqs(&to_recover(0, std::slice::from_ref(&both), &[], |id| id.seq == 2)),
            vec![(1, 100), (3, 300), (4, 400)]
        );
        let refused = [LogRecord::Refuse { id: a.id, reason: "no".into(), arrival_delta_us: 0, ts: 1, others: vec![] }];
        assert_eq!(
            seqs(&to_recover(0, std::slice::from_ref(&both), &refused, |_| false)),
            vec![(2, 200), (3, 300), (4, 400)]
        );
    }

    #[test]
    fn the_counterexample_a_moved_transaction_overtaken_by_an_answered_one_is_not_recovered() {
        // Both followers accepted X at 100; the leader released a conflicting Y at 200 first
        // (answered, its PREPARE committed) and moved X, whose moved PREPARE was lost.
        let x = txn(1, 100, "k", true);
        let y = txn(2, 200, "k", false);
        let sets = vec![vec![(x.clone(), 100)], vec![(x.clone(), 100)]];
        assert!(to_recover(0, &sets, &[prepare(&y, 200)], |_| false).is_empty(), "R2: Y overtook X");
        // A conflicting PREPARE below X, or on another key, does not overtake it.
        let below = txn(3, 50, "k", true);
        let elsewhere = txn(4, 500, "z", true);
        assert_eq!(
            seqs(&to_recover(0, &sets, &[prepare(&below, 50), prepare(&elsewhere, 500)], |_| false)),
            vec![(1, 100)]
        );
        // A DECIDE that raised a conflicting transaction above X overtakes it too.
        let raised = txn(5, 90, "k", true);
        let log = [prepare(&raised, 90), LogRecord::Decide { id: raised.id, ts: 150 }];
        assert!(to_recover(0, &sets, &log, |_| false).is_empty());
    }

    #[test]
    fn committed_records_decide_accepts_and_records_round_trip() {
        let mut f = Acceptor::default();
        let (a, b, c) = (txn(1, 100, "a", true), txn(2, 200, "b", true), txn(3, 300, "c", true));
        for t in [&a, &b, &c] {
            f.offer(0, t, t.piece(0).unwrap()).unwrap();
        }
        // b's DECIDE follows its PREPARE (keys from the order table); c is refused.
        let x = txn(9, 150, "b", true);
        f.on_committed(0, &prepare(&x, 150));
        f.on_committed(0, &LogRecord::Decide { id: x.id, ts: 250 });
        assert_eq!(f.undecided(), vec![(100, a.id), (300, c.id)], "x raised above b overtakes it");
        f.on_committed(
            0,
            &LogRecord::Refuse { id: c.id, reason: "no".into(), arrival_delta_us: 0, ts: 1, others: vec![] },
        );
        f.on_committed(0, &LogRecord::Floor { ts: 1_000 });
        assert_eq!(f.undecided(), vec![(100, a.id)]);
        let record = AcceptRecord { txn: a.clone(), ts: 100 };
        assert_eq!(AcceptRecord::decode(&record.encode()).unwrap(), record);
        assert!(AcceptRecord::decode(b"garbage").is_err());
    }
}
