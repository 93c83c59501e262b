//! `tpcc.order_status` (clause 2.6).

use std::sync::Arc;

use luigi_store::{Key, ScanOrder};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure};
use serde::{Deserialize, Serialize};

use super::{bad, find_customer, spec, CustomerSel, Env, ORDER_STATUS};
use crate::tpcc::keys::*;
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Arguments of `tpcc.order_status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusArgs {
    /// W_ID.
    pub w: u32,
    /// D_ID.
    pub d: u8,
    /// The customer, by id or last name.
    pub customer: CustomerSel,
}

impl OrderStatusArgs {
    /// Declared keys: reads STATIC(w,d), ORD(w,d) and CUST(w,d).
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        let (w, d) = (self.w, self.d);
        (vec![static_unit(w, d), ord_unit(w, d), cust_unit(w, d)], Vec::new())
    }

    /// The transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(ORDER_STATUS, self, partitioner, reads, writes)
    }
}

/// One line of the customer's last order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineStatus {
    /// OL_I_ID.
    pub item: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u32,
    /// OL_QUANTITY.
    pub quantity: u8,
    /// OL_AMOUNT.
    pub amount: Money,
    /// OL_DELIVERY_D.
    pub delivery_d: Option<Date>,
}

/// The customer's last order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOrder {
    /// O_ID.
    pub o_id: u32,
    /// O_ENTRY_D.
    pub entry_d: Date,
    /// O_CARRIER_ID.
    pub carrier: Option<u8>,
    /// Its lines, in line order.
    pub lines: Vec<LineStatus>,
}

/// What `tpcc.order_status` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderStatusOutput {
    /// C_ID.
    pub c: u16,
    /// C_FIRST.
    pub first: String,
    /// C_MIDDLE.
    pub middle: String,
    /// C_LAST.
    pub last: String,
    /// C_BALANCE.
    pub balance: Money,
    /// The customer's last order (`None` if it has none).
    pub order: Option<LastOrder>,
}

/// `tpcc.order_status`: the customer's balance, last order and its lines.
pub(crate) struct OrderStatus(pub Arc<Env>);

impl Procedure for OrderStatus {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: OrderStatusArgs = super::super::rows::args(ORDER_STATUS, args)?;
        let env = &self.0;
        env.check_warehouse(a.w)?;
        env.check_district(a.d)?;
        env.check_customer(&a.customer)?;
        env.require_owner(ctx, a.w, ORDER_STATUS)?;
        let (w, d) = (a.w, a.d);
        let (c, row) = find_customer(ctx, w, d, &a.customer)?;
        let changing: CustomerChanging = read_required(ctx, &customer_changing_key(w, d, c))?;
        let order = last_order(ctx, w, d, c)?;
        output(&OrderStatusOutput {
            c,
            first: row.first,
            middle: row.middle,
            last: row.last,
            balance: changing.balance,
            order,
        })
    }
}

/// The last order of customer `c` (the order-by-customer index, descending) with its lines.
fn last_order(ctx: &mut dyn ProcCtx, w: u32, d: u8, c: u16) -> Result<Option<LastOrder>, ProcError> {
    let prefix = order_by_customer_prefix(w, d, c);
    let end = prefix_successor(&prefix).ok_or_else(|| bad("index prefix has no successor".into()))?;
    let Some((key, _)) = ctx.scan(&prefix, &end, 1, ScanOrder::Descending)?.pop() else { return Ok(None) };
    let o = u32_at(&key, prefix.len()).ok_or_else(|| bad(format!("malformed index key {key:?}")))?;
    let order: OrderRow = read_required(ctx, &order_key(w, d, o))?;
    let lines_prefix = order_lines_of(w, d, o);
    let end = prefix_successor(&lines_prefix).ok_or_else(|| bad("lines prefix has no successor".into()))?;
    let mut lines = Vec::with_capacity(usize::from(order.ol_cnt));
    for (key, value) in ctx.scan(&lines_prefix, &end, usize::MAX, ScanOrder::Ascending)? {
        let line: OrderLineRow = decode(&key, &value)?;
        lines.push(LineStatus {
            item: line.item,
            supply_w: line.supply_w,
            quantity: line.quantity,
            amount: line.amount,
            delivery_d: line.delivery_d,
        });
    }
    Ok(Some(LastOrder { o_id: o, entry_d: order.entry_d, carrier: order.carrier, lines }))
}
