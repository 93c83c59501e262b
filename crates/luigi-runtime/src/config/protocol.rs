//! The cluster file's `[protocol]` table ([`ProtocolConfig`]) and its checks: every knob's
//! range, and which knobs a protocol other than Luigi refuses.

use luigi_protocol::leader::answers::MIN_ANSWER_EXPIRY_US;
use luigi_txn::types::Protocol;
use serde::{Deserialize, Serialize};

/// The longest answer expiry a cluster file may set (`[protocol] answer_expiry_s`): a day.
/// Past it a command-line client run every second would cost more tables than it is worth.
pub const ANSWER_EXPIRY_S_MAX: u64 = 86_400;

/// The largest coordinator headroom a cluster file may set (`[protocol] headroom_us`, and the
/// adaptive headroom's ceiling `headroom_max_us`), µs: 60 s. Every transaction waits out its
/// headroom, and rule 22's horizon widens by the larger of the two, so a replica would accept
/// timestamps that far ahead of its clock.
pub const HEADROOM_US_MAX: u64 = 60_000_000;

/// The longest version window a cluster file may set (`[protocol] snapshot_retention_us`),
/// µs: 60 s, twelve times a snapshot read's longest wait at a replica. Every write's replaced
/// value is kept that long: a longer window holds memory for reads that no client sends.
pub const SNAPSHOT_RETENTION_US_MAX: u64 = 60_000_000;

/// The shortest idle-marker interval a cluster file may set (`[protocol] idle_marker_us`), µs:
/// 1 ms, what a busy shard logs at (`LeaderConfig::applied_marker_us`); below it an idle
/// shard would log more markers than a busy one.
pub const IDLE_MARKER_US_MIN: u64 = 1_000;

/// The longest idle-marker interval a cluster file may set (`[protocol] idle_marker_us`), µs:
/// 60 s. The other shards keep a refusal for this one until its markers pass it
/// (`leader::outcomes`), so an idle shard must not hold them longer.
pub const IDLE_MARKER_US_MAX: u64 = 60_000_000;

/// A `[protocol]` field and what is wrong with it.
pub(super) struct Problem {
    /// The field, e.g. `protocol.idle_marker_us`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn problem(field: &str, problem: impl Into<String>) -> Problem {
    Problem { field: format!("protocol.{field}"), problem: problem.into() }
}

/// Protocol knobs. Absent fields take defaults derived from the scenario.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtocolConfig {
    /// The transaction protocol the cluster runs, by name (see [`Protocol`]); absent: Luigi.
    /// Read it with [`ClusterConfig::protocol`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Added by coordinators to the one-way-delay estimate (with `adaptive_headroom`, the
    /// least they add).
    pub headroom_us: Option<u64>,
    /// Coordinators raise the headroom per shard when dispatches reach its leader late, and
    /// stamp single-shard transactions without the fast path to arrive late (DESIGN.md rule
    /// 1). Default on; `false`: every transaction gets `headroom_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_headroom: Option<bool>,
    /// The adaptive headroom's ceiling, µs. Default: an eighth of the resend timeout. Rule
    /// 22's horizon counts it, so every server and client of the cluster must read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom_max_us: Option<u64>,
    /// How far ahead leaders log their watermark floor promise.
    pub floor_lookahead_us: Option<u64>,
    /// Coordinators resend a dispatch unanswered for this long.
    pub retry_timeout_us: Option<u64>,
    /// A follower snapshots its state and compacts its log every this many applied records.
    pub snapshot_entries: Option<u64>,
    /// The clock bound (DESIGN.md rule 22), µs: the largest offset between two nodes' clocks
    /// the cluster tolerates. A replica refuses a transaction stamped further ahead of its
    /// clock than a client's resend timeout, its headroom and this bound together. Default
    /// 500 ms (CockroachDB's); raise it only for clocks that are known to drift further.
    pub max_clock_offset_us: Option<u64>,
    /// How long a client's answers outlive its newest transaction, seconds (DESIGN.md rule
    /// 7): a client that stops (every `luigi get/put/scan/txn` invocation) costs nothing
    /// after it, and a dispatch older than this is answered `Expired`, never executed
    /// again. Default 120; at least 30 (longer than any client resends); every server of
    /// the cluster must use the same value (change it with the whole cluster stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_expiry_s: Option<u64>,
    /// Raft's election timeout base, µs (rounded up to whole ticks; the timeout is drawn
    /// from it to twice it). Default: 10 ticks and at least 1 s (`luigi_node::tuning`).
    pub election_timeout_us: Option<u64>,
    /// Luigi's fast path (DESIGN.md, "the fast path"): clients send every dispatch to every
    /// replica, followers accept, and an uncontended single-shard transaction commits in 2
    /// one-way delays, a cross-shard one in 3 (rules 16-19); clients fan out only while it
    /// pays (rule 20). Default: on for Luigi, on shards of 3 replicas or more
    /// ([`ClusterConfig::fast_path_on`]); `false` turns it off (rule 14's path alone).
    /// Luigi only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_path: Option<bool>,
    /// Luigi's read-only path (DESIGN.md rule 23): clients send a read-only transaction's
    /// pieces as snapshot reads to a replica of each shard (leader or follower) instead of
    /// ordering them, and the servers keep the versions and log the idle markers those reads
    /// need (`snapshot_retention_us`, `idle_marker_us`). Default: on for Luigi, off for the
    /// baselines (which serve no snapshot reads: `true` is refused for them). Read it with
    /// [`ClusterConfig::read_only_path`](super::ClusterConfig::read_only_path); every server
    /// and client of the cluster must read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_path: Option<bool>,
    /// How long replicas keep the versions their writes replaced, timestamp µs (rule 23): a
    /// snapshot read older than the window is refused. Default: 5 s with the read-only path
    /// on (`luigi_node::tuning::READ_ONLY_RETENTION_US`, which says why), 0 (none kept) off;
    /// at most [`SNAPSHOT_RETENTION_US_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_retention_us: Option<u64>,
    /// How far an idle shard's watermark moves between two `Applied` markers, timestamp µs:
    /// the markers are the replicas' safe time, so a snapshot read at an idle shard waits up
    /// to this long for one, and each is a log record. Default: 20 ms with the read-only path
    /// on (`luigi_node::tuning::READ_ONLY_IDLE_MARKER_US`, which weighs the cost), 15 s off;
    /// from [`IDLE_MARKER_US_MIN`] to [`IDLE_MARKER_US_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_marker_us: Option<u64>,
}

impl ProtocolConfig {
    /// The protocol the table names (absent: Luigi), or what is wrong with its name.
    pub(super) fn named(&self) -> Result<Protocol, Problem> {
        self.kind.as_deref().map_or(Ok(Protocol::Luigi), |k| k.parse::<Protocol>().map_err(|e| problem("kind", e)))
    }

    /// Checks every knob's range, and refuses Luigi's own knobs (`fast_path`,
    /// `read_only_path`) turned on for another protocol.
    pub(super) fn check(&self) -> Result<(), Problem> {
        let protocol = self.named()?;
        for (field, on) in [("fast_path", self.fast_path), ("read_only_path", self.read_only_path)] {
            if on == Some(true) && protocol != Protocol::Luigi {
                return Err(problem(field, format!("is Luigi's; this cluster runs {protocol}")));
            }
        }
        for (field, value) in
            [("retry_timeout_us", self.retry_timeout_us), ("election_timeout_us", self.election_timeout_us)]
        {
            if value == Some(0) {
                return Err(problem(field, "must be positive"));
            }
        }
        if let Some(s) = self.answer_expiry_s {
            let (min, max) = (MIN_ANSWER_EXPIRY_US / 1_000_000, ANSWER_EXPIRY_S_MAX);
            if !(min..=max).contains(&s) {
                let why = format!("is {s} s; must be from {min} s (longer than a client resends) to {max} s");
                return Err(problem("answer_expiry_s", why));
            }
        }
        let bounded = [
            ("headroom_us", self.headroom_us, 0, HEADROOM_US_MAX),
            ("headroom_max_us", self.headroom_max_us, 0, HEADROOM_US_MAX),
            ("snapshot_retention_us", self.snapshot_retention_us, 0, SNAPSHOT_RETENTION_US_MAX),
            ("idle_marker_us", self.idle_marker_us, IDLE_MARKER_US_MIN, IDLE_MARKER_US_MAX),
        ];
        for (field, value, min, max) in bounded {
            match value {
                Some(us) if !(min..=max).contains(&us) => {
                    return Err(problem(
                        field,
                        format!("is {us} µs; must be from {min} to {max} µs ({} s)", max / 1_000_000),
                    ));
                }
                Some(_) | None => {}
            }
        }
        Ok(())
    }
}
