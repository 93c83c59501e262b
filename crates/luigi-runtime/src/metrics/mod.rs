//! The servers' Prometheus metrics (docs/METRICS.md lists every one): a neutral room that
//! knows plain figures, not protocols. The server shell reads its node's existing counters
//! into a [`Snapshot`] when a scrape asks for one (the cores count; nothing here runs inside
//! them), and times what it can time cheaply into the [`Timings`]' histograms; [`encode`]
//! turns both into the OpenMetrics text exposition with `prometheus-client`, and [`http`]
//! serves it at `GET /metrics`; [`scrape`] is the one client that reads it back (`luigi top`
//! and the benchmark's per-run scrapes).
//!
//! Names follow Prometheus's conventions (base units, counters end in `_total`, histograms
//! in `_seconds`) and mirror etcd's and TiKV's where the meaning is the same. Every series
//! carries the server's `shard`, `replica` and `protocol` labels; none is per key or per
//! transaction.

mod addresses;
pub mod http;
pub mod scrape;
mod snapshot;

use std::borrow::Cow;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

pub use addresses::{validate_addresses, AddressError};
pub use snapshot::{ConnCounts, LabeledCount, PeerOffset, ProcedureCount, Snapshot, TxnCount};

/// Prefix of Luigi's own metrics (the etcd- and TiKV-named ones keep theirs).
const PREFIX: &str = "luigi";

/// Who a server is: the labels every one of its series carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLabels {
    /// Its shard.
    pub shard: u32,
    /// Its index in the shard's replica list.
    pub replica: u32,
    /// The transaction protocol it runs (`luigi`, `occ`, `2pl`, `direct`).
    pub protocol: String,
}

/// What the shell times itself, shared with the threads that time it (each histogram is a
/// handle: clones observe into the same buckets).
#[derive(Clone, Debug)]
pub struct Timings {
    /// Each sync of the Raft log (etcd's `etcd_disk_wal_fsync_duration_seconds`).
    pub wal_fsync: Histogram,
    /// Each snapshot file written (a whole store's image).
    pub snapshot_save: Histogram,
    /// Each turn of the event loop: the node applies what its log committed and the state
    /// machine's work of the turn (its effects executed).
    pub turn: Histogram,
    /// Each write of the Raft log the node waits for, from its hand-over to the disk until
    /// it is reported durable (TiKV's `tikv_raftstore_append_log_duration_seconds`).
    pub append: Histogram,
    /// Each batch of entries the leader appended, from the turn that appended them until the
    /// turn that saw them committed (TiKV's `tikv_raftstore_commit_log_duration_seconds`).
    pub commit: Histogram,
    /// Bytes of the snapshot files written.
    pub snapshot_bytes: Counter,
}

impl Default for Timings {
    fn default() -> Self {
        // 10 µs to about 20 s, doubling: a page-cache write to a stalled disk.
        let buckets = || exponential_buckets(10e-6, 2.0, 22);
        Timings {
            wal_fsync: Histogram::new(buckets()),
            snapshot_save: Histogram::new(buckets()),
            turn: Histogram::new(buckets()),
            append: Histogram::new(buckets()),
            commit: Histogram::new(buckets()),
            snapshot_bytes: Counter::default(),
        }
    }
}

impl Timings {
    /// Observes `elapsed` into `histogram` (seconds).
    pub fn observe(histogram: &Histogram, elapsed: std::time::Duration) {
        histogram.observe(elapsed.as_secs_f64());
    }
}

/// The labels of a transaction counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TxnLabels {
    outcome: &'static str,
    path: &'static str,
}

/// The label of a per-procedure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcedureLabels {
    procedure: String,
}

/// The label of an agreement round's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The label of a per-peer clock figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: u32,
}

/// The label of a connection or refusal figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The label of a refusal's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The label of a Raft role figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: &'static str,
}

/// A gauge registered under `name` holding `value`.
fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// A gauge of seconds registered under `name` (`_seconds` appended) holding `value`.
fn gauge_seconds(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    g.set(value);
    registry.register_with_unit(name, help, Unit::Seconds, g);
}

/// The histogram `histogram` (of seconds) registered under `name` (`_seconds` appended).
fn histogram_seconds(registry: &mut Registry, name: &str, help: &str, histogram: &Histogram) {
    registry.register_with_unit(name, help, Unit::Seconds, histogram.clone());
}

/// A counter registered under `name` (`_total` appended) holding `value`.
fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

/// Saturating conversion of a count to a gauge's value.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The exposition of `snapshot` and `timings` for the server `labels` (OpenMetrics text,
/// ending in `# EOF`).
pub fn encode(labels: &ServerLabels, snapshot: &Snapshot, timings: &Timings) -> String {
    let server_labels = [
        (Cow::Borrowed("shard"), Cow::Owned(labels.shard.to_string())),
        (Cow::Borrowed("replica"), Cow::Owned(labels.replica.to_string())),
        (Cow::Borrowed("protocol"), Cow::Owned(labels.protocol.clone())),
    ];
    let mut registry = Registry::with_labels(server_labels.into_iter());
    register_etcd_names(&mut registry, snapshot, timings);
    register_own(registry.sub_registry_with_prefix(PREFIX), snapshot, timings);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String does not fail");
    text
}

/// The figures whose meaning is etcd's (or TiKV's), under their names.
fn register_etcd_names(registry: &mut Registry, s: &Snapshot, timings: &Timings) {
    gauge(
        registry,
        "etcd_server_has_leader",
        "1 if this replica knows a leader of its shard, else 0",
        s.has_leader.into(),
    );
    gauge(
        registry,
        "etcd_server_is_leader",
        "1 if this replica is its shard's Raft leader, else 0",
        s.is_leader.into(),
    );
    counter(
        registry,
        "etcd_server_leader_changes_seen",
        "Times this replica saw its shard's leader change (since it started)",
        s.leader_changes,
    );
    counter(
        registry,
        "etcd_server_proposals_committed",
        "Raft log entries known committed (the commit index)",
        s.commit_index,
    );
    counter(
        registry,
        "etcd_server_proposals_applied",
        "Raft log entries applied (handed to the state machine)",
        s.applied_index,
    );
    gauge(registry, "etcd_server_proposals_pending", "Transactions admitted and not executed yet", int(s.pending));
    counter(
        registry,
        "etcd_server_proposals_failed",
        "Log entries appended while leading and not seen committed when the leadership was lost",
        s.proposals_failed,
    );
    histogram_seconds(
        registry,
        "etcd_disk_wal_fsync_duration",
        "Time of each sync of the Raft log",
        &timings.wal_fsync,
    );
    gauge(
        registry,
        "tikv_raftstore_leader_missing",
        "1 if this replica knows no leader of its shard, else 0",
        (!s.has_leader).into(),
    );
    histogram_seconds(
        registry,
        "tikv_raftstore_append_log_duration",
        "Time of each write of the Raft log waited for, from its hand-over to the disk until durable",
        &timings.append,
    );
    histogram_seconds(
        registry,
        "tikv_raftstore_commit_log_duration",
        "Time from the leader's turn that appended entries to the turn that saw them committed",
        &timings.commit,
    );
}

/// Luigi's own figures (prefixed `luigi_`).
fn register_own(registry: &mut Registry, s: &Snapshot, timings: &Timings) {
    gauge(registry, "raft_term", "The Raft term this replica is in", int(s.term));
    let role: Family<RoleLabels, Gauge> = Family::default();
    role.get_or_create(&RoleLabels { role: s.role }).set(1);
    registry.register("raft_role", "1 for the Raft role this replica is in", role);
    gauge(registry, "serving", "1 while this replica serves as its shard's leader, else 0", s.serving.into());
    let txns: Family<TxnLabels, Counter> = Family::default();
    for t in &s.txns {
        txns.get_or_create(&TxnLabels { outcome: t.outcome, path: t.path }).inc_by(t.count);
    }
    registry.register(
        "transactions",
        "Transactions by outcome and path, as this replica's leaders counted them, summed over every time it served",
        txns,
    );
    let procedures: Family<ProcedureLabels, Counter> = Family::default();
    for p in &s.procedure_commits {
        procedures.get_or_create(&ProcedureLabels { procedure: p.procedure.clone() }).inc_by(p.count);
    }
    registry.register(
        "procedure_commits",
        "Transactions committed by stored procedure (the transaction's kind), summed over every time it served",
        procedures,
    );
    register_leader_totals(registry, s);
    register_snapshot_reads(registry, s);
    gauge(
        registry,
        "transactions_stalled",
        "Transactions pending on the leader longer than an agreement takes",
        int(s.stalled),
    );
    gauge(registry, "answers_held", "Answers kept for clients, not yet acknowledged or expired", int(s.answers));
    gauge(registry, "answer_clients", "Clients with an answer table here", int(s.answer_clients));
    if let Some(lag_us) = s.watermark_lag_us {
        gauge_seconds(registry, "watermark_lag", "This replica's clock minus its watermark", lag_us as f64 / 1e6);
    }
    gauge(registry, "locks_held", "Keys locked by the leader (2PL)", int(s.locks_held));
    gauge(registry, "prepared", "Pieces prepared and not decided (the baselines)", int(s.prepared));
    register_snapshots(registry, s, timings);
    register_clock(registry, s);
    register_conns(registry, s);
    histogram_seconds(
        registry,
        "turn_duration",
        "Time of each turn of the event loop (applying what the log committed, the state machine's work)",
        &timings.turn,
    );
}

/// The store's versions and the snapshot reads (DESIGN.md rule 23).
fn register_snapshot_reads(registry: &mut Registry, s: &Snapshot) {
    gauge(registry, "versions_held", "Older versions kept for snapshot reads", int(s.versions_held));
    gauge(registry, "versions_bytes", "Bytes of the older versions kept for snapshot reads", int(s.versions_bytes));
    counter(registry, "snapshot_reads_served", "Snapshot reads answered with a result", s.snapshot_reads_served);
    gauge(
        registry,
        "snapshot_reads_waiting",
        "Snapshot reads waiting for the safe time",
        int(s.snapshot_reads_waiting),
    );
    let refused: Family<ReasonLabels, Counter> = Family::default();
    for r in &s.snapshot_reads_refused {
        refused.get_or_create(&ReasonLabels { reason: r.label }).inc_by(r.count);
    }
    registry.register("snapshot_reads_refused", "Snapshot reads refused, by reason", refused);
}

/// The leaders' summed figures beside the transaction counters, the accept log and what the
/// accept rule decided while the replica followed.
fn register_leader_totals(registry: &mut Registry, s: &Snapshot) {
    if !s.agreement_rounds.is_empty() {
        let help = "Cross-shard agreement rounds by outcome, summed over its leaders";
        outcome_counters(registry, "agreement_rounds", help, &s.agreement_rounds);
    }
    if let Some(us) = s.hold_us {
        let held: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default();
        held.inc_by(us as f64 / 1e6);
        registry.register_with_unit(
            "hold",
            "Time the transactions released from the hold queue waited since admission, summed",
            Unit::Seconds,
            held,
        );
    }
    gauge(registry, "accept_log_entries", "Fast-path accept records in the accept log", int(s.accept_log_entries));
    counter(
        registry,
        "accept_log_entries_written",
        "Fast-path accept records written to the accept log",
        s.accept_log_written,
    );
    if !s.fast_accepts.is_empty() {
        let help = "Fast-path dispatches offered to this replica while it followed, by what its accept rule decided";
        outcome_counters(registry, "fast_accepts", help, &s.fast_accepts);
    }
}

/// A counter family `name` labelled by `outcome`, one per count.
fn outcome_counters(registry: &mut Registry, name: &str, help: &str, counts: &[LabeledCount]) {
    let family: Family<OutcomeLabels, Counter> = Family::default();
    for c in counts {
        family.get_or_create(&OutcomeLabels { outcome: c.label }).inc_by(c.count);
    }
    registry.register(name, help, family);
}

fn register_snapshots(registry: &mut Registry, s: &Snapshot, timings: &Timings) {
    counter(registry, "snapshots_taken", "Snapshots of its own this replica compacted behind", s.snapshots_taken);
    counter(registry, "snapshots_installed", "Snapshots from its leader this replica installed", s.snapshots_installed);
    counter(registry, "snapshots_rejected", "Snapshots received whose check failed", s.snapshots_rejected);
    counter(registry, "batches_dropped", "Agreement batches received while not serving (dropped)", s.batches_dropped);
    counter(
        registry,
        "replication_messages_not_taken",
        "Replication messages from peers that could not be taken",
        s.replication_not_taken,
    );
    histogram_seconds(registry, "snapshot_save_duration", "Time of each snapshot file written", &timings.snapshot_save);
    registry.register_with_unit(
        "snapshot_saved",
        "Bytes of the snapshot files written",
        Unit::Bytes,
        timings.snapshot_bytes.clone(),
    );
}

fn register_clock(registry: &mut Registry, s: &Snapshot) {
    let offset: Family<PeerLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let error: Family<PeerLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    for p in &s.clock_offsets {
        offset.get_or_create(&PeerLabels { peer: p.replica }).set(p.offset_us as f64 / 1e6);
        error.get_or_create(&PeerLabels { peer: p.replica }).set(p.error_us as f64 / 1e6);
    }
    registry.register_with_unit(
        "clock_offset",
        "Measured offset of this replica's clock to each peer of its group (DESIGN.md rule 22)",
        Unit::Seconds,
        offset,
    );
    registry.register_with_unit("clock_offset_error", "The error bound of each offset measured", Unit::Seconds, error);
    let rtt: Family<PeerLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    for p in &s.clock_offsets {
        // The error bound is half the probe's round trip, rounded up.
        rtt.get_or_create(&PeerLabels { peer: p.replica }).set(p.error_us.saturating_mul(2) as f64 / 1e6);
    }
    registry.register_with_unit(
        "peer_round_trip_time",
        "Round trip of the clock probe each offset was measured with (the fastest fresh one)",
        Unit::Seconds,
        rtt,
    );
    gauge(
        registry,
        "clock_beyond_bound",
        "1 if this clock is beyond the bound from a majority of its group",
        s.clock_beyond_bound.into(),
    );
}

fn register_conns(registry: &mut Registry, s: &Snapshot) {
    let open: Family<KindLabels, Gauge> = Family::default();
    let c = &s.connections;
    for (kind, n) in [("pending", c.pending), ("client", c.clients), ("peer", c.peers)] {
        open.get_or_create(&KindLabels { kind }).set(int(n));
    }
    registry.register("connections", "Accepted connections open, by what they have shown themselves to be", open);
    let refused: Family<KindLabels, Counter> = Family::default();
    for (kind, n) in [("message", c.refused_messages), ("connection", c.refused_connections)] {
        refused.get_or_create(&KindLabels { kind }).inc_by(n);
    }
    registry.register(
        "refusals",
        "Refusals sent: of a message (the connection stays) or closing its connection",
        refused,
    );
    let by_reason: Family<ReasonLabels, Counter> = Family::default();
    for r in &s.refusal_reasons {
        by_reason.get_or_create(&ReasonLabels { reason: r.label }).inc_by(r.count);
    }
    registry.register("refusals_by_reason", "Refusals sent, of either kind, by reason", by_reason);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_parse::{Sample, Scrape, Value};

    fn parsed(text: &str) -> Vec<Sample> {
        Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses").samples
    }

    fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found =
            samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
        found.map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(_) | Value::Summary(_) => panic!("{metric} is not a single value"),
        })
    }

    #[test]
    fn a_snapshot_is_exposed_under_its_names_and_labels() {
        let labels = ServerLabels { shard: 1, replica: 2, protocol: "luigi".into() };
        let snapshot = Snapshot {
            role: "leader",
            is_leader: true,
            has_leader: true,
            leader_changes: 3,
            commit_index: 40,
            watermark_lag_us: Some(1_500),
            txns: vec![TxnCount { outcome: "committed", path: "any", count: 17 }],
            clock_offsets: vec![PeerOffset { replica: 0, offset_us: -250, error_us: 100 }],
            connections: ConnCounts { clients: 2, refused_connections: 1, ..ConnCounts::default() },
            ..Snapshot::default()
        };
        let timings = Timings::default();
        timings.wal_fsync.observe(0.002);
        let text = encode(&labels, &snapshot, &timings);
        assert!(text.ends_with("# EOF\n"), "{text}");
        let s = parsed(&text);
        let me = [("shard", "1"), ("replica", "2"), ("protocol", "luigi")];
        assert_eq!(value(&s, "etcd_server_has_leader", &me), Some(1.0));
        assert_eq!(value(&s, "tikv_raftstore_leader_missing", &me), Some(0.0));
        assert_eq!(value(&s, "etcd_server_leader_changes_seen_total", &me), Some(3.0));
        assert_eq!(value(&s, "etcd_server_proposals_committed_total", &me), Some(40.0));
        assert_eq!(value(&s, "luigi_transactions_total", &[("outcome", "committed"), ("path", "any")]), Some(17.0));
        assert_eq!(value(&s, "luigi_raft_role", &[("role", "leader")]), Some(1.0));
        assert_eq!(value(&s, "luigi_watermark_lag_seconds", &me), Some(0.0015));
        assert_eq!(value(&s, "luigi_clock_offset_seconds", &[("peer", "0")]), Some(-0.00025));
        assert_eq!(value(&s, "luigi_connections", &[("kind", "client")]), Some(2.0));
        assert_eq!(value(&s, "luigi_refusals_total", &[("kind", "connection")]), Some(1.0));
        let fsync = s.iter().find(|x| x.metric == "etcd_disk_wal_fsync_duration_seconds").expect("the histogram");
        let Value::Histogram(buckets) = &fsync.value else { panic!("{fsync:?}") };
        assert_eq!(buckets.iter().map(|b| b.count).fold(0.0, f64::max), 1.0, "one fsync observed");
        assert!(s.iter().all(|x| x.labels.get("shard") == Some("1")), "every series carries the server's labels");
    }

    #[test]
    fn the_leaders_totals_the_log_and_the_refusals_by_reason_are_exposed() {
        let labels = ServerLabels { shard: 0, replica: 1, protocol: "luigi".into() };
        let snapshot = Snapshot {
            role: "follower",
            txns: vec![TxnCount { outcome: "committed", path: "any", count: 40 }],
            agreement_rounds: vec![LabeledCount { label: "decided", count: 7 }],
            hold_us: Some(2_500_000),
            procedure_commits: vec![ProcedureCount { procedure: "NewOrder".into(), count: 12 }],
            proposals_failed: 3,
            accept_log_entries: 5,
            accept_log_written: 9,
            clock_offsets: vec![PeerOffset { replica: 2, offset_us: 10, error_us: 150 }],
            refusal_reasons: vec![LabeledCount { label: "bad_proof", count: 2 }],
            replication_not_taken: 4,
            versions_held: 11,
            versions_bytes: 400,
            snapshot_reads_served: 6,
            snapshot_reads_refused: vec![LabeledCount { label: "busy", count: 1 }],
            fast_accepts: vec![LabeledCount { label: "late", count: 3 }],
            ..Snapshot::default()
        };
        let timings = Timings::default();
        timings.append.observe(0.001);
        timings.commit.observe(0.004);
        timings.snapshot_bytes.inc_by(1 << 20);
        let s = parsed(&encode(&labels, &snapshot, &timings));
        assert_eq!(
            value(&s, "luigi_transactions_total", &[("outcome", "committed")]),
            Some(40.0),
            "a demoted leader's"
        );
        assert_eq!(value(&s, "luigi_agreement_rounds_total", &[("outcome", "decided")]), Some(7.0));
        assert_eq!(value(&s, "luigi_versions_held", &[]), Some(11.0));
        assert_eq!(value(&s, "luigi_versions_bytes", &[]), Some(400.0));
        assert_eq!(value(&s, "luigi_snapshot_reads_served_total", &[]), Some(6.0));
        assert_eq!(value(&s, "luigi_snapshot_reads_refused_total", &[("reason", "busy")]), Some(1.0));
        assert_eq!(value(&s, "luigi_fast_accepts_total", &[("outcome", "late")]), Some(3.0));
        assert_eq!(value(&s, "luigi_hold_seconds_total", &[]), Some(2.5));
        assert_eq!(value(&s, "luigi_procedure_commits_total", &[("procedure", "NewOrder")]), Some(12.0));
        assert_eq!(value(&s, "etcd_server_proposals_failed_total", &[]), Some(3.0));
        assert_eq!(value(&s, "luigi_accept_log_entries", &[]), Some(5.0));
        assert_eq!(value(&s, "luigi_accept_log_entries_written_total", &[]), Some(9.0));
        assert_eq!(value(&s, "luigi_peer_round_trip_time_seconds", &[("peer", "2")]), Some(0.0003));
        assert_eq!(value(&s, "luigi_snapshot_saved_bytes_total", &[]), Some(1048576.0));
        assert_eq!(value(&s, "luigi_refusals_by_reason_total", &[("reason", "bad_proof")]), Some(2.0));
        assert_eq!(value(&s, "luigi_replication_messages_not_taken_total", &[]), Some(4.0));
        for histogram in ["tikv_raftstore_append_log_duration_seconds", "tikv_raftstore_commit_log_duration_seconds"] {
            let h = s.iter().find(|x| x.metric == histogram).expect(histogram);
            let Value::Histogram(buckets) = &h.value else { panic!("{h:?}") };
            assert_eq!(buckets.iter().map(|b| b.count).fold(0.0, f64::max), 1.0, "{histogram}: one observed");
        }
    }

    #[test]
    fn a_follower_has_no_transaction_series_and_no_watermark_lag() {
        let labels = ServerLabels { shard: 0, replica: 0, protocol: "occ".into() };
        let s = parsed(&encode(&labels, &Snapshot { role: "follower", ..Snapshot::default() }, &Timings::default()));
        assert!(s.iter().all(|x| x.metric != "luigi_transactions_total" && x.metric != "luigi_watermark_lag_seconds"));
        assert_eq!(value(&s, "tikv_raftstore_leader_missing", &[]), Some(1.0));
    }
}
