use luigi_txn::procedure::ProcError;

use super::super::keys::*;
use super::super::rows::*;
use super::super::{TpccLoad, TpccWorkload};
use super::Fixture;
use crate::{TxnSpec, Workload};

#[test]
fn the_population_satisfies_every_condition() {
    let f = Fixture::new(3, 2, 0.02);
    f.assert_conditions_hold();
    let results = f.conditions();
    assert_eq!(results.iter().map(|c| c.number).collect::<Vec<_>>(), (1..=12).collect::<Vec<_>>());
    let checked = |n: usize| results[n - 1].checked;
    let (w, districts, customers) = (3, 30, 30 * 60);
    assert_eq!([checked(1), checked(8)], [w, w]);
    assert_eq!([checked(2), checked(3), checked(4), checked(9), checked(11)], [districts; 5]);
    assert_eq!([checked(5), checked(6), checked(10), checked(12)], [customers; 4]);
    let stores: Vec<_> = f.stores.iter().collect();
    assert!(f.wl.check(0, &stores).is_ok());
}

/// Runs `count` generated business transactions (every step) on `f`; only NewOrder's
/// rollback may abort. Returns the number of aborts.
fn run_generated(f: &mut Fixture, seed: u64, count: usize) -> usize {
    let mut g = f.wl.generator(seed);
    let mut aborts = 0;
    for _ in 0..count {
        let mut spec: Option<TxnSpec> = Some(g.next_txn().unwrap());
        while let Some(s) = spec.take() {
            match f.run(&s) {
                Ok(outputs) => spec = g.next_step(&s, &outputs).unwrap(),
                Err(ProcError::UserAbort(_)) => aborts += 1,
                Err(e) => panic!("{}: {e}", s.procedure),
            }
        }
    }
    aborts
}

#[test]
fn every_condition_holds_after_thousands_of_generated_transactions() {
    let mut f = Fixture::new(3, 2, 0.01);
    let aborts = run_generated(&mut f, 5, 4_000);
    assert!((2..=40).contains(&aborts), "{aborts} rollbacks of ~1 800 NewOrders");
    f.assert_conditions_hold();
}

#[test]
fn every_condition_holds_with_many_remote_transactions() {
    let config = super::workload(4, 3, 0.01).config().clone();
    let load = TpccLoad { remote_item_pct: 30.0, remote_payment_pct: 60.0, ..TpccLoad::default() };
    let mut f = Fixture::new(4, 3, 0.01);
    f.wl = TpccWorkload::new(config, load, 3).unwrap();
    run_generated(&mut f, 6, 2_000);
    f.assert_conditions_hold();
}

#[test]
fn the_check_transaction_and_the_local_stores_agree() {
    let mut f = Fixture::new(3, 2, 0.01);
    run_generated(&mut f, 8, 300);
    let spec = f.wl.check_txn();
    assert_eq!(spec.pieces.len(), 2);
    assert!(spec.pieces.iter().all(|p| p.keys.writes.is_empty() && p.keys.check_shape().is_ok()));
    let outputs = f.run(&spec).unwrap();
    assert_eq!(f.wl.evaluate(&outputs).unwrap(), f.conditions());
    assert!(f.wl.evaluate(&outputs[..1]).is_err(), "a missing shard's warehouses are an error");
}

/// Corrupts a fresh population with `corrupt` and asserts that condition `number` fails.
fn fails(number: u8, corrupt: impl FnOnce(&mut Fixture)) {
    let mut f = Fixture::new(2, 2, 0.01);
    corrupt(&mut f);
    let result = f.conditions().into_iter().find(|c| c.number == number).unwrap();
    assert!(!result.passed, "condition {number} holds on corrupted state");
    assert!(result.detail.contains("violation"), "{}", result.detail);
    let stores: Vec<_> = f.stores.iter().collect();
    assert!(f.wl.check(0, &stores).is_err());
}

fn bump<T: serde::Serialize + serde::de::DeserializeOwned>(
    f: &mut Fixture,
    w: u32,
    key: Vec<u8>,
    change: impl FnOnce(&mut T),
) {
    let mut row: T = f.row(w, &key);
    change(&mut row);
    f.set_row(w, key, &row);
}

/// The first undelivered order of the population in a district.
fn undelivered(f: &Fixture) -> u32 {
    f.wl.config().initial_delivered() + 1
}

#[test]
fn condition_1_fails_on_a_wrong_w_ytd() {
    fails(1, |f| bump(f, 2, w_ytd_key(2), |y: &mut Money| *y += 1));
}

#[test]
fn condition_2_fails_on_a_wrong_next_order_id() {
    fails(2, |f| bump(f, 1, next_o_id_key(1, 5), |o: &mut u32| *o += 1));
}

#[test]
fn condition_3_fails_on_a_gap_in_new_orders() {
    fails(3, |f| {
        let o = undelivered(f) + 2;
        assert!(f.store_of(1).delete(&new_order_key(1, 2, o)).is_some());
    });
}

#[test]
fn condition_4_fails_on_a_missing_order_line() {
    fails(4, |f| assert!(f.store_of(2).delete(&order_line_key(2, 9, 3, 1)).is_some()));
}

#[test]
fn condition_5_fails_on_a_carrier_for_an_undelivered_order() {
    fails(5, |f| {
        let o = undelivered(f);
        bump(f, 1, order_key(1, 1, o), |r: &mut OrderRow| r.carrier = Some(3));
    });
}

#[test]
fn condition_6_fails_on_a_wrong_line_count() {
    fails(6, |f| bump(f, 1, order_key(1, 7, 4), |r: &mut OrderRow| r.ol_cnt -= 1));
}

#[test]
fn condition_7_fails_on_a_delivery_date_of_an_undelivered_line() {
    fails(7, |f| {
        let o = undelivered(f);
        bump(f, 2, order_line_key(2, 4, o, 2), |r: &mut OrderLineRow| r.delivery_d = Some(5));
    });
}

#[test]
fn condition_8_fails_on_history_paid_at_a_warehouse_without_its_ytd() {
    fails(8, |f| bump(f, 1, history_key(1, 3, 4, 0), |h: &mut HistoryRow| h.w = 2));
}

#[test]
fn condition_9_fails_on_a_wrong_d_ytd() {
    fails(9, |f| bump(f, 1, d_ytd_key(1, 10), |y: &mut Money| *y -= 5));
}

#[test]
fn condition_10_fails_on_a_wrong_balance() {
    fails(10, |f| bump(f, 2, customer_changing_key(2, 2, 2), |c: &mut CustomerChanging| c.balance += 1));
}

#[test]
fn condition_11_fails_on_a_lost_delivered_order() {
    fails(11, |f| {
        let order: OrderRow = f.row(1, &order_key(1, 6, 1));
        let store = f.store_of(1);
        assert!(store.delete(&order_key(1, 6, 1)).is_some());
        assert!(store.delete(&order_by_customer_key(1, 6, order.c, 1)).is_some());
        for ol in 1..=order.ol_cnt {
            assert!(store.delete(&order_line_key(1, 6, 1, ol)).is_some());
        }
    });
}

#[test]
fn condition_12_fails_on_a_wrong_ytd_payment() {
    fails(12, |f| bump(f, 1, customer_changing_key(1, 8, 5), |c: &mut CustomerChanging| c.ytd_payment += 1));
}
