use std::collections::BTreeMap;

use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::ProcError;

use super::super::conflicts::measure_conflicts;
use super::super::keys::*;
use super::super::procedures::new_order::NewOrderArgs;
use super::super::procedures::payment::PaymentArgs;
use super::super::procedures::*;
use super::super::{Mix, TpccLoad, TpccWorkload, TxnKind};
use super::{workload, Fixture};
use crate::{TxnGenerator, Workload};

#[test]
fn the_standard_mix_has_the_spec_shares() {
    let wl = workload(4, 2, 0.01);
    let mut g = wl.tpcc_generator(1);
    let n = 20_000;
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        *counts.entry(g.next_kind()).or_insert(0u32) += 1;
    }
    for (kind, share) in [
        (TxnKind::NewOrder, 45.0),
        (TxnKind::Payment, 43.0),
        (TxnKind::OrderStatus, 4.0),
        (TxnKind::Delivery, 4.0),
        (TxnKind::StockLevel, 4.0),
    ] {
        let got = f64::from(counts[&kind]) * 100.0 / f64::from(n);
        assert!((got - share).abs() < 1.0, "{kind:?}: {got:.2} % (spec {share} %)");
    }
    let config = wl.config().clone();
    let only = TpccWorkload::new(config, TpccLoad { mix: Mix::NewOrder, ..TpccLoad::default() }, 2).unwrap();
    let mut g = only.generator(2);
    assert!((0..1_000).all(|_| g.next_txn().unwrap().procedure == NEW_ORDER));
    assert_eq!("new-order".parse::<Mix>(), Ok(Mix::NewOrder));
    assert!("tpcc".parse::<Mix>().is_err());
}

#[test]
fn the_read_mostly_mix_is_four_fifths_read_only_and_every_mix_sums_to_100() {
    for mix in Mix::ALL {
        assert_eq!(mix.shares().iter().map(|(_, share)| share).sum::<u32>(), 100, "{mix:?}");
        assert_eq!(mix.name().parse::<Mix>(), Ok(mix));
    }
    assert!("read_mostly".parse::<Mix>().unwrap_err().contains("read-mostly"), "the error names the mixes");
    let config = workload(4, 2, 0.01).config().clone();
    let wl = TpccWorkload::new(config, TpccLoad { mix: Mix::ReadMostly, ..TpccLoad::default() }, 2).unwrap();
    let mut g = wl.tpcc_generator(11);
    let n = 20_000;
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        *counts.entry(g.next_kind()).or_insert(0u32) += 1;
    }
    let pct = |kind| f64::from(counts.get(&kind).copied().unwrap_or(0)) * 100.0 / f64::from(n);
    for (kind, share) in [
        (TxnKind::NewOrder, 10.0),
        (TxnKind::Payment, 9.0),
        (TxnKind::OrderStatus, 40.0),
        (TxnKind::Delivery, 1.0),
        (TxnKind::StockLevel, 40.0),
    ] {
        assert!((pct(kind) - share).abs() < 1.0, "{kind:?}: {:.2} % (mix {share} %)", pct(kind));
    }
    let read_only = pct(TxnKind::OrderStatus) + pct(TxnKind::StockLevel);
    assert!((79.0..81.0).contains(&read_only), "read-only share {read_only:.2} %");
}

#[test]
fn order_status_and_stock_levels_two_steps_declare_no_writes_and_the_others_do() {
    let mut f = Fixture::new(3, 2, 0.02);
    let mut g = f.wl.tpcc_generator(12);
    let (mut read_only_txns, mut second_steps) = (0, 0);
    for _ in 0..100 {
        for kind in [TxnKind::NewOrder, TxnKind::Payment, TxnKind::OrderStatus, TxnKind::Delivery, TxnKind::StockLevel]
        {
            let reads_only = matches!(kind, TxnKind::OrderStatus | TxnKind::StockLevel);
            let mut spec = Some(g.txn_of(kind));
            while let Some(s) = spec.take() {
                let writes: usize = s.pieces.iter().map(|piece| piece.keys.writes.len()).sum();
                assert_eq!(writes == 0, reads_only, "{}: {writes} declared writes", s.procedure);
                read_only_txns += usize::from(reads_only);
                second_steps += usize::from(s.procedure == STOCK_LEVEL_STOCK);
                match f.run(&s) {
                    Ok(outputs) => spec = g.next_step(&s, &outputs).unwrap(),
                    Err(e) => assert!(s.procedure == NEW_ORDER && matches!(e, ProcError::UserAbort(_)), "{e}"),
                }
            }
        }
    }
    assert!(second_steps > 50, "StockLevel's second step ran {second_steps} times");
    assert!(read_only_txns >= 200 + second_steps);
}

#[test]
fn remote_shares_rollbacks_and_by_name_follow_the_load() {
    let wl = workload(5, 2, 0.01);
    let items = wl.config().items();
    let mut g = wl.tpcc_generator(3);
    let (mut lines, mut remote_lines, mut rollbacks, mut orders) = (0u32, 0u32, 0u32, 0u32);
    for _ in 0..20_000 {
        let a: NewOrderArgs = g.new_order();
        orders += 1;
        assert!((5..=15).contains(&a.lines.len()));
        lines += a.lines.len() as u32;
        remote_lines += a.lines.iter().filter(|l| l.supply_w != a.w).count() as u32;
        rollbacks += u32::from(a.lines.last().unwrap().item == items + 1);
        assert!(a.lines[..a.lines.len() - 1].iter().all(|l| (1..=items).contains(&l.item)));
        assert!(a.lines.iter().all(|l| (1..=10).contains(&l.quantity) && (1..=5).contains(&l.supply_w)));
    }
    let pct = |x: u32, of: u32| f64::from(x) * 100.0 / f64::from(of);
    assert!((0.8..1.2).contains(&pct(remote_lines, lines)), "remote lines {:.2} %", pct(remote_lines, lines));
    assert!((0.8..1.2).contains(&pct(rollbacks, orders)), "rollbacks {:.2} %", pct(rollbacks, orders));
    let (mut remote, mut by_name, n) = (0u32, 0u32, 20_000);
    for _ in 0..n {
        let a: PaymentArgs = g.payment();
        remote += u32::from(a.c_w != a.w);
        by_name += u32::from(matches!(a.customer, CustomerSel::LastName(_)));
        assert!((100..=500_000).contains(&a.amount));
    }
    assert!((14.0..16.0).contains(&pct(remote, n)), "remote payments {:.2} %", pct(remote, n));
    assert!((59.0..61.0).contains(&pct(by_name, n)), "by name {:.2} %", pct(by_name, n));
    // One warehouse: nothing is remote.
    let mut single = workload(1, 1, 0.01).tpcc_generator(4);
    assert!((0..2_000).all(|_| single.new_order().lines.iter().all(|l| l.supply_w == 1)));
    assert!((0..2_000).all(|_| single.payment().c_w == 1));
}

#[test]
fn every_spec_is_well_shaped_and_on_the_right_shards() {
    let wl = workload(5, 3, 0.01);
    let p = wl.tpcc_partitioner();
    let mut g = wl.tpcc_generator(5);
    let mut cross = 0;
    for _ in 0..5_000 {
        let spec = g.next_txn().unwrap();
        assert!(NAMES.contains(&spec.procedure.as_str()));
        assert!(spec.pieces.windows(2).all(|w| w[0].shard < w[1].shard));
        cross += usize::from(spec.is_cross_shard());
        for piece in &spec.pieces {
            piece.keys.check_shape().unwrap();
            for (key, _) in piece.keys.entries() {
                assert!(
                    p.is_replicated(key) || p.shard_of(key) == piece.shard,
                    "{} on shard {}",
                    describe(key),
                    piece.shard
                );
            }
        }
        // ITEM rows are read on every participant of a NewOrder.
        if spec.procedure == NEW_ORDER {
            let items: Vec<_> = spec.pieces[0].keys.reads.iter().filter(|k| is_item_key(k)).collect();
            assert!(spec.pieces.iter().all(|x| x
                .keys
                .reads
                .iter()
                .filter(|k| is_item_key(k))
                .eq(items.iter().copied())));
        }
    }
    assert!(cross > 100, "{cross} cross-shard transactions");
}

#[test]
fn the_generator_is_deterministic() {
    let wl = workload(3, 2, 0.01);
    let mut a = wl.generator(9);
    let mut b = wl.generator(9);
    let mut c = wl.generator(10);
    let xs: Vec<_> = (0..200).map(|_| a.next_txn().unwrap()).collect();
    let ys: Vec<_> = (0..200).map(|_| b.next_txn().unwrap()).collect();
    let zs: Vec<_> = (0..200).map(|_| c.next_txn().unwrap()).collect();
    assert_eq!(xs, ys);
    assert_ne!(xs, zs);
}

#[test]
fn declared_conflicts_cover_the_touched_ones() {
    let wl = workload(2, 2, 0.01);
    let stats = measure_conflicts(&wl, 1, 2_000, 8).unwrap();
    assert_eq!(stats.txns, 2_000);
    assert_eq!(stats.undetected, 0, "a row conflict the declarations miss");
    assert!(stats.actual <= stats.declared && stats.actual > 0);
    assert_eq!(stats.by_procedure.values().map(|p| p.txns).sum::<u64>(), 2_000);
    assert!(stats.by_procedure.contains_key(STOCK_LEVEL_STOCK), "StockLevel's second step runs");
    let alone = measure_conflicts(&wl, 1, 200, 1).unwrap();
    assert_eq!((alone.declared, alone.actual), (0, 0));
}

/// The conflict figures of `docs/TPCC.md`: scale 0.1, 2 warehouses on 2 shards.
/// `cargo test --release -p luigi-workloads conflict_figures -- --ignored --nocapture`
#[test]
#[ignore]
fn conflict_figures() {
    let wl = workload(2, 2, 0.1);
    for window in [8, 64] {
        let s = measure_conflicts(&wl, 7, 20_000, window).unwrap();
        println!(
            "window {window}: {} txns, declared {} ({:.1} %), actual {} ({:.1} %), undetected {}",
            s.txns,
            s.declared,
            100.0 * s.declared_share(),
            s.actual,
            100.0 * s.actual_share(),
            s.undetected
        );
        for (name, p) in &s.by_procedure {
            let pct = |x: u64| 100.0 * x as f64 / p.txns.max(1) as f64;
            println!(
                "  {name:<26} {:>6} txns  declared {:>5.1} %  actual {:>5.1} %",
                p.txns,
                pct(p.declared),
                pct(p.actual)
            );
        }
    }
}
