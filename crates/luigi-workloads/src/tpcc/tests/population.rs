use std::collections::BTreeMap;
use std::time::Instant;

use luigi_store::{Key, Store, Value};

use super::super::keys::*;
use super::super::nurand::{last_name, NuRandConstants};
use super::super::population::{self, district_name, s_dist, warehouse_name, DISTRICTS};
use super::super::rows::*;
use super::super::TpccConfig;
use super::{workload, Fixture};
use crate::Workload;

/// The table of a key, from its description ("stock(w=1, i=2)" is "stock").
fn table_of(key: &[u8]) -> String {
    let d = describe(key);
    let end = d.find(['(', ' ']).unwrap_or(d.len());
    d[..end].to_string()
}

fn counts(rows: &[(Key, Value)]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (key, _) in rows {
        *counts.entry(table_of(key)).or_default() += 1;
    }
    counts
}

/// The spec's counts (clause 4.3.3.1) for `warehouses` warehouses of `config`, except
/// ORDER-LINE (5-15 per order, checked separately).
fn expected(config: &TpccConfig, warehouses: u64) -> BTreeMap<String, u64> {
    let districts = warehouses * u64::from(DISTRICTS);
    let customers = districts * u64::from(config.customers());
    let undelivered = districts * u64::from(u32::from(config.customers()) - config.initial_delivered());
    [
        ("item", u64::from(config.items())),
        ("warehouse", warehouses),
        ("w_ytd", warehouses),
        ("stock", warehouses * u64::from(config.items())),
        ("district", districts),
        ("d_ytd", districts),
        ("d_next_o_id", districts),
        ("customer", customers),
        ("customer_changing", customers),
        ("name", customers),
        ("history", customers),
        ("order", customers),
        ("order-by-customer", customers),
        ("new_order", undelivered),
    ]
    .into_iter()
    .map(|(t, n)| (t.to_string(), n))
    .collect()
}

fn check_counts(config: &TpccConfig, warehouses: u64, rows: &[(Key, Value)]) {
    let mut got = counts(rows);
    let lines = got.remove("order_line").unwrap_or(0);
    let orders = warehouses * u64::from(DISTRICTS) * u64::from(config.customers());
    assert!((5 * orders..=15 * orders).contains(&lines), "{lines} lines for {orders} orders");
    let mean = lines as f64 / orders as f64;
    assert!((9.0..11.0).contains(&mean), "mean O_OL_CNT {mean}");
    assert_eq!(got, expected(config, warehouses));
}

#[test]
fn population_has_the_spec_counts_at_small_scale() {
    let wl = workload(3, 2, 0.02);
    let config = wl.config().clone();
    assert_eq!((config.items(), config.customers(), config.initial_delivered()), (2_000, 60, 42));
    let shard0 = wl.population(0, 0);
    let shard1 = wl.population(0, 1);
    check_counts(&config, 2, &shard0); // warehouses 1 and 3
    check_counts(&config, 1, &shard1); // warehouse 2
}

#[test]
fn scale_floors_are_the_minimum_sizes() {
    let config = TpccConfig { warehouses: 1, scale: 0.0001, seed: 1 };
    assert_eq!((config.items(), config.customers(), config.initial_delivered()), (100, 30, 21));
    let odd = TpccConfig { warehouses: 1, scale: 0.29, seed: 1 };
    assert_eq!((odd.items(), odd.customers(), odd.initial_delivered()), (29_000, 870, 609));
    let full = TpccConfig::default();
    assert_eq!((full.items(), full.customers(), full.initial_delivered()), (100_000, 3_000, 2_100));
    assert!(TpccConfig { scale: 1.5, ..full.clone() }.check(1).is_err());
    assert!(TpccConfig { scale: f64::NAN, ..full.clone() }.check(1).is_err());
    assert!(TpccConfig { warehouses: 1, ..full }.check(2).is_err());
}

/// One warehouse at scale 1: the spec's counts; counted straight from the generated rows.
#[test]
fn one_full_scale_warehouse_has_the_spec_counts() {
    let config = TpccConfig { warehouses: 1, scale: 1.0, seed: 3 };
    let start = Instant::now();
    let rows = population::population(&config, 1, 0);
    eprintln!("population of 1 warehouse at scale 1: {} rows in {:?}", rows.len(), start.elapsed());
    check_counts(&config, 1, &rows);
    // Last names: customers 1-1000 get names 0-999, the others NURand with C_LOAD.
    let mut above = BTreeMap::<String, u32>::new();
    for (key, value) in &rows {
        if table_of(key) != "customer" {
            continue;
        }
        let c = u16::from_be_bytes(key[key.len() - 2..].try_into().unwrap());
        let row: CustomerRow = decode(key, value).unwrap();
        if c <= 1000 {
            assert_eq!(row.last, last_name(c - 1));
        } else {
            *above.entry(row.last).or_default() += 1;
        }
    }
    // NURand(255, 0, 999) is skewed: some names repeat well above the uniform 2 per name.
    assert!(above.values().any(|&n| n > 6), "names above 1000 look uniform");
}

#[test]
fn population_is_deterministic_and_independent_of_the_shard_count() {
    let one = workload(4, 1, 0.01);
    let two = workload(4, 2, 0.01);
    let a = one.populate(0, 0);
    assert_eq!(a.state_hash(), one.populate(99, 0).state_hash(), "the trait's seed is ignored");
    let rows_of = |store: &Store, w: u32| -> Vec<(Key, Value)> {
        store.iter().filter(|(k, _)| warehouse_of(k) == Some(w)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let b1 = two.populate(0, 1);
    for w in [2, 4] {
        assert_eq!(rows_of(&a, w), rows_of(&b1, w), "warehouse {w}");
    }
    let items = |s: &Store| s.iter().filter(|(k, _)| is_item_key(k)).count();
    assert_eq!(items(&b1), 1_000);
    let other_seed = TpccConfig { seed: 43, ..one.config().clone() };
    assert_ne!(population::population(&other_seed, 1, 0), one.population(0, 0));
}

#[test]
fn static_columns_come_from_the_pure_functions() {
    let mut f = Fixture::new(2, 2, 0.01);
    let config = f.wl.config().clone();
    for w in 1..=2 {
        let row: WarehouseRow = f.row(w, &warehouse_key(w));
        assert_eq!(row.name, warehouse_name(&config, w));
        assert!((6..=10).contains(&row.name.len()) && (0..=2_000).contains(&row.tax));
        for d in 1..=DISTRICTS {
            let row: DistrictRow = f.row(w, &district_key(w, d));
            assert_eq!(row.name, district_name(&config, w, d));
        }
        for i in [1, 500, config.items()] {
            let stock: StockRow = f.row(w, &stock_key(w, i));
            for d in 1..=DISTRICTS {
                assert_eq!(stock.dist_of(d), Some(s_dist(&config, w, i, d).as_str()));
            }
        }
    }
    let history: HistoryRow = f.row(1, &history_key(1, 2, 3, 0));
    assert_eq!((history.w, history.d, history.amount), (1, 2, 1_000));
}

#[test]
fn item_and_stock_data_hold_original_in_a_tenth_of_rows() {
    let wl = workload(1, 1, 0.05);
    let rows = wl.population(0, 0);
    let (mut items, mut stock) = ((0, 0), (0, 0));
    for (key, value) in &rows {
        match table_of(key).as_str() {
            "item" => {
                let row: ItemRow = decode(key, value).unwrap();
                assert!((100..=10_000).contains(&row.price) && (14..=24).contains(&row.name.len()));
                items = (items.0 + 1, items.1 + u32::from(row.data.contains("ORIGINAL")));
            }
            "stock" => {
                let row: StockRow = decode(key, value).unwrap();
                assert!((10..=100).contains(&row.quantity) && (26..=50).contains(&row.data.len()));
                stock = (stock.0 + 1, stock.1 + u32::from(row.data.contains("ORIGINAL")));
            }
            _ => {}
        }
    }
    for (n, original) in [items, stock] {
        assert_eq!(n, 5_000);
        assert!((350..650).contains(&original), "{original} of {n} hold ORIGINAL");
    }
}

#[test]
fn initial_orders_follow_the_spec() {
    let mut f = Fixture::new(1, 1, 0.01);
    let config = f.wl.config().clone();
    let delivered = config.initial_delivered();
    let mut customers = Vec::new();
    for o in 1..=u32::from(config.customers()) {
        let order: OrderRow = f.row(1, &order_key(1, 4, o));
        customers.push(order.c);
        assert_eq!(order.carrier.is_some(), o <= delivered);
        assert!((5..=15).contains(&order.ol_cnt));
        for ol in 1..=order.ol_cnt {
            let line: OrderLineRow = f.row(1, &order_line_key(1, 4, o, ol));
            assert_eq!(line.delivery_d.is_some(), o <= delivered);
            assert_eq!(line.amount == 0, o <= delivered);
            assert_eq!((line.quantity, line.supply_w, line.dist_info.len()), (5, 1, DIST_BYTES));
        }
        assert!(f.store_of(1).get(&order_by_customer_key(1, 4, order.c, o)).is_some());
    }
    customers.sort_unstable();
    assert_eq!(customers, (1..=config.customers()).collect::<Vec<_>>(), "O_C_ID is a permutation");
    let next: u32 = f.row(1, &next_o_id_key(1, 4));
    assert_eq!(next, u32::from(config.customers()) + 1);
    let (load, run) = NuRandConstants::from_seed(config.seed);
    assert_ne!(load.c_last, run.c_last);
}
