//! Strategies behind the derived `proptest::arbitrary::Arbitrary` of the wire vocabulary
//! (feature `arbitrary`; issue 26): every message, transaction and log record can be drawn
//! with `any::<T>()`, structured as the decoder would hand it over but with every field
//! hostile. The derive uses these for the fields where the default strategy would miss what
//! matters:
//! - times and timestamps: the whole `u64` range, with extra weight on `0`, `u64::MAX`
//!   and values near the clocks of [`CLOCKS`] (a fuzzer starts its replica's clock at one
//!   of them, so drawn times land where the clock horizon and the watermark cut);
//! - keys: a small alphabet (a few micro and key-value keys and short byte strings), so
//!   that drawn transactions collide with each other and with valid traffic;
//! - ids, shards, replicas, terms: mostly small, so that they name what exists;
//! - byte blobs, strings and lists: small, so that a case stays cheap.
//!
//! Release builds do not carry any of this: only the dev-dependencies of the crates whose
//! tests draw messages enable the feature.

use proptest::prelude::*;

use serde::Serialize;

use crate::types::{KeySet, ShardPiece};

/// The built-in procedures' names (`luigi_workloads::procedures`): this crate cannot see
/// them, so it names them; `luigi-workloads`' tests check that they agree.
pub const MICRO_NAME: &str = "micro";
/// See [`MICRO_NAME`].
pub const KV_NAME: &str = "kv";

/// The micro benchmark's key number `k` (`luigi_workloads::procedures::micro_key`: table 1).
pub fn micro_key(k: u64) -> Vec<u8> {
    luigi_store::table_key(1, &[k])
}

/// The key-value table's key `key` (`luigi_workloads::procedures::kv_key`: table 3's prefix).
pub fn kv_key(key: &[u8]) -> Vec<u8> {
    let mut k = luigi_store::table_key(3, &[]);
    k.extend_from_slice(key);
    k
}

/// The micro procedure's operation as it is encoded (`luigi_workloads::procedures::MicroOp`;
/// postcard encodes a struct as its fields in order, so the bytes are the same).
#[derive(Serialize)]
pub struct MicroOpShape {
    /// Key number.
    pub key: u64,
    /// Write this value, or read.
    pub write: Option<u64>,
}

/// The key-value procedure's operation as it is encoded (`luigi_workloads::procedures::KvOp`,
/// whose first two variants these are, in the same order).
#[derive(Serialize)]
pub enum KvOpShape {
    /// Read a key.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// Write a key.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
}

/// Clocks a fuzzer may start a replica at; drawn times cluster around them: the start of
/// time, a second in, a present-day wall clock, the middle of the range and an hour before
/// its end (where `now + horizon` saturates).
pub const CLOCKS: [u64; 5] = [0, 1_000_000, 1_767_225_600_000_000, u64::MAX / 2, u64::MAX - 3_600_000_000];

/// A time or timestamp over the whole `u64` range: uniform, the two ends, and near
/// [`CLOCKS`] (within a few milliseconds, or within two hours).
pub fn time() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => any::<u64>(),
        1 => Just(0u64),
        1 => Just(u64::MAX),
        4 => (proptest::sample::select(CLOCKS.to_vec()), offset()).prop_map(|(clock, d)| shift(clock, d)),
    ]
    .boxed()
}

/// A signed offset: within 10 ms, or within two hours.
fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![-10_000i64..10_000, -7_200_000_000i64..7_200_000_000]
}

fn shift(clock: u64, d: i64) -> u64 {
    clock.saturating_add_signed(d)
}

/// A signed delay (`arrival_delta_us`): small, or anything.
pub fn delta() -> BoxedStrategy<i64> {
    prop_oneof![3 => -10_000i64..10_000, 1 => any::<i64>()].boxed()
}

/// A client id: one of a few, or anything.
pub fn client() -> BoxedStrategy<u64> {
    prop_oneof![4 => 0u64..8, 1 => any::<u64>()].boxed()
}

/// A sequence number (or an acknowledgement bound): small, or anything.
pub fn seq() -> BoxedStrategy<u64> {
    prop_oneof![4 => 0u64..64, 1 => any::<u64>()].boxed()
}

/// A shard: one of the first few, or anything.
pub fn shard() -> BoxedStrategy<u32> {
    prop_oneof![6 => 0u32..4, 1 => any::<u32>()].boxed()
}

/// A replica index (or a Raft id): one of the first few, or anything.
pub fn replica() -> BoxedStrategy<u32> {
    prop_oneof![6 => 0u32..6, 1 => any::<u32>()].boxed()
}

/// A Raft id (from 1): one of the first few, or anything.
pub fn raft_id() -> BoxedStrategy<u64> {
    prop_oneof![6 => 0u64..6, 1 => any::<u64>()].boxed()
}

/// A term or a log index: small, or anything.
pub fn small_u64() -> BoxedStrategy<u64> {
    prop_oneof![6 => 0u64..32, 1 => any::<u64>()].boxed()
}

/// A key from a small alphabet: micro keys 0..8, key-value keys "a".."c", short bytes, the
/// empty key, and one over the key size limit.
pub fn key() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        6 => (0u64..8).prop_map(micro_key),
        3 => proptest::sample::select(vec![&b"a"[..], b"b", b"c"]).prop_map(kv_key),
        2 => proptest::collection::vec(0u8..4, 0..3),
        1 => Just(vec![0u8; crate::types::limits::KEY_BYTES_MAX + 1]),
    ]
    .boxed()
}

/// A key list as it may arrive: unsorted, duplicated, empty.
pub fn keys() -> BoxedStrategy<Vec<Vec<u8>>> {
    proptest::collection::vec(key(), 0..4).boxed()
}

/// A key set: mostly normalized (sorted, unique, disjoint: what a correct client sends,
/// and may still be empty or hold an oversized key), else raw.
pub fn key_set() -> BoxedStrategy<KeySet> {
    prop_oneof![
        2 => (keys(), keys()).prop_map(|(reads, writes)| KeySet::new(reads, writes)),
        1 => any::<KeySet>(),
    ]
    .boxed()
}

/// A transaction's participants: mostly sorted by shard and distinct (as a correct client
/// sends them), else raw (unsorted, repeated, none).
pub fn pieces() -> BoxedStrategy<Vec<ShardPiece>> {
    let list = proptest::collection::vec(any::<ShardPiece>(), 0..3);
    prop_oneof![
        2 => list.clone().prop_map(|mut pieces| {
            pieces.sort_by_key(|p| p.shard);
            pieces.dedup_by_key(|p| p.shard);
            pieces
        }),
        1 => list,
    ]
    .boxed()
}

/// A small byte blob.
pub fn blob() -> BoxedStrategy<Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..16).boxed()
}

/// Procedure arguments: a valid micro or key-value encoding over the key alphabet, or bytes.
pub fn args() -> BoxedStrategy<Vec<u8>> {
    let micro = proptest::collection::vec((0u64..8, proptest::option::of(any::<u64>())), 0..4).prop_map(|ops| {
        let ops: Vec<MicroOpShape> = ops.into_iter().map(|(key, write)| MicroOpShape { key, write }).collect();
        postcard::to_stdvec(&ops).expect("micro ops encode")
    });
    let kv = proptest::collection::vec((proptest::sample::select(vec!["a", "b", "c"]), any::<bool>()), 0..3).prop_map(
        |ops| {
            let ops: Vec<KvOpShape> = ops
                .into_iter()
                .map(|(k, put)| {
                    let key = k.as_bytes().to_vec();
                    if put {
                        KvOpShape::Put { key, value: b"v".to_vec() }
                    } else {
                        KvOpShape::Get { key }
                    }
                })
                .collect();
            postcard::to_stdvec(&ops).expect("kv ops encode")
        },
    );
    prop_oneof![3 => micro, 2 => kv, 1 => blob()].boxed()
}

/// A procedure name: a registered one, or not.
pub fn procedure() -> BoxedStrategy<String> {
    prop_oneof![
        4 => Just(MICRO_NAME.to_string()),
        2 => Just(KV_NAME.to_string()),
        1 => "[a-z.]{0,8}",
        1 => Just("p".repeat(crate::types::limits::PROCEDURE_NAME_BYTES_MAX + 1)),
    ]
    .boxed()
}

/// A short human-readable string (a reason, a protocol name).
pub fn text() -> BoxedStrategy<String> {
    "[a-z ]{0,12}".boxed()
}

/// A short list of `T`.
pub fn few<T: Arbitrary + 'static>() -> BoxedStrategy<Vec<T>> {
    proptest::collection::vec(any::<T>(), 0..3).boxed()
}

/// An outcome as a reply carries it.
pub fn outcome() -> BoxedStrategy<Result<Vec<u8>, crate::msg::TxnError>> {
    prop_oneof![blob().prop_map(Ok), any::<crate::msg::TxnError>().prop_map(Err)].boxed()
}

/// A vote's outcome (baselines).
pub fn vote() -> BoxedStrategy<Result<(), String>> {
    prop_oneof![Just(Ok(())), text().prop_map(Err)].boxed()
}
