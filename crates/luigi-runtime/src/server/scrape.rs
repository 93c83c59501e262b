//! What a metrics scrape reads of the server: its node's existing counters and state, copied
//! into a plain [`Snapshot`] on the event loop (the responder encodes it off the loop), and the
//! leader changes the shell counts as it watches the log after each turn.

use luigi_node::ReplicaNode;
use luigi_txn::types::TimeUs;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::info;

use super::conns::Conns;
use super::log_watch::LogCounts;
use super::Inbound;
use crate::config::{ClusterConfig, NodeId};
use crate::metrics::{self, http, LabeledCount, PeerOffset, ProcedureCount, ServerLabels, Snapshot, Timings, TxnCount};

/// The shard's leader as this replica last knew it, and the times that changed (etcd's
/// `leader_changes_seen_total`: the first leader known counts as a change).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LeaderWatch {
    last: Option<u64>,
    changes: u64,
}

impl LeaderWatch {
    /// Looks at the leader `node`'s log knows now (after a turn: cheap, no allocation).
    pub(super) fn watch(&mut self, node: &ReplicaNode) {
        let now = node.log().leader_id();
        if now.is_some() && now != self.last {
            self.changes += 1;
            self.last = now;
        }
    }
}

/// The Raft role's label.
fn role_name(role: luigi_raft::Role) -> &'static str {
    match role {
        luigi_raft::Role::Leader => "leader",
        luigi_raft::Role::Follower => "follower",
        luigi_raft::Role::Candidate => "candidate",
        luigi_raft::Role::PreCandidate => "pre_candidate",
    }
}

/// What the shell itself counted, for a scrape.
pub(super) struct ShellCounts<'a> {
    pub conns: &'a Conns,
    pub leaders: &'a LeaderWatch,
    pub log: LogCounts,
    pub replication_not_taken: u64,
}

/// The agreement rounds by outcome in `totals`, if its protocol agrees across shards: every
/// agreement decided (its first round), the second rounds of those whose proposals differed,
/// the ones aborted, and the recovery rounds started for stalled ones.
fn agreement_rounds(totals: &luigi_replica::LeaderTotals) -> Vec<LabeledCount> {
    let Some(a) = totals.agreement else { return Vec::new() };
    let count = |label, count| LabeledCount { label, count };
    vec![
        count("decided", a.cross_decided),
        count("second_round", totals.txn("decided", "second_round").unwrap_or(0)),
        count("aborted", totals.txn("aborted", "cross_shard").unwrap_or(0)),
        count("recovery", a.recover_sent),
    ]
}

/// `node`'s figures at `now` (its clock), with the shell's own.
pub(super) fn snapshot(node: &ReplicaNode, shell: &ShellCounts<'_>, now: TimeUs) -> Snapshot {
    let status = node.status(now);
    let log = node.log();
    let figures = node.replica().leader_figures();
    let totals = node.replica().leader_totals();
    let stats = node.stats();
    let versions = node.replica().store().history_stats();
    let (reads, reads_waiting) = node.replica().snapshot_read_stats();
    Snapshot {
        role: role_name(log.role()),
        is_leader: log.is_leader(),
        serving: status.serving,
        has_leader: log.leader_id().is_some(),
        term: status.term,
        leader_changes: shell.leaders.changes,
        commit_index: status.commit_index,
        applied_index: status.applied_index,
        pending: status.pending,
        stalled: status.stalled_count,
        answers: status.answers,
        answer_clients: status.answer_clients,
        watermark_lag_us: figures.as_ref().and_then(|f| f.watermark).map(|w| now.saturating_sub(w)),
        txns: totals.txns.iter().map(|t| TxnCount { outcome: t.outcome, path: t.path, count: t.count }).collect(),
        agreement_rounds: agreement_rounds(&totals),
        hold_us: totals.held_us,
        procedure_commits: totals
            .procedure_commits
            .iter()
            .map(|(procedure, count)| ProcedureCount { procedure: procedure.to_string(), count })
            .collect(),
        proposals_failed: shell.log.proposals_failed,
        accept_log_entries: shell.log.accept_entries,
        accept_log_written: shell.log.accept_written,
        locks_held: figures.as_ref().map_or(0, |f| f.locks_held as u64),
        prepared: figures.as_ref().map_or(0, |f| f.prepared.len() as u64),
        snapshots_taken: stats.snapshots_taken,
        snapshots_installed: stats.snapshots_installed,
        snapshots_rejected: stats.snapshots_rejected,
        batches_dropped: stats.batches_dropped,
        replication_not_taken: shell.replication_not_taken,
        clock_offsets: status
            .clock
            .peers
            .iter()
            .map(|p| PeerOffset { replica: p.replica, offset_us: p.offset_us, error_us: p.error_us })
            .collect(),
        clock_beyond_bound: status.clock.beyond_bound,
        connections: shell.conns.counts(),
        refusal_reasons: shell.conns.refusal_reasons(),
        versions_held: versions.versions as u64,
        versions_bytes: versions.bytes as u64,
        snapshot_reads_served: reads.served,
        snapshot_reads_waiting: reads_waiting as u64,
        snapshot_reads_refused: vec![
            LabeledCount { label: "busy", count: reads.refused_busy },
            LabeledCount { label: "timeout", count: reads.refused_timeout },
            LabeledCount { label: "other", count: reads.refused_other },
        ],
        fast_accepts: node.replica().fast_path().map_or_else(Vec::new, |f| {
            f.accept_counts().labeled().into_iter().map(|(label, count)| LabeledCount { label, count }).collect()
        }),
    }
}

/// The metrics responder's body: asks the event loop for a [`Snapshot`] through `inbound`
/// (refused at once when its queue is full: a 503, never a wait on a busy server) and encodes
/// it off the loop.
pub(super) fn body(inbound: mpsc::Sender<Inbound>, labels: ServerLabels, timings: Timings) -> http::Body {
    std::sync::Arc::new(move || {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let asked = inbound.try_send(Inbound::Scrape(reply)).is_ok();
        let (labels, timings) = (labels.clone(), timings.clone());
        Box::pin(async move {
            let snapshot = if asked { answer.await.ok()? } else { return None };
            Some(metrics::encode(&labels, &snapshot, &timings))
        })
    })
}

/// Starts the metrics responder on `listener` (the address the cluster file gives `node`):
/// scrapes ask the event loop through `inbound`, the histograms are `timings`'.
pub(super) fn serve(
    listener: TcpListener,
    node: NodeId,
    config: &ClusterConfig,
    inbound: &mpsc::Sender<Inbound>,
    timings: &Timings,
) -> tokio::task::JoinHandle<()> {
    info!(node = %node.name(), addr = ?listener.local_addr().ok(), "serving metrics");
    let labels = ServerLabels { shard: node.shard, replica: node.replica, protocol: config.protocol().to_string() };
    tokio::spawn(http::serve(listener, body(inbound.clone(), labels, timings.clone())))
}
