//! Identifiers and the transaction as it travels on the wire.

use std::fmt;
use std::str::FromStr;

use luigi_store::Key;
use serde::{Deserialize, Serialize};

/// Microseconds since the Unix epoch (or virtual microseconds in the simulator).
pub type TimeUs = u64;
/// A transaction timestamp, in microseconds: the position of a transaction in the global order.
pub type Timestamp = u64;
/// Index of a shard, `0..shards`.
pub type ShardId = u32;
/// Identifier of a client (one coordinator). Unique per cluster run.
pub type ClientId = u64;

/// A transaction id: (client id, sequence number). Sequence numbers start at 1 and grow by one
/// per transaction of that client, which lets servers forget answers the client has acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct TxnId {
    /// The coordinator that issued the transaction.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::client()"))]
    pub client: ClientId,
    /// Per-client sequence number, from 1.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::seq()"))]
    pub seq: u64,
}

/// The keys a transaction reads and writes on one shard. Reads and writes are sorted and
/// deduplicated; a key that is both read and written appears in `writes` only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct KeySet {
    /// Keys read (and not written).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::keys()"))]
    #[serde(with = "crate::byte_strings::list")]
    pub reads: Vec<Key>,
    /// Keys written (possibly also read).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::keys()"))]
    #[serde(with = "crate::byte_strings::list")]
    pub writes: Vec<Key>,
}

impl KeySet {
    /// What [`KeySet::new`] guarantees, checked on a key set that arrived from outside:
    /// non-empty, each list strictly sorted (so unique), reads and writes disjoint, keys
    /// within [`limits::KEY_BYTES_MAX`], at most [`limits::KEYS_PER_SHARD_MAX`] keys.
    pub fn check_shape(&self) -> Result<(), String> {
        let count = self.reads.len() + self.writes.len();
        if count == 0 {
            return Err("empty key set".into());
        }
        if count > limits::KEYS_PER_SHARD_MAX {
            return Err(format!("{count} keys (at most {})", limits::KEYS_PER_SHARD_MAX));
        }
        for (name, list) in [("reads", &self.reads), ("writes", &self.writes)] {
            if !list.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("{name} are not sorted and unique"));
            }
            if let Some(k) = list.iter().find(|k| k.len() > limits::KEY_BYTES_MAX) {
                return Err(format!("a key of {} bytes (at most {})", k.len(), limits::KEY_BYTES_MAX));
            }
        }
        if self.reads.iter().any(|k| self.writes.binary_search(k).is_ok()) {
            return Err("a key is both in reads and writes".into());
        }
        Ok(())
    }

    /// Builds a normalized key set: sorted, deduplicated, reads minus writes.
    pub fn new(mut reads: Vec<Key>, mut writes: Vec<Key>) -> Self {
        writes.sort_unstable();
        writes.dedup();
        reads.sort_unstable();
        reads.dedup();
        reads.retain(|k| writes.binary_search(k).is_err());
        Self { reads, writes }
    }

    /// How `key` may be accessed under this key set (exact match or a declared prefix).
    pub fn access(&self, key: &[u8]) -> Option<Access> {
        // Exact matches first: the common case, one binary search per list.
        if contains(&self.writes, key) {
            return Some(Access::Write);
        }
        if contains(&self.reads, key) {
            return Some(Access::Read);
        }
        if has_prefix_of(&self.writes, key) {
            Some(Access::Write)
        } else if has_prefix_of(&self.reads, key) {
            Some(Access::Read)
        } else {
            None
        }
    }

    /// Every declared key with its access mode.
    pub fn entries(&self) -> impl Iterator<Item = (&Key, Access)> {
        self.reads.iter().map(|k| (k, Access::Read)).chain(self.writes.iter().map(|k| (k, Access::Write)))
    }

    /// Number of declared keys.
    pub fn len(&self) -> usize {
        self.reads.len() + self.writes.len()
    }

    /// True when no key is declared.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn contains(sorted: &[Key], key: &[u8]) -> bool {
    sorted.binary_search_by(|d| cmp_bytes(d, key)).is_ok()
}

/// `a.cmp(b)` for byte strings (lexicographic, then by length), eight bytes at a time as
/// big-endian words: keys are short, and the library's comparison is a call to `memcmp` per
/// step of a key set's binary search (the servers' profile showed it under every access).
pub fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut x, mut y) = (a, b);
    while let (Some((wx, rx)), Some((wy, ry))) = (x.split_first_chunk::<8>(), y.split_first_chunk::<8>()) {
        let (ux, uy) = (u64::from_be_bytes(*wx), u64::from_be_bytes(*wy));
        if ux != uy {
            return ux.cmp(&uy);
        }
        (x, y) = (rx, ry);
    }
    x.cmp(y)
}

/// True when a declared key is a proper prefix of `key`. A declared prefix stands for a whole
/// key range (e.g. one district's orders); conflicts are detected on declared keys, so a table
/// must be declared at one granularity by every procedure (see the procedure API). Key sets
/// are small, so a scan that compares lengths first beats a binary search per prefix length.
fn has_prefix_of(keys: &[Key], key: &[u8]) -> bool {
    keys.iter().any(|d| d.len() < key.len() && key.starts_with(d))
}

/// Read or write access to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum Access {
    /// Read only.
    Read,
    /// Written (and possibly read).
    Write,
}

impl Access {
    /// Two accesses to the same key conflict unless both are reads.
    pub fn conflicts(self, other: Access) -> bool {
        matches!((self, other), (Access::Write, _) | (_, Access::Write))
    }
}

/// One participant shard of a transaction and the keys it touches there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct ShardPiece {
    /// The participant shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::shard()"))]
    pub shard: ShardId,
    /// Its keys.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::key_set()"))]
    pub keys: KeySet,
}

/// A whole transaction: a stored procedure call with its footprint, as sent to every
/// participant leader in one message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub struct Txn {
    /// Its id.
    pub id: TxnId,
    /// Registered procedure name.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::procedure()"))]
    pub procedure: String,
    /// Procedure arguments (encoding chosen by the procedure).
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::args()"))]
    #[serde(with = "crate::byte_strings::one")]
    pub args: Vec<u8>,
    /// Every participant with its key set, sorted by shard.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::pieces()"))]
    pub pieces: Vec<ShardPiece>,
    /// Timestamp the coordinator proposes.
    #[cfg_attr(feature = "arbitrary", proptest(strategy = "crate::arbitrary::time()"))]
    pub ts: Timestamp,
}

/// The transaction protocol a cluster runs: every server and client of a cluster runs the same
/// one (the cluster file's `[protocol] kind`, or `luigi bench --protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "arbitrary", derive(proptest_derive::Arbitrary))]
pub enum Protocol {
    /// Luigi: timestamp agreement among the participant leaders, execution in timestamp order.
    #[default]
    #[serde(rename = "luigi")]
    Luigi,
    /// Baseline: optimistic concurrency control with two-phase commit among the participant
    /// leaders, in the style of Mako (`luigi-baseline`).
    #[serde(rename = "occ")]
    Occ,
    /// Baseline: two-phase locking (no-wait) with two-phase commit (`luigi-baseline`).
    #[serde(rename = "2pl")]
    TwoPl,
    /// No transaction: each shard's piece runs at once on its leader, independently
    /// (replicated, but neither atomic nor isolated). A lower bound, not a transaction protocol.
    #[serde(rename = "direct")]
    Direct,
}

impl Protocol {
    /// Every protocol, in the order reports list them.
    pub const ALL: [Protocol; 4] = [Protocol::Luigi, Protocol::Occ, Protocol::TwoPl, Protocol::Direct];

    /// Its name in cluster files, options and reports.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Luigi => "luigi",
            Protocol::Occ => "occ",
            Protocol::TwoPl => "2pl",
            Protocol::Direct => "direct",
        }
    }

    /// False for [`Protocol::Direct`], which gives no atomicity or isolation.
    pub fn is_transactional(self) -> bool {
        match self {
            Protocol::Luigi | Protocol::Occ | Protocol::TwoPl => true,
            Protocol::Direct => false,
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Protocol::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
            format!("unknown protocol '{s}' (expected one of: {})", names.join(", "))
        })
    }
}

/// Bounds on what one transaction may carry (checked by [`Txn::check_shape`] before
/// anything else looks at it).
pub mod limits {
    /// Bytes in a procedure name.
    pub const PROCEDURE_NAME_BYTES_MAX: usize = 128;
    /// Bytes of procedure arguments.
    pub const ARGS_BYTES_MAX: usize = 4 << 20;
    /// Bytes in one key.
    pub const KEY_BYTES_MAX: usize = 4 << 10;
    /// Keys declared on one shard (reads plus writes).
    pub const KEYS_PER_SHARD_MAX: usize = 1 << 16;
}

impl Txn {
    /// Checks what every participant can check alike, before admission: participants sorted,
    /// distinct and below `shards`; every key set non-empty, sorted, unique, reads and writes
    /// disjoint; sizes within [`limits`]. A transaction that fails is malformed: every
    /// participant refuses it the same way, so nothing needs to be logged or told to anyone.
    pub fn check_shape(&self, shards: u32) -> Result<(), String> {
        use limits::*;
        if self.pieces.is_empty() {
            return Err("no participant".into());
        }
        if !self.pieces.windows(2).all(|w| w[0].shard < w[1].shard) {
            return Err("participants must be sorted and distinct".into());
        }
        if let Some(p) = self.pieces.iter().find(|p| p.shard >= shards) {
            return Err(format!("participant shard {} does not exist (the cluster has {shards})", p.shard));
        }
        if self.procedure.len() > PROCEDURE_NAME_BYTES_MAX {
            return Err(format!(
                "procedure name of {} bytes (at most {PROCEDURE_NAME_BYTES_MAX})",
                self.procedure.len()
            ));
        }
        if self.args.len() > ARGS_BYTES_MAX {
            return Err(format!("{} bytes of arguments (at most {ARGS_BYTES_MAX})", self.args.len()));
        }
        if self.ts == 0 {
            return Err("timestamp 0".into());
        }
        for p in &self.pieces {
            p.keys.check_shape().map_err(|why| format!("shard {}: {why}", p.shard))?;
        }
        Ok(())
    }

    /// The key set on `shard`, if it participates.
    pub fn piece(&self, shard: ShardId) -> Option<&KeySet> {
        self.pieces.iter().find(|p| p.shard == shard).map(|p| &p.keys)
    }

    /// True when more than one shard participates.
    pub fn is_cross_shard(&self) -> bool {
        self.pieces.len() > 1
    }

    /// The participant shards.
    pub fn shards(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.pieces.iter().map(|p| p.shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pieces: Vec<ShardPiece>) -> Txn {
        Txn { id: TxnId { client: 1, seq: 1 }, procedure: "p".into(), args: vec![], pieces, ts: 5 }
    }

    fn piece(shard: ShardId, reads: Vec<Key>, writes: Vec<Key>) -> ShardPiece {
        ShardPiece { shard, keys: KeySet { reads, writes } }
    }

    proptest::proptest! {
        /// The word-wise comparison orders byte strings exactly as the library does, over
        /// lengths around the word size and bytes from a small alphabet (so prefixes and ties
        /// are common).
        #[test]
        fn cmp_bytes_orders_as_slices_do(
            a in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 127, 128, 255]), 0..20),
            b in proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 127, 128, 255]), 0..20),
        ) {
            proptest::prop_assert_eq!(cmp_bytes(&a, &b), a.as_slice().cmp(b.as_slice()));
            let shared: Vec<u8> = a.iter().chain(&b).copied().collect();
            proptest::prop_assert_eq!(cmp_bytes(&shared, &a), shared.as_slice().cmp(a.as_slice()));
        }
    }

    #[test]
    fn protocols_parse_from_their_names_only() {
        for p in Protocol::ALL {
            assert_eq!(p.name().parse::<Protocol>(), Ok(p));
        }
        let why = "occ2".parse::<Protocol>().unwrap_err();
        assert!(why.contains("unknown protocol 'occ2'") && why.contains("luigi, occ, 2pl, direct"), "{why}");
        assert!(!Protocol::Direct.is_transactional() && Protocol::TwoPl.is_transactional());
    }

    #[test]
    fn malformed_transactions_are_named() {
        let k = |s: &str| s.as_bytes().to_vec();
        let ok = t(vec![piece(0, vec![k("a")], vec![k("b")]), piece(1, vec![], vec![k("c")])]);
        assert_eq!(ok.check_shape(2), Ok(()));
        let why = |txn: Txn| txn.check_shape(2).unwrap_err();
        assert!(why(t(vec![])).contains("no participant"));
        assert!(why(t(vec![piece(0, vec![], vec![k("a")]), piece(5, vec![], vec![k("a")])]))
            .contains("shard 5 does not exist"));
        assert!(why(t(vec![piece(1, vec![], vec![k("a")]), piece(0, vec![], vec![k("a")])])).contains("sorted"));
        assert!(why(t(vec![piece(0, vec![], vec![])])).contains("empty key set"));
        assert!(why(t(vec![piece(0, vec![k("b"), k("a")], vec![])])).contains("reads are not sorted"));
        assert!(why(t(vec![piece(0, vec![], vec![k("a"), k("a")])])).contains("writes are not sorted and unique"));
        assert!(why(t(vec![piece(0, vec![k("a")], vec![k("a")])])).contains("both in reads and writes"));
        assert!(why(t(vec![piece(0, vec![], vec![vec![0; limits::KEY_BYTES_MAX + 1]])])).contains("bytes"));
        let mut big = ok.clone();
        big.args = vec![0; limits::ARGS_BYTES_MAX + 1];
        assert!(why(big).contains("arguments"));
        let mut zero = ok;
        zero.ts = 0;
        assert!(why(zero).contains("timestamp 0"));
    }

    #[test]
    fn keyset_normalizes_and_checks_access() {
        let ks = KeySet::new(
            vec![b"b".to_vec(), b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
            vec![b"c".to_vec(), b"pre".to_vec()],
        );
        assert_eq!(ks.reads, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(ks.writes, vec![b"c".to_vec(), b"pre".to_vec()]);
        assert_eq!(ks.access(b"a"), Some(Access::Read));
        assert_eq!(ks.access(b"c"), Some(Access::Write));
        assert_eq!(ks.access(b"prefix-row"), Some(Access::Write));
        assert_eq!(ks.access(b"d"), None);
        assert_eq!(ks.access(b"pr"), None);
    }

    #[test]
    fn access_conflicts() {
        assert!(!Access::Read.conflicts(Access::Read));
        assert!(Access::Read.conflicts(Access::Write));
        assert!(Access::Write.conflicts(Access::Read));
        assert!(Access::Write.conflicts(Access::Write));
    }
}

/// Identity of a server node: one replica of one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    /// Shard.
    pub shard: ShardId,
    /// Replica index within the shard, from 0.
    pub replica: u32,
}

impl NodeId {
    /// The node's name, `s{shard}r{replica}`.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The node's Raft id within its group (replica index + 1: Raft ids are non-zero).
    pub fn raft_id(&self) -> u64 {
        u64::from(self.replica) + 1
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}r{}", self.shard, self.replica)
    }
}

impl FromStr for NodeId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("node name '{s}' is not of the form s<shard>r<replica>, e.g. s0r0");
        let rest = s.strip_prefix('s').ok_or_else(bad)?;
        let (shard, replica) = rest.split_once('r').ok_or_else(bad)?;
        Ok(NodeId { shard: shard.parse().map_err(|_| bad())?, replica: replica.parse().map_err(|_| bad())? })
    }
}
