//! A process test's transactions, recorded as the simulator records its own, and checked for
//! strict serializability by the project's history checker (`luigi_sim::checker`): every
//! answer replayed in final-timestamp order must give the outputs the client saw and the
//! stores the servers hold, real-time order must agree with the timestamps, and the
//! conflict order plus real time must have no cycle.
//!
//! Moments are this process's monotonic clock: a dispatch is stamped before the request is
//! handed to the client and an answer after it came back, so "A answered before B was
//! dispatched" in the record is true of the run (the check can only miss an order, never
//! invent one).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use luigi_runtime::client::Client;
use luigi_sim::checker::{check, AnswerRecord, CheckOptions, CheckSummary, History, Moment, TxnRecord};
use luigi_store::Store;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::{split, HashPartitioner, Partitioner};
use luigi_txn::types::ShardPiece;
use luigi_workloads::micro::micro_pieces;
use luigi_workloads::procedures::{account_key, micro_key, Micro, MicroOp, MicroOutput, Transfer, TransferArgs};

/// Runs transactions through a client and records each with its dispatch and answer.
pub struct Recorder {
    client: Client,
    partitioner: HashPartitioner,
    start: Instant,
    history: Mutex<History>,
}

impl Recorder {
    /// Records what `client`, of a cluster of `shards` hash-partitioned shards, runs.
    pub fn new(client: Client, shards: u32) -> Arc<Self> {
        Arc::new(Self {
            client,
            partitioner: HashPartitioner::new(shards),
            start: Instant::now(),
            history: Mutex::default(),
        })
    }

    fn now(&self) -> Moment {
        Moment::at(self.start.elapsed().as_micros() as u64)
    }

    /// Runs `procedure(args)` on `pieces` and records it.
    pub async fn execute(&self, procedure: &str, args: Vec<u8>, pieces: Vec<ShardPiece>) -> TxnOutcome {
        let dispatched = self.now();
        let done = self.client.execute_pieces(procedure, args.clone(), pieces.clone()).await.expect("client alive");
        let at = self.now();
        let answer =
            AnswerRecord { at, outcome: done.outcome.clone(), attempts: done.attempts, read_only: done.read_only };
        let record = TxnRecord {
            id: done.id,
            procedure: procedure.to_string(),
            args,
            pieces,
            dispatched,
            answers: vec![answer],
        };
        self.history.lock().unwrap().txns.push(record);
        done.outcome
    }

    /// Transactions answered as read at a snapshot (DESIGN.md rule 23).
    pub fn read_only_answers(&self) -> u64 {
        self.history.lock().unwrap().read_only_answered()
    }

    /// A bank transfer (a zero one reads both balances).
    pub async fn transfer(&self, args: TransferArgs) -> TxnOutcome {
        let pieces = split(&self.partitioner, vec![], vec![account_key(args.from), account_key(args.to)]);
        self.execute(Transfer::NAME, postcard::to_stdvec(&args).unwrap(), pieces).await
    }

    /// A micro transaction of `ops` (writes should carry values unique to the run, so that
    /// every read names the write it saw).
    pub async fn micro(&self, ops: &[MicroOp]) -> TxnOutcome {
        let pieces = micro_pieces(&self.partitioner, ops);
        self.execute(Micro::NAME, postcard::to_stdvec(ops).unwrap(), pieces).await
    }

    /// Reads accounts `0..accounts` and micro keys `0..micro_keys` (recorded like every other
    /// transaction) and builds each shard's store from what they returned: the servers'
    /// stores, as far as these tables go, which are the only ones the run wrote.
    pub async fn read_stores(&self, accounts: u64, micro_keys: u64) -> Vec<Store> {
        let mut stores = vec![Store::new(); self.partitioner.shards() as usize];
        for from in (0..accounts).step_by(2) {
            let outcome = self.transfer(TransferArgs { from, to: (from + 1) % accounts, amount: 0 }).await;
            let TxnOutcome::Ordered { results, .. } = outcome else { panic!("reading accounts failed: {outcome:?}") };
            for (shard, r) in results {
                let read: Vec<(u64, i64)> = postcard::from_bytes(&r.expect("a read commits")).unwrap();
                for (account, balance) in read {
                    stores[shard as usize].put(account_key(account), balance.to_le_bytes().to_vec());
                }
            }
        }
        for key in 0..micro_keys {
            let outcome = self.micro(&[MicroOp { key, write: None }]).await;
            let TxnOutcome::Ordered { results, .. } = outcome else { panic!("reading micro keys failed: {outcome:?}") };
            for (shard, r) in results {
                let read: MicroOutput = postcard::from_bytes(&r.expect("a read commits")).unwrap();
                for (key, value) in read.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))) {
                    stores[shard as usize].put(micro_key(key), value.to_le_bytes().to_vec());
                }
            }
        }
        stores
    }

    /// Checks the history against `stores` (from [`Recorder::read_stores`], which must come
    /// last) with every pair of real-time ordered transactions required in timestamp order
    /// (the all-shards commit rule promises it).
    pub fn check(&self, stores: &[Store]) -> CheckSummary {
        let history = self.history.lock().unwrap().clone();
        let stores: Vec<&Store> = stores.iter().collect();
        let options = CheckOptions { realtime_across_shards: true };
        match check(&history, &luigi_workloads::procedures::builtins(), &stores, options) {
            Ok(summary) => summary,
            Err(violation) => {
                panic!("the history of {} transactions is not strictly serializable: {violation}", history.txns.len())
            }
        }
    }
}
