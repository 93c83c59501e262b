//! Rows: postcard-encoded structs holding the columns some transaction or condition uses,
//! plus the spec's filler strings where they size the table (C_DATA, S_DIST_xx, S_DATA,
//! I_DATA). Money is [`Money`] (integer cents), rates are basis points (1/10 000), dates are
//! seconds supplied by the generator.
//!
//! Integer rows (W_YTD, D_YTD, D_NEXT_O_ID) are a postcard integer; index entries and
//! NEW-ORDER rows are empty.

use luigi_store::{Key, Value};
use luigi_txn::procedure::{ProcCtx, ProcError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::keys::describe;

/// Money in cents.
pub type Money = i64;
/// A rate in basis points (1/10 000): 1 250 is 12.5 %.
pub type BasisPoints = i64;
/// A date: seconds (logical, from the generator's clock).
pub type Date = u64;

/// Bytes in one S_DIST_xx column.
pub const DIST_BYTES: usize = 24;
/// Most characters of C_DATA (clause 2.5.2.2).
pub const C_DATA_MAX: usize = 500;

/// WAREHOUSE's static columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarehouseRow {
    /// W_NAME.
    pub name: String,
    /// W_TAX.
    pub tax: BasisPoints,
}

/// DISTRICT's static columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistrictRow {
    /// D_NAME.
    pub name: String,
    /// D_TAX.
    pub tax: BasisPoints,
}

/// C_CREDIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Credit {
    /// "GC".
    Good,
    /// "BC": Payment prepends to C_DATA.
    Bad,
}

impl Credit {
    /// The spec's two-letter code.
    pub fn code(self) -> &'static str {
        match self {
            Credit::Good => "GC",
            Credit::Bad => "BC",
        }
    }
}

/// CUSTOMER's static columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerRow {
    /// C_FIRST.
    pub first: String,
    /// C_MIDDLE ("OE").
    pub middle: String,
    /// C_LAST.
    pub last: String,
    /// C_SINCE.
    pub since: Date,
    /// C_CREDIT.
    pub credit: Credit,
    /// C_CREDIT_LIM.
    pub credit_lim: Money,
    /// C_DISCOUNT.
    pub discount: BasisPoints,
}

/// CUSTOMER's changing columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerChanging {
    /// C_BALANCE.
    pub balance: Money,
    /// C_YTD_PAYMENT.
    pub ytd_payment: Money,
    /// C_PAYMENT_CNT.
    pub payment_cnt: u32,
    /// C_DELIVERY_CNT.
    pub delivery_cnt: u32,
    /// C_DATA (300-500 characters).
    pub data: String,
}

/// A HISTORY row (its customer is in its key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRow {
    /// H_W_ID: the warehouse the payment was made at.
    pub w: u32,
    /// H_D_ID.
    pub d: u8,
    /// H_DATE.
    pub date: Date,
    /// H_AMOUNT.
    pub amount: Money,
    /// H_DATA.
    pub data: String,
}

/// An ORDER row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRow {
    /// O_C_ID.
    pub c: u16,
    /// O_ENTRY_D.
    pub entry_d: Date,
    /// O_CARRIER_ID (`None`: not delivered).
    pub carrier: Option<u8>,
    /// O_OL_CNT.
    pub ol_cnt: u8,
    /// O_ALL_LOCAL.
    pub all_local: bool,
}

/// An ORDER-LINE row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderLineRow {
    /// OL_I_ID.
    pub item: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w: u32,
    /// OL_DELIVERY_D (`None`: not delivered).
    pub delivery_d: Option<Date>,
    /// OL_QUANTITY.
    pub quantity: u8,
    /// OL_AMOUNT.
    pub amount: Money,
    /// OL_DIST_INFO (24 characters).
    pub dist_info: String,
}

/// A STOCK row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockRow {
    /// S_QUANTITY.
    pub quantity: i32,
    /// S_YTD.
    pub ytd: i64,
    /// S_ORDER_CNT.
    pub order_cnt: u32,
    /// S_REMOTE_CNT.
    pub remote_cnt: u32,
    /// S_DIST_01 to S_DIST_10, [`DIST_BYTES`] characters each, concatenated.
    pub dist: String,
    /// S_DATA (26-50 characters).
    pub data: String,
}

impl StockRow {
    /// S_DIST_xx of district `d` (1-10), `None` if the row is malformed or `d` out of range.
    pub fn dist_of(&self, d: u8) -> Option<&str> {
        let at = usize::from(d).checked_sub(1)? * DIST_BYTES;
        self.dist.get(at..at + DIST_BYTES)
    }
}

/// An ITEM row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRow {
    /// I_IM_ID.
    pub im_id: u32,
    /// I_NAME.
    pub name: String,
    /// I_PRICE.
    pub price: Money,
    /// I_DATA (26-50 characters).
    pub data: String,
}

/// Encodes a row.
pub fn encode<T: Serialize>(row: &T) -> Value {
    postcard::to_stdvec(row).expect("rows of plain fields always encode")
}

/// Decodes the row stored under `key`; a row that does not decode is an error naming the key.
pub fn decode<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, ProcError> {
    postcard::from_bytes(value).map_err(|e| ProcError::BadArgs(format!("row {} does not decode: {e}", describe(key))))
}

/// Reads and decodes the row under `key` (`None` if absent).
pub fn read<T: DeserializeOwned>(ctx: &mut dyn ProcCtx, key: &[u8]) -> Result<Option<T>, ProcError> {
    let mut row = None;
    ctx.get_with(key, &mut |v| row = v.map(|v| decode(key, v)))?;
    row.transpose()
}

/// Reads and decodes the row under `key`, which must exist.
pub fn read_required<T: DeserializeOwned>(ctx: &mut dyn ProcCtx, key: &[u8]) -> Result<T, ProcError> {
    read(ctx, key)?.ok_or_else(|| ProcError::BadArgs(format!("no row {}", describe(key))))
}

/// Encodes and writes `row` under `key`.
pub fn write<T: Serialize>(ctx: &mut dyn ProcCtx, key: Key, row: &T) -> Result<(), ProcError> {
    ctx.put(key, encode(row))
}

/// Encodes and inserts `row` under `key`, which must not exist yet.
pub fn insert<T: Serialize>(ctx: &mut dyn ProcCtx, key: Key, row: &T) -> Result<(), ProcError> {
    ctx.insert(key, encode(row))
}

/// Encodes a procedure's output.
pub fn output<T: Serialize>(out: &T) -> Result<Vec<u8>, ProcError> {
    postcard::to_stdvec(out).map_err(|e| ProcError::BadArgs(format!("output does not encode: {e}")))
}

/// Decodes a procedure's arguments.
pub fn args<T: DeserializeOwned>(procedure: &str, bytes: &[u8]) -> Result<T, ProcError> {
    postcard::from_bytes(bytes).map_err(|e| ProcError::BadArgs(format!("{procedure}: arguments do not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::keys::stock_key;

    #[test]
    fn rows_round_trip_and_bad_rows_name_their_key() {
        let row = StockRow {
            quantity: 50,
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            dist: "a".repeat(DIST_BYTES * 10),
            data: "data".into(),
        };
        let key = stock_key(3, 9);
        assert_eq!(decode::<StockRow>(&key, &encode(&row)).unwrap(), row);
        assert_eq!(row.dist_of(10).map(str::len), Some(DIST_BYTES));
        assert_eq!(row.dist_of(11), None);
        assert_eq!(row.dist_of(0), None);
        let err = decode::<StockRow>(&key, &[0xff]).unwrap_err();
        assert!(matches!(&err, ProcError::BadArgs(m) if m.contains("stock(w=3, i=9)")), "{err}");
    }
}
