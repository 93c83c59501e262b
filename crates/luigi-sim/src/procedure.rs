//! The simulator's transaction procedure, `sim-micro`: `micro` with the transaction id in
//! front of its arguments (`luigi_workloads::micro::TaggedMicro`, whose argument format and
//! decoding live in the workloads crate). The id does not change what the procedure does, but
//! it lets the simulator see which transaction a leader executes, on which shard and in which
//! order: [`SimMicro`] wraps the shared procedure and records every execution in an
//! [`ExecLog`] the moment it happens.

use std::sync::{Arc, Mutex};

use luigi_proto::procedure::{ProcCtx, ProcError, Procedure, Registry};
use luigi_proto::types::{ShardId, TxnId};
use luigi_workloads::micro::{split_tagged_args, TaggedMicro};

pub use luigi_workloads::micro::{
    decode_tagged_args as decode_args, encode_tagged_args as encode_args, is_micro, micro_ops,
};

/// Registered name.
pub const NAME: &str = TaggedMicro::NAME;

/// Executions in the order they happened: (shard, transaction).
pub type ExecLog = Arc<Mutex<Vec<(ShardId, TxnId)>>>;

/// `sim-micro` recording every execution in `sink` (if any), then running the shared
/// [`TaggedMicro`].
pub struct SimMicro {
    sink: Option<ExecLog>,
}

impl Procedure for SimMicro {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        if let (Some(sink), Some((id, _))) = (&self.sink, split_tagged_args(args)) {
            sink.lock().expect("single-threaded").push((ctx.shard(), id));
        }
        TaggedMicro.execute(ctx, args)
    }
}

/// The built-in procedures plus `sim-micro` recording into `sink` (None: not recorded, as
/// for the checker's replay).
pub fn registry(sink: Option<ExecLog>) -> Registry {
    let mut r = Registry::with_builtins();
    r.register(NAME, Arc::new(SimMicro { sink }));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_proto::procedures::{micro_key, MicroOp, MicroOutput};
    use luigi_proto::types::KeySet;
    use luigi_store::Store;

    #[test]
    fn runs_micro_and_records_the_execution() {
        let sink = ExecLog::default();
        let reg = registry(Some(sink.clone()));
        let id = TxnId { client: 3, seq: 9 };
        let ops = [MicroOp { key: 4, write: Some(7) }, MicroOp { key: 4, write: None }];
        let args = encode_args(id, &ops);
        assert_eq!(decode_args(&args), Some((id, ops.to_vec())));
        let mut store = Store::new();
        let keys = KeySet::new(vec![], vec![micro_key(4)]);
        let out = reg.execute(NAME, &args, &mut store, &keys, 2).expect("runs");
        let out: MicroOutput = postcard::from_bytes(&out).expect("micro output");
        assert_eq!(out, vec![(4, Some(7))]);
        assert_eq!(*sink.lock().unwrap(), vec![(2, id)]);
        assert!(reg.execute(NAME, &[1, 2], &mut store, &keys, 2).is_err());
    }
}
