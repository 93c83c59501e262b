//! YCSB's keys and rows: `user` + the FNV-hashed record number (YCSB's `insertorder=hashed`,
//! `CoreWorkload.buildKeyName` with `Utils.fnvhash64`), stored under the usertable's prefix;
//! a row is `field_count` fields of `field_length` bytes, stored concatenated.

use luigi_store::{table_key, Key, Value};

/// Table id of YCSB's `usertable`.
pub const YCSB_TABLE: u16 = 4;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-end-first octets of `val`, then Java's
/// `Math.abs` (which leaves `i64::MIN` negative: `wrapping_abs`).
pub fn fnvhash64(val: i64) -> i64 {
    const OFFSET_BASIS: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
    const PRIME: i64 = 1_099_511_628_211;
    let mut hash = OFFSET_BASIS;
    let mut v = val;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(PRIME);
    }
    hash.wrapping_abs()
}

/// YCSB's key name of record number `n` (hashed insert order): `"user"` + the decimal
/// `fnvhash64(n)`.
pub fn key_name(n: u64) -> String {
    format!("user{}", fnvhash64(n as i64))
}

/// The usertable's prefix in the store.
pub fn table_prefix() -> Key {
    table_key(YCSB_TABLE, &[])
}

/// The store key of record number `n`: the table prefix, then [`key_name`].
pub fn record_key(n: u64) -> Key {
    let mut key = table_prefix();
    key.extend_from_slice(key_name(n).as_bytes());
    key
}

/// Field `field` of record `n` as the population of `seed` writes it: `length` printable
/// bytes drawn from a splitmix64 stream (YCSB writes random bytes; these are reproducible).
pub fn initial_field(seed: u64, n: u64, field: u32, length: u32) -> Vec<u8> {
    let mut state = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(field).wrapping_mul(0xd1b5_4a32_d192_ed03);
    (0..length)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            b' ' + ((z ^ (z >> 31)) % 95) as u8
        })
        .collect()
}

/// Record `n`'s row in the population of `seed`: its fields concatenated.
pub fn initial_row(seed: u64, n: u64, field_count: u32, field_length: u32) -> Value {
    (0..field_count).flat_map(|f| initial_field(seed, n, f, field_length)).collect()
}
