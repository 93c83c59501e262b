//! `micro` with the transaction id in front of its arguments ([`TaggedMicro`]), and decoding
//! the operations of either form ([`micro_ops`]), which a checker needs to replay them.
//!
//! The id does not change what the procedure does, but it lets an observer (the simulator)
//! see which transaction a leader executes, on which shard and in which order.

use luigi_txn::procedure::{ProcCtx, ProcError, Procedure};
use luigi_txn::types::TxnId;

use super::{Micro, MicroOp};

/// Bytes of the transaction id in front of the `micro` arguments.
const ID_LEN: usize = 16;

/// `micro` behind a transaction id: runs [`Micro`] on the arguments after the id.
pub struct TaggedMicro;

impl TaggedMicro {
    /// Registered name (the simulator's, where it began).
    pub const NAME: &'static str = "sim-micro";
}

impl Procedure for TaggedMicro {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let (_, ops) =
            split_tagged_args(args).ok_or_else(|| ProcError::BadArgs("sim-micro: no transaction id".into()))?;
        Micro.execute(ctx, ops)
    }
}

/// Encodes the [`TaggedMicro`] arguments of transaction `id` running `ops`.
pub fn encode_tagged_args(id: TxnId, ops: &[MicroOp]) -> Vec<u8> {
    let mut args = Vec::with_capacity(ID_LEN + 2 * ops.len() + 1);
    args.extend_from_slice(&id.client.to_le_bytes());
    args.extend_from_slice(&id.seq.to_le_bytes());
    args.extend(postcard::to_stdvec(ops).expect("micro operations always encode"));
    args
}

/// Decodes [`TaggedMicro`] arguments.
pub fn decode_tagged_args(args: &[u8]) -> Option<(TxnId, Vec<MicroOp>)> {
    let (id, ops) = split_tagged_args(args)?;
    Some((id, postcard::from_bytes(ops).ok()?))
}

/// Splits [`TaggedMicro`] arguments into the id and the (still encoded) `micro` arguments.
pub fn split_tagged_args(args: &[u8]) -> Option<(TxnId, &[u8])> {
    if args.len() < ID_LEN {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(args[i..i + 8].try_into().expect("8 bytes"));
    Some((TxnId { client: word(0), seq: word(8) }, &args[ID_LEN..]))
}

/// The operations of a transaction of `procedure` (`micro` or `sim-micro`) with `args`.
pub fn micro_ops(procedure: &str, args: &[u8]) -> Option<Vec<MicroOp>> {
    match procedure {
        TaggedMicro::NAME => decode_tagged_args(args).map(|(_, ops)| ops),
        Micro::NAME => postcard::from_bytes(args).ok(),
        _ => None,
    }
}

/// True for procedures whose output is a `MicroOutput`.
pub fn is_micro(procedure: &str) -> bool {
    procedure == TaggedMicro::NAME || procedure == Micro::NAME
}
