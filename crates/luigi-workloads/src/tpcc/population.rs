//! The initial population (clause 4.3.3.1), a deterministic function of the configuration
//! and the shard: each warehouse's rows are drawn from generators seeded by
//! `(seed, warehouse, table)`, so a warehouse's rows do not depend on the shard count, and
//! the item table (on every shard) from `(seed, ITEM)`.
//!
//! Static data rule (`docs/TPCC.md`): S_DIST_xx, W_NAME and D_NAME are pure functions
//! ([`s_dist`], [`warehouse_name`], [`district_name`]) that a piece recomputes when it needs
//! another warehouse's value; the population takes them from the same functions.

use luigi_store::{Key, Value};
use luigi_txn::types::ShardId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::keys::*;
use super::nurand::{astring, data_string, last_name_into, nurand, push_alnum, NuRandConstants, SplitMix};
use super::rows::*;
use super::TpccConfig;

/// The date of every population row (O_ENTRY_D, H_DATE, C_SINCE): the generators' clocks
/// start after it.
pub const POPULATION_DATE: Date = 1_600_000_000;
/// Districts per warehouse.
pub const DISTRICTS: u8 = 10;
/// H_AMOUNT of the population's history rows, and the initial C_YTD_PAYMENT (10.00).
pub const INITIAL_PAYMENT: Money = 1_000;
/// C_CREDIT_LIM (50 000.00).
pub const CREDIT_LIMIT: Money = 5_000_000;

/// Tags of the per-table generators.
#[derive(Clone, Copy)]
enum Table {
    Warehouse = 1,
    Stock = 2,
    District = 3,
    Customer = 4,
    Order = 5,
    Item = 6,
}

fn rng_for(config: &TpccConfig, w: u32, table: Table) -> ChaCha8Rng {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&config.seed.to_le_bytes());
    seed[8..12].copy_from_slice(&w.to_le_bytes());
    seed[12] = table as u8;
    seed[13..16].copy_from_slice(b"TPC");
    ChaCha8Rng::from_seed(seed)
}

/// S_DIST_`d` of item `i` in warehouse `w` (24 characters).
pub fn s_dist(config: &TpccConfig, w: u32, i: u32, d: u8) -> String {
    let mut s = String::with_capacity(DIST_BYTES);
    push_s_dist(config, w, i, d, &mut s);
    s
}

fn push_s_dist(config: &TpccConfig, w: u32, i: u32, d: u8, out: &mut String) {
    let mut rng = SplitMix::new(&[config.seed, 0x5344, u64::from(w), u64::from(i), u64::from(d)]);
    push_alnum(&mut rng, DIST_BYTES, out);
}

/// W_NAME of warehouse `w` (6-10 characters).
pub fn warehouse_name(config: &TpccConfig, w: u32) -> String {
    astring(&mut SplitMix::new(&[config.seed, 0x574e, u64::from(w)]), 6, 10)
}

/// D_NAME of district `(w, d)` (6-10 characters).
pub fn district_name(config: &TpccConfig, w: u32, d: u8) -> String {
    astring(&mut SplitMix::new(&[config.seed, 0x444e, u64::from(w), u64::from(d)]), 6, 10)
}

/// H_DATA of a payment at `(w, d)`: W_NAME, four spaces, D_NAME.
pub fn history_data(config: &TpccConfig, w: u32, d: u8) -> String {
    format!("{}    {}", warehouse_name(config, w), district_name(config, w, d))
}

/// The warehouses shard `shard` owns among `1..=warehouses` (`(w - 1) % shards == shard`).
pub fn owned_warehouses(warehouses: u32, shards: u32, shard: ShardId) -> impl Iterator<Item = u32> {
    (shard.saturating_add(1)..=warehouses).step_by(shards.max(1) as usize)
}

/// Every row shard `shard` of `shards` starts with: the item table, then each warehouse it
/// owns.
pub fn population(config: &TpccConfig, shards: u32, shard: ShardId) -> Vec<(Key, Value)> {
    let owned: Vec<u32> = owned_warehouses(config.warehouses, shards, shard).collect();
    let per_warehouse = rows_per_warehouse(config);
    let mut out = Vec::with_capacity(config.items() as usize + owned.len() * per_warehouse);
    item_population(config, &mut out);
    for w in owned {
        warehouse_population(config, w, &mut out);
    }
    out
}

/// An upper bound of a warehouse's row count (for capacity).
fn rows_per_warehouse(config: &TpccConfig) -> usize {
    let customers = usize::from(config.customers());
    2 + config.items() as usize + usize::from(DISTRICTS) * (3 + customers * (4 + 2 + 15) + customers)
}

/// The ITEM table: I_IM_ID 1..=10 000, I_NAME 14-24 characters, I_PRICE 1.00-100.00,
/// I_DATA 26-50 characters, 10 % holding "ORIGINAL".
pub fn item_population(config: &TpccConfig, out: &mut Vec<(Key, Value)>) {
    let mut rng = rng_for(config, 0, Table::Item);
    for i in 1..=config.items() {
        let row = ItemRow {
            im_id: rng.gen_range(1..=10_000),
            name: astring(&mut rng, 14, 24),
            price: rng.gen_range(100..=10_000),
            data: data_string(&mut rng, 26, 50),
        };
        out.push((item_key(i), encode(&row)));
    }
}

/// Every row of warehouse `w`: WAREHOUSE, W_YTD, STOCK, and per district DISTRICT, D_YTD,
/// D_NEXT_O_ID, CUSTOMER (both parts, name index), HISTORY, ORDER (and index), NEW-ORDER,
/// ORDER-LINE.
pub fn warehouse_population(config: &TpccConfig, w: u32, out: &mut Vec<(Key, Value)>) {
    let customers = config.customers();
    let d_ytd = Money::from(customers) * INITIAL_PAYMENT;
    let mut rng = rng_for(config, w, Table::Warehouse);
    let row = WarehouseRow { name: warehouse_name(config, w), tax: rng.gen_range(0..=2_000) };
    out.push((warehouse_key(w), encode(&row)));
    out.push((w_ytd_key(w), encode(&(d_ytd * Money::from(DISTRICTS)))));
    stock_population(config, w, out);
    let mut rng = rng_for(config, w, Table::District);
    for d in 1..=DISTRICTS {
        let row = DistrictRow { name: district_name(config, w, d), tax: rng.gen_range(0..=2_000) };
        out.push((district_key(w, d), encode(&row)));
        out.push((d_ytd_key(w, d), encode(&d_ytd)));
        out.push((next_o_id_key(w, d), encode(&(u32::from(customers) + 1))));
    }
    customer_population(config, w, out);
    order_population(config, w, out);
}

/// STOCK of warehouse `w`: S_QUANTITY 10-100, S_DIST_xx from [`s_dist`], S_DATA 26-50
/// characters, 10 % holding "ORIGINAL".
fn stock_population(config: &TpccConfig, w: u32, out: &mut Vec<(Key, Value)>) {
    let mut rng = rng_for(config, w, Table::Stock);
    for i in 1..=config.items() {
        let mut dist = String::with_capacity(DIST_BYTES * usize::from(DISTRICTS));
        for d in 1..=DISTRICTS {
            push_s_dist(config, w, i, d, &mut dist);
        }
        let row = StockRow {
            quantity: rng.gen_range(10..=100),
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            dist,
            data: data_string(&mut rng, 26, 50),
        };
        out.push((stock_key(w, i), encode(&row)));
    }
}

/// CUSTOMER (static and changing parts, name index entry) and one HISTORY row per customer.
fn customer_population(config: &TpccConfig, w: u32, out: &mut Vec<(Key, Value)>) {
    let (load, _) = NuRandConstants::from_seed(config.seed);
    let mut rng = rng_for(config, w, Table::Customer);
    for d in 1..=DISTRICTS {
        for c in 1..=config.customers() {
            let number = if c <= 1000 { c - 1 } else { nurand(&mut rng, 255, 0, 999, load.c_last) as u16 };
            let mut last = String::with_capacity(15);
            last_name_into(number, &mut last);
            let row = CustomerRow {
                first: astring(&mut rng, 8, 16),
                middle: "OE".into(),
                last,
                since: POPULATION_DATE,
                credit: if rng.gen_ratio(1, 10) { Credit::Bad } else { Credit::Good },
                credit_lim: CREDIT_LIMIT,
                discount: rng.gen_range(0..=5_000),
            };
            let (Some(last), Some(first)) = (pad_name(&row.last), pad_name(&row.first)) else {
                unreachable!("population names fit in {NAME_BYTES} bytes")
            };
            out.push((name_index_key(w, d, &last, &first, c), Vec::new()));
            out.push((customer_key(w, d, c), encode(&row)));
            let changing = CustomerChanging {
                balance: -INITIAL_PAYMENT,
                ytd_payment: INITIAL_PAYMENT,
                payment_cnt: 1,
                delivery_cnt: 0,
                data: astring(&mut rng, 300, 500),
            };
            out.push((customer_changing_key(w, d, c), encode(&changing)));
            let history =
                HistoryRow { w, d, date: POPULATION_DATE, amount: INITIAL_PAYMENT, data: astring(&mut rng, 12, 24) };
            out.push((history_key(w, d, c, 0), encode(&history)));
        }
    }
}

/// ORDER (O_C_ID a permutation, 5-15 lines; the first [`TpccConfig::initial_delivered`]
/// delivered with a carrier), its order-by-customer entry, NEW-ORDER for the others, and
/// ORDER-LINE (delivered: date set and amount 0; else amount 0.01-9 999.99).
fn order_population(config: &TpccConfig, w: u32, out: &mut Vec<(Key, Value)>) {
    let mut rng = rng_for(config, w, Table::Order);
    let customers = config.customers();
    let delivered = config.initial_delivered();
    let mut permutation: Vec<u16> = (1..=customers).collect();
    for d in 1..=DISTRICTS {
        for k in (1..permutation.len()).rev() {
            permutation.swap(k, rng.gen_range(0..=k));
        }
        for (o, &c) in (1u32..).zip(&permutation) {
            let is_delivered = o <= delivered;
            let order = OrderRow {
                c,
                entry_d: POPULATION_DATE,
                carrier: is_delivered.then(|| rng.gen_range(1..=10)),
                ol_cnt: rng.gen_range(5..=15),
                all_local: true,
            };
            for ol in 1..=order.ol_cnt {
                let mut dist_info = String::with_capacity(DIST_BYTES);
                let item = rng.gen_range(1..=config.items());
                let amount = if is_delivered { 0 } else { rng.gen_range(1..=999_999) };
                push_alnum(&mut rng, DIST_BYTES, &mut dist_info);
                let line = OrderLineRow {
                    item,
                    supply_w: w,
                    delivery_d: is_delivered.then_some(POPULATION_DATE),
                    quantity: 5,
                    amount,
                    dist_info,
                };
                out.push((order_line_key(w, d, o, ol), encode(&line)));
            }
            out.push((order_key(w, d, o), encode(&order)));
            out.push((order_by_customer_key(w, d, c, o), Vec::new()));
            if !is_delivered {
                out.push((new_order_key(w, d, o), Vec::new()));
            }
        }
    }
}
