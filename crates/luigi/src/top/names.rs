//! The metrics `luigi top` reads, by name (docs/METRICS.md lists what the servers serve). Two
//! are not served yet (names another change of issue 29 adds): the view shows `-` for them until the servers serve them (issue 29);
//! [`AWAITED`] names them, and a test keeps every other name to docs/METRICS.md's.

/// 1 on the shard's Raft leader.
pub const IS_LEADER: &str = "etcd_server_is_leader";
/// 1 while the leader serves (elected and caught up).
pub const SERVING: &str = "luigi_serving";
/// The replica's Raft term.
pub const TERM: &str = "luigi_raft_term";
/// 1 for the role the replica is in, labelled `role`.
pub const ROLE: &str = "luigi_raft_role";
/// The serving leader's transaction counters, labelled `outcome` and `path`.
pub const TRANSACTIONS: &str = "luigi_transactions_total";
/// Transactions admitted and not executed yet: the leader's hold queue.
pub const PENDING: &str = "etcd_server_proposals_pending";
/// The serving leader's clock minus its watermark.
pub const WATERMARK_LAG: &str = "luigi_watermark_lag_seconds";
/// Each sync of the Raft log.
pub const FSYNC: &str = "etcd_disk_wal_fsync_duration_seconds";
/// Times the replica saw its shard's leader change.
pub const LEADER_CHANGES: &str = "etcd_server_leader_changes_seen_total";
/// Raft log entries applied.
pub const APPLIED: &str = "etcd_server_proposals_applied_total";
/// The replica's clock offset to each peer, labelled `peer`.
pub const CLOCK_OFFSET: &str = "luigi_clock_offset_seconds";
/// 1 if the replica's clock is beyond the bound from a majority of its group.
pub const CLOCK_BEYOND: &str = "luigi_clock_beyond_bound";

/// Commit latency: Raft proposal to commit, TiKV's name (issue 29 asks for append and commit
/// latency histograms under etcd's/TiKV's names; `../shared/notes/references.md`). Not served
/// yet.
pub const COMMIT_LATENCY: &str = "tikv_raftstore_commit_log_duration_seconds";
/// Fast-path accept records each replica wrote to its accept log. Not served yet. The fast
/// path's use as the servers see it: which transactions then committed on the fast path only
/// the client knows (it decides), so no server can count fast commits.
pub const ACCEPTS_WRITTEN: &str = "luigi_accept_log_entries_written_total";

/// What the view wants that no server serves yet (shown as `-`).
#[cfg(test)]
pub const AWAITED: &[&str] = &[COMMIT_LATENCY, ACCEPTS_WRITTEN];

/// Every metric name read (for the test against docs/METRICS.md).
#[cfg(test)]
pub const READ: &[&str] = &[
    IS_LEADER,
    SERVING,
    TERM,
    ROLE,
    TRANSACTIONS,
    PENDING,
    WATERMARK_LAG,
    FSYNC,
    LEADER_CHANGES,
    APPLIED,
    CLOCK_OFFSET,
    CLOCK_BEYOND,
    COMMIT_LATENCY,
    ACCEPTS_WRITTEN,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_read_is_documented_or_awaited() {
        let doc = include_str!("../../../../docs/METRICS.md");
        for name in READ {
            // A row of the metrics table: `| `name` |` or `| `name{labels}` |`.
            let documented =
                doc.lines().any(|l| l.starts_with(&format!("| `{name}`")) || l.starts_with(&format!("| `{name}{{")));
            let awaited = AWAITED.contains(name);
            assert!(documented || awaited, "{name} is neither in docs/METRICS.md nor awaited");
        }
    }
}
