//! Tests of reads at a snapshot timestamp ([`crate::versions`]), against a naive model.

use proptest::prelude::*;

use crate::versions::{TooOld, VERSION_OVERHEAD_BYTES};
use crate::{ScanOrder, Store, Timestamp, Value};

fn v(s: &str) -> Value {
    s.as_bytes().to_vec()
}

#[test]
fn a_read_at_a_snapshot_sees_the_last_write_at_or_below_it() {
    let mut s = Store::new();
    s.put(b"k".to_vec(), v("initial"));
    s.put_at(b"k", v("ten"), 10);
    s.put_at(b"k", v("twenty"), 20);
    assert_eq!(s.get_at(b"k", 0), Ok(Some(&v("initial"))));
    assert_eq!(s.get_at(b"k", 9), Ok(Some(&v("initial"))));
    assert_eq!(s.get_at(b"k", 10), Ok(Some(&v("ten"))));
    assert_eq!(s.get_at(b"k", 19), Ok(Some(&v("ten"))));
    assert_eq!(s.get_at(b"k", u64::MAX), Ok(Some(&v("twenty"))));
    assert_eq!(s.get(b"k"), Some(&v("twenty")), "the latest value stays where it was");
    assert_eq!(s.get_at(b"absent", 5), Ok(None));
}

#[test]
fn deleted_and_inserted_keys_are_seen_by_scans_at_their_snapshots() {
    let mut s = Store::new();
    for k in [b"a", b"b", b"c"] {
        s.put(k.to_vec(), v("0"));
    }
    s.delete_at(b"b", 10);
    s.put_at(b"bb", v("new"), 20);
    s.put_at(b"c", v("c20"), 20);
    let keys = |t| s.scan_at(b"a", b"z", 10, ScanOrder::Ascending, t).unwrap();
    assert_eq!(keys(5), vec![(b"a".to_vec(), v("0")), (b"b".to_vec(), v("0")), (b"c".to_vec(), v("0"))]);
    assert_eq!(keys(10), vec![(b"a".to_vec(), v("0")), (b"c".to_vec(), v("0"))]);
    assert_eq!(keys(20), vec![(b"a".to_vec(), v("0")), (b"bb".to_vec(), v("new")), (b"c".to_vec(), v("c20"))]);
    let desc = s.scan_at(b"a", b"z", 2, ScanOrder::Descending, 5).unwrap();
    assert_eq!(desc, vec![(b"c".to_vec(), v("0")), (b"b".to_vec(), v("0"))]);
    assert_eq!(s.scan_at(b"z", b"a", 10, ScanOrder::Ascending, 5), Ok(vec![]));
}

#[test]
fn versions_older_than_the_window_go_and_reads_below_it_are_too_old_not_wrong() {
    let mut s = Store::new();
    s.set_retention(100);
    s.put_at(b"k", v("a"), 10);
    s.put_at(b"k", v("b"), 50);
    assert_eq!(s.get_at(b"k", 5), Ok(None), "within the window");
    s.put_at(b"other", v("x"), 160); // the window now starts at 60
    assert_eq!(s.oldest_snapshot(), 60);
    assert_eq!(s.get_at(b"k", 59), Err(TooOld { requested: 59, oldest: 60 }));
    assert_eq!(s.get_at(b"k", 60), Ok(Some(&v("b"))));
    assert_eq!(s.scan_at(b"a", b"z", 9, ScanOrder::Ascending, 0), Err(TooOld { requested: 0, oldest: 60 }));
    let stats = s.history_stats();
    assert_eq!(stats.versions, 1, "only the version `other` replaced at 160 is left");
    assert_eq!(stats.bytes, b"other".len() + VERSION_OVERHEAD_BYTES);
    s.put_at(b"k", v("c"), 1_000);
    assert_eq!(s.history_stats().versions, 1, "the window passed 160");
}

#[test]
fn a_rolled_back_write_leaves_no_version_and_does_not_drop_another_of_its_timestamp() {
    let mut s = Store::new();
    s.put_at(b"k", v("first at 7"), 7);
    // A second transaction at the same timestamp (ordered after by id) writes, then rolls back.
    let r = s.put_at(b"k", v("second at 7"), 7);
    assert!(!r.versioned, "the version below 7 was kept by the first write");
    s.put(b"k".to_vec(), r.old.unwrap());
    assert_eq!(s.get_at(b"k", 6), Ok(None));
    let r = s.put_at(b"k", v("at 9"), 9);
    assert!(r.versioned);
    s.put(b"k".to_vec(), r.old.unwrap());
    s.unrecord(b"k", 9);
    assert_eq!(s.get_at(b"k", 8), Ok(Some(&v("first at 7"))));
    assert_eq!(s.get_at(b"k", 6), Ok(None));
    assert_eq!(s.history_stats().versions, 1);
}

#[test]
fn a_store_rebuilt_from_a_snapshot_refuses_reads_below_it_and_compares_by_latest_values() {
    let mut s = Store::new();
    s.put(b"k".to_vec(), v("x"));
    let mut with_history = Store::new();
    with_history.put_at(b"k", v("x"), 3);
    assert_eq!(s, with_history, "equal content, different histories");
    s.forget_below(40);
    assert_eq!(s.get_at(b"k", 39), Err(TooOld { requested: 39, oldest: 40 }));
    assert_eq!(s.get_at(b"k", 40), Ok(Some(&v("x"))));
    s.forget_below(10);
    assert_eq!(s.oldest_snapshot(), 40, "never lowered");
    assert!(TooOld { requested: 1, oldest: 2 }.to_string().contains("retention window"));
}

/// One step of the property test: a write at the next timestamp, possibly rolled back.
#[derive(Clone, Debug)]
struct Step {
    key: u8,
    value: Option<u8>,
    rolled_back: bool,
    read_at: Timestamp,
}

fn steps() -> impl Strategy<Value = (Vec<Step>, Vec<Timestamp>)> {
    let step = (0u8..6, proptest::option::of(any::<u8>()), proptest::bool::weighted(0.15), any::<u64>())
        .prop_map(|(key, value, rolled_back, read_at)| Step { key, value, rolled_back, read_at });
    proptest::collection::vec(step, 1..60).prop_flat_map(|steps| {
        let n = steps.len();
        // Full-range timestamps, sorted (writes come in timestamp order), ties included.
        let times = proptest::collection::vec(prop_oneof![any::<u64>(), 0u64..64, (u64::MAX - 64)..=u64::MAX], n)
            .prop_map(|mut t| {
                t.sort_unstable();
                t
            });
        (Just(steps), times)
    })
}

/// The naive model: every committed write, in order; a key's value at `t` is its last write at
/// or below `t`.
fn model_at(writes: &[(u8, Timestamp, Option<u8>)], key: u8, t: Timestamp) -> Option<Value> {
    writes.iter().rev().find(|(k, at, _)| *k == key && *at <= t).and_then(|(_, _, value)| value.map(|b| vec![b]))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reads_at_any_snapshot_match_the_naive_model_or_are_refused_as_too_old(
        (steps, times) in steps(),
        retention in prop_oneof![Just(0u64), 1u64..1_000, any::<u64>(), Just(u64::MAX)],
    ) {
        let mut s = Store::new();
        s.set_retention(retention);
        let mut writes: Vec<(u8, Timestamp, Option<u8>)> = Vec::new();
        let mut newest = 0;
        for (step, ts) in steps.iter().zip(times) {
            let key = [step.key];
            let replaced = match step.value {
                Some(b) => s.put_at(&key, vec![b], ts),
                None => s.delete_at(&key, ts),
            };
            if step.rolled_back {
                match replaced.old {
                    Some(old) => s.put(key.to_vec(), old),
                    None => s.delete(&key),
                };
                if replaced.versioned {
                    s.unrecord(&key, ts);
                }
            } else {
                writes.push((step.key, ts, step.value));
            }
            newest = newest.max(ts);
            for t in [step.read_at, ts, ts.saturating_sub(1), newest.saturating_sub(retention)] {
                let within = t >= newest.saturating_sub(retention);
                match s.get_at(&key, t) {
                    Ok(got) => prop_assert_eq!(got.cloned(), model_at(&writes, step.key, t), "key {} at {}", step.key, t),
                    Err(e) => {
                        prop_assert!(!within, "a read within the window was refused: {e}");
                        prop_assert_eq!(e, TooOld { requested: t, oldest: s.oldest_snapshot() });
                    }
                }
                if let Ok(scan) = s.scan_at(&[0], &[255], usize::MAX, ScanOrder::Ascending, t) {
                    let expected: Vec<_> = (0u8..6)
                        .filter_map(|k| model_at(&writes, k, t).map(|value| (vec![k], value)))
                        .collect();
                    prop_assert_eq!(scan, expected);
                }
            }
        }
        let stats = s.history_stats();
        prop_assert_eq!(stats, s.recount_history());
        prop_assert!(stats.versions <= writes.len());
        prop_assert!(stats.bytes >= stats.versions * VERSION_OVERHEAD_BYTES);
    }
}

/// One operation of the counters' property test.
#[derive(Clone, Debug)]
enum Op {
    /// A write at a timestamp `back` below the newest so far (writes to other keys may come
    /// out of timestamp order; to one key they come in order, so a key written above it is
    /// skipped), or above it; `None` deletes; possibly rolled back.
    Write {
        key: u8,
        value: Option<u8>,
        ahead: u64,
        back: u64,
        rolled_back: bool,
    },
    /// A write without a timestamp (loading, a baseline protocol).
    Plain {
        key: u8,
        value: Option<u8>,
    },
    Retention(Timestamp),
    ForgetBelow(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let write = (0u8..8, proptest::option::of(any::<u8>()), 0u64..50, 0u64..80, proptest::bool::weighted(0.2))
        .prop_map(|(key, value, ahead, back, rolled_back)| Op::Write { key, value, ahead, back, rolled_back });
    let op = prop_oneof![
        8 => write,
        1 => (0u8..8, proptest::option::of(any::<u8>())).prop_map(|(key, value)| Op::Plain { key, value }),
        1 => prop_oneof![Just(0u64), 1u64..200, any::<u64>()].prop_map(Op::Retention),
        1 => (0u64..100).prop_map(Op::ForgetBelow),
    ];
    proptest::collection::vec(op, 1..120)
}

/// One timestamped write of the counters' property test, rolled back (as `TxnCtx` does) or not.
fn write_at(s: &mut Store, key: u8, value: Option<u8>, ts: Timestamp, rolled_back: bool) {
    let k = [key];
    let replaced = match value {
        Some(b) => s.put_at(&k, vec![b], ts),
        None => s.delete_at(&k, ts),
    };
    if rolled_back {
        if replaced.versioned {
            s.unrecord(&k, ts);
        }
        match replaced.old {
            Some(old) => s.put(k.to_vec(), old),
            None => s.delete(&k),
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `luigi_versions_held` and `luigi_versions_bytes` read the history's counters: after any
    /// operations they match a recount of what is held (and the structures agree).
    #[test]
    fn the_history_counters_match_a_recount_after_any_operations(ops in ops()) {
        let mut s = Store::new();
        s.set_retention(100);
        let mut newest: Timestamp = 1_000;
        let mut last = [0 as Timestamp; 8];
        for op in ops {
            match op {
                Op::Write { key, value, ahead, back, rolled_back } => {
                    newest += ahead;
                    let ts = newest - back;
                    if ts >= last[usize::from(key)] {
                        last[usize::from(key)] = ts;
                        write_at(&mut s, key, value, ts, rolled_back);
                    }
                }
                Op::Plain { key, value: Some(b) } => drop(s.put(vec![key], vec![b])),
                Op::Plain { key, value: None } => drop(s.delete(&[key])),
                Op::Retention(r) => s.set_retention(r),
                Op::ForgetBelow(below) => s.forget_below(newest.saturating_sub(below)),
            }
            let stats = s.history_stats();
            prop_assert_eq!(stats, s.recount_history());
            prop_assert_eq!(s.len(), s.iter().count());
            let everything = s.scan(&[0], &[255], usize::MAX, ScanOrder::Ascending);
            prop_assert_eq!(s.scan_at(&[0], &[255], usize::MAX, ScanOrder::Ascending, u64::MAX), Ok(everything));
        }
    }
}
