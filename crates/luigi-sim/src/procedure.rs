//! The simulator's transaction procedure, `sim-micro`: the built-in `micro` procedure with the
//! transaction id in front of its arguments. The id does not change what the procedure does
//! (it runs `micro` on the rest of the arguments), but it lets the simulator see which
//! transaction a leader executes, on which shard and in which order: every execution is
//! recorded in an [`ExecLog`] the moment it happens.

use std::sync::{Arc, Mutex};

use luigi_proto::procedure::{ProcCtx, ProcError, Procedure, Registry};
use luigi_proto::procedures::{Micro, MicroOp};
use luigi_proto::types::{ShardId, TxnId};

/// Registered name.
pub const NAME: &str = "sim-micro";

/// Bytes of the transaction id in front of the `micro` arguments.
const ID_LEN: usize = 16;

/// Executions in the order they happened: (shard, transaction).
pub type ExecLog = Arc<Mutex<Vec<(ShardId, TxnId)>>>;

/// Encodes the arguments of transaction `id` running `ops`.
pub fn encode_args(id: TxnId, ops: &[MicroOp]) -> Vec<u8> {
    let mut args = Vec::with_capacity(ID_LEN + 2 * ops.len() + 1);
    args.extend_from_slice(&id.client.to_le_bytes());
    args.extend_from_slice(&id.seq.to_le_bytes());
    args.extend(postcard::to_stdvec(ops).expect("micro operations always encode"));
    args
}

/// Decodes `sim-micro` arguments.
pub fn decode_args(args: &[u8]) -> Option<(TxnId, Vec<MicroOp>)> {
    let (id, ops) = split(args)?;
    Some((id, postcard::from_bytes(ops).ok()?))
}

fn split(args: &[u8]) -> Option<(TxnId, &[u8])> {
    if args.len() < ID_LEN {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(args[i..i + 8].try_into().expect("8 bytes"));
    Some((TxnId { client: word(0), seq: word(8) }, &args[ID_LEN..]))
}

/// The operations of a transaction of `procedure` (`micro` or `sim-micro`) with `args`.
pub fn micro_ops(procedure: &str, args: &[u8]) -> Option<Vec<MicroOp>> {
    match procedure {
        NAME => decode_args(args).map(|(_, ops)| ops),
        Micro::NAME => postcard::from_bytes(args).ok(),
        _ => None,
    }
}

/// True for procedures whose output is a `MicroOutput`.
pub fn is_micro(procedure: &str) -> bool {
    procedure == NAME || procedure == Micro::NAME
}

/// `micro` behind a transaction id, recording every execution in `sink` (if any).
pub struct SimMicro {
    sink: Option<ExecLog>,
}

impl Procedure for SimMicro {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let (id, ops) = split(args).ok_or_else(|| ProcError::BadArgs("sim-micro: no transaction id".into()))?;
        if let Some(sink) = &self.sink {
            sink.lock().expect("single-threaded").push((ctx.shard(), id));
        }
        Micro.execute(ctx, ops)
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
    use luigi_proto::procedures::{micro_key, MicroOutput};
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
