//! The deterministic simulator of Luigi: the real sans-I/O cores (`luigi_proto`'s
//! [`Coordinator`](luigi_proto::coordinator::Coordinator) per client and
//! [`ShardLeader`](luigi_proto::leader::ShardLeader) per shard) driven on one thread in
//! virtual time, with a seeded network and seeded clocks, and a checker over the outcome.
//!
//! - Virtual time is in µs. Every node has a clock offset drawn from
//!   `[-clock_offset_max_us, +clock_offset_max_us]`; its local clock is virtual time plus the
//!   offset, clamped at 0. Clocks only decide how long things wait: every check must hold
//!   whatever the offsets.
//! - Every message gets a delay drawn from its link's distribution (`mean ± jitter`, uniform);
//!   links are FIFO unless [`SimConfig::reorder`] is set, and may lose messages
//!   ([`LinkConfig::drop_rate`]). Messages are addressed by [`Node`], so leader-to-leader
//!   traffic and replicas are new variants, not a new simulator.
//! - The event queue orders deliveries, wake-ups and client starts by (virtual time,
//!   insertion order). A node is woken at its `next_deadline()` (translated from its local
//!   clock to virtual time) and `tick`ed.
//! - Each shard's log is a [`SimLog`]: records commit a seeded delay after they are appended,
//!   in log order (a replication round). With [`Delay::ZERO`] it is exactly
//!   `luigi_proto::log::LocalLog`. A commit delay is what makes "durable" and "released"
//!   differ in time, which the hold queue must respect.
//! - Workload: each client keeps `in_flight` `micro` transactions outstanding (closed loop)
//!   until `txns` have been submitted; keys come from a small space so transactions conflict.
//! - Everything random derives from [`SimConfig::seed`] (ChaCha8): same config, same trace
//!   hash ([`RunReport::trace_hash`]) and same report.
//!
//! After the run the [`checker`] verifies exactly-once answers, replays every ordered
//! transaction in (timestamp, id) order through a sequential model and compares answers and
//! final stores byte for byte, checks the real-time order of timestamps, and checks strict
//! serializability (no cycle in conflict order + real-time order). During the run the
//! simulator also checks that watermarks never go back, that every reply's timestamp is at or
//! below its watermark and above the watermark published when the dispatch arrived, and that
//! every participant and every retry report the same timestamp.
//!
//! Real time across shards: `ts(A) < ts(B)` for A answered before B was dispatched holds by
//! the watermark rule when A and B share a shard, but across shards it depends on clock skew
//! (A's shard may run ahead of B's by more than a round trip). Strict serializability does not
//! need it (the cycle check covers that), so the cross-shard timestamp rule is opt-in:
//! [`SimConfig::check_realtime_across_shards`].
//!
//! ```no_run
//! let report = luigi_sim::run(luigi_sim::SimConfig::new(42).clients(3)).expect("correct run");
//! println!("{} committed, trace {:#x}", report.committed, report.trace_hash);
//! ```

#![warn(missing_docs)]

pub mod checker;
pub mod config;
pub mod hash;
pub mod log;
pub mod net;
pub mod violation;
pub mod workload;
pub mod world;

pub use checker::{check, CheckOptions, History, Moment, TxnRecord};
pub use config::{Delay, LinkConfig, SimConfig};
pub use log::SimLog;
pub use net::Node;
pub use violation::{Violation, ViolationKind, SEED_ENV, TRACE_ENV};

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
    config
        .validate()
        .map_err(|why| tag(Violation::new(ViolationKind::Config, why)))?;
    let mut world = world::World::new(&config);
    world.run().map_err(tag)?;
    world.finish().map_err(tag)
}
