//! The deterministic simulator of Luigi: the real sans-I/O cores (`luigi_protocol`'s
//! [`Coordinator`](luigi_protocol::coordinator::Coordinator) per client and
//! [`ShardLeader`](luigi_protocol::leader::ShardLeader) per shard) driven on one thread in
//! virtual time, with a seeded network and seeded clocks, and a checker over the outcome.
//!
//! One engine, one cluster model (FoundationDB-shaped). The engine (`engine.rs`, `Sim`)
//! owns everything that is not a server: virtual time, the event queue, the network, the
//! clients (`clients.rs`, the same coordinators and workload in every run), wake-ups, the
//! trace hash, and the event loop. What the servers are is a `ClusterModel` the engine
//! delegates to (delivering to a server, waking it, its disk syncs and faults, which links
//! are cut, settling after the last answer, the coordinator kill point, the end-of-run checks
//! and the report):
//!
//! - [`run`] uses the model's ideal-log configuration: each shard is one real node
//!   (`luigi_node::ReplicaNode`), alone in its Raft group, whose disk makes a write durable a
//!   seeded delay after it is synced and never fails, with no faults; it reports a
//!   [`RunReport`]. The rest of this page describes it.
//! - [`run_replicated`] uses the Raft model ([`failover`]): each shard is a Raft group of the
//!   real node on simulated disks, under crashes, partitions and kills ([`FaultConfig`]); it
//!   reports a [`FailoverReport`].
//!
//! So the simulator calls a server one way, and both kinds of run feed the same [`checker`].
//!
//! The Raft model also runs the baselines ([`SimConfig::protocol`]: `occ`, `2pl`, `direct`
//! from `luigi-baseline`) with the same networks, clocks and faults: nodes built with
//! `luigi_node::replicas_for`, clients driving the `BaseClient`. Luigi's own in-run checks
//! (watermarks, rule 7, rule 4) are matched out by protocol; the baselines' serial order is
//! derived from their committed logs and real time ([`checker::derive_order`]) and replayed by
//! the same checker; `direct` is checked for durability only (see [`failover`]).
//!
//! - Virtual time is in µs. Every node has a clock offset drawn from
//!   `[-clock_offset_max_us, +clock_offset_max_us]`; its local clock is virtual time plus the
//!   offset, clamped at 0. Clocks only decide how long things wait: every check must hold
//!   whatever the offsets.
//! - Every message gets a delay drawn from its link's distribution (`mean ± jitter`, uniform;
//!   [`SimConfig::per_link_delays`] gives every directed link its own); links are FIFO unless
//!   [`SimConfig::reorder`] is set, and client links may lose messages
//!   ([`LinkConfig::drop_rate`]). Leader-to-leader links (cross-shard agreement, DESIGN.md
//!   rule 4) are like TCP: never lost, FIFO unless [`SimConfig::peer_links_fifo`] is cleared.
//!   Messages on different links overtake each other whenever their delays say so.
//! - A leader asking for a deadline in the past (`Some(0)`: agreement items waiting to be
//!   flushed) is ticked at once.
//! - The event queue orders deliveries, wake-ups and client starts by (virtual time,
//!   insertion order). A node is woken at its `next_deadline()` (translated from its local
//!   clock to virtual time) and `tick`ed.
//! - Each shard's log is its node's Raft log on a simulated disk: what the node asks to sync
//!   is durable [`SimConfig::log_commit`] later (a seeded delay; the writes asked for meanwhile
//!   wait for the next sync), and a record is committed once durable, in log order (a
//!   one-replica group). A commit delay is what makes "durable" and "released" differ in
//!   time, which the hold queue must respect.
//! - Workload: each client keeps `in_flight` `micro` transactions outstanding (closed loop)
//!   until `txns` have been submitted; keys come from a small space so transactions conflict;
//!   a share ([`SimConfig::cross_shard_ratio`]) touches 2 to all shards. They run as
//!   [`procedure::NAME`] (`micro` with the transaction id in front), so the simulator sees
//!   every execution: which transaction, on which shard, in which order.
//! - Or any other workload ([`SimConfig::hosting`], [`hosted`]): a
//!   `luigi_workloads::Workload` such as TPC-C, whose procedures every server registers, whose
//!   population every replica (and the checker's replay) starts from, whose generators the
//!   clients draw from (one each; the next step of a multi-step business transaction is
//!   submitted when the previous one commits), and whose own consistency check runs on the
//!   final stores after the replay. [`SimConfig::probe_txns`] adds a liveness probe: once the
//!   run has settled (every fault healed), new transactions must be answered and commit.
//! - Coordinators use [`CommitRule::AllShards`](luigi_protocol::coordinator::CommitRule) by
//!   default, as the runtime does.
//! - Everything random derives from [`SimConfig::seed`] (ChaCha8): same config, same trace
//!   hash ([`RunReport::trace_hash`]) and same report.
//!
//! After the run the simulator checks that exactly the ordered transactions were executed,
//! once on each participant (a rejected or aborted one leaves no trace anywhere), and that on
//! every shard conflicting transactions executed in final-timestamp order and in the order of
//! the shard's own committed log (what a replica replays). Then the [`checker`] verifies
//! exactly-once answers, replays every ordered transaction in (timestamp, id) order through a
//! sequential model and compares answers and final stores byte for byte, checks the real-time
//! order of timestamps, and checks strict serializability (no cycle in conflict order +
//! real-time order). During the run the simulator also checks that watermarks never go back,
//! that every reply's timestamp is at or below its watermark and above the watermark
//! published when the dispatch arrived, that every participant and every retry report the
//! same timestamp, and (rule 4) that no shard executes a cross-shard transaction before every
//! participant's `PREPARE`, and when proposals differed the final timestamp, is committed in
//! that participant's log ([`SimConfig::check_durable_decisions`]).
//!
//! Real time across shards: `ts(A) < ts(B)` for A answered before B was dispatched holds by
//! the watermark rule when A and B share a shard. Across shards it holds with
//! `CommitRule::AllShards` (A is answered only once every shard's watermark has passed
//! `ts(A)`, so B lands above it wherever it runs) whatever the clocks do; with
//! `CommitRule::Participants` it depends on clock skew. The check is on by default
//! ([`SimConfig::check_realtime_across_shards`]); turn it off to run `Participants` with skew.
//!
//! ```no_run
//! let report = luigi_sim::run(luigi_sim::SimConfig::new(42).clients(3)).expect("correct run");
//! println!("{} committed, trace {:#x}", report.committed, report.trace_hash);
//! ```

pub mod checker;
mod clients;
pub mod config;
mod engine;
pub mod failover;
pub mod hash;
pub mod hosted;
pub mod log;
pub mod net;
pub mod procedure;
pub mod replies;
mod source;
pub mod violation;
pub mod workload;

pub use checker::{check, CheckOptions, History, Moment, TxnRecord};
pub use config::{Delay, LinkConfig, RetiredShard, SimConfig};
pub use failover::{
    failover_config, hostile_dispatches, run_replicated, CutKind, CutMode, FailoverReport, FaultConfig, KillPoint,
    Outage, PlannedCut, HOSTILE_CLIENT,
};
pub use hosted::HostedWorkload;
pub use log::SimLog;
pub use net::Node;
pub use violation::{Violation, ViolationKind, DIGEST_ENV, SEED_ENV, TRACE_ENV};

/// Latency from dispatch to answer, virtual µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Mean.
    pub mean_us: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl Latency {
    /// Summarizes `sorted` (ascending) latencies.
    pub fn of_sorted(sorted: &[u64]) -> Self {
        if sorted.is_empty() {
            return Self::default();
        }
        let at = |p: usize| sorted[(sorted.len() - 1) * p / 100];
        Self {
            mean_us: sorted.iter().sum::<u64>() / sorted.len() as u64,
            p50_us: at(50),
            p99_us: at(99),
            max_us: sorted[sorted.len() - 1],
        }
    }
}

/// What a correct run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Transactions submitted (all answered).
    pub txns: u64,
    /// Ordered with every participant's procedure succeeding.
    pub committed: u64,
    /// Of the ordered ones, those read at a snapshot (DESIGN.md rule 23).
    pub read_only: u64,
    /// Ordered with some participant's procedure failing.
    pub proc_aborted: u64,
    /// Rejected at admission.
    pub rejected: u64,
    /// Dispatches the coordinators sent again.
    pub retries: u64,
    /// Admissions whose timestamp a leader moved up.
    pub bumped: u64,
    /// Retried dispatches the leaders recognized.
    pub duplicates: u64,
    /// Cross-shard transactions submitted.
    pub cross_shard: u64,
    /// Cross-shard transactions whose participants' proposals differed (second round), from
    /// the shards' logs.
    pub cross_differed: u64,
    /// Every leader's counters, summed over shards (a cross-shard transaction counts once
    /// per participant in `cross_decided`, `cross_differed` and `aborted`), as each node's
    /// serving leader reports them (`luigi_protocol::replica::leader_stats`).
    pub leaders: luigi_protocol::leader::LeaderStats,
    /// Leader-to-leader batches sent.
    pub peer_batches: u64,
    /// Node wake-ups after which the node asked for a deadline in the past again although it
    /// had just been turned (a busy wake-up, backed off exponentially by the model).
    pub busy_wakes: u64,
    /// Virtual time at which the last transaction was answered, µs.
    pub end_us: u64,
    /// Events processed.
    pub events: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Messages lost.
    pub dropped: u64,
    /// Largest final timestamp.
    pub max_ts: u64,
    /// Conflict edges between transactions (how contended the run was).
    pub conflict_edges: u64,
    /// Dispatch-to-answer latency.
    pub latency: Latency,
    /// Each shard's final `Store::state_hash`.
    pub shard_hashes: Vec<u64>,
    /// Hash of every delivered message (time, source, destination, content), every wake-up
    /// and every answer, in order: equal for equal configs, different for different seeds.
    pub trace_hash: u64,
}

/// Runs the simulation described by `config` and checks it.
pub fn run(config: SimConfig) -> Result<RunReport, Violation> {
    let summary = config.summary();
    let tag = |v: Violation| v.in_run(config.seed, summary.clone());
    config.validate().map_err(|why| tag(Violation::new(ViolationKind::Config, why)))?;
    match config.protocol {
        luigi_txn::types::Protocol::Luigi => {}
        // The ideal-log model is one Luigi `ShardLeader` per shard: the baselines run in the
        // Raft model only.
        p @ (luigi_txn::types::Protocol::Occ
        | luigi_txn::types::Protocol::TwoPl
        | luigi_txn::types::Protocol::Direct) => {
            let why = format!("the ideal-log model runs Luigi only; run {} with run_replicated", p.name());
            return Err(tag(Violation::new(ViolationKind::Config, why)));
        }
    }
    failover::run_ideal(&config).map_err(tag)
}
