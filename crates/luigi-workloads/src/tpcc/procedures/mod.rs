//! The five transactions and the check as stored procedures (names in `docs/TPCC.md`).
//!
//! Every participant of a transaction runs the same procedure with the same arguments and
//! acts on the warehouses it owns (by [`TpccPartitioner`]). Arguments are validated the same
//! way on every participant before anything is read, so a bad argument is refused
//! everywhere; the only decision taken from the data on one participant alone is a missing
//! row that valid arguments never reach (e.g. a customer id beyond the population).
//!
//! Each argument struct builds its own transaction (`spec`), declaring its keys at the
//! levels of `docs/TPCC.md`: rows for W static, W_YTD, DYTD, STOCK and ITEM; prefixes for
//! the units STATIC, ORD and CUST of a district.

pub mod check;
pub mod delivery;
pub mod new_order;
pub mod order_status;
pub mod payment;
pub mod stock_level;

use std::sync::Arc;

use luigi_store::{Key, ScanOrder};
use luigi_txn::partition::{split, Partitioner};
use luigi_txn::procedure::{prefix_successor, ProcCtx, ProcError, Procedure, Registry};
use serde::{Deserialize, Serialize};

use super::keys::{customer_key, customer_of_name_index, name_index_prefix, pad_name};
use super::partitioner::TpccPartitioner;
use super::population::DISTRICTS;
use super::rows::{encode, read_required, CustomerRow};
use super::TpccConfig;
use crate::TxnSpec;

/// `tpcc.new_order`.
pub const NEW_ORDER: &str = "tpcc.new_order";
/// `tpcc.payment`.
pub const PAYMENT: &str = "tpcc.payment";
/// `tpcc.order_status`.
pub const ORDER_STATUS: &str = "tpcc.order_status";
/// `tpcc.delivery`.
pub const DELIVERY: &str = "tpcc.delivery";
/// `tpcc.stock_level.orders`: StockLevel's first step.
pub const STOCK_LEVEL_ORDERS: &str = "tpcc.stock_level.orders";
/// `tpcc.stock_level.stock`: StockLevel's second step.
pub const STOCK_LEVEL_STOCK: &str = "tpcc.stock_level.stock";
/// `tpcc.check`.
pub const CHECK: &str = "tpcc.check";

/// Every procedure name, in registration order.
pub const NAMES: [&str; 7] = [NEW_ORDER, PAYMENT, ORDER_STATUS, DELIVERY, STOCK_LEVEL_ORDERS, STOCK_LEVEL_STOCK, CHECK];

/// What every procedure knows: the configuration and the partitioning.
#[derive(Clone, Debug)]
pub(crate) struct Env {
    pub config: TpccConfig,
    pub partitioner: TpccPartitioner,
    pub customers: u16,
}

impl Env {
    pub fn new(config: TpccConfig, shards: u32) -> Self {
        let customers = config.customers();
        Self { config, partitioner: TpccPartitioner::new(shards), customers }
    }

    /// True when the shard behind `ctx` owns warehouse `w`.
    pub fn owns(&self, ctx: &dyn ProcCtx, w: u32) -> bool {
        self.partitioner.owns(ctx.shard(), w)
    }

    pub fn check_warehouse(&self, w: u32) -> Result<(), ProcError> {
        match (1..=self.config.warehouses).contains(&w) {
            true => Ok(()),
            false => Err(bad(format!("warehouse {w} out of 1..={}", self.config.warehouses))),
        }
    }

    pub fn check_district(&self, d: u8) -> Result<(), ProcError> {
        match (1..=DISTRICTS).contains(&d) {
            true => Ok(()),
            false => Err(bad(format!("district {d} out of 1..={DISTRICTS}"))),
        }
    }

    pub fn check_customer(&self, customer: &CustomerSel) -> Result<(), ProcError> {
        match customer {
            CustomerSel::Id(c) if (1..=self.customers).contains(c) => Ok(()),
            CustomerSel::Id(c) => Err(bad(format!("customer {c} out of 1..={}", self.customers))),
            CustomerSel::LastName(name) if pad_name(name).is_some() => Ok(()),
            CustomerSel::LastName(name) => Err(bad(format!("last name '{name}' longer than 16 bytes"))),
        }
    }

    /// Refuses a procedure run on a shard that owns none of its warehouses.
    pub fn require_owner(&self, ctx: &dyn ProcCtx, w: u32, procedure: &str) -> Result<(), ProcError> {
        match self.owns(ctx, w) {
            true => Ok(()),
            false => Err(bad(format!("{procedure}: warehouse {w} is not on shard {}", ctx.shard()))),
        }
    }
}

/// A [`ProcError::BadArgs`].
pub(crate) fn bad(message: String) -> ProcError {
    ProcError::BadArgs(message)
}

/// A customer, by id or by last name (clause 2.5.1.2, 2.6.1.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CustomerSel {
    /// C_ID.
    Id(u16),
    /// C_LAST: the customer at position ceil(n/2) of the n customers with that last name,
    /// sorted by first name.
    LastName(String),
}

/// Finds a customer of `(w, d)` and reads its static row: by id, or by last name through
/// the name index (static, inside STATIC(w,d)).
pub(crate) fn find_customer(
    ctx: &mut dyn ProcCtx,
    w: u32,
    d: u8,
    customer: &CustomerSel,
) -> Result<(u16, CustomerRow), ProcError> {
    let c = match customer {
        CustomerSel::Id(c) => *c,
        CustomerSel::LastName(name) => {
            let last = pad_name(name).ok_or_else(|| bad(format!("last name '{name}' longer than 16 bytes")))?;
            let prefix = name_index_prefix(w, d, &last);
            let end = prefix_successor(&prefix).ok_or_else(|| bad("name index prefix has no successor".into()))?;
            let entries = ctx.scan(&prefix, &end, usize::MAX, ScanOrder::Ascending)?;
            let Some((key, _)) = entries.get(entries.len().saturating_sub(1) / 2) else {
                return Err(bad(format!("no customer named '{name}' in (w={w}, d={d})")));
            };
            customer_of_name_index(key).ok_or_else(|| bad(format!("malformed name index key {key:?}")))?
        }
    };
    Ok((c, read_required(ctx, &customer_key(w, d, c))?))
}

/// A transaction calling `procedure` with `args`, declaring `reads` and `writes`, split over
/// the shards that own them (ITEM reads go to every participant).
pub(crate) fn spec<T: Serialize>(
    procedure: &str,
    args: &T,
    partitioner: &dyn Partitioner,
    reads: Vec<Key>,
    writes: Vec<Key>,
) -> TxnSpec {
    TxnSpec { procedure: procedure.to_string(), args: encode(args), pieces: split(partitioner, reads, writes) }
}

/// The procedure registered under `name`, if it is one of [`NAMES`].
pub(crate) fn lookup(name: &str, env: &Arc<Env>) -> Option<Arc<dyn Procedure>> {
    let env = env.clone();
    let procedure: Arc<dyn Procedure> = match name {
        NEW_ORDER => Arc::new(new_order::NewOrder(env)),
        PAYMENT => Arc::new(payment::Payment(env)),
        ORDER_STATUS => Arc::new(order_status::OrderStatus(env)),
        DELIVERY => Arc::new(delivery::Delivery(env)),
        STOCK_LEVEL_ORDERS => Arc::new(stock_level::StockLevelOrders(env)),
        STOCK_LEVEL_STOCK => Arc::new(stock_level::StockLevelStock(env)),
        CHECK => Arc::new(check::Check(env)),
        _ => return None,
    };
    Some(procedure)
}

/// Registers every TPC-C procedure.
pub(crate) fn register(registry: &mut Registry, env: &Arc<Env>) {
    for name in NAMES {
        if let Some(procedure) = lookup(name, env) {
            registry.register(name, procedure);
        }
    }
}

/// Money as the spec prints it (dollars with two decimals).
pub(crate) fn dollars(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.unsigned_abs() / 100, cents.unsigned_abs() % 100)
}
