//! StockLevel (clause 2.8) in two steps, as clause 2.8.2.3 allows: `tpcc.stock_level.orders`
//! reads ORD(w,d) and returns the distinct items of the district's last 20 orders;
//! `tpcc.stock_level.stock` declares those STOCK rows and counts the ones below the
//! threshold. Each step is serializable; declaring the whole STOCK table instead would make
//! every NewOrder of the warehouse conflict with it.

use std::sync::Arc;

use luigi_store::{Key, ScanOrder};
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure};
use serde::{Deserialize, Serialize};

use super::{bad, spec, Env, STOCK_LEVEL_ORDERS, STOCK_LEVEL_STOCK};
use crate::tpcc::keys::*;
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Orders StockLevel looks back over.
pub const RECENT_ORDERS: u32 = 20;

/// Arguments of `tpcc.stock_level.orders`, the first step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevelArgs {
    /// W_ID.
    pub w: u32,
    /// D_ID.
    pub d: u8,
    /// The threshold (10-20).
    pub threshold: i32,
}

impl StockLevelArgs {
    /// Declared keys: reads ORD(w,d).
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        (vec![ord_unit(self.w, self.d)], Vec::new())
    }

    /// The first step's transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(STOCK_LEVEL_ORDERS, self, partitioner, reads, writes)
    }

    /// The second step, from the first step's output (`None`: no recent item, the count is 0).
    pub fn next_step(&self, first: &StockLevelOrdersOutput) -> Option<StockLevelStockArgs> {
        (!first.items.is_empty()).then(|| StockLevelStockArgs {
            w: self.w,
            threshold: self.threshold,
            items: first.items.clone(),
        })
    }
}

/// What `tpcc.stock_level.orders` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevelOrdersOutput {
    /// D_NEXT_O_ID.
    pub next_o_id: u32,
    /// The distinct OL_I_ID of orders `next_o_id - 20 .. next_o_id`, ascending.
    pub items: Vec<u32>,
}

/// Arguments of `tpcc.stock_level.stock`, the second step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevelStockArgs {
    /// W_ID.
    pub w: u32,
    /// The threshold.
    pub threshold: i32,
    /// The items to look at (distinct).
    pub items: Vec<u32>,
}

impl StockLevelStockArgs {
    /// Declared keys: reads the STOCK rows of the items.
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        (self.items.iter().map(|&i| stock_key(self.w, i)).collect(), Vec::new())
    }

    /// The second step's transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(STOCK_LEVEL_STOCK, self, partitioner, reads, writes)
    }
}

/// What `tpcc.stock_level.stock` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevelOutput {
    /// Items whose S_QUANTITY is below the threshold.
    pub low_stock: u32,
}

/// `tpcc.stock_level.orders`.
pub(crate) struct StockLevelOrders(pub Arc<Env>);

impl Procedure for StockLevelOrders {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: StockLevelArgs = super::super::rows::args(STOCK_LEVEL_ORDERS, args)?;
        let env = &self.0;
        env.check_warehouse(a.w)?;
        env.check_district(a.d)?;
        env.require_owner(ctx, a.w, STOCK_LEVEL_ORDERS)?;
        let next: u32 = read_required(ctx, &next_o_id_key(a.w, a.d))?;
        let start = order_lines_of(a.w, a.d, next.saturating_sub(RECENT_ORDERS).max(1));
        let end = order_lines_of(a.w, a.d, next);
        let mut items = Vec::new();
        for (key, value) in ctx.scan(&start, &end, usize::MAX, ScanOrder::Ascending)? {
            items.push(decode::<OrderLineRow>(&key, &value)?.item);
        }
        items.sort_unstable();
        items.dedup();
        output(&StockLevelOrdersOutput { next_o_id: next, items })
    }
}

/// `tpcc.stock_level.stock`.
pub(crate) struct StockLevelStock(pub Arc<Env>);

impl Procedure for StockLevelStock {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: StockLevelStockArgs = super::super::rows::args(STOCK_LEVEL_STOCK, args)?;
        let env = &self.0;
        env.check_warehouse(a.w)?;
        env.require_owner(ctx, a.w, STOCK_LEVEL_STOCK)?;
        if !a.items.windows(2).all(|p| p[0] < p[1]) {
            return Err(bad("items must be sorted and distinct".into()));
        }
        let mut low_stock = 0;
        for &i in &a.items {
            let stock: StockRow = read_required(ctx, &stock_key(a.w, i))?;
            low_stock += u32::from(stock.quantity < a.threshold);
        }
        output(&StockLevelOutput { low_stock })
    }
}
