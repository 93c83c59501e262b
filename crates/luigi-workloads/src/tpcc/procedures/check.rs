//! `tpcc.check`: read-only, over every shard. Each participant reads every unit of the
//! warehouses it owns, evaluates the conditions that are local to a warehouse (all but 8
//! and 9) and returns a [`ShardSummary`] with the YTD values and its history sums by
//! (H_W_ID, H_D_ID), from which `conditions::evaluate` finishes conditions 8 and 9 over
//! every shard.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use luigi_store::{Key, ScanOrder, Value};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure};
use luigi_txn::types::ShardId;
use serde::{Deserialize, Serialize};

use super::{bad, spec, Env, CHECK};
use crate::tpcc::keys::*;
use crate::tpcc::population::DISTRICTS;
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Number of consistency conditions.
pub const CONDITIONS: usize = 12;

/// Arguments of `tpcc.check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckArgs {
    /// Violations kept as text per condition and shard.
    pub detail_limit: u32,
}

impl CheckArgs {
    /// Declared keys (all reads): per warehouse the W static and W_YTD rows, per district
    /// the STATIC, ORD and CUST prefixes and the DYTD row.
    pub fn declare(warehouses: u32) -> Vec<Key> {
        let mut reads = Vec::new();
        for w in 1..=warehouses {
            reads.extend([warehouse_key(w), w_ytd_key(w)]);
            for d in 1..=DISTRICTS {
                reads.extend([static_unit(w, d), ord_unit(w, d), d_ytd_key(w, d), cust_unit(w, d)]);
            }
        }
        reads
    }

    /// The transaction over every shard owning one of `warehouses` warehouses.
    pub fn spec(&self, partitioner: &dyn Partitioner, warehouses: u32) -> TxnSpec {
        spec(CHECK, self, partitioner, Self::declare(warehouses), Vec::new())
    }
}

/// One condition's count on one shard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Instances checked.
    pub checked: u64,
    /// Instances that violate it.
    pub violations: u64,
    /// The first violations, as text.
    pub detail: Vec<String>,
}

impl Tally {
    /// Counts one instance, keeping its description when it violates and fewer than `limit`
    /// were kept.
    pub(crate) fn record(&mut self, holds: bool, limit: u32, what: impl FnOnce() -> String) {
        self.checked += 1;
        if !holds {
            self.violations += 1;
            if self.detail.len() < limit as usize {
                self.detail.push(what());
            }
        }
    }
}

/// The YTD values of a warehouse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarehouseYtd {
    /// W_ID.
    pub w: u32,
    /// W_YTD.
    pub w_ytd: Money,
    /// D_YTD of districts 1 to 10.
    pub d_ytd: Vec<Money>,
}

/// The sum of H_AMOUNT of the history rows with (H_W_ID, H_D_ID) = (w, d) stored on a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistorySum {
    /// H_W_ID.
    pub w: u32,
    /// H_D_ID.
    pub d: u8,
    /// Sum of H_AMOUNT.
    pub amount: Money,
}

/// What one participant of `tpcc.check` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSummary {
    /// The shard.
    pub shard: ShardId,
    /// Conditions 1 to 12 (index 0 is condition 1) as far as this shard checks them
    /// (nothing for 8 and 9, which need every shard's history).
    pub local: Vec<Tally>,
    /// The YTD values of the warehouses this shard owns.
    pub warehouses: Vec<WarehouseYtd>,
    /// The history stored on this shard, summed by (H_W_ID, H_D_ID).
    pub history: Vec<HistorySum>,
}

/// `tpcc.check`.
pub(crate) struct Check(pub Arc<Env>);

impl Procedure for Check {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: CheckArgs = args_of(args)?;
        let env = &self.0;
        let mut summary = ShardSummary {
            shard: ctx.shard(),
            local: vec![Tally::default(); CONDITIONS],
            warehouses: Vec::new(),
            history: Vec::new(),
        };
        let mut history: BTreeMap<(u32, u8), Money> = BTreeMap::new();
        let owned: Vec<u32> = (1..=env.config.warehouses).filter(|&w| env.owns(ctx, w)).collect();
        for w in owned {
            read_required::<WarehouseRow>(ctx, &warehouse_key(w))?;
            let w_ytd: Money = read_required(ctx, &w_ytd_key(w))?;
            let mut d_ytd = Vec::with_capacity(usize::from(DISTRICTS));
            for d in 1..=DISTRICTS {
                d_ytd.push(read_required(ctx, &d_ytd_key(w, d))?);
                read_required::<DistrictRow>(ctx, &district_key(w, d))?;
                let district = District::read(ctx, w, d)?;
                district.check(env, &mut summary.local, a.detail_limit);
                for (&key, &amount) in &district.history_by_payer {
                    let sum = history.entry(key).or_default();
                    *sum = sum.saturating_add(amount);
                }
            }
            let sum = d_ytd.iter().fold(0, |s: Money, &x| s.saturating_add(x));
            summary.local[0]
                .record(w_ytd == sum, a.detail_limit, || format!("w={w}: W_YTD {w_ytd} != sum(D_YTD) {sum}"));
            summary.warehouses.push(WarehouseYtd { w, w_ytd, d_ytd });
        }
        summary.history = history.into_iter().map(|((w, d), amount)| HistorySum { w, d, amount }).collect();
        output(&summary)
    }
}

fn args_of(bytes: &[u8]) -> Result<CheckArgs, ProcError> {
    super::super::rows::args(CHECK, bytes)
}

/// Every row of one district's ORD and CUST units, decoded.
struct District {
    w: u32,
    d: u8,
    next_o_id: Option<u32>,
    orders: BTreeMap<u32, OrderRow>,
    new_orders: BTreeSet<u32>,
    lines: Vec<(u32, u8, OrderLineRow)>,
    customers: BTreeMap<u16, CustomerChanging>,
    /// Sum of H_AMOUNT per customer.
    history_by_customer: BTreeMap<u16, Money>,
    /// Sum of H_AMOUNT per (H_W_ID, H_D_ID).
    history_by_payer: BTreeMap<(u32, u8), Money>,
}

fn scan_unit(ctx: &mut dyn ProcCtx, unit: &[u8]) -> Result<Vec<(Key, Value)>, ProcError> {
    let end = prefix_successor(unit).ok_or_else(|| bad("unit prefix has no successor".into()))?;
    ctx.scan(unit, &end, usize::MAX, ScanOrder::Ascending)
}

fn malformed(key: &[u8]) -> ProcError {
    bad(format!("unexpected key {} ({key:?})", describe(key)))
}

impl District {
    fn read(ctx: &mut dyn ProcCtx, w: u32, d: u8) -> Result<Self, ProcError> {
        let mut this = District {
            w,
            d,
            next_o_id: None,
            orders: BTreeMap::new(),
            new_orders: BTreeSet::new(),
            lines: Vec::new(),
            customers: BTreeMap::new(),
            history_by_customer: BTreeMap::new(),
            history_by_payer: BTreeMap::new(),
        };
        for (key, value) in scan_unit(ctx, &ord_unit(w, d))? {
            let at = UNIT_LEN + 1;
            match (key.get(UNIT_LEN).copied(), key.len().saturating_sub(at)) {
                (Some(O_NEXT), 0) => this.next_o_id = Some(decode(&key, &value)?),
                (Some(O_ORDER), 4) => {
                    let o = u32_at(&key, at).ok_or_else(|| malformed(&key))?;
                    this.orders.insert(o, decode(&key, &value)?);
                }
                (Some(O_BY_CUSTOMER), 6) => {}
                (Some(O_NEW_ORDER), 4) => {
                    this.new_orders.insert(u32_at(&key, at).ok_or_else(|| malformed(&key))?);
                }
                (Some(O_LINE), 5) => {
                    let o = u32_at(&key, at).ok_or_else(|| malformed(&key))?;
                    this.lines.push((o, key[at + 4], decode(&key, &value)?));
                }
                _ => return Err(malformed(&key)),
            }
        }
        for (key, value) in scan_unit(ctx, &cust_unit(w, d))? {
            let at = UNIT_LEN + 1;
            let c = u16_at(&key, at).ok_or_else(|| malformed(&key))?;
            match (key.get(UNIT_LEN).copied(), key.len().saturating_sub(at)) {
                (Some(C_ROW), 2) => {
                    this.customers.insert(c, decode(&key, &value)?);
                }
                (Some(C_HISTORY), 10) => {
                    let h: HistoryRow = decode(&key, &value)?;
                    let sum = this.history_by_customer.entry(c).or_default();
                    *sum = sum.saturating_add(h.amount);
                    let sum = this.history_by_payer.entry((h.w, h.d)).or_default();
                    *sum = sum.saturating_add(h.amount);
                }
                _ => return Err(malformed(&key)),
            }
        }
        Ok(this)
    }

    /// Conditions 2-7 and 10-12 over this district.
    fn check(&self, env: &Env, tallies: &mut [Tally], limit: u32) {
        let (w, d) = (self.w, self.d);
        let at = |what: String| format!("(w={w}, d={d}): {what}");
        let max_o = self.orders.keys().next_back().copied().unwrap_or(0);
        let next = self.next_o_id.map_or(-1, i64::from);
        let (min_no, max_no) = (self.new_orders.first().copied(), self.new_orders.last().copied());
        let c2 = next - 1 == i64::from(max_o) && max_no.is_none_or(|m| i64::from(m) == next - 1);
        tallies[1].record(c2, limit, || {
            at(format!("D_NEXT_O_ID {:?} - 1, max(O_ID) {max_o}, max(NO_O_ID) {max_no:?} differ", self.next_o_id))
        });
        let count_no = self.new_orders.len() as u64;
        let c3 = match (min_no, max_no) {
            (Some(lo), Some(hi)) => u64::from(hi - lo) + 1 == count_no,
            _ => count_no == 0,
        };
        tallies[2].record(c3, limit, || at(format!("NO_O_ID {min_no:?}..{max_no:?} but {count_no} new orders")));
        let ol_sum: u64 = self.orders.values().map(|o| u64::from(o.ol_cnt)).sum();
        let lines = self.lines.len() as u64;
        tallies[3].record(ol_sum == lines, limit, || at(format!("sum(O_OL_CNT) {ol_sum} != {lines} lines")));
        for &o in self.new_orders.iter().filter(|o| !self.orders.contains_key(o)) {
            tallies[4].record(false, limit, || at(format!("NEW-ORDER {o} without an ORDER")));
        }
        let mut line_counts: BTreeMap<u32, u64> = BTreeMap::new();
        let mut delivered: BTreeMap<u16, Money> = BTreeMap::new();
        for (o, ol, line) in &self.lines {
            *line_counts.entry(*o).or_default() += 1;
            let order = self.orders.get(o);
            let c7 = order.is_some_and(|order| order.carrier.is_none() == line.delivery_d.is_none());
            tallies[6].record(c7, limit, || {
                let carrier = order.map(|o| o.carrier);
                at(format!("line ({o}, {ol}): OL_DELIVERY_D {:?}, O_CARRIER_ID {carrier:?}", line.delivery_d))
            });
            if let (Some(order), Some(_)) = (order, line.delivery_d) {
                let sum = delivered.entry(order.c).or_default();
                *sum = sum.saturating_add(line.amount);
            }
        }
        let initial = env.config.initial_delivered();
        let mut delivered_since = 0u64;
        for (&o, order) in &self.orders {
            let has_no = self.new_orders.contains(&o);
            tallies[4].record(order.carrier.is_none() == has_no, limit, || {
                at(format!("order {o}: O_CARRIER_ID {:?}, NEW-ORDER {has_no}", order.carrier))
            });
            let count = line_counts.get(&o).copied().unwrap_or(0);
            tallies[5].record(u64::from(order.ol_cnt) == count, limit, || {
                at(format!("order {o}: O_OL_CNT {} but {count} lines", order.ol_cnt))
            });
            delivered_since += u64::from(o > initial && order.carrier.is_some());
        }
        let (orders, expected) = (self.orders.len() as u64, u64::from(initial) + delivered_since);
        tallies[10].record(orders.checked_sub(count_no) == Some(expected), limit, || {
            at(format!(
                "count(ORDER) {orders} - count(NEW-ORDER) {count_no} != {initial} + {delivered_since} delivered"
            ))
        });
        for (&c, row) in &self.customers {
            let delivered = delivered.get(&c).copied().unwrap_or(0);
            let paid = self.history_by_customer.get(&c).copied().unwrap_or(0);
            tallies[9].record(row.balance == delivered.saturating_sub(paid), limit, || {
                at(format!("customer {c}: C_BALANCE {} != delivered {delivered} - history {paid}", row.balance))
            });
            let c12 = row.balance.saturating_add(row.ytd_payment) == delivered;
            tallies[11].record(c12, limit, || {
                at(format!(
                    "customer {c}: C_BALANCE {} + C_YTD_PAYMENT {} != delivered {delivered}",
                    row.balance, row.ytd_payment
                ))
            });
        }
    }
}
