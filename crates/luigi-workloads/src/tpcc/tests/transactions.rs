use std::collections::BTreeSet;

use luigi_store::ScanOrder;
use luigi_txn::procedure::{prefix_successor, ProcError};

use super::super::keys::*;
use super::super::population::{history_data, s_dist, DISTRICTS};
use super::super::procedures::delivery::{DeliveryArgs, DeliveryOutput};
use super::super::procedures::new_order::{NewOrderArgs, NewOrderOutput, OrderLineArg};
use super::super::procedures::order_status::{OrderStatusArgs, OrderStatusOutput};
use super::super::procedures::payment::{PaymentArgs, PaymentOutput};
use super::super::procedures::stock_level::{StockLevelArgs, StockLevelOrdersOutput, StockLevelOutput};
use super::super::procedures::{CustomerSel, STOCK_LEVEL_STOCK};
use super::super::rows::*;
use super::Fixture;
use crate::TxnGenerator;

/// Two warehouses on two shards, 1 000 items, 30 customers per district.
fn fixture() -> Fixture {
    Fixture::new(2, 2, 0.01)
}

fn set_stock_quantity(f: &mut Fixture, w: u32, i: u32, quantity: i32) {
    let mut stock: StockRow = f.row(w, &stock_key(w, i));
    stock.quantity = quantity;
    f.set_row(w, stock_key(w, i), &stock);
}

#[test]
fn new_order_enters_the_order_and_applies_the_stock_rule() {
    let mut f = fixture();
    let config = f.wl.config().clone();
    let (w, d, c) = (1, 3, 7);
    set_stock_quantity(&mut f, 1, 11, 50);
    set_stock_quantity(&mut f, 2, 22, 12);
    let lines =
        vec![OrderLineArg { item: 11, supply_w: 1, quantity: 5 }, OrderLineArg { item: 22, supply_w: 2, quantity: 3 }];
    let args = NewOrderArgs { w, d, c, lines, entry_d: 1_700_000_000 };
    let spec = args.spec(&f.wl.tpcc_partitioner());
    assert_eq!(spec.pieces.len(), 2, "a remote supply line makes it cross-shard");
    let next_before: u32 = f.row(w, &next_o_id_key(w, d));
    let old_remote: StockRow = f.row(2, &stock_key(2, 22));
    let outputs = f.run(&spec).unwrap();
    let out: Vec<NewOrderOutput> = outputs.iter().map(|(_, b)| postcard::from_bytes(b).unwrap()).collect();
    let home = out[0].home.clone().expect("shard 0 is home");
    assert!(out[1].home.is_none());
    assert_eq!(home.o_id, next_before);
    assert_eq!(f.row::<u32>(w, &next_o_id_key(w, d)), next_before + 1);
    // Stock rule: 50 - 5 = 45; 12 < 3 + 10, so 12 - 3 + 91 = 100; remote count on the remote line only.
    assert_eq!(out[0].stock.iter().map(|s| (s.ol, s.quantity)).collect::<Vec<_>>(), [(1, 45)]);
    assert_eq!(out[1].stock.iter().map(|s| (s.ol, s.quantity)).collect::<Vec<_>>(), [(2, 100)]);
    let local: StockRow = f.row(1, &stock_key(1, 11));
    assert_eq!((local.quantity, local.ytd, local.order_cnt, local.remote_cnt), (45, 5, 1, 0));
    let remote: StockRow = f.row(2, &stock_key(2, 22));
    assert_eq!((remote.quantity, remote.ytd, remote.order_cnt, remote.remote_cnt), (100, 3, 1, 1));
    assert_eq!(remote.data, old_remote.data);
    // The order, its index entry, NEW-ORDER and lines.
    let o = home.o_id;
    let order: OrderRow = f.row(w, &order_key(w, d, o));
    assert_eq!((order.c, order.carrier, order.ol_cnt, order.all_local), (c, None, 2, false));
    assert!(f.store_of(w).get(&order_by_customer_key(w, d, c, o)).is_some());
    assert!(f.store_of(w).get(&new_order_key(w, d, o)).is_some());
    let price = |f: &mut Fixture, i| f.row::<ItemRow>(1, &item_key(i)).price;
    let (p11, p22) = (price(&mut f, 11), price(&mut f, 22));
    let line1: OrderLineRow = f.row(w, &order_line_key(w, d, o, 1));
    let line2: OrderLineRow = f.row(w, &order_line_key(w, d, o, 2));
    assert_eq!((line1.amount, line2.amount), (5 * p11, 3 * p22));
    assert_eq!(home.amounts, vec![5 * p11, 3 * p22]);
    assert_eq!(line1.dist_info, local.dist_of(d).unwrap());
    assert_eq!(line2.dist_info, s_dist(&config, 2, 22, d), "static data rule for the remote line");
    assert_eq!(line2.dist_info, remote.dist_of(d).unwrap());
    assert_eq!((line2.supply_w, line2.delivery_d, line2.quantity), (2, None, 3));
    let customer: CustomerRow = f.row(w, &customer_key(w, d, c));
    let factor = (10_000 - customer.discount) as i128 * (10_000 + home.w_tax + home.d_tax) as i128;
    assert_eq!(home.total as i128, (5 * p11 + 3 * p22) as i128 * factor / 100_000_000);
    f.assert_conditions_hold();
}

#[test]
fn new_order_rollback_leaves_every_participant_unchanged() {
    let mut f = fixture();
    let items = f.wl.config().items();
    let before = f.hashes();
    let lines = vec![
        OrderLineArg { item: 5, supply_w: 1, quantity: 1 },
        OrderLineArg { item: 6, supply_w: 2, quantity: 1 },
        OrderLineArg { item: items + 1, supply_w: 1, quantity: 1 },
    ];
    let spec = NewOrderArgs { w: 1, d: 1, c: 1, lines, entry_d: 1 }.spec(&f.wl.tpcc_partitioner());
    assert_eq!(spec.pieces.len(), 2);
    let err = f.run(&spec).unwrap_err();
    assert!(matches!(err, ProcError::UserAbort(_)), "{err}");
    assert_eq!(f.hashes(), before);
}

#[test]
fn bad_arguments_are_refused_by_every_participant() {
    let mut f = fixture();
    let before = f.hashes();
    let p = f.wl.tpcc_partitioner();
    let line = |supply_w, quantity| OrderLineArg { item: 1, supply_w, quantity };
    for args in [
        NewOrderArgs { w: 1, d: 11, c: 1, lines: vec![line(2, 1)], entry_d: 1 },
        NewOrderArgs { w: 1, d: 1, c: 31, lines: vec![line(2, 1)], entry_d: 1 },
        NewOrderArgs { w: 1, d: 1, c: 1, lines: vec![line(2, 11)], entry_d: 1 },
        NewOrderArgs { w: 1, d: 1, c: 1, lines: vec![line(2, 1); 16], entry_d: 1 },
    ] {
        assert!(matches!(f.run(&args.spec(&p)), Err(ProcError::BadArgs(_))), "{args:?}");
    }
    let pay = PaymentArgs { w: 1, d: 1, c_w: 2, c_d: 1, customer: CustomerSel::Id(1), amount: 0, date: 1, nonce: 1 };
    assert!(matches!(f.run(&pay.spec(&p)), Err(ProcError::BadArgs(_))));
    let mut garbage = pay.spec(&p);
    garbage.args = vec![0xff; 3];
    assert!(matches!(f.run(&garbage), Err(ProcError::BadArgs(_))));
    assert_eq!(f.hashes(), before);
}

#[test]
fn payment_updates_ytd_customer_and_history_across_shards() {
    let mut f = fixture();
    let config = f.wl.config().clone();
    let (w, d, c_w, c_d, c) = (1, 2, 2, 5, 9);
    let w_ytd: Money = f.row(w, &w_ytd_key(w));
    let d_ytd: Money = f.row(w, &d_ytd_key(w, d));
    let before: CustomerChanging = f.row(c_w, &customer_changing_key(c_w, c_d, c));
    let args =
        PaymentArgs { w, d, c_w, c_d, customer: CustomerSel::Id(c), amount: 12_345, date: 1_700_000_001, nonce: 77 };
    let spec = args.spec(&f.wl.tpcc_partitioner());
    assert_eq!(spec.pieces.len(), 2);
    let outputs = f.run(&spec).unwrap();
    let out: Vec<PaymentOutput> = outputs.iter().map(|(_, b)| postcard::from_bytes(b).unwrap()).collect();
    assert!(out[0].home.is_some() && out[0].customer.is_none());
    assert!(out[1].home.is_none() && out[1].customer.is_some());
    assert_eq!(f.row::<Money>(w, &w_ytd_key(w)), w_ytd + 12_345);
    assert_eq!(f.row::<Money>(w, &d_ytd_key(w, d)), d_ytd + 12_345);
    let after: CustomerChanging = f.row(c_w, &customer_changing_key(c_w, c_d, c));
    assert_eq!(after.balance, before.balance - 12_345);
    assert_eq!(after.ytd_payment, before.ytd_payment + 12_345);
    assert_eq!(after.payment_cnt, before.payment_cnt + 1);
    assert_eq!(out[1].customer.as_ref().unwrap().balance, after.balance);
    let history: HistoryRow = f.row(c_w, &history_key(c_w, c_d, c, 77));
    assert_eq!((history.w, history.d, history.amount, history.date), (w, d, 12_345, 1_700_000_001));
    assert_eq!(history.data, history_data(&config, w, d), "static data rule for H_DATA");
    let home = out[0].home.as_ref().unwrap();
    assert_eq!(history.data, format!("{}    {}", home.w_name, home.d_name));
    f.assert_conditions_hold();
}

/// Gives customers `ids` of (w, d) the last name `last` and first names `firsts`.
fn rename(f: &mut Fixture, w: u32, d: u8, last: &str, named: &[(u16, &str)]) {
    for &(c, first) in named {
        let mut row: CustomerRow = f.row(w, &customer_key(w, d, c));
        let old = name_index_key(w, d, &pad_name(&row.last).unwrap(), &pad_name(&row.first).unwrap(), c);
        assert!(f.store_of(w).delete(&old).is_some());
        row.last = last.into();
        row.first = first.into();
        f.set_row(w, customer_key(w, d, c), &row);
        let new = name_index_key(w, d, &pad_name(last).unwrap(), &pad_name(first).unwrap(), c);
        f.store_of(w).put(new, Vec::new());
    }
}

#[test]
fn payment_by_last_name_picks_the_middle_customer_by_first_name() {
    let mut f = fixture();
    let (w, d) = (2, 4);
    let last = "PRESESEATION";
    rename(&mut f, w, d, last, &[(4, "Carl"), (9, "Abe"), (2, "Bob"), (7, "Dan")]);
    let p = f.wl.tpcc_partitioner();
    let pay = |f: &mut Fixture, nonce| {
        let customer = CustomerSel::LastName(last.into());
        let args = PaymentArgs { w, d, c_w: w, c_d: d, customer, amount: 100, date: 1, nonce };
        f.run_one::<PaymentOutput>(&args.spec(&p)).customer.unwrap().c
    };
    assert_eq!(pay(&mut f, 1), 2, "4 named: position 2 (Bob)");
    rename(&mut f, w, d, last, &[(11, "Eve")]);
    assert_eq!(pay(&mut f, 2), 4, "5 named: position 3 (Carl)");
    let os = OrderStatusArgs { w, d, customer: CustomerSel::LastName(last.into()) };
    assert_eq!(f.run_one::<OrderStatusOutput>(&os.spec(&p)).c, 4);
    let nobody = OrderStatusArgs { w, d, customer: CustomerSel::LastName("NOBODY".into()) };
    assert!(matches!(f.run(&nobody.spec(&p)), Err(ProcError::BadArgs(_))));
    f.assert_conditions_hold();
}

#[test]
fn payment_to_a_bad_credit_customer_prepends_to_c_data() {
    let mut f = fixture();
    let (w, d) = (1, 1);
    for (c, credit) in [(3, Credit::Bad), (4, Credit::Good)] {
        let mut row: CustomerRow = f.row(w, &customer_key(w, d, c));
        row.credit = credit;
        f.set_row(w, customer_key(w, d, c), &row);
    }
    let p = f.wl.tpcc_partitioner();
    for (c, nonce) in [(3, 1), (4, 2)] {
        let before: CustomerChanging = f.row(w, &customer_changing_key(w, d, c));
        let args = PaymentArgs { w, d, c_w: w, c_d: d, customer: CustomerSel::Id(c), amount: 4_321, date: 1, nonce };
        let out = f.run_one::<PaymentOutput>(&args.spec(&p)).customer.unwrap();
        let after: CustomerChanging = f.row(w, &customer_changing_key(w, d, c));
        if c == 3 {
            let entry = "3 1 1 1 1 43.21|";
            assert!(after.data.starts_with(entry), "{}", after.data);
            assert_eq!(after.data.len(), (entry.len() + before.data.len()).min(C_DATA_MAX));
            assert_eq!(after.data[entry.len()..], before.data[..after.data.len() - entry.len()]);
            assert_eq!(out.data.unwrap(), after.data[..200]);
        } else {
            assert_eq!(after.data, before.data);
            assert!(out.data.is_none());
        }
    }
}

#[test]
fn delivery_delivers_the_oldest_new_order_of_every_district() {
    let mut f = fixture();
    let w = 2;
    let oldest = f.wl.config().initial_delivered() + 1;
    let mut expected_balance = Vec::new();
    for d in 1..=DISTRICTS {
        let order: OrderRow = f.row(w, &order_key(w, d, oldest));
        let sum: Money =
            (1..=order.ol_cnt).map(|ol| f.row::<OrderLineRow>(w, &order_line_key(w, d, oldest, ol)).amount).sum();
        let customer: CustomerChanging = f.row(w, &customer_changing_key(w, d, order.c));
        expected_balance.push((order.c, customer.balance + sum, customer.delivery_cnt + 1));
    }
    let p = f.wl.tpcc_partitioner();
    let args = DeliveryArgs { w, carrier: 7, date: 1_700_000_002 };
    let out: DeliveryOutput = f.run_one(&args.spec(&p));
    assert_eq!(out.delivered, (1..=DISTRICTS).map(|d| (d, oldest)).collect::<Vec<_>>());
    assert_eq!(out.skipped, 0);
    for (d, (c, balance, count)) in (1..=DISTRICTS).zip(expected_balance) {
        assert!(f.store_of(w).get(&new_order_key(w, d, oldest)).is_none());
        let order: OrderRow = f.row(w, &order_key(w, d, oldest));
        assert_eq!(order.carrier, Some(7));
        for ol in 1..=order.ol_cnt {
            let line: OrderLineRow = f.row(w, &order_line_key(w, d, oldest, ol));
            assert_eq!(line.delivery_d, Some(1_700_000_002));
        }
        let customer: CustomerChanging = f.row(w, &customer_changing_key(w, d, c));
        assert_eq!((customer.balance, customer.delivery_cnt), (balance, count));
    }
    f.assert_conditions_hold();
    // A district without new orders is skipped.
    let prefix = new_order_prefix(w, 3);
    let end = prefix_successor(&prefix).unwrap();
    for (key, _) in f.store_of(w).scan(&prefix, &end, usize::MAX, ScanOrder::Ascending) {
        f.store_of(w).delete(&key);
    }
    let out: DeliveryOutput = f.run_one(&DeliveryArgs { w, carrier: 1, date: 5 }.spec(&p));
    assert_eq!((out.delivered.len(), out.skipped), (9, 1));
}

#[test]
fn order_status_returns_the_last_order_of_the_customer() {
    let mut f = fixture();
    let (w, d, c) = (1, 6, 12);
    let p = f.wl.tpcc_partitioner();
    let status = OrderStatusArgs { w, d, customer: CustomerSel::Id(c) };
    let before: OrderStatusOutput = f.run_one(&status.spec(&p));
    let initial = before.order.expect("every customer has one initial order");
    let row: OrderRow = f.row(w, &order_key(w, d, initial.o_id));
    assert_eq!((row.c, initial.lines.len()), (c, usize::from(row.ol_cnt)));
    let lines =
        vec![OrderLineArg { item: 3, supply_w: 1, quantity: 2 }, OrderLineArg { item: 4, supply_w: 1, quantity: 1 }];
    let spec = NewOrderArgs { w, d, c, lines, entry_d: 9 }.spec(&p);
    let home = f.run_one::<NewOrderOutput>(&spec).home.unwrap();
    let after: OrderStatusOutput = f.run_one(&status.spec(&p));
    let last = after.order.unwrap();
    assert_eq!((last.o_id, last.entry_d, last.carrier), (home.o_id, 9, None));
    assert_eq!(
        last.lines.iter().map(|l| (l.item, l.quantity, l.amount)).collect::<Vec<_>>(),
        vec![(3, 2, home.amounts[0]), (4, 1, home.amounts[1])]
    );
    let changing: CustomerChanging = f.row(w, &customer_changing_key(w, d, c));
    assert_eq!(after.balance, changing.balance);
}

#[test]
fn stock_level_counts_low_stock_of_the_last_twenty_orders_in_two_steps() {
    let mut f = fixture();
    let (w, d) = (2, 8);
    let p = f.wl.tpcc_partitioner();
    let next: u32 = f.row(w, &next_o_id_key(w, d));
    let mut items = BTreeSet::new();
    for o in next - 20..next {
        let order: OrderRow = f.row(w, &order_key(w, d, o));
        for ol in 1..=order.ol_cnt {
            items.insert(f.row::<OrderLineRow>(w, &order_line_key(w, d, o, ol)).item);
        }
    }
    let low: Vec<u32> = items.iter().copied().step_by(3).collect();
    for &i in &items {
        set_stock_quantity(&mut f, w, i, if low.contains(&i) { 14 } else { 15 });
    }
    let args = StockLevelArgs { w, d, threshold: 15 };
    let first_spec = args.spec(&p);
    let first: StockLevelOrdersOutput = f.run_one(&first_spec);
    assert_eq!(first.next_o_id, next);
    assert_eq!(first.items, items.iter().copied().collect::<Vec<_>>());
    let second = args.next_step(&first).unwrap();
    let out: StockLevelOutput = f.run_one(&second.spec(&p));
    assert_eq!(out.low_stock as usize, low.len());
    // The generator builds the same second step from the first's output.
    let mut g = f.wl.tpcc_generator(1);
    let outputs = f.run(&first_spec).unwrap();
    let step = g.next_step(&first_spec, &outputs).unwrap().unwrap();
    assert_eq!(step, second.spec(&p));
    assert_eq!(step.procedure, STOCK_LEVEL_STOCK);
    assert_eq!(g.next_step(&step, &f.run(&step).unwrap()).unwrap(), None);
}
