//! The key layout of `docs/TPCC.md`: every TPC-C key starts with [`TPCC_SPACE`], then the
//! warehouse (u32, big-endian), then a scope byte, so a warehouse's rows are contiguous and a
//! district's units (STATIC, ORD, DYTD, CUST) are prefixes that a transaction can declare.
//!
//! ```text
//! [TPCC][w][0]                                    WAREHOUSE, static columns
//! [TPCC][w][1]                                    W_YTD
//! [TPCC][w][2][d][0][0]                           DISTRICT, static columns      unit STATIC(w,d)
//! [TPCC][w][2][d][0][1][c:u16]                    CUSTOMER, static columns
//! [TPCC][w][2][d][0][2][last:16][first:16][c:u16] customer-by-last-name index
//! [TPCC][w][2][d][1][0]                           D_NEXT_O_ID                  unit ORD(w,d)
//! [TPCC][w][2][d][1][1][o:u32]                    ORDER
//! [TPCC][w][2][d][1][2][c:u16][o:u32]             order-by-customer index
//! [TPCC][w][2][d][1][3][o:u32]                    NEW-ORDER
//! [TPCC][w][2][d][1][4][o:u32][ol:u8]             ORDER-LINE
//! [TPCC][w][2][d][2]                              D_YTD                        unit DYTD(w,d)
//! [TPCC][w][2][d][3][0][c:u16]                    CUSTOMER, changing columns   unit CUST(w,d)
//! [TPCC][w][2][d][3][1][c:u16][nonce:u64]         HISTORY
//! [TPCC][w][3][i:u32]                             STOCK
//! [ITEM][i:u32]                                   ITEM (replicated)
//! ```
//!
//! Names in the index are padded with zero bytes to [`NAME_BYTES`], so the index sorts by
//! last name, then first name, then customer id.

use luigi_store::Key;

/// Table-space id of every TPC-C key but ITEM's.
pub const TPCC_SPACE: u16 = 0x0C01;
/// Table id of ITEM, replicated on every shard.
pub const ITEM_TABLE: u16 = 0x0C02;
/// Bytes of a name in the customer-by-last-name index (zero-padded).
pub const NAME_BYTES: usize = 16;

/// Scope byte after the warehouse: WAREHOUSE's static row.
const W_STATIC: u8 = 0;
/// Scope byte after the warehouse: W_YTD.
const W_YTD: u8 = 1;
/// Scope byte after the warehouse: a district's units.
const W_DISTRICT: u8 = 2;
/// Scope byte after the warehouse: STOCK.
const W_STOCK: u8 = 3;

/// District unit byte: STATIC(w,d).
const D_STATIC: u8 = 0;
/// District unit byte: ORD(w,d).
const D_ORD: u8 = 1;
/// District unit byte: DYTD(w,d).
const D_YTD: u8 = 2;
/// District unit byte: CUST(w,d).
const D_CUST: u8 = 3;

/// Table byte inside STATIC(w,d): the district's row.
const S_DISTRICT: u8 = 0;
/// Table byte inside STATIC(w,d): customers' static rows.
const S_CUSTOMER: u8 = 1;
/// Table byte inside STATIC(w,d): the customer-by-last-name index.
const S_NAME: u8 = 2;

/// Table byte inside ORD(w,d): D_NEXT_O_ID.
pub(crate) const O_NEXT: u8 = 0;
/// Table byte inside ORD(w,d): ORDER.
pub(crate) const O_ORDER: u8 = 1;
/// Table byte inside ORD(w,d): the order-by-customer index.
pub(crate) const O_BY_CUSTOMER: u8 = 2;
/// Table byte inside ORD(w,d): NEW-ORDER.
pub(crate) const O_NEW_ORDER: u8 = 3;
/// Table byte inside ORD(w,d): ORDER-LINE.
pub(crate) const O_LINE: u8 = 4;

/// Table byte inside CUST(w,d): customers' changing rows.
pub(crate) const C_ROW: u8 = 0;
/// Table byte inside CUST(w,d): HISTORY.
pub(crate) const C_HISTORY: u8 = 1;

/// Length of a district prefix `[TPCC][w][2][d]`.
pub(crate) const DISTRICT_PREFIX_LEN: usize = 2 + 4 + 1 + 1;
/// Length of a district unit prefix (STATIC, ORD, CUST): the district prefix and a byte.
pub(crate) const UNIT_LEN: usize = DISTRICT_PREFIX_LEN + 1;

fn with(prefix: Key, tail: &[u8]) -> Key {
    let mut k = prefix;
    k.extend_from_slice(tail);
    k
}

/// `[TPCC][w]`: every row of warehouse `w`.
pub fn warehouse_prefix(w: u32) -> Key {
    let mut k = Vec::with_capacity(32);
    k.extend_from_slice(&TPCC_SPACE.to_be_bytes());
    k.extend_from_slice(&w.to_be_bytes());
    k
}

/// WAREHOUSE's static row (name, tax).
pub fn warehouse_key(w: u32) -> Key {
    with(warehouse_prefix(w), &[W_STATIC])
}

/// W_YTD of warehouse `w`.
pub fn w_ytd_key(w: u32) -> Key {
    with(warehouse_prefix(w), &[W_YTD])
}

/// `[TPCC][w][2][d]`: every unit of district `(w, d)`.
pub fn district_prefix(w: u32, d: u8) -> Key {
    with(warehouse_prefix(w), &[W_DISTRICT, d])
}

/// Unit STATIC(w,d) (a prefix): the district's static row, its customers' static rows and
/// the customer-by-last-name index.
pub fn static_unit(w: u32, d: u8) -> Key {
    with(district_prefix(w, d), &[D_STATIC])
}

/// DISTRICT's static row (name, tax).
pub fn district_key(w: u32, d: u8) -> Key {
    with(static_unit(w, d), &[S_DISTRICT])
}

/// CUSTOMER's static row (names, credit, discount).
pub fn customer_key(w: u32, d: u8, c: u16) -> Key {
    let mut k = with(static_unit(w, d), &[S_CUSTOMER]);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// The customers named `last` in the last-name index of `(w, d)`.
pub fn name_index_prefix(w: u32, d: u8, last: &[u8; NAME_BYTES]) -> Key {
    let mut k = with(static_unit(w, d), &[S_NAME]);
    k.extend_from_slice(last);
    k
}

/// The last-name index entry of customer `c` (empty value).
pub fn name_index_key(w: u32, d: u8, last: &[u8; NAME_BYTES], first: &[u8; NAME_BYTES], c: u16) -> Key {
    let mut k = name_index_prefix(w, d, last);
    k.extend_from_slice(first);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// The customer id at the end of a last-name index key.
pub fn customer_of_name_index(key: &[u8]) -> Option<u16> {
    let tail: [u8; 2] = key.get(key.len().checked_sub(2)?..)?.try_into().ok()?;
    Some(u16::from_be_bytes(tail))
}

/// Unit ORD(w,d) (a prefix): D_NEXT_O_ID, ORDER, the order-by-customer index, NEW-ORDER and
/// ORDER-LINE of the district.
pub fn ord_unit(w: u32, d: u8) -> Key {
    with(district_prefix(w, d), &[D_ORD])
}

/// D_NEXT_O_ID of `(w, d)`.
pub fn next_o_id_key(w: u32, d: u8) -> Key {
    with(ord_unit(w, d), &[O_NEXT])
}

/// ORDER `o` of `(w, d)`.
pub fn order_key(w: u32, d: u8, o: u32) -> Key {
    let mut k = with(ord_unit(w, d), &[O_ORDER]);
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// The orders of customer `c` in the order-by-customer index.
pub fn order_by_customer_prefix(w: u32, d: u8, c: u16) -> Key {
    let mut k = with(ord_unit(w, d), &[O_BY_CUSTOMER]);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// The order-by-customer index entry of order `o` of customer `c` (empty value).
pub fn order_by_customer_key(w: u32, d: u8, c: u16, o: u32) -> Key {
    with(order_by_customer_prefix(w, d, c), &o.to_be_bytes())
}

/// Every NEW-ORDER row of `(w, d)`.
pub fn new_order_prefix(w: u32, d: u8) -> Key {
    with(ord_unit(w, d), &[O_NEW_ORDER])
}

/// NEW-ORDER row of order `o` (empty value).
pub fn new_order_key(w: u32, d: u8, o: u32) -> Key {
    with(new_order_prefix(w, d), &o.to_be_bytes())
}

/// Every ORDER-LINE row of `(w, d)`.
pub fn order_line_prefix(w: u32, d: u8) -> Key {
    with(ord_unit(w, d), &[O_LINE])
}

/// The ORDER-LINE rows of order `o`, or the first key of order `o`'s lines in a range scan.
pub fn order_lines_of(w: u32, d: u8, o: u32) -> Key {
    with(order_line_prefix(w, d), &o.to_be_bytes())
}

/// ORDER-LINE `ol` (1-based) of order `o`.
pub fn order_line_key(w: u32, d: u8, o: u32, ol: u8) -> Key {
    with(order_lines_of(w, d, o), &[ol])
}

/// D_YTD of `(w, d)`: unit DYTD(w,d), a row.
pub fn d_ytd_key(w: u32, d: u8) -> Key {
    with(district_prefix(w, d), &[D_YTD])
}

/// Unit CUST(w,d) (a prefix): the customers' changing rows and their HISTORY.
pub fn cust_unit(w: u32, d: u8) -> Key {
    with(district_prefix(w, d), &[D_CUST])
}

/// CUSTOMER's changing row (balance, YTD payment, counts, C_DATA).
pub fn customer_changing_key(w: u32, d: u8, c: u16) -> Key {
    let mut k = with(cust_unit(w, d), &[C_ROW]);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// HISTORY row `nonce` of customer `c` of `(w, d)`.
pub fn history_key(w: u32, d: u8, c: u16, nonce: u64) -> Key {
    let mut k = with(cust_unit(w, d), &[C_HISTORY]);
    k.extend_from_slice(&c.to_be_bytes());
    k.extend_from_slice(&nonce.to_be_bytes());
    k
}

/// STOCK row of item `i` in warehouse `w`.
pub fn stock_key(w: u32, i: u32) -> Key {
    let mut k = with(warehouse_prefix(w), &[W_STOCK]);
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// ITEM row `i` (replicated on every shard).
pub fn item_key(i: u32) -> Key {
    let mut k = Vec::with_capacity(6);
    k.extend_from_slice(&ITEM_TABLE.to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// True for a key of the ITEM table.
pub fn is_item_key(key: &[u8]) -> bool {
    key.get(..2) == Some(&ITEM_TABLE.to_be_bytes()[..])
}

/// The warehouse of a TPC-C key (`None` for ITEM and any other key).
pub fn warehouse_of(key: &[u8]) -> Option<u32> {
    if key.get(..2)? != TPCC_SPACE.to_be_bytes() {
        return None;
    }
    Some(u32::from_be_bytes(key.get(2..6)?.try_into().ok()?))
}

/// The big-endian u32 at `at` in `key`.
pub(crate) fn u32_at(key: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(key.get(at..at + 4)?.try_into().ok()?))
}

/// The big-endian u16 at `at` in `key`.
pub(crate) fn u16_at(key: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(key.get(at..at + 2)?.try_into().ok()?))
}

/// `name` zero-padded to [`NAME_BYTES`] (`None` when longer).
pub fn pad_name(name: &str) -> Option<[u8; NAME_BYTES]> {
    let bytes = name.as_bytes();
    let mut out = [0u8; NAME_BYTES];
    out.get_mut(..bytes.len())?.copy_from_slice(bytes);
    Some(out)
}

/// A readable description of a key for error messages (e.g. `stock(w=1, i=42)`).
pub fn describe(key: &[u8]) -> String {
    if is_item_key(key) {
        return match u32_at(key, 2) {
            Some(i) if key.len() == 6 => format!("item(i={i})"),
            _ => format!("item key {key:?}"),
        };
    }
    let Some(w) = warehouse_of(key) else { return format!("key {key:?}") };
    let tail = &key[6..];
    let rest = |at: usize| tail.get(at..).unwrap_or_default();
    match tail {
        [W_STATIC] => format!("warehouse(w={w})"),
        [W_YTD] => format!("w_ytd(w={w})"),
        [W_STOCK, ..] if tail.len() == 5 => format!("stock(w={w}, i={})", u32_at(tail, 1).unwrap_or_default()),
        [W_DISTRICT, d, unit, ..] => {
            let scope = match (*unit, tail.get(3)) {
                (D_STATIC, Some(&S_DISTRICT)) => "district".to_string(),
                (D_STATIC, Some(&S_CUSTOMER)) => format!("customer(c={})", u16_at(tail, 4).unwrap_or_default()),
                (D_STATIC, Some(&S_NAME)) => "name index entry".to_string(),
                (D_STATIC, _) => "unit STATIC".to_string(),
                (D_ORD, Some(&O_NEXT)) => "d_next_o_id".to_string(),
                (D_ORD, Some(&O_ORDER)) => format!("order(o={})", u32_at(tail, 4).unwrap_or_default()),
                (D_ORD, Some(&O_BY_CUSTOMER)) => "order-by-customer entry".to_string(),
                (D_ORD, Some(&O_NEW_ORDER)) => format!("new_order(o={})", u32_at(tail, 4).unwrap_or_default()),
                (D_ORD, Some(&O_LINE)) => format!(
                    "order_line(o={}, ol={})",
                    u32_at(tail, 4).unwrap_or_default(),
                    rest(8).first().copied().unwrap_or_default()
                ),
                (D_ORD, _) => "unit ORD".to_string(),
                (D_YTD, _) => "d_ytd".to_string(),
                (D_CUST, Some(&C_ROW)) => format!("customer_changing(c={})", u16_at(tail, 4).unwrap_or_default()),
                (D_CUST, Some(&C_HISTORY)) => format!("history(c={})", u16_at(tail, 4).unwrap_or_default()),
                (D_CUST, _) => "unit CUST".to_string(),
                (other, _) => format!("unknown unit {other}"),
            };
            format!("{scope} of (w={w}, d={d})")
        }
        _ => format!("tpcc key {key:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::procedure::prefix_successor;

    #[test]
    fn units_are_prefixes_of_their_rows_and_disjoint() {
        let (w, d) = (7, 3);
        assert!(district_key(w, d).starts_with(&static_unit(w, d)));
        assert!(customer_key(w, d, 5).starts_with(&static_unit(w, d)));
        let last = pad_name("BARBAR").unwrap();
        let first = pad_name("Ann").unwrap();
        assert!(name_index_key(w, d, &last, &first, 9).starts_with(&name_index_prefix(w, d, &last)));
        for k in [next_o_id_key(w, d), order_key(w, d, 1), order_by_customer_key(w, d, 2, 1), new_order_key(w, d, 1)] {
            assert!(k.starts_with(&ord_unit(w, d)));
        }
        assert!(order_line_key(w, d, 1, 1).starts_with(&ord_unit(w, d)));
        assert!(customer_changing_key(w, d, 5).starts_with(&cust_unit(w, d)));
        assert!(history_key(w, d, 5, 1).starts_with(&cust_unit(w, d)));
        let units = [static_unit(w, d), ord_unit(w, d), d_ytd_key(w, d), cust_unit(w, d)];
        for (i, a) in units.iter().enumerate() {
            for b in &units[i + 1..] {
                assert!(!a.starts_with(b) && !b.starts_with(a));
            }
        }
        assert!(!stock_key(w, 1).starts_with(&w_ytd_key(w)));
        assert_eq!(warehouse_of(&stock_key(w, 1)), Some(w));
        assert_eq!(warehouse_of(&item_key(1)), None);
        assert!(is_item_key(&item_key(3)));
    }

    #[test]
    fn name_index_sorts_by_first_name_and_scans_stay_in_the_unit() {
        let (w, d) = (1, 1);
        let last = pad_name("ABLEABLE").unwrap();
        let a = name_index_key(w, d, &last, &pad_name("Al").unwrap(), 9);
        let b = name_index_key(w, d, &last, &pad_name("Alice").unwrap(), 1);
        assert!(a < b);
        assert_eq!(customer_of_name_index(&b), Some(1));
        let end = prefix_successor(&name_index_prefix(w, d, &last)).unwrap();
        assert!(end.starts_with(&static_unit(w, d)));
        assert!(pad_name("SEVENTEEN_CHARS_X").is_none());
    }

    #[test]
    fn describe_names_the_table() {
        assert_eq!(describe(&stock_key(2, 42)), "stock(w=2, i=42)");
        assert_eq!(describe(&order_line_key(1, 3, 7, 2)), "order_line(o=7, ol=2) of (w=1, d=3)");
        assert_eq!(describe(&item_key(5)), "item(i=5)");
        assert_eq!(describe(&w_ytd_key(4)), "w_ytd(w=4)");
    }
}
