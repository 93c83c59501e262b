//! `tpcc.payment` (clause 2.5).

use std::sync::Arc;

use luigi_store::Key;
use luigi_txn::partition::Partitioner;
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure};
use serde::{Deserialize, Serialize};

use super::{bad, dollars, find_customer, spec, CustomerSel, Env, PAYMENT};
use crate::tpcc::keys::*;
use crate::tpcc::population::{district_name, warehouse_name};
use crate::tpcc::rows::*;
use crate::TxnSpec;

/// Characters of C_DATA a Payment returns for a bad-credit customer.
pub const C_DATA_SHOWN: usize = 200;

/// Arguments of `tpcc.payment`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentArgs {
    /// W_ID: the warehouse paid at.
    pub w: u32,
    /// D_ID.
    pub d: u8,
    /// C_W_ID: the customer's warehouse.
    pub c_w: u32,
    /// C_D_ID.
    pub c_d: u8,
    /// The customer, by id or last name.
    pub customer: CustomerSel,
    /// H_AMOUNT (positive).
    pub amount: Money,
    /// H_DATE.
    pub date: Date,
    /// The HISTORY row's key suffix (random, from the generator).
    pub nonce: u64,
}

impl PaymentArgs {
    /// Declared keys: the home piece reads W static and STATIC(w,d) and writes W_YTD and
    /// DYTD(w,d); the customer's piece reads STATIC(c_w,c_d) and writes CUST(c_w,c_d).
    pub fn declare(&self) -> (Vec<Key>, Vec<Key>) {
        let reads = vec![warehouse_key(self.w), static_unit(self.w, self.d), static_unit(self.c_w, self.c_d)];
        let writes = vec![w_ytd_key(self.w), d_ytd_key(self.w, self.d), cust_unit(self.c_w, self.c_d)];
        (reads, writes)
    }

    /// The transaction.
    pub fn spec(&self, partitioner: &dyn Partitioner) -> TxnSpec {
        let (reads, writes) = self.declare();
        spec(PAYMENT, self, partitioner, reads, writes)
    }
}

/// The home piece's part of a payment's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentHome {
    /// W_NAME.
    pub w_name: String,
    /// D_NAME.
    pub d_name: String,
    /// W_YTD after the payment.
    pub w_ytd: Money,
    /// D_YTD after the payment.
    pub d_ytd: Money,
}

/// The customer's piece's part of a payment's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentCustomer {
    /// C_ID (found by name or given).
    pub c: u16,
    /// C_FIRST.
    pub first: String,
    /// C_MIDDLE.
    pub middle: String,
    /// C_LAST.
    pub last: String,
    /// C_CREDIT.
    pub credit: Credit,
    /// C_CREDIT_LIM.
    pub credit_lim: Money,
    /// C_DISCOUNT.
    pub discount: BasisPoints,
    /// C_BALANCE after the payment.
    pub balance: Money,
    /// The first [`C_DATA_SHOWN`] characters of C_DATA, for a bad-credit customer.
    pub data: Option<String>,
}

/// What one participant of `tpcc.payment` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentOutput {
    /// The home piece's part.
    pub home: Option<PaymentHome>,
    /// The customer's piece's part.
    pub customer: Option<PaymentCustomer>,
}

/// `tpcc.payment`: the home piece adds the amount to W_YTD and D_YTD; the customer's piece
/// updates the customer and inserts the HISTORY row.
pub(crate) struct Payment(pub Arc<Env>);

impl Procedure for Payment {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let a: PaymentArgs = super::super::rows::args(PAYMENT, args)?;
        let env = &self.0;
        env.check_warehouse(a.w)?;
        env.check_district(a.d)?;
        env.check_warehouse(a.c_w)?;
        env.check_district(a.c_d)?;
        env.check_customer(&a.customer)?;
        if a.amount <= 0 {
            return Err(bad(format!("amount {} is not positive", a.amount)));
        }
        let home = match env.owns(ctx, a.w) {
            true => Some(pay_home(ctx, &a)?),
            false => None,
        };
        let customer = match env.owns(ctx, a.c_w) {
            true => Some(pay_customer(env, ctx, &a, home.as_ref())?),
            false => None,
        };
        output(&PaymentOutput { home, customer })
    }
}

fn add(ctx: &mut dyn ProcCtx, key: Key, amount: Money) -> Result<Money, ProcError> {
    let ytd: Money = read_required(ctx, &key)?;
    let ytd = ytd.checked_add(amount).ok_or_else(|| bad(format!("{} overflows", describe(&key))))?;
    write(ctx, key, &ytd)?;
    Ok(ytd)
}

fn pay_home(ctx: &mut dyn ProcCtx, a: &PaymentArgs) -> Result<PaymentHome, ProcError> {
    let warehouse: WarehouseRow = read_required(ctx, &warehouse_key(a.w))?;
    let district: DistrictRow = read_required(ctx, &district_key(a.w, a.d))?;
    let w_ytd = add(ctx, w_ytd_key(a.w), a.amount)?;
    let d_ytd = add(ctx, d_ytd_key(a.w, a.d), a.amount)?;
    Ok(PaymentHome { w_name: warehouse.name, d_name: district.name, w_ytd, d_ytd })
}

fn pay_customer(
    env: &Env,
    ctx: &mut dyn ProcCtx,
    a: &PaymentArgs,
    home: Option<&PaymentHome>,
) -> Result<PaymentCustomer, ProcError> {
    let (c, row) = find_customer(ctx, a.c_w, a.c_d, &a.customer)?;
    let key = customer_changing_key(a.c_w, a.c_d, c);
    let mut changing: CustomerChanging = read_required(ctx, &key)?;
    changing.balance = changing.balance.saturating_sub(a.amount);
    changing.ytd_payment = changing.ytd_payment.saturating_add(a.amount);
    changing.payment_cnt = changing.payment_cnt.saturating_add(1);
    let shown = match row.credit {
        Credit::Bad => {
            let entry = format!("{c} {} {} {} {} {}|", a.c_d, a.c_w, a.d, a.w, dollars(a.amount));
            let mut data = entry + &changing.data;
            truncate_chars(&mut data, C_DATA_MAX);
            changing.data = data;
            let mut shown = changing.data.clone();
            truncate_chars(&mut shown, C_DATA_SHOWN);
            Some(shown)
        }
        Credit::Good => None,
    };
    let balance = changing.balance;
    write(ctx, key, &changing)?;
    // H_DATA: the home names, read by the home piece, else recomputed (static data rule).
    let data = match home {
        Some(h) => format!("{}    {}", h.w_name, h.d_name),
        None => format!("{}    {}", warehouse_name(&env.config, a.w), district_name(&env.config, a.w, a.d)),
    };
    let history = HistoryRow { w: a.w, d: a.d, date: a.date, amount: a.amount, data };
    insert(ctx, history_key(a.c_w, a.c_d, c, a.nonce), &history)?;
    Ok(PaymentCustomer {
        c,
        first: row.first,
        middle: row.middle,
        last: row.last,
        credit: row.credit,
        credit_lim: row.credit_lim,
        discount: row.discount,
        balance,
        data: shown,
    })
}

/// Cuts `s` to at most `max` characters.
fn truncate_chars(s: &mut String, max: usize) {
    if let Some((at, _)) = s.char_indices().nth(max) {
        s.truncate(at);
    }
}
