//! What a replicated run is asked to do: its faults ([`FaultConfig`], [`KillPoint`],
//! [`Outage`]), a configuration suited to it ([`failover_config`]), and what it reports
//! ([`FailoverReport`]).

use std::sync::Arc;

use luigi_store::{table_key, ScanOrder, Store};
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::{KeySet, ShardId, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

use crate::config::{Delay, SimConfig};

/// A named point in the life of a cross-shard transaction at which the serving leader of a
/// participant (or the coordinator) is killed. Under a baseline protocol, "its first
/// `Propose`" is a participant's first `Vote` (its `Prepare` record committed) and "decided"
/// is a coordinator sending its `Decide`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KillPoint {
    /// (a) Its `PREPARE` committed, its `Propose` not sent: the leader crashes in the call
    /// that would send its first `Propose` (the call's outputs are lost).
    PrepareCommitted,
    /// (b) Its `Propose` sent, nothing decided: the leader crashes right after the call that
    /// sent its first `Propose`.
    ProposeSent,
    /// (c) Decided (agreement reached, or the `DECIDE` of a second round committed) but not
    /// executed: the leader crashes in that call, its outputs lost.
    Decided,
    /// (d) Executed but not answered (the watermark has not passed it, or its reply is lost):
    /// the leader crashes in the call that executed it, its outputs lost.
    Executed,
    /// (e) The coordinator dispatches a cross-shard transaction to its first participant only
    /// and dies (every transaction it had in flight is orphaned).
    CoordinatorPartial,
    /// (f) A speculative answer sent, its log position not known committed (DESIGN.md rule
    /// 14): the leader crashes right after the call that sent it, before its followers may
    /// have the records the answer rests on.
    SpeculativeAnswer,
}

/// How a partition cuts a replica off (issue 26).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// Nothing it sends arrives, nothing sent to it arrives.
    BothWays,
    /// What it sends is cut; it still hears everyone.
    Outgoing,
    /// What is sent to it is cut; it still reaches everyone.
    Incoming,
    /// Cut from the other replicas of its own shard only (clients and other shards still
    /// reach it, both ways).
    FromGroup,
}

/// What becomes of the messages on a cut link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Lost. A two-way cut ([`CutKind::BothWays`], [`CutKind::FromGroup`]) also takes the
    /// links down, and both ends hear of it, as a server hears of a reset connection; a
    /// one-way cut loses its direction's messages silently.
    Lost,
    /// Held, as TCP holds them: the connections stay up (nobody hears of the cut), what is
    /// sent waits (in order) and is delivered when the cut heals, late. After a partition
    /// healed, such late pongs once stretched every timestamp by seconds (DESIGN.md rule 1).
    Held,
}

/// A partition at a planned time (see [`FaultConfig::cuts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedCut {
    /// The shard.
    pub shard: ShardId,
    /// The replica cut off; `None`: the shard's serving leader at the time (replica 0 if
    /// none serves).
    pub replica: Option<u32>,
    /// How it is cut.
    pub kind: CutKind,
    /// What becomes of the messages it cuts.
    pub mode: CutMode,
    /// When, virtual µs.
    pub at_us: u64,
    /// How long it holds, µs.
    pub down_us: u64,
}

/// Replication and fault knobs of a replicated run (the rest comes from [`SimConfig`]).
#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// Replicas per shard (Raft group size), `>= 1`.
    pub replicas: u32,
    /// Virtual time between two Raft ticks of a replica, µs.
    pub raft_tick_us: u64,
    /// Raft election timeout base, in ticks (heartbeats every tick).
    pub election_ticks: usize,
    /// Time a disk takes to make written data durable.
    pub sync: Delay,
    /// Random faults (crashes, isolations, Raft-only partitions) drawn from the seed.
    pub random_faults: bool,
    /// The random faults also draw one-way partitions (a replica's outgoing or incoming
    /// messages lost) and partitions that hold messages as TCP does ([`CutMode::Held`]).
    /// Off by default: the draws of the runs without them (and their seeds) stay as they were.
    pub partitions: bool,
    /// Partitions at planned times, besides the random faults.
    pub cuts: Vec<PlannedCut>,
    /// Time between two random faults.
    pub fault_gap: Delay,
    /// How long a crashed or cut-off replica stays down.
    pub down: Delay,
    /// No random fault starts after this virtual time (so runs end).
    pub faults_until_us: u64,
    /// Kill serving leaders (or a coordinator) at this point.
    pub kill: Option<KillPoint>,
    /// Just before each leader kill, a hostile client ([`HOSTILE_CLIENT`]) sends the
    /// followers of the shard, on the fast path, a dispatch of every shape a replica refuses
    /// as malformed and two stamped far ahead of their clocks ([`hostile_dispatches`]): no
    /// replica may ever execute one (DESIGN.md rule 22).
    pub hostile_fast: bool,
    /// How many kills at `kill` (each needs a shard with every replica up).
    pub kills: u32,
    /// Least time between two kills, µs.
    pub kill_gap_us: u64,
    /// After every transaction is answered, how long (virtual µs) the healed cluster may take
    /// to converge (one serving leader per shard, nothing pending, equal stores).
    pub settle_us: u64,
    /// A deliberately broken disk, for tests that prove the checks catch lost writes: Raft is
    /// told that writes are durable (acknowledgements and votes leave) before they are synced,
    /// so a crash can lose what a quorum acknowledged.
    pub ack_before_sync: bool,
    /// Followers snapshot their state and compact their log every this many applied
    /// records (`None`: never). Restarts then load snapshots, and a replica that fell
    /// behind a compaction is sent the leader's snapshot.
    pub snapshot_entries: Option<u64>,
    /// Each shard starts from a population of about this many bytes (rows of
    /// [`POPULATION_ROW_BYTES`] in a table of their own, [`population`], which the workload
    /// never touches), as a workload's population would: every snapshot then carries it, and
    /// one larger than a frame (16 MiB) must travel in many chunks. 0: none.
    pub population_bytes: u64,
    /// Majority losses: at each, a majority of one shard's replicas (its serving leader
    /// first) crash and stay down for a while, so the shard has no quorum.
    pub outages: Vec<Outage>,
    /// Liveness: once every fault has healed (outages and random faults over), the cluster
    /// answers a transaction at least this often, virtual µs: no gap between two answers (or
    /// between the last repair and the first answer) is longer, until every transaction has
    /// a definite answer.
    pub liveness_us: u64,
}

/// A shard without a majority for a while (see [`FaultConfig::outages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// The shard.
    pub shard: ShardId,
    /// When its majority crashes, virtual µs.
    pub at_us: u64,
    /// How long they stay down, µs.
    pub down_us: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl FaultConfig {
    /// 3 replicas, 2 ms ticks, 10-tick elections, syncs of 300 ± 200 µs, random faults every
    /// 60 ± 40 ms for the first 600 ms, each lasting 80 ± 60 ms; no kill point.
    pub fn new() -> Self {
        Self {
            replicas: 3,
            raft_tick_us: 2_000,
            election_ticks: 10,
            sync: Delay::new(300, 200),
            random_faults: true,
            partitions: false,
            cuts: Vec::new(),
            fault_gap: Delay::new(60_000, 40_000),
            down: Delay::new(80_000, 60_000),
            faults_until_us: 600_000,
            kill: None,
            hostile_fast: false,
            kills: 0,
            kill_gap_us: 100_000,
            settle_us: 5_000_000,
            ack_before_sync: false,
            snapshot_entries: None,
            population_bytes: 0,
            outages: Vec::new(),
            liveness_us: 10_000_000,
        }
    }

    /// No random faults; `kills` kills at `point`.
    pub fn kill_at(point: KillPoint, kills: u32) -> Self {
        Self { random_faults: false, kill: Some(point), kills, ..Self::new() }
    }

    /// A one-line summary (for failure messages).
    pub fn summary(&self) -> String {
        format!(
            "replicas={} raft_tick={}us election_ticks={} sync={}±{}us random_faults={} fault_gap={}±{}us \
             down={}±{}us faults_until={}us kill={:?}×{} hostile_fast={} ack_before_sync={} snapshot_entries={:?} \
             population_bytes={} outages={:?} partitions={} cuts={:?}",
            self.replicas,
            self.raft_tick_us,
            self.election_ticks,
            self.sync.mean_us,
            self.sync.jitter_us,
            self.random_faults,
            self.fault_gap.mean_us,
            self.fault_gap.jitter_us,
            self.down.mean_us,
            self.down.jitter_us,
            self.faults_until_us,
            self.kill,
            self.kills,
            self.hostile_fast,
            self.ack_before_sync,
            self.snapshot_entries,
            self.population_bytes,
            self.outages,
            self.partitions,
            self.cuts
        )
    }
}

/// The client id of [`FaultConfig::hostile_fast`]'s dispatches: no simulated client has it,
/// and nothing is sent back to it.
pub const HOSTILE_CLIENT: u64 = u64::MAX - 0x0bad;

/// What [`FaultConfig::hostile_fast`] sends a follower of `shard` (of `shards`) whose clock
/// reads `now`, numbered from `first_seq`: a micro write of key 0 with a piece for a shard that does not exist, with
/// `shard` twice, with unsorted keys, with a key twice, with a key both read and written,
/// and well-formed but stamped an hour ahead and at `u64::MAX`; all on the fast path.
pub fn hostile_dispatches(shard: ShardId, shards: u32, now: u64, first_seq: u64) -> Vec<ClientMsg> {
    let (a, b) = (micro_key(0), micro_key(1));
    let piece = |shard: ShardId, reads: Vec<Vec<u8>>, writes: Vec<Vec<u8>>| ShardPiece {
        shard,
        keys: KeySet { reads, writes },
    };
    let ok = piece(shard, vec![], vec![a.clone()]);
    let shapes: Vec<(Vec<ShardPiece>, u64)> = vec![
        (vec![ok.clone(), piece(shards, vec![], vec![a.clone()])], now),
        (vec![ok.clone(), ok.clone()], now),
        (vec![piece(shard, vec![], vec![b.clone(), a.clone()])], now),
        (vec![piece(shard, vec![], vec![a.clone(), a.clone()])], now),
        (vec![piece(shard, vec![a.clone()], vec![a.clone()])], now),
        (vec![ok.clone()], now.saturating_add(3_600_000_000)),
        (vec![ok], u64::MAX),
    ];
    let args = postcard::to_stdvec(&[MicroOp { key: 0, write: Some(0x0bad) }]).expect("micro ops encode");
    shapes
        .into_iter()
        .zip(first_seq..)
        .map(|((pieces, ts), seq)| {
            let id = TxnId { client: HOSTILE_CLIENT, seq };
            let txn = Txn { id, procedure: Micro::NAME.into(), args: args.clone(), pieces, ts };
            ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: now, acked_below: 0, fast: true }
        })
        .collect()
}

/// The table of a shard's population ([`FaultConfig::population_bytes`]).
pub const POPULATION_TABLE: u16 = 0xF0F0;
/// The size of a population row's value, bytes.
pub const POPULATION_ROW_BYTES: usize = 256 << 10;

/// A population of about `bytes` bytes: rows of [`POPULATION_ROW_BYTES`] under
/// [`POPULATION_TABLE`], the same on every replica.
pub fn population(bytes: u64) -> Store {
    let mut store = Store::new();
    for row in 0..bytes.div_ceil(POPULATION_ROW_BYTES as u64) {
        let value: Vec<u8> =
            (0..POPULATION_ROW_BYTES).map(|i| (row as usize).wrapping_mul(31).wrapping_add(i) as u8).collect();
        store.put(table_key(POPULATION_TABLE, &[row]), value);
    }
    store
}

/// `store` without the population's rows (what the workload's model knows of).
pub fn without_population(store: &Store) -> Store {
    let mut rest = store.clone();
    let (lo, hi) = (table_key(POPULATION_TABLE, &[]), table_key(POPULATION_TABLE + 1, &[]));
    for (key, _) in store.scan(&lo, &hi, usize::MAX, ScanOrder::Ascending) {
        rest.delete(&key);
    }
    rest
}

/// A [`SimConfig`] suited to replicated runs with faults: `shards` shards, 3 clients with 3
/// transactions in flight, 120 transactions over 6 keys per shard, half of them cross-shard,
/// coordinators that resend after 60 ms (and after 5 ms on `NotLeader`) and never give up,
/// leaders that recover stalled transactions after 40 ms.
pub fn failover_config(seed: u64, shards: u32) -> SimConfig {
    let mut c = SimConfig::new(seed)
        .shards(shards)
        .clients(3)
        .in_flight(3)
        .txns(120)
        .keys(6 * u64::from(shards))
        .cross_shard(0.5);
    c.coordinator.retry_timeout_us = 60_000;
    c.coordinator.not_leader_retry_us = 5_000;
    c.coordinator.max_attempts = 100_000;
    c.leader.recover_after_us = 40_000;
    c.max_virtual_us = 60_000_000;
    c
}

/// What a correct replicated run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailoverReport {
    /// The seed.
    pub seed: u64,
    /// Transactions submitted (with the later steps of multi-step business transactions and
    /// the liveness probe's).
    pub txns: u64,
    /// Ordered with every participant's procedure succeeding.
    pub committed: u64,
    /// Of the ordered ones, those read at a snapshot (DESIGN.md rule 23).
    pub read_only: u64,
    /// Snapshot-read pieces (one per shard a read-only transaction reads) that a replica ran
    /// at their snapshot (answered neither with a refusal nor `SnapshotTooOld`) while not its
    /// shard's serving leader: a follower's.
    pub snapshot_reads_by_followers: u64,
    /// Hostile fast-path dispatches handed to followers ([`FaultConfig::hostile_fast`]).
    pub hostile_sent: u64,
    /// Rejected (refused or aborted).
    pub rejected: u64,
    /// Never answered: their coordinator died.
    pub orphans: u64,
    /// Reported unknown by a coordinator that gave up (each resolved later: the run ends
    /// only when every transaction has a definite answer).
    pub unknown: u64,
    /// Majority losses applied.
    pub outages: u64,
    /// The longest virtual µs without an answer once every fault had healed (the liveness
    /// bound checks it).
    pub recovery_us: u64,
    /// Of the orphans, those that were executed (recovered by the participants).
    pub orphans_executed: u64,
    /// Replica crashes (random and kill points).
    pub crashes: u64,
    /// Kills at the configured kill point (coordinator deaths included).
    pub kills: u64,
    /// Isolations and Raft-only partitions (every partition, one-way and held ones included).
    pub cuts: u64,
    /// Of the cuts, the one-way ones ([`CutKind::Outgoing`], [`CutKind::Incoming`]).
    pub one_way_cuts: u64,
    /// Of the cuts, those that held their messages ([`CutMode::Held`]).
    pub held_cuts: u64,
    /// Messages held on cut links and delivered at the heal.
    pub held_delivered: u64,
    /// Messages held on cut links and lost: an end crashed meanwhile, or the bound
    /// (`HELD_MAX`) was reached.
    pub held_lost: u64,
    /// Times the clients' one-way delay estimates were read one virtual second after a held
    /// partition healed.
    pub owd_observations: u64,
    /// The largest of those estimates (any live Luigi client, any shard), µs: a client that
    /// took the late answers' delays as samples stamps everything that far ahead.
    pub owd_after_heal_max_us: i64,
    /// Times a replica became its shard's serving leader.
    pub promotions: u64,
    /// Times a serving leader stepped down and rebuilt its state.
    pub demotions: u64,
    /// Each promotion's replica (shard, replica index), in order (per run: not summed).
    pub promoted: Vec<(ShardId, u32)>,
    /// Leadership hand-overs started by leaders whose clock was beyond the clock bound from
    /// their group's majority (DESIGN.md rule 22), over the replicas alive at the end.
    pub clock_handovers: u64,
    /// Snapshots followers took (each compacting its log).
    pub compactions: u64,
    /// Times a serving leader compacted its log behind a follower's snapshot.
    pub leader_compactions: u64,
    /// Snapshots replicas installed from their leader (they had fallen behind a compaction).
    pub snapshots_installed: u64,
    /// The largest snapshot of a leader that a replica received (in chunks) to install,
    /// bytes.
    pub installed_bytes_max: u64,
    /// Dispatches the coordinators sent again.
    pub retries: u64,
    /// Transactions completed on the fast path alone (`CoordStats::fast`).
    pub fast_commits: u64,
    /// Transactions that asked for the fast path (`CoordStats::fanned_out`, DESIGN.md rule 20).
    pub fanned_out: u64,
    /// Of the fast commits, those on an early answer of some leader (`CoordStats::early`,
    /// DESIGN.md rule 21).
    pub early_commits: u64,
    /// First answers that reached their leader after their timestamp, of transactions
    /// stamped to arrive before it (`CoordStats::late_arrivals`, DESIGN.md rule 1).
    pub late_arrivals: u64,
    /// The headroom those transactions were stamped with, summed, µs
    /// (`CoordStats::headroom_us_sum`).
    pub headroom_us_sum: u64,
    /// Leader counters, summed over every serving incarnation that was still alive at the
    /// end (a crashed leader's counters are lost with it).
    pub recover_sent: u64,
    /// `Recover` requests answered from an outcome kept past its answer (DESIGN.md rule 9,
    /// retention), counted like `recover_sent`.
    pub recover_kept: u64,
    /// `Acknowledged` answers received by a recovering leader, counted like `recover_sent`.
    pub recover_acknowledged: u64,
    /// Other shards' marked proposals used before their proof (DESIGN.md rule 18), counted
    /// like `recover_sent`.
    pub fast_proposals: u64,
    /// Early answers sent (DESIGN.md rule 21), counted like `recover_sent`.
    pub early_answers: u64,
    /// Virtual time at which the last transaction was answered, µs.
    pub end_us: u64,
    /// Events processed.
    pub events: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Each shard's final store hash (equal on every replica).
    pub shard_hashes: Vec<u64>,
    /// Hash of every delivery, wake-up, fault and answer, in order.
    pub trace_hash: u64,
}

impl FailoverReport {
    /// Adds `r`'s counts to this sweep total; the longest `recovery_us` and `end_us` are kept
    /// (per-run fields, `seed`, `shard_hashes` and `trace_hash`, are left as they are).
    pub fn absorb(&mut self, r: &FailoverReport) {
        self.txns += r.txns;
        self.committed += r.committed;
        self.read_only += r.read_only;
        self.snapshot_reads_by_followers += r.snapshot_reads_by_followers;
        self.hostile_sent += r.hostile_sent;
        self.rejected += r.rejected;
        self.orphans += r.orphans;
        self.unknown += r.unknown;
        self.outages += r.outages;
        self.recovery_us = self.recovery_us.max(r.recovery_us);
        self.orphans_executed += r.orphans_executed;
        self.crashes += r.crashes;
        self.kills += r.kills;
        self.cuts += r.cuts;
        self.one_way_cuts += r.one_way_cuts;
        self.held_cuts += r.held_cuts;
        self.held_delivered += r.held_delivered;
        self.held_lost += r.held_lost;
        self.owd_observations += r.owd_observations;
        self.owd_after_heal_max_us = self.owd_after_heal_max_us.max(r.owd_after_heal_max_us);
        self.promotions += r.promotions;
        self.demotions += r.demotions;
        self.clock_handovers += r.clock_handovers;
        self.compactions += r.compactions;
        self.leader_compactions += r.leader_compactions;
        self.snapshots_installed += r.snapshots_installed;
        self.installed_bytes_max = self.installed_bytes_max.max(r.installed_bytes_max);
        self.retries += r.retries;
        self.fast_commits += r.fast_commits;
        self.fanned_out += r.fanned_out;
        self.early_commits += r.early_commits;
        self.late_arrivals += r.late_arrivals;
        self.headroom_us_sum = self.headroom_us_sum.saturating_add(r.headroom_us_sum);
        self.recover_sent += r.recover_sent;
        self.recover_kept += r.recover_kept;
        self.recover_acknowledged += r.recover_acknowledged;
        self.fast_proposals += r.fast_proposals;
        self.early_answers += r.early_answers;
        self.end_us = self.end_us.max(r.end_us);
        self.events += r.events;
        self.messages += r.messages;
    }
}
