//! `tpcc.new_order` (clause 2.4).

use std::sync::Arc;

use luigi_store::Key;
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure};
use serde::{Deserialize, Serialize};

use super::{bad, spec, Env, NEW_ORDER};
use crate::tpcc::keys::*;
use crate::tpcc::population::s_dist;
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Most lines of an order (O_OL_CNT is 5-15).
pub const MAX_LINES: usize = 15;
/// Most units of one line (OL_QUANTITY is 1-10).
pub const MAX_QUANTITY: u8 = 10;

/// One line of a new order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderLineArg {
    /// OL_I_ID (an unused id makes the order roll back).
    pub item: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u32,
    /// OL_QUANTITY (1-10).
    pub quantity: u8,
}

/// Arguments of `tpcc.new_order`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderArgs {
    /// W_ID.
    pub w: u32,
    /// D_ID.
    pub d: u8,
    /// C_ID.
    pub c: u16,
    /// The lines (1-15).
    pub lines: Vec<OrderLineArg>,
    /// O_ENTRY_D.
    pub entry_d: Date,
}

impl NewOrderArgs {
    /// Declared keys: reads W static, STATIC(w,d) and every line's ITEM; writes ORD(w,d) and
    /// every line's STOCK row.
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        let mut reads = vec![warehouse_key(self.w), static_unit(self.w, self.d)];
        let mut writes = vec![ord_unit(self.w, self.d)];
        for line in &self.lines {
            reads.push(item_key(line.item));
            writes.push(stock_key(line.supply_w, line.item));
        }
        (reads, writes)
    }

    /// The transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(NEW_ORDER, self, partitioner, reads, writes)
    }
}

/// What the home piece returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderHome {
    /// O_ID.
    pub o_id: u32,
    /// The total: sum(OL_AMOUNT) x (1 - C_DISCOUNT) x (1 + W_TAX + D_TAX), in cents.
    pub total: Money,
    /// OL_AMOUNT of each line.
    pub amounts: Vec<Money>,
    /// C_LAST.
    pub c_last: String,
    /// C_CREDIT.
    pub c_credit: Credit,
    /// C_DISCOUNT.
    pub c_discount: BasisPoints,
    /// W_TAX.
    pub w_tax: BasisPoints,
    /// D_TAX.
    pub d_tax: BasisPoints,
}

/// A STOCK row a piece updated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockUpdate {
    /// The line number (1-based).
    pub ol: u8,
    /// S_QUANTITY after the update.
    pub quantity: i32,
    /// Brand-generic: true ("B") when both I_DATA and S_DATA hold "ORIGINAL".
    pub brand: bool,
}

/// What one participant of `tpcc.new_order` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrderOutput {
    /// The home piece's part (`None` on other pieces).
    pub home: Option<NewOrderHome>,
    /// The lines whose supply warehouse this piece owns.
    pub stock: Vec<StockUpdate>,
}

/// `tpcc.new_order`: every participant reads every line's ITEM (a missing one aborts the
/// transaction on every participant before any write), updates the STOCK rows of the supply
/// warehouses it owns; the home piece enters the order.
pub(crate) struct NewOrder(pub Arc<Env>);

impl NewOrder {
    fn validate(&self, a: &NewOrderArgs) -> Result<(), ProcError> {
        let env = &self.0;
        env.check_warehouse(a.w)?;
        env.check_district(a.d)?;
        env.check_customer(&super::CustomerSel::Id(a.c))?;
        if a.lines.is_empty() || a.lines.len() > MAX_LINES {
            return Err(bad(format!("{} lines (1 to {MAX_LINES})", a.lines.len())));
        }
        for line in &a.lines {
            env.check_warehouse(line.supply_w)?;
            if !(1..=MAX_QUANTITY).contains(&line.quantity) {
                return Err(bad(format!("quantity {} out of 1..={MAX_QUANTITY}", line.quantity)));
            }
        }
        Ok(())
    }
}

impl Procedure for NewOrder {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: NewOrderArgs = super::super::rows::args(NEW_ORDER, args)?;
        self.validate(&a)?;
        let env = &self.0;
        // Every participant reads every item from its own copy: the same decision everywhere.
        let mut items = Vec::with_capacity(a.lines.len());
        for line in &a.lines {
            match read::<ItemRow>(ctx, &item_key(line.item))? {
                Some(item) => items.push(item),
                None => return Err(ProcError::UserAbort(format!("item {} not found", line.item))),
            }
        }
        // Stock of the supply warehouses this piece owns; S_DIST_xx of the home district
        // kept for the order lines.
        let mut stock = Vec::new();
        let mut dists: Vec<Option<String>> = vec![None; a.lines.len()];
        for (k, (line, item)) in a.lines.iter().zip(&items).enumerate() {
            if !env.owns(ctx, line.supply_w) {
                continue;
            }
            let key = stock_key(line.supply_w, line.item);
            let mut s: StockRow = read_required(ctx, &key)?;
            let qty = i32::from(line.quantity);
            s.quantity = match s.quantity >= qty + 10 {
                true => s.quantity - qty,
                false => s.quantity.saturating_sub(qty).saturating_add(91),
            };
            s.ytd = s.ytd.saturating_add(i64::from(line.quantity));
            s.order_cnt = s.order_cnt.saturating_add(1);
            if line.supply_w != a.w {
                s.remote_cnt = s.remote_cnt.saturating_add(1);
            }
            let dist = s.dist_of(a.d).ok_or_else(|| bad(format!("row {} has no S_DIST_{:02}", describe(&key), a.d)))?;
            dists[k] = Some(dist.to_string());
            let brand = item.data.contains("ORIGINAL") && s.data.contains("ORIGINAL");
            stock.push(StockUpdate { ol: k as u8 + 1, quantity: s.quantity, brand });
            write(ctx, key, &s)?;
        }
        let home = match env.owns(ctx, a.w) {
            true => Some(enter_order(env, ctx, &a, &items, dists)?),
            false => None,
        };
        output(&NewOrderOutput { home, stock })
    }
}

/// The home piece: takes D_NEXT_O_ID, inserts ORDER, its index entry, NEW-ORDER and the lines.
fn enter_order(
    env: &Env,
    ctx: &mut dyn ProcCtx,
    a: &NewOrderArgs,
    items: &[ItemRow],
    dists: Vec<Option<String>>,
) -> Result<NewOrderHome, ProcError> {
    let (w, d) = (a.w, a.d);
    let warehouse: WarehouseRow = read_required(ctx, &warehouse_key(w))?;
    let district: DistrictRow = read_required(ctx, &district_key(w, d))?;
    let customer: CustomerRow = read_required(ctx, &customer_key(w, d, a.c))?;
    let next_key = next_o_id_key(w, d);
    let o: u32 = read_required(ctx, &next_key)?;
    let next = o.checked_add(1).ok_or_else(|| bad(format!("{} overflows", describe(&next_key))))?;
    write(ctx, next_key, &next)?;
    let order = OrderRow {
        c: a.c,
        entry_d: a.entry_d,
        carrier: None,
        ol_cnt: a.lines.len() as u8,
        all_local: a.lines.iter().all(|l| l.supply_w == w),
    };
    insert(ctx, order_key(w, d, o), &order)?;
    ctx.insert(order_by_customer_key(w, d, a.c, o), Vec::new())?;
    ctx.insert(new_order_key(w, d, o), Vec::new())?;
    let mut amounts = Vec::with_capacity(a.lines.len());
    for (k, ((line, item), dist)) in a.lines.iter().zip(items).zip(dists).enumerate() {
        let amount = Money::from(line.quantity).saturating_mul(item.price);
        // Static data rule: a remote supply line's S_DIST_xx is recomputed, not read.
        let dist_info = dist.unwrap_or_else(|| s_dist(&env.config, line.supply_w, line.item, d));
        let row = OrderLineRow {
            item: line.item,
            supply_w: line.supply_w,
            delivery_d: None,
            quantity: line.quantity,
            amount,
            dist_info,
        };
        insert(ctx, order_line_key(w, d, o, k as u8 + 1), &row)?;
        amounts.push(amount);
    }
    let sum: i128 = amounts.iter().map(|&a| i128::from(a)).sum();
    let overflow = || bad("order total overflows".into());
    let discount = 10_000 - i128::from(customer.discount);
    let tax = 10_000 + i128::from(warehouse.tax) + i128::from(district.tax);
    let total = sum.checked_mul(discount).and_then(|x| x.checked_mul(tax)).ok_or_else(overflow)? / 100_000_000;
    let total = Money::try_from(total).map_err(|_| overflow())?;
    Ok(NewOrderHome {
        o_id: o,
        total,
        amounts,
        c_last: customer.last,
        c_credit: customer.credit,
        c_discount: customer.discount,
        w_tax: warehouse.tax,
        d_tax: district.tax,
    })
}
