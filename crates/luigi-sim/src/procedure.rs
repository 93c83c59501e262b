//! The simulator's transaction procedure, `sim-micro`: `micro` with the transaction id in
//! front of its arguments (`luigi_workloads::micro::TaggedMicro`, whose argument format and
//! decoding live in the workloads crate). The id does not change what the procedure does, but
//! it lets the checker tell transactions apart in a replay. Which transaction a replica
//! executes, and when, the simulator learns from the core's `Executed` effects.

use std::sync::Arc;

use luigi_txn::procedure::Registry;
use luigi_workloads::micro::TaggedMicro;

pub use luigi_workloads::micro::{
    decode_tagged_args as decode_args, encode_tagged_args as encode_args, is_micro, micro_ops,
};

/// Registered name.
pub const NAME: &str = TaggedMicro::NAME;

/// The built-in procedures plus `sim-micro`.
pub fn registry() -> Registry {
    let mut r = luigi_workloads::procedures::builtins();
    r.register(NAME, Arc::new(TaggedMicro));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_store::Store;
    use luigi_txn::types::{KeySet, TxnId};
    use luigi_workloads::procedures::{micro_key, MicroOp, MicroOutput};

    #[test]
    fn runs_micro_under_its_tagged_arguments() {
        let reg = registry();
        let id = TxnId { client: 3, seq: 9 };
        let ops = [MicroOp { key: 4, write: Some(7) }, MicroOp { key: 4, write: None }];
        let args = encode_args(id, &ops);
        assert_eq!(decode_args(&args), Some((id, ops.to_vec())));
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![micro_key(4)]);
        let out = reg.execute(NAME, &args, &mut store, &keys, 2).expect("runs");
        let out: MicroOutput = postcard::from_bytes(&out).expect("micro output");
        assert_eq!(out, vec![(4, Some(7))]);
        assert!(reg.execute(NAME, &[1, 2], &mut store, &keys, 2).is_err());
    }
}
