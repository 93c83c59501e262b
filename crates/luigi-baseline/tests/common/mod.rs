//! A hand-driven cluster of baseline leaders over logs that commit when told to.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Arc;

use luigi_baseline::msg::{BaseBatch, BaseItem, BaseOutput};
use luigi_baseline::{BaseConfig, BaseLeader, BaseRecord, Mode, ShardState};
use luigi_protocol::log::{LogEntry, LogError, ReplicatedLog};
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError, TxnReply};
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure, Registry};
use luigi_txn::types::{KeySet, ShardId, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

/// A log whose records commit only when the test says so.
#[derive(Debug, Default)]
pub struct ManualLog {
    pub next: u64,
    pub pending: VecDeque<LogEntry<BaseRecord>>,
    pub ready: Vec<LogEntry<BaseRecord>>,
    /// Everything committed, in order (what a follower would apply).
    pub history: Vec<LogEntry<BaseRecord>>,
    pub refuse: bool,
}

impl ManualLog {
    pub fn commit_all(&mut self) {
        while let Some(e) = self.pending.pop_front() {
            self.history.push(e.clone());
            self.ready.push(e);
        }
    }
}

impl ManualLog {
    /// Commits the first `n` pending records.
    pub fn commit_prefix(&mut self, n: usize) {
        for _ in 0..n.min(self.pending.len()) {
            let e = self.pending.pop_front().expect("counted");
            self.history.push(e.clone());
            self.ready.push(e);
        }
    }
}

impl ReplicatedLog<BaseRecord> for ManualLog {
    fn propose(&mut self, record: BaseRecord) -> Result<u64, LogError> {
        if self.refuse {
            return Err(LogError::Backlogged(9));
        }
        self.next += 1;
        self.pending.push_back(LogEntry { index: self.next, record });
        Ok(self.next)
    }

    fn take_committed(&mut self, out: &mut Vec<LogEntry<BaseRecord>>) {
        out.append(&mut self.ready);
    }
}

/// A procedure that aborts on purpose.
pub struct UserAbort;

impl Procedure for UserAbort {
    fn execute(&self, _ctx: &mut dyn ProcCtx, _args: &[u8]) -> Result<Vec<u8>, ProcError> {
        Err(ProcError::UserAbort("on purpose".into()))
    }
}

pub fn registry() -> Registry {
    let mut r = luigi_workloads::procedures::builtins();
    r.register("user-abort", Arc::new(UserAbort));
    r
}

pub const CLIENT: u64 = 7;

/// Micro transaction `seq` of ops (key, write); key k lives on shard k % shards.
pub fn micro(seq: u64, shards: u32, ops: &[(u64, Option<u64>)]) -> Arc<Txn> {
    let mut pieces: Vec<ShardPiece> = Vec::new();
    for s in 0..shards {
        let mine: Vec<&(u64, Option<u64>)> = ops.iter().filter(|(k, _)| (k % u64::from(shards)) as u32 == s).collect();
        if mine.is_empty() {
            continue;
        }
        let reads = mine.iter().filter(|(_, w)| w.is_none()).map(|(k, _)| micro_key(*k)).collect();
        let writes = mine.iter().filter(|(_, w)| w.is_some()).map(|(k, _)| micro_key(*k)).collect();
        pieces.push(ShardPiece { shard: s, keys: KeySet::new(reads, writes) });
    }
    let ops: Vec<MicroOp> = ops.iter().map(|(key, write)| MicroOp { key: *key, write: *write }).collect();
    Arc::new(Txn {
        id: TxnId { client: CLIENT, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces,
        ts: 1,
    })
}

/// A leader beside the log it is lent (as a replica node holds its Raft log).
pub struct Lent {
    pub leader: BaseLeader<ManualLog>,
    pub log: ManualLog,
}

impl Lent {
    pub fn recover(config: BaseConfig, registry: Registry, log: ManualLog, state: ShardState, now: u64) -> Self {
        Lent { leader: BaseLeader::recover(config, registry, state, now), log }
    }

    pub fn on_client(&mut self, now: u64, client: u64, msg: ClientMsg, out: &mut Vec<BaseOutput>) {
        self.leader.on_client(&mut self.log, now, client, msg, out);
    }

    pub fn on_peer(&mut self, now: u64, batch: BaseBatch, out: &mut Vec<BaseOutput>) {
        self.leader.on_peer(&mut self.log, now, batch, out);
    }

    pub fn tick(&mut self, now: u64, out: &mut Vec<BaseOutput>) {
        self.leader.tick(&mut self.log, now, out);
    }

    pub fn log(&self) -> &ManualLog {
        &self.log
    }

    pub fn log_mut(&mut self) -> &mut ManualLog {
        &mut self.log
    }

    pub fn into_log(self) -> ManualLog {
        self.log
    }
}

impl std::ops::Deref for Lent {
    type Target = BaseLeader<ManualLog>;

    fn deref(&self) -> &BaseLeader<ManualLog> {
        &self.leader
    }
}

pub struct Cluster {
    pub leaders: Vec<Option<Lent>>,
    /// Messages between leaders, in flight: (to, batch).
    pub net: VecDeque<(ShardId, BaseBatch)>,
    pub replies: Vec<TxnReply>,
    pub now: u64,
    pub executed: Vec<(ShardId, TxnId)>,
    pub config: Vec<BaseConfig>,
}

impl Cluster {
    pub fn new(shards: u32, mode: Mode) -> Self {
        let config: Vec<BaseConfig> = (0..shards).map(|s| BaseConfig::new(s, shards, mode)).collect();
        let leaders = config
            .iter()
            .map(|c| {
                Some(Lent::recover(
                    c.clone(),
                    registry(),
                    ManualLog::default(),
                    ShardState::new(c.shard, Store::new()),
                    0,
                ))
            })
            .collect();
        Cluster { leaders, net: VecDeque::new(), replies: Vec::new(), now: 0, executed: Vec::new(), config }
    }

    pub fn leader(&mut self, s: ShardId) -> &mut Lent {
        self.leaders[s as usize].as_mut().expect("up")
    }

    fn absorb(&mut self, out: Vec<BaseOutput>) {
        for o in out {
            match o {
                BaseOutput::ToClient { client, msg: ServerMsg::Reply(r) } => {
                    assert_eq!(client, CLIENT);
                    self.replies.push(r);
                }
                BaseOutput::ToClient { .. }
                | BaseOutput::ToClientDurably { .. }
                | BaseOutput::ToClients { .. }
                | BaseOutput::ToAllClients { .. } => {}
                BaseOutput::ToPeer { shard, batch } | BaseOutput::ToPeerDurably { shard, batch, .. } => {
                    self.net.push_back((shard, batch))
                }
                BaseOutput::Executed { shard, id, .. } => self.executed.push((shard, id)),
            }
        }
    }

    pub fn dispatch(&mut self, to: ShardId, txn: Arc<Txn>) {
        let mut out = Vec::new();
        let now = self.now;
        let msg = ClientMsg::Dispatch { txn, sent_us: now, acked_below: 0, fast: true };
        if let Some(l) = self.leaders[to as usize].as_mut() {
            l.on_client(now, CLIENT, msg, &mut out);
        }
        self.absorb(out);
        self.check();
    }

    /// Delivers every message in flight (and what they cause) without committing logs.
    pub fn deliver(&mut self) {
        for _ in 0..10_000 {
            if self.net.is_empty() {
                return;
            }
            self.deliver_one();
        }
        panic!("messages never settle");
    }

    /// Delivers the first message in flight.
    pub fn deliver_one(&mut self) {
        let Some((to, batch)) = self.net.pop_front() else { return };
        let mut out = Vec::new();
        let now = self.now;
        if let Some(l) = self.leaders[to as usize].as_mut() {
            l.on_peer(now, batch, &mut out);
        }
        self.absorb(out);
        self.check();
    }

    /// Ticks every leader at the current time (they see what their logs committed).
    pub fn tick_all(&mut self) {
        self.advance(0);
    }

    /// Commits every log and lets the leaders see it.
    pub fn commit(&mut self) {
        for s in 0..self.leaders.len() {
            let now = self.now;
            let mut out = Vec::new();
            if let Some(l) = self.leaders[s].as_mut() {
                l.log_mut().commit_all();
                l.tick(now, &mut out);
            }
            self.absorb(out);
        }
        self.check();
    }

    /// Delivers and commits until nothing moves.
    pub fn settle(&mut self) {
        for _ in 0..100 {
            self.deliver();
            self.commit();
            if self.net.is_empty() && self.leaders.iter().flatten().all(|l| l.log().pending.is_empty()) {
                return;
            }
        }
        panic!("cluster never settles");
    }

    pub fn advance(&mut self, us: u64) {
        self.now += us;
        for s in 0..self.leaders.len() {
            let now = self.now;
            let mut out = Vec::new();
            if let Some(l) = self.leaders[s].as_mut() {
                l.tick(now, &mut out);
            }
            self.absorb(out);
        }
        self.check();
    }

    pub fn check(&self) {
        for l in self.leaders.iter().flatten() {
            l.check_invariants().unwrap();
        }
    }

    pub fn take_replies(&mut self) -> Vec<TxnReply> {
        let mut r = std::mem::take(&mut self.replies);
        r.sort_by_key(|r| (r.id, r.shard));
        r
    }

    /// Shard `s`'s leader crashes: its memory is gone; its log keeps what was committed.
    pub fn crash(&mut self, s: ShardId) -> Vec<LogEntry<BaseRecord>> {
        let l = self.leaders[s as usize].take().expect("up");
        l.into_log().history
    }

    /// A new leader of `s` from the committed history (as a replica rebuilt from the log).
    pub fn elect(&mut self, s: ShardId, history: Vec<LogEntry<BaseRecord>>) {
        let mut state = ShardState::new(s, Store::new());
        for e in &history {
            state.apply(e);
        }
        let next = history.last().map_or(0, |e| e.index);
        let log = ManualLog { next, history, ..ManualLog::default() };
        self.leaders[s as usize] =
            Some(Lent::recover(self.config[s as usize].clone(), registry(), log, state, self.now));
    }

    /// The value of micro key `k` on shard `s`'s leader.
    pub fn value(&mut self, s: ShardId, k: u64) -> Option<u64> {
        self.leader(s).state().store().get(&micro_key(k)).map(|v| u64::from_le_bytes(v.as_slice().try_into().unwrap()))
    }

    /// Drops every message in flight that matches.
    pub fn drop_items(&mut self, keep: impl Fn(ShardId, &BaseItem) -> bool) {
        for (to, batch) in self.net.iter_mut() {
            batch.items.retain(|i| keep(*to, i));
        }
    }
}

pub fn is_aborted(r: &TxnReply) -> bool {
    matches!(r.outcome, Err(TxnError::Aborted(_)))
}
