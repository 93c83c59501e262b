//! The ideal-log configuration of the Raft cluster model ([`run_ideal`], what [`crate::run`]
//! runs): each shard is one [`ReplicaNode`](luigi_node::ReplicaNode), the node the server
//! runs, alone in its Raft group, serving from virtual time 0 (it elects itself and its boot
//! syncs complete at once: `RaftGroups::boot_ideal`), over a disk that then makes what it
//! is asked to sync durable a seeded [`SimConfig::log_commit`] later and never fails; nothing
//! crashes and no link is cut. A record therefore commits one sync after it is
//! appended, in log order, as on a Raft group whose leader is healthy. The node is addressed
//! as its shard's [`Node::Leader`](crate::Node::Leader), so a configuration's per-leader
//! links (leader-to-leader links are never lost) and clock offsets apply to it.
//!
//! Everything else is the Raft model's, so the simulator calls a server one way: the node's
//! effects are executed by `replicas.rs` and checked by `checks.rs` while the run goes
//! (each execution against the committed logs, rule 4; every reply, rule 7; watermarks that
//! never go back; the cores' invariants after every turn), and the run ends once every shard
//! has converged (nothing pending, every record committed and applied). This configuration
//! keeps the order of each shard's executions ([`IdealRecords`]) for the checks of
//! `ideal_checks.rs` after the run: exactly the ordered transactions executed, in timestamp
//! and log order per key, and a follower replaying each committed log rebuilds its leader's
//! store; then it reports a [`RunReport`].

use luigi_protocol::log::LogRecord;
use luigi_raft::RaftLog;
use luigi_txn::types::{ShardId, TxnId};

use super::{sim, FaultConfig, Finished, RaftGroups};
use crate::config::SimConfig;
use crate::engine::{Core, Step};
use crate::violation::{Violation, ViolationKind};
use crate::RunReport;

/// Runs `config` (valid, Luigi) over the ideal-log configuration and checks it.
pub(crate) fn run_ideal(config: &SimConfig) -> Result<RunReport, Violation> {
    let faults = ideal_faults(config);
    let records = IdealRecords { executions: vec![Vec::new(); config.shards as usize] };
    let mut sim = sim(config, &faults, Some(records))?;
    sim.run()?;
    match sim.finish()? {
        Finished::Ideal(report) => Ok(report),
        Finished::Replicated(_) => {
            Err(Violation::new(ViolationKind::Invariant, "an ideal-log run reported as replicated"))
        }
    }
}

/// One replica per shard, syncs after [`SimConfig::log_commit`], no faults, and
/// [`SimConfig::drain_us`] to converge once every transaction is answered; no liveness bound
/// beyond the run's virtual-time budget.
fn ideal_faults(config: &SimConfig) -> FaultConfig {
    FaultConfig {
        replicas: 1,
        sync: config.log_commit,
        random_faults: false,
        settle_us: config.drain_us,
        liveness_us: u64::MAX,
        ..FaultConfig::new()
    }
}

/// Rounds of syncing a node's disk at once, at boot, before it counts as never serving.
const BOOT_ROUNDS_MAX: usize = 16;

impl RaftGroups<'_> {
    /// The ideal log's leaders serve from the start: at virtual time 0, before any client
    /// dispatches, each shard's node wins its one-replica election and its disk completes
    /// at once the syncs it asks for until it serves (its term's first entry, its floor).
    /// After that every sync takes [`SimConfig::log_commit`]. (A node that does not serve yet
    /// holds dispatches, but drops other shards' agreement batches, which their senders send
    /// again only once a recovery asks, seconds later: a cluster's start, not what these runs
    /// are about.)
    pub(super) fn boot_ideal(&mut self, core: &mut Core<'_>) -> Step {
        for s in 0..core.config.shards {
            for _ in 0..BOOT_ROUNDS_MAX {
                if self.serving(s, 0) {
                    break;
                }
                // The sync already scheduled for the boot's write is void.
                let r = &mut self.replicas[s as usize][0];
                r.gen += 1;
                let gen = r.gen;
                self.sync_disk(core, s, 0, gen)?;
            }
            if !self.serving(s, 0) {
                let msg = format!("shard {s}'s node does not serve after {BOOT_ROUNDS_MAX} syncs at boot");
                return Err(core.violation(ViolationKind::Invariant, msg));
            }
        }
        Ok(())
    }

    /// The index up to which a serving leader's `log` must be committed, known to the oracle
    /// and applied for its shard to have settled: its last index. In the ideal-log
    /// configuration a commit may take longer than the leader takes to log its next periodic
    /// record (a floor renewal, an applied marker), so there the last index before an
    /// uncommitted tail of such records only (they decide nothing and change no store).
    pub(super) fn settle_index(&self, log: &RaftLog) -> u64 {
        let (commit, last) = (log.commit_index(), log.last_index());
        if self.ideal.is_none() {
            return last;
        }
        let periodic = |index: u64| {
            log.entry(index).is_some_and(|e| {
                e.entry_type as i32 != 0
                    || e.data.is_empty()
                    || matches!(
                        postcard::from_bytes::<LogRecord>(&e.data),
                        Ok(LogRecord::Floor { .. } | LogRecord::Applied { .. } | LogRecord::PeerApplied { .. })
                    )
            })
        };
        if (commit + 1..=last).all(periodic) {
            commit
        } else {
            last
        }
    }
}

/// What the ideal-log configuration records beyond the Raft model's checks.
pub(super) struct IdealRecords {
    /// Per shard, the transactions its node executed, in execution order.
    pub(super) executions: Vec<Vec<TxnId>>,
}

impl IdealRecords {
    /// Shard `s`'s node executed `id` (checked by the model: a participant, once).
    pub(super) fn executed(&mut self, s: ShardId, id: TxnId) {
        self.executions[s as usize].push(id);
    }
}
