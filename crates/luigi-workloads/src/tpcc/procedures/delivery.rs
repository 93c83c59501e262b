//! `tpcc.delivery` (clause 2.7), all ten districts in one transaction.

use std::sync::Arc;

use luigi_store::{Key, ScanOrder};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure};
use serde::{Deserialize, Serialize};

use super::{bad, spec, Env, DELIVERY};
use crate::tpcc::keys::*;
use crate::tpcc::population::DISTRICTS;
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Arguments of `tpcc.delivery`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryArgs {
    /// W_ID.
    pub w: u32,
    /// O_CARRIER_ID (1-10).
    pub carrier: u8,
    /// OL_DELIVERY_D.
    pub date: Date,
}

impl DeliveryArgs {
    /// Declared keys: writes ORD(w,d) and CUST(w,d) of every district.
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        let writes = (1..=DISTRICTS).flat_map(|d| [ord_unit(self.w, d), cust_unit(self.w, d)]).collect();
        (Vec::new(), writes)
    }

    /// The transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(DELIVERY, self, partitioner, reads, writes)
    }
}

/// What `tpcc.delivery` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryOutput {
    /// (D_ID, O_ID) of each delivered order.
    pub delivered: Vec<(u8, u32)>,
    /// Districts without an undelivered order (skipped).
    pub skipped: u8,
}

/// `tpcc.delivery`: per district, the oldest NEW-ORDER row is deleted, its order gets the
/// carrier, its lines the delivery date, and their amounts go to the customer's balance.
pub(crate) struct Delivery(pub Arc<Env>);

impl Procedure for Delivery {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: DeliveryArgs = super::super::rows::args(DELIVERY, args)?;
        let env = &self.0;
        env.check_warehouse(a.w)?;
        if !(1..=10).contains(&a.carrier) {
            return Err(bad(format!("carrier {} out of 1..=10", a.carrier)));
        }
        env.require_owner(ctx, a.w, DELIVERY)?;
        let mut out = DeliveryOutput { delivered: Vec::new(), skipped: 0 };
        for d in 1..=DISTRICTS {
            match deliver(ctx, &a, d)? {
                Some(o) => out.delivered.push((d, o)),
                None => out.skipped += 1,
            }
        }
        output(&out)
    }
}

/// Delivers the oldest undelivered order of `(w, d)`, if any.
fn deliver(ctx: &mut dyn ProcCtx, a: &DeliveryArgs, d: u8) -> Result<Option<u32>, ProcError> {
    let w = a.w;
    let prefix = new_order_prefix(w, d);
    let end = prefix_successor(&prefix).ok_or_else(|| bad("new-order prefix has no successor".into()))?;
    let Some((key, _)) = ctx.scan(&prefix, &end, 1, ScanOrder::Ascending)?.pop() else { return Ok(None) };
    let o = u32_at(&key, prefix.len()).ok_or_else(|| bad(format!("malformed new-order key {key:?}")))?;
    ctx.delete(&key)?;
    let order_k = order_key(w, d, o);
    let mut order: OrderRow = read_required(ctx, &order_k)?;
    order.carrier = Some(a.carrier);
    let c = order.c;
    write(ctx, order_k, &order)?;
    let lines_prefix = order_lines_of(w, d, o);
    let end = prefix_successor(&lines_prefix).ok_or_else(|| bad("lines prefix has no successor".into()))?;
    let mut total: Money = 0;
    for (key, value) in ctx.scan(&lines_prefix, &end, usize::MAX, ScanOrder::Ascending)? {
        let mut line: OrderLineRow = decode(&key, &value)?;
        line.delivery_d = Some(a.date);
        total = total.saturating_add(line.amount);
        write(ctx, key, &line)?;
    }
    let customer_k = customer_changing_key(w, d, c);
    let mut customer: CustomerChanging = read_required(ctx, &customer_k)?;
    customer.balance = customer.balance.saturating_add(total);
    customer.delivery_cnt = customer.delivery_cnt.saturating_add(1);
    write(ctx, customer_k, &customer)?;
    Ok(Some(o))
}
