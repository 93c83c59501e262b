//! What a scrape reads of a server: plain figures, filled in by the server shell from its
//! node's existing counters (see `crate::server::scrape`).

/// One of a serving leader's transaction counters: `luigi_transactions_total{outcome, path}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnCount {
    /// What happened (`admitted`, `committed`, `rejected`, `refused`, `aborted`, ...).
    pub outcome: &'static str,
    /// How (`any`, `cross_shard`, `second_round`, `early`, `clock_horizon`, ...).
    pub path: &'static str,
    /// How many times.
    pub count: u64,
}

/// A leader's commits of one stored procedure: `luigi_procedure_commits_total{procedure}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcedureCount {
    /// The procedure's name (one of the registry's).
    pub procedure: String,
    /// Its commits.
    pub count: u64,
}

/// A count under one label's value (e.g. an agreement round's outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabeledCount {
    /// The label's value.
    pub label: &'static str,
    /// How many times.
    pub count: u64,
}

/// The measured offset of this replica's clock to one peer of its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerOffset {
    /// The peer (its replica index).
    pub replica: u32,
    /// Its offset, µs (positive: the peer's clock is ahead).
    pub offset_us: i64,
    /// The measurement's error bound, µs.
    pub error_us: u64,
}

/// The server's accepted connections and the refusals it sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    /// Open, not authenticated yet.
    pub pending: u64,
    /// Open, authenticated clients.
    pub clients: u64,
    /// Open, authenticated servers of the cluster.
    pub peers: u64,
    /// Messages refused on a connection that stayed open.
    pub refused_messages: u64,
    /// Refusals that closed their connection.
    pub refused_connections: u64,
}

/// A server's figures at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Its Raft role (`leader`, `follower`, `candidate`, `pre_candidate`).
    pub role: &'static str,
    /// It is its shard's Raft leader.
    pub is_leader: bool,
    /// It serves as its shard's leader (elected and caught up).
    pub serving: bool,
    /// It knows a leader of its shard.
    pub has_leader: bool,
    /// Its Raft term.
    pub term: u64,
    /// Times it saw its shard's leader change.
    pub leader_changes: u64,
    /// The log's commit index.
    pub commit_index: u64,
    /// The log's applied index.
    pub applied_index: u64,
    /// Transactions admitted and not executed.
    pub pending: u64,
    /// Transactions pending longer than an agreement takes.
    pub stalled: u64,
    /// Answers held for clients.
    pub answers: u64,
    /// Clients with an answer table.
    pub answer_clients: u64,
    /// Its clock minus its watermark, µs (if its protocol publishes one).
    pub watermark_lag_us: Option<u64>,
    /// Its leaders' transaction counters, summed over every time it served since it started
    /// (none before it first served).
    pub txns: Vec<TxnCount>,
    /// Its leaders' cross-shard agreement rounds by outcome, summed likewise (Luigi only).
    pub agreement_rounds: Vec<LabeledCount>,
    /// Its leaders' hold time summed, µs (transactions released from the hold queue: time
    /// since admission), if its protocol holds transactions.
    pub hold_us: Option<u64>,
    /// Its leaders' commits per stored procedure, summed likewise.
    pub procedure_commits: Vec<ProcedureCount>,
    /// Log entries it appended while leading and had not seen committed when it lost the
    /// leadership.
    pub proposals_failed: u64,
    /// Fast-path accept records in its accept log now.
    pub accept_log_entries: u64,
    /// Fast-path accept records it wrote to its accept log since it started.
    pub accept_log_written: u64,
    /// Keys locked (2PL).
    pub locks_held: u64,
    /// Pieces prepared and not decided (the baselines).
    pub prepared: u64,
    /// Snapshots of its own it compacted behind.
    pub snapshots_taken: u64,
    /// Snapshots from its leader it installed.
    pub snapshots_installed: u64,
    /// Snapshots received whose check failed.
    pub snapshots_rejected: u64,
    /// Agreement batches dropped while not serving.
    pub batches_dropped: u64,
    /// Replication messages from authenticated peers it could not take (a snapshot that
    /// does not load, a misaddressed or garbled message).
    pub replication_not_taken: u64,
    /// Its clock's offsets to its group's other replicas.
    pub clock_offsets: Vec<PeerOffset>,
    /// Its clock is beyond the bound from a majority of its group.
    pub clock_beyond_bound: bool,
    /// Its connections.
    pub connections: ConnCounts,
    /// The refusals it sent, by reason.
    pub refusal_reasons: Vec<LabeledCount>,
    /// Older versions its store keeps for snapshot reads (DESIGN.md rule 23).
    pub versions_held: u64,
    /// Their bytes.
    pub versions_bytes: u64,
    /// Snapshot reads it answered with a result.
    pub snapshot_reads_served: u64,
    /// Snapshot reads waiting for its safe time now.
    pub snapshot_reads_waiting: u64,
    /// Snapshot reads it refused, by reason (`busy`, `timeout`, `other`).
    pub snapshot_reads_refused: Vec<LabeledCount>,
    /// What its fast-path accept rule decided while it followed, by outcome (`accepted`,
    /// `late`, `overtaken`, `full`, `tangled`); empty without a fast path.
    pub fast_accepts: Vec<LabeledCount>,
}
