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
        if self.accepts.is_empty() {
            // Nothing undecided to be overtaken (where clients do not ask, the common case).
            self.order.record(id, ts, keys);
            return;
        }
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
mod tests;
