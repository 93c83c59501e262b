//! The seeded TPC-C transaction generator: the mix, uniform home warehouse and district,
//! NURand customers and items with the run-time constants, remote lines and payments, and
//! a logical clock for dates.

use luigi_txn::types::ShardId;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::nurand::{last_name, nurand, NuRandConstants};
use super::partitioner::TpccPartitioner;
use super::population::{DISTRICTS, POPULATION_DATE};
use super::procedures::delivery::DeliveryArgs;
use super::procedures::new_order::{NewOrderArgs, OrderLineArg};
use super::procedures::order_status::OrderStatusArgs;
use super::procedures::payment::PaymentArgs;
use super::procedures::stock_level::{StockLevelArgs, StockLevelOrdersOutput};
use super::procedures::{CustomerSel, STOCK_LEVEL_ORDERS};
use super::rows::Date;
use super::{Mix, TpccConfig, TpccLoad};
use crate::{GenError, TxnGenerator, TxnSpec};

/// The five business transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnKind {
    /// NewOrder (45 % of the standard mix).
    NewOrder,
    /// Payment (43 %).
    Payment,
    /// OrderStatus (4 %).
    OrderStatus,
    /// Delivery (4 %).
    Delivery,
    /// StockLevel (4 %), two steps.
    StockLevel,
}

/// Seeded generator of TPC-C transactions: the same seed gives the same sequence.
pub struct TpccGenerator {
    config: TpccConfig,
    load: TpccLoad,
    partitioner: TpccPartitioner,
    rng: ChaCha8Rng,
    run: NuRandConstants,
    clock: Date,
    items: u32,
    customers: u16,
}

impl TpccGenerator {
    /// A generator for `config` and `load` over `shards` shards, seeded with `seed`. The
    /// NURand constants come from the configuration's seed (the same for every generator).
    pub fn new(config: TpccConfig, load: TpccLoad, shards: u32, seed: u64) -> Self {
        let (_, run) = NuRandConstants::from_seed(config.seed);
        let (items, customers) = (config.items(), config.customers());
        Self {
            config,
            load,
            partitioner: TpccPartitioner::new(shards),
            rng: ChaCha8Rng::seed_from_u64(seed),
            run,
            clock: POPULATION_DATE,
            items,
            customers,
        }
    }

    /// The partitioner the pieces follow.
    pub fn partitioner(&self) -> &TpccPartitioner {
        &self.partitioner
    }

    /// The next business transaction's kind, drawn from the mix.
    pub fn next_kind(&mut self) -> TxnKind {
        if self.load.mix == Mix::NewOrder {
            return TxnKind::NewOrder; // draws nothing, as before there were other mixes
        }
        let mut draw = self.rng.gen_range(0..100);
        for (kind, share) in self.load.mix.shares() {
            if draw < share {
                return kind;
            }
            draw -= share;
        }
        unreachable!("every mix's shares sum to 100")
    }

    /// The first (or only) transaction of a business transaction of `kind`.
    pub fn txn_of(&mut self, kind: TxnKind) -> TxnSpec {
        let p = self.partitioner;
        match kind {
            TxnKind::NewOrder => self.new_order().spec(&p),
            TxnKind::Payment => self.payment().spec(&p),
            TxnKind::OrderStatus => self.order_status().spec(&p),
            TxnKind::Delivery => self.delivery().spec(&p),
            TxnKind::StockLevel => self.stock_level().spec(&p),
        }
    }

    fn tick(&mut self) -> Date {
        self.clock += 1;
        self.clock
    }

    fn warehouse(&mut self) -> u32 {
        self.rng.gen_range(1..=self.config.warehouses)
    }

    fn district(&mut self) -> u8 {
        self.rng.gen_range(1..=DISTRICTS)
    }

    /// A warehouse other than `w` (uniform), when there is one and a draw of `pct` % says so.
    fn maybe_remote(&mut self, w: u32, pct: f64) -> u32 {
        let warehouses = self.config.warehouses;
        if warehouses < 2 || !self.rng.gen_bool((pct / 100.0).clamp(0.0, 1.0)) {
            return w;
        }
        let other = self.rng.gen_range(1..warehouses);
        if other >= w {
            other + 1
        } else {
            other
        }
    }

    fn customer_id(&mut self) -> u16 {
        nurand(&mut self.rng, 1023, 1, u32::from(self.customers), self.run.c_id) as u16
    }

    /// By last name (60 %, NURand(255, 0, 999) over the names the population has) or by id.
    fn customer(&mut self) -> CustomerSel {
        if self.rng.gen_ratio(60, 100) {
            let names = u32::from(self.customers.min(1000));
            CustomerSel::LastName(last_name(nurand(&mut self.rng, 255, 0, names - 1, self.run.c_last) as u16))
        } else {
            CustomerSel::Id(self.customer_id())
        }
    }

    /// NewOrder's arguments: 5-15 lines of NURand items, 1 % rolled back by an unused item
    /// on the last line, each line remote with `remote_item_pct` %.
    pub fn new_order(&mut self) -> NewOrderArgs {
        let (w, d, c) = (self.warehouse(), self.district(), self.customer_id());
        let count = self.rng.gen_range(5..=15);
        let rollback = self.rng.gen_ratio(1, 100);
        let mut lines = Vec::with_capacity(count);
        for k in 0..count {
            let item = match rollback && k + 1 == count {
                true => self.items + 1,
                false => nurand(&mut self.rng, 8191, 1, self.items, self.run.ol_i_id),
            };
            let supply_w = self.maybe_remote(w, self.load.remote_item_pct);
            lines.push(OrderLineArg { item, supply_w, quantity: self.rng.gen_range(1..=10) });
        }
        NewOrderArgs { w, d, c, lines, entry_d: self.tick() }
    }

    /// Payment's arguments: a remote customer with `remote_payment_pct` %, 60 % by last
    /// name, 1.00 to 5 000.00.
    pub fn payment(&mut self) -> PaymentArgs {
        let (w, d) = (self.warehouse(), self.district());
        let c_w = self.maybe_remote(w, self.load.remote_payment_pct);
        let c_d = if c_w == w { d } else { self.district() };
        let customer = self.customer();
        let amount = self.rng.gen_range(100..=500_000);
        PaymentArgs { w, d, c_w, c_d, customer, amount, date: self.tick(), nonce: self.rng.gen() }
    }

    /// OrderStatus's arguments: 60 % by last name.
    pub fn order_status(&mut self) -> OrderStatusArgs {
        let (w, d) = (self.warehouse(), self.district());
        OrderStatusArgs { w, d, customer: self.customer() }
    }

    /// Delivery's arguments: a carrier 1-10.
    pub fn delivery(&mut self) -> DeliveryArgs {
        let w = self.warehouse();
        DeliveryArgs { w, carrier: self.rng.gen_range(1..=10), date: self.tick() }
    }

    /// StockLevel's first step: a threshold 10-20.
    pub fn stock_level(&mut self) -> StockLevelArgs {
        let (w, d) = (self.warehouse(), self.district());
        StockLevelArgs { w, d, threshold: self.rng.gen_range(10..=20) }
    }
}

impl TxnGenerator for TpccGenerator {
    fn next_txn(&mut self) -> Result<TxnSpec, GenError> {
        let kind = self.next_kind();
        Ok(self.txn_of(kind))
    }

    /// StockLevel's second step from its first step's output; nothing after any other.
    fn next_step(&mut self, done: &TxnSpec, outputs: &[(ShardId, Vec<u8>)]) -> Result<Option<TxnSpec>, GenError> {
        if done.procedure != STOCK_LEVEL_ORDERS {
            return Ok(None);
        }
        let args: StockLevelArgs = postcard::from_bytes(&done.args)
            .map_err(|e| GenError(format!("{STOCK_LEVEL_ORDERS}: arguments do not decode: {e}")))?;
        let [(_, bytes)] = outputs else {
            return Err(GenError(format!("{STOCK_LEVEL_ORDERS}: {} outputs, expected 1", outputs.len())));
        };
        let first: StockLevelOrdersOutput = postcard::from_bytes(bytes)
            .map_err(|e| GenError(format!("{STOCK_LEVEL_ORDERS}: output does not decode: {e}")))?;
        Ok(args.next_step(&first).map(|a| a.spec(&self.partitioner)))
    }
}
