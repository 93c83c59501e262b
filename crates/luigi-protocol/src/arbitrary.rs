//! The protocol's strategies for the derived `proptest::arbitrary::Arbitrary` (feature
//! `arbitrary`): every strategy of `luigi_txn::arbitrary` (times, keys, transactions; see
//! there for what each draws and why), and the fast path's accept records.

use proptest::prelude::*;

pub use luigi_txn::arbitrary::*;

use crate::fast::AcceptRecord;

/// Accept records as a replica answers an accepts query: valid encodings and garbage.
pub fn accept_records() -> BoxedStrategy<Vec<Vec<u8>>> {
    let one = prop_oneof![3 => any::<AcceptRecord>().prop_map(|r| r.encode()), 1 => blob()];
    proptest::collection::vec(one, 0..3).boxed()
}
