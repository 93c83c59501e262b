//! Where the servers' time went during a run's measured interval: every server's `/metrics`
//! (docs/METRICS.md) is scraped at the start and at the end of the interval, and the
//! differences of the counters and histogram sums that say where a transaction's time went
//! (hold queue, agreement, log appends and commits, fsync) are recorded beside the client's
//! figures ([`ServerDeltas`], in [`crate::report::BenchResult::server_metrics`]). A scrape
//! that fails is named in the record; the run goes on (the figures then cover the servers
//! scraped at both ends).
//!
//! The servers are read with the runtime's one scrape client
//! ([`luigi_runtime::metrics::scrape`]: bounded, an oversized answer refused whole, parsed
//! with `prometheus-parse`, never matched as strings). The servers'
//! CPU time is not here: the suite records it per point from the process tree
//! ([`crate::cpu`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use luigi_runtime::config::{ClusterConfig, NodeId};
use luigi_runtime::metrics::scrape::{fetch, Metrics};
use serde::{Deserialize, Serialize};

/// Time one scrape may take (connect, ask, read): a server too busy to answer within it is
/// recorded as a failed scrape.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One server to scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The server (`s0r1`).
    pub node: String,
    /// Its metrics address.
    pub addr: SocketAddr,
}

/// Every server of `config` that serves metrics.
pub fn targets(config: &ClusterConfig) -> Vec<Target> {
    let mut out = Vec::new();
    for (shard, s) in config.shards.iter().enumerate() {
        for replica in 0..s.replicas.len() as u32 {
            let node = NodeId { shard: shard as u32, replica };
            if let Some(addr) = config.metrics_addr(node) {
                out.push(Target { node: node.name(), addr });
            }
        }
    }
    out
}

/// The figures a run records of one server's exposition, as read at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
struct Figures {
    committed: f64,
    hold_s: Option<f64>,
    fsync_s: f64,
    fsyncs: f64,
    append_s: f64,
    appends: f64,
    commit_log_s: f64,
    commit_logs: f64,
    turn_s: f64,
    rounds: BTreeMap<String, f64>,
    accepts_written: f64,
    leader_changes: f64,
    proposals_failed: f64,
}

impl Figures {
    /// The figures of an exposition (absent counters read as 0).
    fn of(m: &Metrics) -> Self {
        let get = |metric: &str| m.value(metric, &[]).unwrap_or(0.0);
        let rounds = m.by_label("luigi_agreement_rounds_total", "outcome").into_iter().collect();
        Figures {
            committed: m.value("luigi_transactions_total", &[("outcome", "committed"), ("path", "any")]).unwrap_or(0.0),
            hold_s: m.value("luigi_hold_seconds_total", &[]),
            fsync_s: get("etcd_disk_wal_fsync_duration_seconds_sum"),
            fsyncs: get("etcd_disk_wal_fsync_duration_seconds_count"),
            append_s: get("tikv_raftstore_append_log_duration_seconds_sum"),
            appends: get("tikv_raftstore_append_log_duration_seconds_count"),
            commit_log_s: get("tikv_raftstore_commit_log_duration_seconds_sum"),
            commit_logs: get("tikv_raftstore_commit_log_duration_seconds_count"),
            turn_s: get("luigi_turn_duration_seconds_sum"),
            rounds,
            accepts_written: get("luigi_accept_log_entries_written_total"),
            leader_changes: get("etcd_server_leader_changes_seen_total"),
            proposals_failed: get("etcd_server_proposals_failed_total"),
        }
    }
}

/// One scrape of every server: each one's figures, or why it failed.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    by_server: BTreeMap<String, Result<Figures, String>>,
}

/// Scrapes every one of `targets` (one after the other: a few ms each), from a thread outside
/// any tokio runtime (the run's scrape thread).
pub fn read(targets: &[Target]) -> Reading {
    let by_server = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(async {
            let mut by_server = BTreeMap::new();
            for t in targets {
                by_server.insert(t.node.clone(), fetch(t.addr, SCRAPE_TIMEOUT).await.map(|m| Figures::of(&m)));
            }
            by_server
        }),
        Err(e) => targets.iter().map(|t| (t.node.clone(), Err(format!("no runtime to scrape with: {e}")))).collect(),
    };
    Reading { by_server }
}

/// The servers' side of a run's measured interval: the differences between the scrapes at
/// its start and its end, summed over the servers scraped at both.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ServerDeltas {
    /// Servers scraped at both ends.
    pub servers: u32,
    /// The scrapes that failed: the server, the end (`start` or `end`) and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Transactions the servers' leaders committed (executed).
    pub committed: f64,
    /// Hold time summed, seconds (Luigi: released transactions' wait since admission).
    pub hold_s: Option<f64>,
    /// Raft log syncs: their time summed, seconds, and their number.
    pub fsync_s: f64,
    /// Raft log syncs.
    pub fsyncs: f64,
    /// Raft log writes waited for, hand-over to durable: their time summed, seconds.
    pub append_s: f64,
    /// Raft log writes waited for.
    pub appends: f64,
    /// Leaders' entries appended to committed, per batch: their time summed, seconds.
    pub commit_log_s: f64,
    /// Batches of entries timed to their commit.
    pub commit_logs: f64,
    /// Event-loop turns' time summed, seconds.
    pub turn_s: f64,
    /// Cross-shard agreement rounds by outcome (`decided`, `second_round`, `aborted`,
    /// `recovery`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agreement_rounds: BTreeMap<String, f64>,
    /// Fast-path accept records written to the accept logs.
    pub accepts_written: f64,
    /// Leader changes seen (each replica counts its own).
    pub leader_changes: f64,
    /// Entries left uncommitted by a lost leadership.
    pub proposals_failed: f64,
}

impl ServerDeltas {
    /// The differences from `start` to `end`.
    pub fn between(start: &Reading, end: &Reading) -> Self {
        let mut d = ServerDeltas::default();
        for (node, at_end) in &end.by_server {
            let at_start = start.by_server.get(node);
            match (at_start, at_end) {
                (Some(Ok(a)), Ok(b)) => d.add(a, b),
                (Some(Err(e)), _) => d.failed.push(format!("{node} start: {e}")),
                (None, _) => d.failed.push(format!("{node} start: not scraped")),
                (Some(Ok(_)), Err(e)) => d.failed.push(format!("{node} end: {e}")),
            }
        }
        d
    }

    /// Adds one server's differences, `a` to `b`.
    fn add(&mut self, a: &Figures, b: &Figures) {
        self.servers += 1;
        self.committed += b.committed - a.committed;
        if let Some(held) = b.hold_s {
            *self.hold_s.get_or_insert(0.0) += held - a.hold_s.unwrap_or(0.0);
        }
        self.fsync_s += b.fsync_s - a.fsync_s;
        self.fsyncs += b.fsyncs - a.fsyncs;
        self.append_s += b.append_s - a.append_s;
        self.appends += b.appends - a.appends;
        self.commit_log_s += b.commit_log_s - a.commit_log_s;
        self.commit_logs += b.commit_logs - a.commit_logs;
        self.turn_s += b.turn_s - a.turn_s;
        for (outcome, n) in &b.rounds {
            *self.agreement_rounds.entry(outcome.clone()).or_insert(0.0) += n - a.rounds.get(outcome).unwrap_or(&0.0);
        }
        self.accepts_written += b.accepts_written - a.accepts_written;
        self.leader_changes += b.leader_changes - a.leader_changes;
        self.proposals_failed += b.proposals_failed - a.proposals_failed;
    }

    /// The per-commit figures points.csv shows, over the servers' own commits (`None` when
    /// they committed nothing in the interval, or every scrape failed).
    pub fn per_commit(&self) -> Option<PerCommit> {
        (self.committed > 0.0).then(|| {
            let per = |x: f64| x / self.committed;
            PerCommit {
                hold_us: self.hold_s.map(|h| per(h) * 1e6),
                fsync_us: per(self.fsync_s) * 1e6,
                // A fold from +0.0: an empty `sum` of floats is -0.0, which points.csv printed
                // as "-0.000" for the protocols without agreement rounds.
                agreement_rounds: per(self
                    .agreement_rounds
                    .iter()
                    .filter(|(o, _)| *o != "aborted")
                    .fold(0.0, |sum, (_, n)| sum + n)),
                accepts: per(self.accepts_written),
            }
        })
    }
}

/// A run's server figures per committed transaction (of the servers' commits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerCommit {
    /// Hold time, µs (Luigi only).
    pub hold_us: Option<f64>,
    /// Raft log sync time, µs (summed over every replica's syncs).
    pub fsync_us: f64,
    /// Agreement rounds (decided, second and recovery rounds; 0 for single-shard work).
    pub agreement_rounds: f64,
    /// Fast-path accept records written (every replica's).
    pub accepts: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(text: &str) -> Metrics {
        Metrics::parse(text).unwrap()
    }

    fn exposition(committed: u64, hold_s: f64, fsync_sum: f64, decided: u64) -> String {
        format!(
            "# TYPE luigi_transactions counter\n\
             luigi_transactions_total{{shard=\"0\",outcome=\"committed\",path=\"any\"}} {committed}\n\
             # TYPE luigi_hold_seconds counter\n\
             luigi_hold_seconds_total{{shard=\"0\"}} {hold_s}\n\
             # TYPE luigi_agreement_rounds counter\n\
             luigi_agreement_rounds_total{{shard=\"0\",outcome=\"decided\"}} {decided}\n\
             luigi_agreement_rounds_total{{shard=\"0\",outcome=\"aborted\"}} 1\n\
             # TYPE etcd_disk_wal_fsync_duration_seconds histogram\n\
             etcd_disk_wal_fsync_duration_seconds_sum{{shard=\"0\"}} {fsync_sum}\n\
             etcd_disk_wal_fsync_duration_seconds_count{{shard=\"0\"}} 4\n\
             etcd_disk_wal_fsync_duration_seconds_bucket{{shard=\"0\",le=\"+Inf\"}} 4\n\
             # EOF\n"
        )
    }

    #[test]
    fn the_deltas_are_the_differences_of_the_servers_scraped_at_both_ends() {
        let start = Reading {
            by_server: [
                ("s0r0".to_string(), Ok(Figures::of(&samples(&exposition(10, 0.5, 0.25, 2))))),
                ("s0r1".to_string(), Err("connect: refused".to_string())),
            ]
            .into(),
        };
        let end = Reading {
            by_server: [
                ("s0r0".to_string(), Ok(Figures::of(&samples(&exposition(110, 1.5, 0.75, 52))))),
                ("s0r1".to_string(), Ok(Figures::default())),
            ]
            .into(),
        };
        let d = ServerDeltas::between(&start, &end);
        assert_eq!(d.servers, 1);
        assert_eq!(d.failed, vec!["s0r1 start: connect: refused".to_string()]);
        assert_eq!(d.committed, 100.0);
        assert_eq!(d.hold_s, Some(1.0));
        assert_eq!(d.fsync_s, 0.5);
        assert_eq!(d.agreement_rounds.get("decided"), Some(&50.0));
        let per = d.per_commit().unwrap();
        assert_eq!(per.hold_us, Some(10_000.0));
        assert_eq!(per.fsync_us, 5_000.0);
        assert_eq!(per.agreement_rounds, 0.5);
    }

    /// A baseline's servers count no agreement rounds: its figure is +0, printed "0.000",
    /// never "-0.000" (an empty float sum is -0.0).
    #[test]
    fn no_agreement_rounds_are_zero_not_negative_zero() {
        let d = ServerDeltas { committed: 10.0, ..ServerDeltas::default() };
        let per = d.per_commit().unwrap();
        assert!(per.agreement_rounds.is_sign_positive(), "{}", per.agreement_rounds);
        assert_eq!(format!("{:.3}", per.agreement_rounds), "0.000");
    }

    #[test]
    fn a_server_that_does_not_answer_is_a_failed_scrape_not_an_error() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let reading = read(&[Target { node: "s0r0".into(), addr: closed }]);
        let d = ServerDeltas::between(&reading, &reading);
        assert_eq!(d.servers, 0);
        assert_eq!(d.failed.len(), 1, "{:?}", d.failed);
        assert_eq!(d.failed[0], "s0r0 start: connection refused");
        assert_eq!(d.per_commit(), None);
    }
}
