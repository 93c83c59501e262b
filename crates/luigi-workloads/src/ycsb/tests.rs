//! The distributions checked statistically with fixed seeds, the key naming, the generator's
//! mix and the procedure's semantics on stores.

use std::collections::HashMap;

use luigi_store::Store;
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_txn::procedure::ProcError;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::keys::{fnvhash64, initial_row, key_name, record_key};
use super::*;
use crate::TxnGenerator;

const DRAWS: u64 = 200_000;

fn counts(mut draw: impl FnMut(&mut ChaCha8Rng) -> u64, seed: u64) -> HashMap<u64, u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut counts = HashMap::new();
    for _ in 0..DRAWS {
        *counts.entry(draw(&mut rng)).or_insert(0) += 1;
    }
    counts
}

fn share(counts: &HashMap<u64, u64>, item: u64) -> f64 {
    counts.get(&item).copied().unwrap_or(0) as f64 / DRAWS as f64
}

#[test]
fn keys_are_user_and_the_fnv_hash_as_ycsb_names_them() {
    // YCSB's first record key with insertorder=hashed (`user` + Utils.fnvhash64(0)).
    assert_eq!(key_name(0), "user6284781860667377211");
    assert!(fnvhash64(1) >= 0 && fnvhash64(i64::MAX) >= 0);
    assert_ne!(record_key(1), record_key(2));
    assert!(record_key(7).starts_with(&keys::table_prefix()));
}

#[test]
fn zipfian_follows_its_law_with_constant_0_99() {
    let n = 1_000;
    let mut z = Zipfian::new(n, dist::ZIPFIAN_CONSTANT);
    let c = counts(|rng| z.next(n, rng), 1);
    let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(0.99)).sum();
    // P(item i) = 1 / ((i + 1)^0.99 zetan): the first two exactly, later ones approximately.
    for item in [0u64, 1] {
        let expected = 1.0 / ((item + 1) as f64).powf(0.99) / zetan;
        assert!((share(&c, item) - expected).abs() < 0.005, "item {item}: {} vs {expected}", share(&c, item));
    }
    assert!(share(&c, 0) > share(&c, 1) && share(&c, 1) > share(&c, 10) && share(&c, 10) > share(&c, 500));
    let top_tenth: f64 = (0..n / 10).map(|i| share(&c, i)).sum();
    assert!(top_tenth > 0.6, "the hottest 10 % of items take {top_tenth}");
    assert!(c.keys().all(|&i| i < n));
}

#[test]
fn scrambled_zipfian_is_skewed_but_spreads_its_hot_records() {
    let records = 1_000;
    let mut chooser = KeyChooser::new(Distribution::Zipfian, records, InsertCounter::new(records));
    let c = counts(|rng| chooser.next(rng), 2);
    assert!(c.keys().all(|&r| r < records));
    // The hottest record is the hash of the Zipfian's item 0, not record 0.
    let hottest = *c.iter().max_by_key(|(_, n)| **n).unwrap().0;
    assert_eq!(hottest, fnvhash64(0).unsigned_abs() % records);
    let mut sorted: Vec<u64> = c.values().copied().collect();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let top: u64 = sorted.iter().take(10).sum();
    assert!(top as f64 / DRAWS as f64 > 0.1, "the 10 hottest records take {top} of {DRAWS}");
    // Spread: the hot records are not the low numbers (half the draws in each half, roughly).
    let low: u64 = c.iter().filter(|(r, _)| **r < records / 2).map(|(_, n)| n).sum();
    let low = low as f64 / DRAWS as f64;
    assert!((0.25..0.75).contains(&low), "the low half takes {low}");
}

#[test]
fn uniform_covers_every_record_evenly() {
    let records = 1_000;
    let mut chooser = KeyChooser::new(Distribution::Uniform, records, InsertCounter::new(records));
    let c = counts(|rng| chooser.next(rng), 3);
    assert_eq!(c.len() as u64, records, "every record drawn");
    // 200 per record expected, standard deviation about 14: 6 sigma either side.
    assert!(c.values().all(|&n| (115..=285).contains(&n)), "{:?}", c.values().min());
}

#[test]
fn latest_favours_the_newest_records_and_follows_inserts() {
    let records = 1_000;
    let inserted = InsertCounter::new(records);
    let mut chooser = KeyChooser::new(Distribution::Latest, records, inserted.clone());
    let c = counts(|rng| chooser.next(rng), 4);
    assert!(share(&c, records - 1) > share(&c, records - 2) && share(&c, records - 2) > share(&c, records / 2));
    let newest_tenth: f64 = (records - records / 10..records).map(|r| share(&c, r)).sum();
    assert!(newest_tenth > 0.6, "the newest 10 % take {newest_tenth}");
    for _ in 0..100 {
        inserted.next();
    }
    let c = counts(|rng| chooser.next(rng), 5);
    let newest = records + 99;
    assert!(c.keys().all(|&r| r <= newest));
    assert!(share(&c, newest) > 0.1, "the newest insert is the hottest: {}", share(&c, newest));
    let fresh: f64 = (records..=newest).map(|r| share(&c, r)).sum();
    assert!(fresh > 0.5, "the 100 fresh records take {fresh}");
}

fn generator(workload: CoreWorkload, ops: u32, seed: u64) -> YcsbGenerator {
    let config = YcsbConfig::default();
    let load = YcsbLoad { ops_per_txn: ops, ..YcsbLoad::of(workload) };
    YcsbGenerator::new(config.clone(), load, 3, seed, InsertCounter::new(config.records))
}

#[test]
fn the_generator_draws_the_mix_with_distinct_records() {
    for workload in CoreWorkload::ALL {
        let mut g = generator(workload, 4, 6);
        let mut kinds: HashMap<String, u32> = HashMap::new();
        for _ in 0..4_000 {
            let txn = g.next_txn().unwrap();
            let ops: Vec<YcsbOp> = postcard::from_bytes(&txn.args).unwrap();
            assert_eq!(ops.len(), 4);
            assert!(ops.iter().all(|op| op.kind().procedure() == txn.procedure), "one kind per transaction");
            let mut records: Vec<u64> = ops.iter().filter_map(YcsbOp::record).collect();
            records.sort_unstable();
            records.dedup();
            assert_eq!(records.len(), ops.iter().filter(|op| op.record().is_some()).count(), "distinct");
            for op in &ops {
                if let YcsbOp::Scan { count, .. } = op {
                    assert!((1..=100).contains(count));
                }
            }
            *kinds.entry(txn.procedure).or_insert(0) += 1;
        }
        for (kind, weight) in workload.mix().weights() {
            let got = f64::from(kinds.get(kind.procedure()).copied().unwrap_or(0)) / 4_000.0;
            let want = f64::from(weight) / 100.0;
            assert!((got - want).abs() < 0.03, "{workload:?} {kind:?}: {got} vs {want}");
        }
    }
}

/// Runs `ops` as the cluster would: one store per shard, each its own piece; merged results.
fn run(stores: &mut [Store], ops: &[YcsbOp]) -> Result<Vec<YcsbResult>, ProcError> {
    let p = HashPartitioner::new(stores.len() as u32);
    let mut registry = luigi_txn::procedure::Registry::new();
    register_ycsb(&mut registry);
    let name = ops[0].kind().procedure();
    let mut outputs = Vec::new();
    for piece in ycsb_pieces(&p, ops, false) {
        let store = &mut stores[piece.shard as usize];
        outputs.push((piece.shard, registry.execute(name, &ycsb_args(ops), store, &piece.keys, piece.shard)?));
    }
    Ok(ycsb_merge(ops, &outputs).unwrap())
}

/// Runs read-only `ops` as a snapshot read would (rule 23): declared for a snapshot, each
/// piece read-only on its shard's store at its newest state.
fn run_at_snapshot(stores: &[Store], ops: &[YcsbOp]) -> Vec<YcsbResult> {
    let p = HashPartitioner::new(stores.len() as u32);
    let mut registry = luigi_txn::procedure::Registry::new();
    register_ycsb(&mut registry);
    let name = ops[0].kind().procedure();
    let mut outputs = Vec::new();
    for piece in ycsb_pieces(&p, ops, true) {
        assert!(piece.keys.writes.is_empty(), "{piece:?}");
        let store = &stores[piece.shard as usize];
        let out = registry.read_at(name, &ycsb_args(ops), store, &piece.keys, piece.shard, u64::MAX).result.unwrap();
        outputs.push((piece.shard, out));
    }
    ycsb_merge(ops, &outputs).unwrap()
}

fn loaded(shards: u32) -> (YcsbWorkload, Vec<Store>) {
    let config = YcsbConfig { records: 200, ..YcsbConfig::default() };
    let w = YcsbWorkload::new(config, YcsbLoad::of(CoreWorkload::A), shards).unwrap();
    let stores = (0..shards).map(|s| w.populate(w.config().seed, s)).collect();
    (w, stores)
}

#[test]
fn reads_updates_and_read_modify_writes_change_one_field() {
    let (w, mut stores) = loaded(3);
    let seed = w.config().seed;
    let row7 = initial_row(seed, 7, 10, 100);
    assert_eq!(run(&mut stores, &[YcsbOp::Read { record: 7 }]).unwrap(), vec![YcsbResult::Row(Some(row7.clone()))]);
    let value = vec![b'x'; 100];
    let update = YcsbOp::Update { record: 7, field: 3, value: value.clone() };
    assert_eq!(run(&mut stores, &[update]).unwrap(), vec![YcsbResult::Written]);
    let mut expected = row7.clone();
    expected[300..400].copy_from_slice(&value);
    let read = run(&mut stores, &[YcsbOp::Read { record: 7 }]).unwrap();
    assert_eq!(read, vec![YcsbResult::Row(Some(expected.clone()))]);
    let rmw = YcsbOp::ReadModifyWrite { record: 7, field: 9, value: vec![b'y'; 100] };
    assert_eq!(run(&mut stores, &[rmw]).unwrap(), vec![YcsbResult::Row(Some(expected.clone()))], "the old row");
    expected[900..].copy_from_slice(&[b'y'; 100]);
    assert_eq!(run(&mut stores, &[YcsbOp::Read { record: 7 }]).unwrap(), vec![YcsbResult::Row(Some(expected))]);
    // A record that does not exist: a read says so, an update is refused and writes nothing.
    assert_eq!(run(&mut stores, &[YcsbOp::Read { record: 5_000 }]).unwrap(), vec![YcsbResult::Row(None)]);
    let missing = YcsbOp::Update { record: 5_000, field: 0, value: vec![b'z'; 100] };
    assert!(matches!(run(&mut stores, &[missing]), Err(ProcError::UserAbort(_))));
    let outside = YcsbOp::Update { record: 7, field: 10, value: vec![b'z'; 100] };
    assert!(matches!(run(&mut stores, &[outside]), Err(ProcError::BadArgs(_))));
    w.check(seed, &stores.iter().collect::<Vec<_>>()).unwrap();
}

#[test]
fn inserts_add_records_once_and_scans_read_in_key_order_from_every_shard() {
    let (w, mut stores) = loaded(3);
    let row = vec![b'n'; 1_000];
    let insert = YcsbOp::Insert { record: 200, row: row.clone() };
    assert_eq!(run(&mut stores, std::slice::from_ref(&insert)).unwrap(), vec![YcsbResult::Written]);
    assert!(matches!(run(&mut stores, &[insert]), Err(ProcError::DuplicateKey(_))));
    // The same scan over one store holding every row gives the same rows.
    let mut all = Store::new();
    for store in &stores {
        for (k, v) in store.iter() {
            all.put(k.clone(), v.clone());
        }
    }
    for (start, count) in [(0, 1), (13, 100), (200, 7), (55, 1_000)] {
        let scan = YcsbOp::Scan { start, count };
        let results = run(&mut stores, &[scan]).unwrap();
        let [YcsbResult::Rows(rows)] = results.as_slice() else { panic!("a scan answers rows: {results:?}") };
        let end = luigi_txn::procedure::prefix_successor(&keys::table_prefix()).unwrap();
        let want = all.scan(&record_key(start), &end, count as usize, luigi_store::ScanOrder::Ascending);
        assert_eq!(rows.len(), want.len().min(count as usize));
        assert_eq!(rows, &want, "scan from {start} of {count}");
        assert_eq!(rows[0].0, record_key(start), "a scan starts at its own record");
    }
    // Read at a snapshot (declared as reads, no lock), every shard answers the same rows.
    for (start, count) in [(0, 1), (13, 100), (55, 1_000)] {
        let ops = [YcsbOp::Scan { start, count }];
        assert_eq!(run_at_snapshot(&stores, &ops), run(&mut stores, &ops).unwrap(), "scan from {start} of {count}");
    }
    // Every row is still there and where it belongs; a lost record is reported.
    w.check(w.config().seed, &stores.iter().collect::<Vec<_>>()).unwrap();
    let p = HashPartitioner::new(3);
    let shard = p.shard_of(&record_key(3)) as usize;
    stores[shard].delete(&record_key(3));
    let e = w.check(w.config().seed, &stores.iter().collect::<Vec<_>>()).unwrap_err();
    assert!(e.contains("lost record 3"), "{e}");
}

#[test]
fn merging_refuses_an_operation_answered_twice_or_not_at_all() {
    let ops = [YcsbOp::Read { record: 1 }];
    let row = postcard::to_stdvec(&vec![(0u32, YcsbResult::Row(None))]).unwrap();
    let e = ycsb_merge(&ops, &[(0, row.clone()), (1, row)]).unwrap_err();
    assert!(e.contains("operation 0 answered twice"), "{e}");
    assert!(ycsb_merge(&ops, &[]).unwrap_err().contains("no shard ran operation 0"));
    assert!(ycsb_merge(&ops, &[(0, vec![0xff])]).unwrap_err().contains("undecodable ycsb output"));
}

#[test]
fn scans_lock_the_table_and_point_operations_share_it() {
    let p = HashPartitioner::new(2);
    let prefix = keys::table_prefix();
    let scan = ycsb_pieces(&p, &[YcsbOp::Scan { start: 1, count: 5 }], false);
    assert_eq!(scan.len(), 2, "a scan involves every shard");
    assert!(scan.iter().all(|piece| piece.keys.writes == vec![prefix.clone()]));
    // At a snapshot, reads and scans declare no write; a scan in a transaction that writes
    // keeps its lock.
    let snapshot = ycsb_pieces(&p, &[YcsbOp::Scan { start: 1, count: 5 }, YcsbOp::Read { record: 2 }], true);
    assert_eq!(snapshot.len(), 2);
    assert!(snapshot.iter().all(|piece| piece.keys.writes.is_empty() && piece.keys.reads.contains(&prefix)));
    let update = YcsbOp::Update { record: 2, field: 0, value: vec![] };
    let writing = ycsb_pieces(&p, &[YcsbOp::Scan { start: 1, count: 5 }, update], true);
    assert!(writing.iter().all(|piece| piece.keys.writes.contains(&prefix)));
    let read = ycsb_pieces(&p, &[YcsbOp::Read { record: 1 }], false);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].keys.reads, {
        let mut r = vec![prefix.clone(), record_key(1)];
        r.sort();
        r
    });
    let update = ycsb_pieces(&p, &[YcsbOp::Update { record: 1, field: 0, value: vec![] }], false);
    assert_eq!(update[0].keys.writes, vec![record_key(1)]);
    assert_eq!(update[0].keys.reads, vec![prefix]);
}

#[test]
fn parameters_out_of_range_are_refused() {
    let bad_config = [
        YcsbConfig { records: 0, ..YcsbConfig::default() },
        YcsbConfig { records: MAX_RECORDS + 1, ..YcsbConfig::default() },
        YcsbConfig { field_count: 0, ..YcsbConfig::default() },
        YcsbConfig { field_length: 70_000, ..YcsbConfig::default() },
    ];
    for config in bad_config {
        assert!(YcsbWorkload::new(config.clone(), YcsbLoad::of(CoreWorkload::A), 1).is_err(), "{config:?}");
    }
    let config = YcsbConfig::default();
    let bad_load = [
        YcsbLoad { ops_per_txn: 0, ..YcsbLoad::of(CoreWorkload::A) },
        YcsbLoad { ops_per_txn: 501, ..YcsbLoad::of(CoreWorkload::A) },
        YcsbLoad { max_scan_length: 0, ..YcsbLoad::of(CoreWorkload::E) },
        YcsbLoad { mix: Mix { read: 0, update: 0, insert: 0, scan: 0, rmw: 0 }, ..YcsbLoad::of(CoreWorkload::A) },
    ];
    for load in bad_load {
        assert!(YcsbWorkload::new(config.clone(), load, 1).is_err(), "{load:?}");
    }
    assert_eq!("K2-95-5".parse::<CoreWorkload>(), Ok(CoreWorkload::K2Read95));
    assert!("g".parse::<CoreWorkload>().unwrap_err().contains("one of a, b"));
    assert_eq!("latest".parse::<Distribution>(), Ok(Distribution::Latest));
}
