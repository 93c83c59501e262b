//! A client's transaction at the leader it was sent to, and the single-shard path: a
//! transaction on one shard (and, under [`Mode::Direct`], every piece) runs at once, installs
//! its writes as it logs them, and is answered once they are durable.

use std::sync::Arc;

use luigi_protocol::log::LogError;
use luigi_txn::msg::TxnError;
use luigi_txn::procedure::TxnCtx;
use luigi_txn::types::{ClientId, KeySet, Txn};

use super::{lock_keys, BaseLeader, Wait};
use crate::msg::BaseOutput;
use crate::record::BaseRecord;
use crate::state::Outcome;
use crate::Mode;
use luigi_protocol::log::ReplicatedLog;

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    pub(super) fn on_dispatch(
        &mut self,
        log: &mut L,
        client: ClientId,
        txn: Arc<Txn>,
        arrival: i64,
        acked_below: u64,
        out: &mut Vec<BaseOutput>,
    ) {
        let me = self.config.shard;
        let refuse = |this: &Self, why: String, out: &mut Vec<BaseOutput>| {
            for reply in this.replies(&txn, arrival, |_| Err(TxnError::Rejected(why.clone()))) {
                out.push(BaseOutput::ToClient { client, msg: luigi_txn::msg::ServerMsg::Reply(reply) });
            }
        };
        if txn.id.client != client {
            return refuse(self, format!("transaction of client {} sent by client {client}", txn.id.client), out);
        }
        if let Err(why) = txn.check_shape(self.config.shards) {
            return refuse(self, format!("malformed transaction: {why}"), out);
        }
        if !self.registry.contains(&txn.procedure) {
            return refuse(self, format!("unknown procedure '{}'", txn.procedure), out);
        }
        match self.config.mode {
            Mode::Direct => match txn.piece(me).cloned() {
                Some(keys) => self.run_local(log, client, txn, &keys, arrival, acked_below, out),
                None => refuse(self, format!("shard {me} is not a participant"), out),
            },
            Mode::Occ | Mode::TwoPl => {
                let home = txn.pieces[0].shard;
                if home != me {
                    let why = format!("send it to its first participant's leader (shard {home}), not shard {me}");
                    return refuse(self, why, out);
                }
                if txn.is_cross_shard() {
                    self.coordinate(client, txn, arrival, acked_below, out);
                } else {
                    let keys = txn.pieces[0].keys.clone();
                    self.run_local(log, client, txn, &keys, arrival, acked_below, out);
                }
            }
        }
    }

    /// Runs `txn`'s piece `keys` on this shard alone: at once, on the current state.
    #[allow(clippy::too_many_arguments)] // the lent log made it 8
    fn run_local(
        &mut self,
        log: &mut L,
        client: ClientId,
        txn: Arc<Txn>,
        keys: &KeySet,
        arrival: i64,
        acked_below: u64,
        out: &mut Vec<BaseOutput>,
    ) {
        let me = self.config.shard;
        let id = txn.id;
        // A retry: answered from what the log holds, or (still in the log's way) later.
        match self.state.outcome(id) {
            Some(Outcome::Committed { output }) => {
                let reply = self.reply(id, me, Ok(output.clone()), arrival);
                return self.after_log(Wait::Client { client, reply }, out);
            }
            Some(Outcome::Aborted { reason }) => {
                let reply = self.reply(id, me, Err(TxnError::Aborted(reason.clone())), arrival);
                return self.after_log(Wait::Client { client, reply }, out);
            }
            None => {}
        }
        if self.waits_len >= self.config.waits_max {
            let reply = self.reply(id, me, Err(TxnError::Busy(format!("{} answers wait", self.waits_len))), arrival);
            return out.push(BaseOutput::ToClient { client, msg: luigi_txn::msg::ServerMsg::Reply(reply) });
        }
        let (reads, writes) = lock_keys(keys);
        if self.config.mode != Mode::Direct {
            if let Some(h) = self.locks.conflict(id, &reads, &writes) {
                self.stats.lock_conflicts += 1;
                let why = format!("a key (hash {h:016x}) is locked by a transaction being committed");
                let reply = self.reply(id, me, Err(TxnError::Aborted(why)), arrival);
                return out.push(BaseOutput::ToClient { client, msg: luigi_txn::msg::ServerMsg::Reply(reply) });
            }
        }
        let procedure = self.registry.get(&txn.procedure).expect("checked at dispatch");
        let mut ctx = TxnCtx::new(self.state.store_mut(), keys, me);
        let result = ctx.execute(procedure.as_ref(), &txn.args);
        let written = ctx.writes();
        ctx.rollback();
        let output = match result {
            Ok(output) if written.is_empty() => {
                return self.answer_after_barrier(log, client, id, Ok(output), arrival, true, out);
            }
            Ok(output) => output,
            // Decided on the current state, which may not be durable yet, nor current.
            Err(e) => return self.answer_after_barrier(log, client, id, Err(TxnError::Proc(e)), arrival, false, out),
        };
        let record = BaseRecord::Local { id, writes: written, output: output.clone(), acked_below };
        match self.log_record(log, record) {
            Ok(index) => {
                for h in &writes {
                    self.versions.bump(*h);
                }
                self.stats.local_commits += 1;
                self.procedure_commits.committed(&txn.procedure);
                let reply = self.reply(id, me, Ok(output), arrival);
                self.wait_for(index, Wait::Client { client, reply });
            }
            Err(e) => {
                let reply = self.reply(id, me, Err(log_refusal(e)), arrival);
                out.push(BaseOutput::ToClient { client, msg: luigi_txn::msg::ServerMsg::Reply(reply) });
            }
        }
    }
}

impl<L: ReplicatedLog<BaseRecord>> BaseLeader<L> {
    /// Answers a single-shard transaction that changed nothing once a barrier logged after
    /// it is committed (see [`BaseRecord::Barrier`]); `read`: report it as an execution.
    #[allow(clippy::too_many_arguments)] // the lent log made it 8
    fn answer_after_barrier(
        &mut self,
        log: &mut L,
        client: ClientId,
        id: luigi_txn::types::TxnId,
        outcome: Result<Vec<u8>, TxnError>,
        arrival: i64,
        read: bool,
        out: &mut Vec<BaseOutput>,
    ) {
        let me = self.config.shard;
        match self.log_record(log, BaseRecord::Barrier { id }) {
            Ok(index) => {
                if read {
                    self.reads.push((id, index));
                }
                let reply = self.reply(id, me, outcome, arrival);
                self.wait_for(index, Wait::Client { client, reply });
            }
            Err(e) => {
                let reply = self.reply(id, me, Err(log_refusal(e)), arrival);
                out.push(BaseOutput::ToClient { client, msg: luigi_txn::msg::ServerMsg::Reply(reply) });
            }
        }
    }
}

/// What a client is told when the log refused a record (nothing was stored: try again).
pub(super) fn log_refusal(e: LogError) -> TxnError {
    match e {
        LogError::NotLeader => TxnError::NotLeader { hint: None },
        LogError::Backlogged(n) => TxnError::Busy(format!("log backlog full ({n} records pending)")),
    }
}
