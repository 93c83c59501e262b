use std::collections::BTreeSet;

use luigi_txn::partition::HashPartitioner;
use luigi_txn::types::TxnId;

use super::*;
use crate::TxnSpec;

fn bench(shards: u32, cross: f64) -> MicroGenerator {
    let config = MicroConfig { keys: 1000, cross_shard: cross, ..MicroConfig::default() };
    MicroGenerator::new(config, shards, 7)
}

/// The simulator's shape: 1..=10 keys, possibly repeated, modulo placement, 2..=all shards.
fn sim(shards: u32, keys: u64, cross: f64) -> MicroConfig {
    MicroConfig {
        keys,
        vary_ops: true,
        cross_shard: cross,
        spread: Spread::Random,
        distinct_keys: false,
        placement: Placement::Modulo,
        ..MicroConfig::default()
    }
    .tap_check(shards)
}

trait TapCheck {
    fn tap_check(self, shards: u32) -> Self;
}

impl TapCheck for MicroConfig {
    fn tap_check(self, shards: u32) -> Self {
        self.check(shards).unwrap();
        self
    }
}

fn ops_of(spec: &TxnSpec) -> Vec<MicroOp> {
    micro_ops(&spec.procedure, &spec.args).expect("micro arguments")
}

fn shards_of(spec: &TxnSpec) -> BTreeSet<u32> {
    spec.pieces.iter().map(|p| p.shard).collect()
}

#[test]
fn ten_distinct_ops_about_half_reads_within_the_key_space() {
    let mut g = bench(1, 1.0);
    let mut reads = 0;
    for _ in 0..1000 {
        let t = g.next_txn().unwrap();
        let ops = ops_of(&t);
        assert_eq!(ops.len(), 10);
        assert!(ops.iter().all(|o| o.key < 1000));
        assert_eq!(ops.iter().map(|o| o.key).collect::<BTreeSet<_>>().len(), 10, "distinct keys");
        assert_eq!(t.reads().count() + t.writes().count(), 10);
        reads += t.reads().count();
    }
    assert!((4000..6000).contains(&reads), "{reads} reads of 10000 ops");
}

#[test]
fn cross_shard_share_is_respected() {
    let mut all = bench(3, 1.0);
    assert!((0..100).all(|_| shards_of(&all.next_txn().unwrap()).len() == 3));
    let mut none = bench(3, 0.0);
    assert!((0..100).all(|_| shards_of(&none.next_txn().unwrap()).len() == 1));
    let mut half = bench(3, 0.5);
    let cross = (0..1000).filter(|_| half.next_txn().unwrap().is_cross_shard()).count();
    assert!((400..600).contains(&cross), "{cross}");
}

#[test]
fn pieces_follow_the_partitioner() {
    let p = HashPartitioner::new(4);
    let mut g = bench(4, 0.5);
    for _ in 0..100 {
        let t = g.next_txn().unwrap();
        for piece in &t.pieces {
            assert!(piece.keys.entries().all(|(k, _)| p.shard_of(k) == piece.shard));
        }
    }
    // Hash placement is HashPartitioner's, so the runtime's clients agree with the workload.
    let m = MicroPartitioner::new(4, Placement::Hash);
    assert!((0..1000).all(|k| m.shard_of(&micro_key(k)) == p.shard_of(&micro_key(k))));
}

#[test]
fn same_seed_same_transactions_other_seed_others() {
    let draw = |seed| {
        let mut g = MicroGenerator::new(MicroConfig::default(), 2, seed);
        (0..20).map(|_| g.next_txn().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    let workload = MicroWorkload::new(MicroConfig::default(), 2).unwrap();
    let (mut a, mut b) = (workload.generator(5), workload.generator(5));
    assert!((0..20).all(|_| a.next_txn().unwrap() == b.next_txn().unwrap()));
}

#[test]
fn zipf_is_skewed() {
    let config = MicroConfig { keys: 1000, zipf: Some(0.99), ..MicroConfig::default() };
    let mut g = MicroGenerator::new(config, 1, 1);
    let hot = (0..1000).filter(|_| ops_of(&g.next_txn().unwrap()).iter().any(|o| o.key == 0)).count();
    assert!(hot > 100, "key 0 should be hot, seen in {hot} of 1000");
}

#[test]
fn a_key_that_cannot_be_placed_is_an_error_not_a_panic() {
    let config = MicroConfig { keys: 20, ops: 10, ..MicroConfig::default() };
    let mut g = MicroGenerator::new(config, 64, 1);
    let e = (0..100).find_map(|_| g.next_txn().err()).expect("some transaction cannot be placed");
    assert!(e.0.contains("no key on shard") && e.0.contains("in 10000 draws"), "{e}");
}

#[test]
fn simulator_shape_single_shard_transactions_stay_home() {
    let mut g = MicroGenerator::new(sim(3, 10, 0.0), 3, 3);
    for _ in 0..200 {
        let t = g.next_txn().unwrap();
        assert_eq!(t.pieces.len(), 1, "{t:?}");
        let ops = ops_of(&t);
        assert!((1..=10).contains(&ops.len()));
        assert!(ops.iter().all(|o| o.key < 10 && o.key % 3 == u64::from(t.pieces[0].shard)));
    }
}

#[test]
fn simulator_shape_cross_shard_transactions_touch_two_to_all_shards() {
    let mut g = MicroGenerator::new(sim(5, 12, 1.0), 5, 3);
    let mut widths = BTreeSet::new();
    let mut repeated = false;
    for _ in 0..400 {
        let t = g.next_txn().unwrap();
        let ops = ops_of(&t);
        assert!((2..=5).contains(&t.pieces.len()), "{t:?}");
        assert!(ops.len() >= t.pieces.len() && ops.len() <= 10, "{t:?}");
        assert!(ops.iter().all(|o| o.key < 12));
        repeated |= ops.iter().map(|o| o.key).collect::<BTreeSet<_>>().len() < ops.len();
        widths.insert(t.pieces.len());
    }
    assert_eq!(widths.into_iter().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
    assert!(repeated, "keys may repeat in the simulator's shape");
}

#[test]
fn chosen_write_values_are_used() {
    let mut g = MicroGenerator::new(MicroConfig { read_ratio: 0.0, ..MicroConfig::default() }, 1, 9);
    let ops = g.next_ops(Some(&|i| 100 + i as u64)).unwrap();
    assert_eq!(ops.iter().map(|o| o.write).collect::<Vec<_>>(), (0..10).map(|i| Some(100 + i)).collect::<Vec<_>>());
}

#[test]
fn tagged_arguments_round_trip_and_run_micro() {
    let id = TxnId { client: 3, seq: 9 };
    let ops = [MicroOp { key: 4, write: Some(7) }, MicroOp { key: 4, write: None }];
    let args = encode_tagged_args(id, &ops);
    assert_eq!(decode_tagged_args(&args), Some((id, ops.to_vec())));
    assert_eq!(micro_ops(TaggedMicro::NAME, &args), Some(ops.to_vec()));
    assert_eq!(micro_ops(Micro::NAME, &postcard::to_stdvec(&ops.to_vec()).unwrap()), Some(ops.to_vec()));
    assert_eq!(micro_ops("kv", &args), None);
    assert!(is_micro(TaggedMicro::NAME) && is_micro(Micro::NAME) && !is_micro("kv"));
    let registry = MicroWorkload::new(MicroConfig::default(), 1).unwrap().registry();
    let keys = luigi_txn::types::KeySet::new(vec![], vec![micro_key(4)]);
    let mut store = Store::new();
    let out = registry.execute(TaggedMicro::NAME, &args, &mut store, &keys, 0).unwrap();
    assert_eq!(postcard::from_bytes::<MicroOutput>(&out).unwrap(), vec![(4, Some(7))]);
    assert!(registry.execute(TaggedMicro::NAME, &[1, 2], &mut store, &keys, 0).is_err());
}

#[test]
fn population_is_deterministic_per_seed_and_shard() {
    for placement in [Placement::Hash, Placement::Modulo] {
        let config = MicroConfig { keys: 100, populate: true, placement, ..MicroConfig::default() };
        let w = MicroWorkload::new(config, 3).unwrap();
        let rows: Vec<_> = (0..3).map(|s| w.population(11, s)).collect();
        assert_eq!(rows, (0..3).map(|s| w.population(11, s)).collect::<Vec<_>>(), "same seed, same rows");
        assert_ne!(rows[0], w.population(12, 0), "another seed, other values");
        assert_eq!(rows.iter().map(Vec::len).sum::<usize>(), 100, "every key once");
        let stores: Vec<Store> = (0..3).map(|s| w.populate(11, s)).collect();
        w.check(11, &stores.iter().collect::<Vec<_>>()).unwrap();
    }
    let empty = MicroWorkload::new(MicroConfig::default(), 2).unwrap();
    assert!(empty.population(1, 0).is_empty());
}

#[test]
fn the_check_fails_on_a_corrupted_state() {
    let config = MicroConfig { keys: 50, populate: true, placement: Placement::Modulo, ..MicroConfig::default() };
    let w = MicroWorkload::new(config, 2).unwrap();
    let good: Vec<Store> = (0..2).map(|s| w.populate(4, s)).collect();
    let check = |stores: &[Store]| w.check(4, &stores.iter().collect::<Vec<_>>());
    check(&good).unwrap();
    // A write of the workload keeps it consistent.
    let mut written = good.clone();
    written[1].put(micro_key(3), 77u64.to_le_bytes().to_vec());
    check(&written).unwrap();

    let corrupt = |f: &dyn Fn(&mut Vec<Store>)| {
        let mut stores = good.clone();
        f(&mut stores);
        check(&stores).expect_err("corruption detected")
    };
    let e = corrupt(&|s| {
        s[0].put(micro_key(3), 1u64.to_le_bytes().to_vec());
    });
    assert!(e.contains("which shard 1 owns"), "{e}");
    let e = corrupt(&|s| {
        s[0].put(micro_key(2), vec![1, 2, 3]);
    });
    assert!(e.contains("not an 8-byte integer"), "{e}");
    let e = corrupt(&|s| {
        s[0].put(micro_key(50), 0u64.to_le_bytes().to_vec());
    });
    assert!(e.contains("outside the key space"), "{e}");
    let e = corrupt(&|s| {
        s[1].put(b"junk".to_vec(), vec![]);
    });
    assert!(e.contains("foreign key"), "{e}");
    let e = corrupt(&|s| {
        s[1].delete(&micro_key(7));
    });
    assert!(e.contains("lost key 7"), "{e}");
    let e = corrupt(&|s| {
        s.pop();
    });
    assert!(e.contains("1 stores for 2 shards"), "{e}");
}

#[test]
fn parameters_out_of_range_are_refused() {
    let ok = MicroConfig::default();
    ok.check(64).unwrap();
    for (bad, shards) in [
        (MicroConfig { ops: 0, ..ok.clone() }, 1),
        (MicroConfig { keys: 0, ..ok.clone() }, 1),
        (MicroConfig { keys: MAX_KEYS + 1, ..ok.clone() }, 1),
        (MicroConfig { keys: 19, ..ok.clone() }, 1),
        (MicroConfig { ops: MAX_OPS + 1, keys: 1 << 20, ..ok.clone() }, 1),
        (MicroConfig { read_ratio: f64::NAN, ..ok.clone() }, 1),
        (MicroConfig { cross_shard: 1.5, ..ok.clone() }, 1),
        (MicroConfig { zipf: Some(f64::INFINITY), ..ok.clone() }, 1),
        (MicroConfig { keys: 3, ops: 1, placement: Placement::Modulo, ..ok.clone() }, 4),
        (ok.clone(), 0),
    ] {
        assert!(bad.check(shards).is_err(), "{bad:?} over {shards}");
    }
    // Without distinct keys, few keys and many operations are fine.
    MicroConfig { keys: 2, ops: 10, distinct_keys: false, placement: Placement::Modulo, ..ok }.check(2).unwrap();
}
