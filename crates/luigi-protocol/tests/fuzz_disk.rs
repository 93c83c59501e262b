//! Property tests of what a replica reads back from its disk or receives as a snapshot
//! (issue 26): a log record, an accept record and a follower's snapshot image, as arbitrary
//! bytes and as valid encodings cut short or with a byte changed. Decoding never panics: it
//! gives the value or a clear error. (A WAL record's own framing and CRC are fuzzed in
//! `luigi-wal`.) The last two draw whole records with the derived strategies of
//! `luigi_protocol::arbitrary` (any field, times over the whole range): round trips, cut and
//! damaged encodings, and a follower image after any history a leader could log.
//! `PROPTEST_CASES=n` runs more cases (default 256).

use std::collections::HashMap;
use std::sync::Arc;

use luigi_protocol::fast::AcceptRecord;
use luigi_protocol::leader::follower::Follower;
use luigi_protocol::log::{LogEntry, LogRecord};
use luigi_store::Store;
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};
use proptest::prelude::*;

fn txn(seq: u64, ts: u64) -> Arc<Txn> {
    let ops = vec![MicroOp { key: seq % 5, write: Some(seq) }];
    Arc::new(Txn {
        id: TxnId { client: 3, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(seq % 5)]) }],
        ts,
    })
}

/// Every kind of log record, valid.
fn records() -> Vec<LogRecord> {
    let id = TxnId { client: 3, seq: 1 };
    vec![
        LogRecord::Prepare { txn: txn(1, 100), ts: 120, arrival_delta_us: -5, acked_below: 1 },
        LogRecord::Decide { id, ts: 130 },
        LogRecord::Abort { id },
        LogRecord::Refuse { id, reason: "full".into(), arrival_delta_us: 7, ts: u64::MAX, others: vec![1] },
        LogRecord::Floor { ts: 1_000 },
        LogRecord::PeerApplied { shard: 1, ts: 400 },
        LogRecord::Applied { ts: 500 },
    ]
}

/// A follower's snapshot image after a few executed and pending transactions.
fn image() -> Vec<u8> {
    let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
    let mut index = 0;
    let mut apply = |f: &mut Follower, record| {
        index += 1;
        f.apply(&LogEntry { index, record });
    };
    for seq in 1..=6 {
        apply(
            &mut f,
            LogRecord::Prepare { txn: txn(seq, seq * 10), ts: seq * 10, arrival_delta_us: 0, acked_below: 0 },
        );
    }
    apply(&mut f, LogRecord::Applied { ts: 35 });
    f.snapshot()
}

/// A valid encoding cut at `cut` (as a fraction) or with the byte there flipped by `xor`.
fn damaged(bytes: &[u8], cut: f64, xor: u8, truncate: bool) -> Vec<u8> {
    let at = ((bytes.len() as f64) * cut) as usize;
    let mut out = bytes.to_vec();
    if truncate {
        out.truncate(at);
    } else if let Some(b) = out.get_mut(at) {
        *b ^= xor.max(1);
    }
    out
}

proptest! {
    #[test]
    fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = postcard::from_bytes::<LogRecord>(&bytes);
        let _ = AcceptRecord::decode(&bytes);
        if let Err(e) = Follower::check_snapshot(0, 1, &bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
        let _ = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &bytes);
    }

    #[test]
    fn damaged_log_and_accept_records_decode_to_a_value_or_an_error(
        which in 0usize..6, cut in 0.0f64..1.0, xor in any::<u8>(), truncate in any::<bool>()
    ) {
        let record = &records()[which];
        let bytes = postcard::to_stdvec(record).unwrap();
        prop_assert_eq!(&postcard::from_bytes::<LogRecord>(&bytes).unwrap(), record);
        let bad = damaged(&bytes, cut, xor, truncate);
        if truncate && bad.len() < bytes.len() {
            prop_assert!(postcard::from_bytes::<LogRecord>(&bad).is_err(), "a cut record decoded");
        } else {
            let _ = postcard::from_bytes::<LogRecord>(&bad);
        }
        let accept = AcceptRecord { txn: txn(9, 900), ts: 900 }.encode();
        let _ = AcceptRecord::decode(&damaged(&accept, cut, xor, truncate));
    }

    #[test]
    fn a_damaged_snapshot_image_is_refused_or_loaded_never_a_panic(
        cut in 0.0f64..1.0, xor in any::<u8>(), truncate in any::<bool>()
    ) {
        let good = image();
        prop_assert!(Follower::check_snapshot(0, 7, &good).is_ok());
        let bad = damaged(&good, cut, xor, truncate);
        match Follower::check_snapshot(0, 7, &bad) {
            Ok(()) => prop_assert!(!truncate || bad.len() == good.len()),
            Err(e) => prop_assert!(e.to_string().contains("snapshot"), "{e}"),
        }
        if let Ok(f) = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &bad) {
            let _ = f.check_invariants();
        }
    }
}

proptest! {
    /// Structure-aware (the derived strategies of `luigi_protocol::arbitrary`): any log record
    /// and accept record, whatever its fields (times over the whole range, hostile keys and
    /// names), round-trips through its encoding; cut short it is an error; with a byte
    /// changed it decodes to a value or an error, never a panic.
    #[test]
    fn any_log_and_accept_record_round_trips_and_its_damage_is_an_error_or_a_value(
        record in any::<LogRecord>(),
        accept in any::<AcceptRecord>(),
        cut in 0.0f64..1.0,
        xor in any::<u8>(),
    ) {
        let bytes = postcard::to_stdvec(&record).unwrap();
        prop_assert_eq!(&postcard::from_bytes::<LogRecord>(&bytes).unwrap(), &record);
        prop_assert!(postcard::from_bytes::<LogRecord>(&damaged(&bytes, cut, xor, true)).is_err(), "a cut record decoded");
        let _ = postcard::from_bytes::<LogRecord>(&damaged(&bytes, cut, xor, false));
        let encoded = accept.encode();
        prop_assert_eq!(&AcceptRecord::decode(&encoded).unwrap(), &accept);
        prop_assert!(AcceptRecord::decode(&damaged(&encoded, cut, xor, true)).is_err(), "a cut accept decoded");
        let _ = AcceptRecord::decode(&damaged(&encoded, cut, xor, false));
    }

    /// A follower that applied any admissible records (drawn structurally, then held to what
    /// a leader logs: participants of this shard, above the last `Applied` marker) snapshots
    /// an image that loads back to the same state; the image damaged is refused with a
    /// snapshot error or loads, never a panic.
    #[test]
    fn a_follower_image_of_any_admitted_history_round_trips_and_its_damage_is_clear(
        records in proptest::collection::vec(any::<LogRecord>(), 0..24),
        cut in 0.0f64..1.0,
        xor in any::<u8>(),
        truncate in any::<bool>(),
    ) {
        let mut f = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
        let mut history = History::default();
        let mut index = 0;
        for record in records.into_iter().filter_map(|r| history.loggable(r)) {
            index += 1;
            f.apply(&LogEntry { index, record });
            prop_assert_eq!(f.check_invariants(), Ok(()));
        }
        let image = f.snapshot();
        prop_assert!(Follower::check_snapshot(0, index, &image).is_ok());
        // The same state back (its bytes may differ: the answer table is a hash map).
        let back = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &image).unwrap();
        prop_assert_eq!(back.check_invariants(), Ok(()));
        prop_assert_eq!(back.store().state_hash(), f.store().state_hash());
        prop_assert_eq!((back.applied_ts(), back.queued_len()), (f.applied_ts(), f.queued_len()));
        prop_assert_eq!(back.stats().applied_index, index);
        let records = |f: &Follower| {
            let mut r: Vec<String> = f.recovery_records().iter().map(|r| format!("{r:?}")).collect();
            r.sort();
            r
        };
        prop_assert_eq!(records(&back), records(&f));
        let bad = damaged(&image, cut, xor, truncate);
        match Follower::check_snapshot(0, index, &bad) {
            Ok(()) => prop_assert!(!truncate || bad.len() == image.len()),
            Err(e) => prop_assert!(e.to_string().contains("snapshot"), "{e}"),
        }
    }
}

/// What a leader of shard 0 has logged so far, to hold drawn records to what it could log
/// next (what the follower asserts of its log).
#[derive(Default)]
struct History {
    /// The last `Applied` marker.
    applied: u64,
    /// Prepared and not executed or aborted, at their current timestamp.
    prepared: HashMap<TxnId, u64>,
}

impl History {
    /// `record` if it could come next: a `PREPARE` of a transaction shard 0 takes part in,
    /// above the last marker; a `DECIDE` of a prepared one at or above its proposal and
    /// above the marker; a refusal of nothing prepared; anything else as drawn.
    fn loggable(&mut self, record: LogRecord) -> Option<LogRecord> {
        match &record {
            LogRecord::Prepare { txn, ts, .. } => {
                if txn.piece(0).is_none() || *ts <= self.applied {
                    return None;
                }
                self.prepared.entry(txn.id).or_insert(*ts);
            }
            LogRecord::Decide { id, ts } => {
                if let Some(at) = self.prepared.get_mut(id) {
                    if *ts < *at || *ts <= self.applied {
                        return None;
                    }
                    *at = *ts;
                }
            }
            LogRecord::Abort { id } => {
                self.prepared.remove(id);
            }
            LogRecord::Refuse { id, .. } => {
                if self.prepared.contains_key(id) {
                    return None;
                }
            }
            LogRecord::Applied { ts } => {
                self.applied = self.applied.max(*ts);
                let applied = self.applied;
                self.prepared.retain(|_, at| *at > applied);
            }
            LogRecord::Floor { .. } | LogRecord::PeerApplied { .. } => {}
        }
        Some(record)
    }
}
