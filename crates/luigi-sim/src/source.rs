//! Where the clients' transactions come from: the built-in micro workload
//! ([`crate::workload::Workload`], one generator for every client, write values unique per
//! transaction) or a hosted workload ([`crate::hosted::HostedWorkload`], one generator per
//! client, as the bench gives one to each load thread). A hosted workload's business
//! transaction may take several steps ([`TxnGenerator::next_step`]): the client asks for the
//! next one when a step commits. Every hosted transaction's pieces are checked against the
//! workload's partitioner (one piece per shard, in order, each declared key on the shard that
//! owns it or replicated).

use std::sync::Arc;

use luigi_txn::partition::Partitioner;
use luigi_txn::types::{ClientId, ShardId, ShardPiece};
use luigi_workloads::{TxnGenerator, TxnSpec};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::checker::TxnRecord;
use crate::config::SimConfig;
use crate::workload::Workload;

/// One transaction to submit.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Drawn {
    /// Procedure name.
    pub(crate) procedure: String,
    /// Encoded arguments.
    pub(crate) args: Vec<u8>,
    /// Participants, sorted by shard.
    pub(crate) pieces: Vec<ShardPiece>,
    /// What to print when tracing its submission.
    pub(crate) describe: String,
}

impl Drawn {
    fn of_spec(spec: TxnSpec) -> Self {
        let describe =
            format!("{} over shards {:?}", spec.procedure, spec.pieces.iter().map(|p| p.shard).collect::<Vec<_>>());
        Drawn { procedure: spec.procedure, args: spec.args, pieces: spec.pieces, describe }
    }
}

/// The clients' source of transactions.
pub(crate) enum TxnSource {
    /// The built-in micro workload.
    Micro(Box<Workload>),
    /// A hosted workload: client `c`'s generator at index `c - 1`, and the workload's
    /// partitioner.
    Hosted(Vec<Box<dyn TxnGenerator>>, Arc<dyn Partitioner>),
}

impl TxnSource {
    /// The source of `config`'s clients, drawing from `rng` (the micro generator's stream; a
    /// hosted workload's generators are seeded from it, one per client in order).
    pub(crate) fn new(config: &SimConfig, mut rng: ChaCha8Rng) -> Self {
        match &config.workload {
            None => TxnSource::Micro(Box::new(Workload::new(config, rng))),
            Some(hosted) => TxnSource::Hosted(
                (0..config.clients).map(|_| hosted.generator(rng.gen())).collect(),
                hosted.workload().partitioner(),
            ),
        }
    }

    /// The first step of client `client`'s next business transaction, its transaction `seq`.
    pub(crate) fn next(&mut self, client: ClientId, seq: u64) -> Result<Drawn, String> {
        match self {
            TxnSource::Micro(w) => {
                let spec = w.next(client, seq)?;
                let describe = format!("{:?}", spec.ops);
                Ok(Drawn { procedure: spec.procedure, args: spec.args, pieces: spec.pieces, describe })
            }
            TxnSource::Hosted(generators, partitioner) => {
                let generator = generators
                    .get_mut((client as usize).wrapping_sub(1))
                    .ok_or_else(|| format!("no generator for client {client}"))?;
                let spec = generator.next_txn().map_err(|e| format!("client {client}'s generator: {e}"))?;
                placed(partitioner.as_ref(), spec)
            }
        }
    }

    /// The step that follows `done`, which client `client` submitted and which committed with
    /// `outputs` (each participant's result), if its business transaction goes on.
    pub(crate) fn next_step(
        &mut self,
        client: ClientId,
        done: &TxnRecord,
        outputs: &[(ShardId, Vec<u8>)],
    ) -> Result<Option<Drawn>, String> {
        match self {
            TxnSource::Micro(_) => Ok(None),
            TxnSource::Hosted(generators, partitioner) => {
                let generator = generators
                    .get_mut((client as usize).wrapping_sub(1))
                    .ok_or_else(|| format!("no generator for client {client}"))?;
                let spec =
                    TxnSpec { procedure: done.procedure.clone(), args: done.args.clone(), pieces: done.pieces.clone() };
                let step =
                    generator.next_step(&spec, outputs).map_err(|e| format!("client {client}'s generator: {e}"))?;
                step.map(|step| placed(partitioner.as_ref(), step)).transpose()
            }
        }
    }
}

/// `spec`, once its pieces are checked against `partitioner`: one per shard, in shard order,
/// each declared key on the shard that owns it (or replicated).
fn placed(partitioner: &dyn Partitioner, spec: TxnSpec) -> Result<Drawn, String> {
    let mut last = None;
    for piece in &spec.pieces {
        if piece.shard >= partitioner.shards() || last.is_some_and(|l| l >= piece.shard) {
            return Err(format!("{}: pieces not one per shard in order: {:?}", spec.procedure, spec.pieces));
        }
        last = Some(piece.shard);
        let mut keys = piece.keys.reads.iter().chain(&piece.keys.writes);
        if let Some(key) = keys.find(|k| !partitioner.is_replicated(k) && partitioner.shard_of(k) != piece.shard) {
            return Err(format!(
                "{}: key {key:?} declared on shard {}, but the partitioner puts it on shard {}",
                spec.procedure,
                piece.shard,
                partitioner.shard_of(key)
            ));
        }
    }
    Ok(Drawn::of_spec(spec))
}
