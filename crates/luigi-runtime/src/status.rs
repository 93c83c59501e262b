//! Operator queries (`luigi status`): ask every replica of a cluster for its
//! [`ReplicaStatus`] on a client connection, and judge whether the cluster can serve.

use std::net::SocketAddr;
use std::time::Duration;

use crate::wire::WireMsg;
use luigi_txn::msg::{ClientMsg, PeerClockOffset, ReplicaStatus, ServerMsg, StalledTxnInfo};
use luigi_txn::types::ShardId;

use crate::config::{ClusterConfig, NodeId};
use crate::net::peer::{connect, NetConfig};

/// How long `luigi status` waits to connect to a replica, and then for its answer.
pub const STATUS_TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);

/// One replica's answer, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaReport {
    /// The replica.
    pub node: NodeId,
    /// Its address in the cluster file.
    pub addr: SocketAddr,
    /// Its status, or why it could not be had (the replica counts as down).
    pub status: Result<ReplicaStatus, String>,
}

/// Asks the replica at `addr` for its status, waiting at most `timeout` to connect and as
/// long again for the answer. The error is one short phrase (`connection refused`, ...).
pub async fn replica_status(addr: SocketAddr, timeout: Duration) -> Result<ReplicaStatus, String> {
    let net = NetConfig::default();
    let (writer, reader) = match tokio::time::timeout(timeout, connect::<WireMsg, WireMsg>(addr, &net, None)).await {
        Err(_) => return Err(format!("no connection within {}", secs(timeout))),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err("connection refused".into()),
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(halves)) => halves,
    };
    writer.send(&WireMsg::Client(ClientMsg::Status)).map_err(|e| e.to_string())?;
    let (mut rx, reading) = reader.spawn_channel(16);
    let answer = tokio::time::timeout(timeout, async {
        while let Some(msg) = rx.recv().await {
            match msg {
                WireMsg::Server(ServerMsg::Status(status)) => return Ok(status),
                // Nothing else is sent to a connection that said no hello; skip it if it is.
                WireMsg::Server(
                    ServerMsg::Reply(_)
                    | ServerMsg::Pong { .. }
                    | ServerMsg::Watermark { .. }
                    | ServerMsg::Progress(_)
                    | ServerMsg::Promise { .. }
                    | ServerMsg::FastAccept { .. }
                    | ServerMsg::SnapshotRead(_),
                )
                | WireMsg::Client(_)
                | WireMsg::Peer(_)
                | WireMsg::Replication(_)
                | WireMsg::Challenge { .. }
                | WireMsg::PeerHello { .. } => {}
                WireMsg::Refused { reason } => return Err(format!("refused: {reason}")),
            }
        }
        Err("connection closed without an answer (a server without status support?)".to_string())
    })
    .await;
    reading.abort();
    answer.unwrap_or_else(|_| Err(format!("no answer within {}", secs(timeout))))
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Asks every replica of `config` at once; reports in cluster-file order.
pub async fn cluster_status(config: &ClusterConfig, timeout: Duration) -> Vec<ReplicaReport> {
    let mut asks = Vec::new();
    for shard in 0..config.shard_count() {
        for replica in 0..config.shards[shard as usize].replicas.len() as u32 {
            let node = NodeId { shard, replica };
            let addr = config.node_addr(node).expect("nodes come from the validated config");
            asks.push((node, addr, tokio::spawn(replica_status(addr, timeout))));
        }
    }
    let mut reports = Vec::new();
    for (node, addr, ask) in asks {
        let status = ask.await.unwrap_or_else(|e| Err(format!("status query failed: {e}")));
        reports.push(ReplicaReport { node, addr, status });
    }
    reports
}

/// What the reports say about the cluster as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterHealth {
    /// Each shard's serving leader (the one in the highest term if several claim it).
    pub leaders: Vec<Option<u32>>,
    /// Replicas that did not answer.
    pub down: Vec<NodeId>,
    /// Shards whose leader's watermark is stuck: further behind its clock than a few
    /// election timeouts (an answer waits for the watermark, so nothing completes there).
    pub stuck: Vec<StuckShard>,
    /// Replicas whose clock is beyond the clock bound from a majority of their group, by
    /// their own measurement (DESIGN.md rule 22): they do not lead.
    pub skewed: Vec<SkewedReplica>,
}

/// A replica whose clock is beyond the clock bound from its group's majority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkewedReplica {
    /// The replica.
    pub node: NodeId,
    /// The clock bound, µs.
    pub bound_us: u64,
    /// Its largest measured offset to a peer (the peer's clock minus its own).
    pub largest: Option<PeerClockOffset>,
}

/// Of a replica's measured offsets, the largest in magnitude (the first among equals).
pub fn largest_offset(peers: &[PeerClockOffset]) -> Option<PeerClockOffset> {
    peers.iter().copied().reduce(|a, b| if b.offset_us.unsigned_abs() > a.offset_us.unsigned_abs() { b } else { a })
}

/// A shard whose watermark is stuck, and what holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckShard {
    /// The leader that reported it.
    pub leader: NodeId,
    /// How far its watermark is behind its clock, µs.
    pub lag_us: u64,
    /// The oldest transaction pending there, if any (what holds the watermark).
    pub oldest: Option<StalledTxnInfo>,
}

impl ClusterHealth {
    /// Judges `reports` of a cluster of `shards` shards; a leader's watermark more than
    /// `stuck_after_us` behind its clock is stuck.
    pub fn of(shards: u32, reports: &[ReplicaReport], stuck_after_us: u64) -> Self {
        /// The replica serving in the highest term seen for a shard: its leader.
        #[derive(Clone, Copy)]
        struct Serving {
            term: u64,
            replica: u32,
        }
        let mut best: Vec<Option<Serving>> = vec![None; shards as usize];
        let mut down = Vec::new();
        for r in reports {
            match &r.status {
                Ok(s) if s.serving => {
                    let slot = &mut best[r.node.shard as usize];
                    if slot.is_none_or(|b| s.term > b.term) {
                        *slot = Some(Serving { term: s.term, replica: r.node.replica });
                    }
                }
                Ok(_) => {}
                Err(_) => down.push(r.node),
            }
        }
        let leaders: Vec<Option<u32>> = best.into_iter().map(|b| b.map(|b| b.replica)).collect();
        let stuck = reports
            .iter()
            .filter(|r| leaders.get(r.node.shard as usize).copied().flatten() == Some(r.node.replica))
            .filter_map(|r| {
                let s = r.status.as_ref().ok().filter(|s| s.serving && s.watermark > 0)?;
                let lag_us = s.clock_us.saturating_sub(s.watermark);
                (lag_us > stuck_after_us).then(|| StuckShard {
                    leader: r.node,
                    lag_us,
                    oldest: s.stalled.first().cloned(),
                })
            })
            .collect();
        let skewed = reports
            .iter()
            .filter_map(|r| {
                let s = r.status.as_ref().ok().filter(|s| s.clock.beyond_bound)?;
                Some(SkewedReplica {
                    node: r.node,
                    bound_us: s.clock.bound_us,
                    largest: largest_offset(&s.clock.peers),
                })
            })
            .collect();
        Self { leaders, down, stuck, skewed }
    }

    /// Shards without a serving leader.
    pub fn leaderless(&self) -> Vec<ShardId> {
        (0..self.leaders.len() as ShardId).filter(|s| self.leaders[*s as usize].is_none()).collect()
    }

    /// True when every shard has a leader whose watermark moves, every replica answered, and
    /// no replica's clock is beyond the clock bound.
    pub fn is_healthy(&self) -> bool {
        self.down.is_empty() && self.leaderless().is_empty() && self.stuck.is_empty() && self.skewed.is_empty()
    }

    /// One line: what is wrong, or that nothing is.
    pub fn summary(&self, replicas: usize) -> String {
        let shards = self.leaders.len();
        let leaderless = self.leaderless();
        let mut parts = Vec::new();
        if leaderless.is_empty() {
            parts.push(format!("{shards} of {shards} shards with a leader"));
        } else {
            let list: Vec<String> = leaderless.iter().map(ShardId::to_string).collect();
            let noun = if leaderless.len() == 1 { "shard" } else { "shards" };
            parts.push(format!("{noun} {} without a leader", list.join(", ")));
        }
        for s in &self.stuck {
            let held = match &s.oldest {
                Some(t) => {
                    let shards: Vec<String> = t.shards.iter().map(u32::to_string).collect();
                    format!(
                        ", held by transaction {}/{} (shards {}, pending {:.1} s)",
                        t.id.client,
                        t.id.seq,
                        shards.join(","),
                        t.age_us as f64 / 1e6
                    )
                }
                None => String::new(),
            };
            parts.push(format!(
                "shard {}'s watermark stuck {:.1} s behind its leader's clock ({}){held}",
                s.leader.shard,
                s.lag_us as f64 / 1e6,
                s.leader.name()
            ));
        }
        for s in &self.skewed {
            // The peer's offset is the peer's clock minus this replica's.
            let largest = match s.largest {
                Some(p) => format!(
                    " ({:.1} ms {} s{}r{}'s)",
                    p.offset_us.unsigned_abs() as f64 / 1e3,
                    if p.offset_us < 0 { "ahead of" } else { "behind" },
                    s.node.shard,
                    p.replica
                ),
                None => String::new(),
            };
            parts.push(format!(
                "{}'s clock is beyond the {:.0} ms clock bound from its group{largest}: it does not lead",
                s.node.name(),
                s.bound_us as f64 / 1e3
            ));
        }
        let up = replicas - self.down.len();
        if self.down.is_empty() {
            parts.push(format!("{up} of {replicas} replicas up"));
        } else {
            let names: Vec<String> = self.down.iter().map(NodeId::name).collect();
            parts.push(format!("{up} of {replicas} replicas up ({} down)", names.join(", ")));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::msg::ReplicaRole;

    fn report(shard: u32, replica: u32, serving: Option<(bool, u64)>) -> ReplicaReport {
        let status = serving.map(|(serving, term)| ReplicaStatus {
            shard,
            replica,
            protocol: "luigi".into(),
            role: if serving { ReplicaRole::Leader } else { ReplicaRole::Follower },
            serving,
            term,
            leader: None,
            commit_index: 0,
            applied_index: 0,
            watermark: 0,
            clock_us: 0,
            pending: 0,
            stalled_count: 0,
            stalled: Vec::new(),
            answer_clients: 0,
            answers: 0,
            clock: Default::default(),
        });
        ReplicaReport {
            node: NodeId { shard, replica },
            addr: "127.0.0.1:1".parse().unwrap(),
            status: status.ok_or_else(|| "connection refused".to_string()),
        }
    }

    #[test]
    fn health_names_leaderless_shards_and_down_replicas() {
        let reports = vec![
            report(0, 0, Some((true, 2))),
            report(0, 1, Some((true, 3))), // a newer leader; the old one has not noticed yet
            report(0, 2, Some((false, 3))),
            report(1, 0, None),
            report(1, 1, None),
            report(1, 2, Some((false, 4))),
        ];
        let h = ClusterHealth::of(2, &reports, 1_000_000);
        assert_eq!(h.leaders, vec![Some(1), None]);
        assert_eq!(h.leaderless(), vec![1]);
        assert!(!h.is_healthy());
        assert_eq!(h.summary(6), "shard 1 without a leader; 4 of 6 replicas up (s1r0, s1r1 down)");
        let h = ClusterHealth::of(1, &reports[..3], 1_000_000);
        assert!(h.is_healthy());
        assert_eq!(h.summary(3), "1 of 1 shards with a leader; 3 of 3 replicas up");
    }

    /// Issue 26: a shard whose leader's watermark no longer moves is degraded, and the
    /// summary names the transaction that holds it; a follower's lag (its last marker) and
    /// an old leader's do not count.
    #[test]
    fn a_stuck_watermark_is_degraded_and_names_what_holds_it() {
        let mut reports =
            vec![report(0, 0, Some((true, 3))), report(0, 1, Some((false, 3))), report(0, 2, Some((true, 2)))];
        for r in &mut reports {
            let s = r.status.as_mut().unwrap();
            (s.clock_us, s.watermark) = (50_000_000, 10_000_000);
        }
        reports[0].status.as_mut().unwrap().watermark = 49_000_000;
        assert!(ClusterHealth::of(1, &reports, 3_000_000).is_healthy(), "1 s behind: moving");
        let s = reports[0].status.as_mut().unwrap();
        s.watermark = 10_800_000;
        let id = luigi_txn::types::TxnId { client: 7, seq: 2 };
        s.stalled = vec![StalledTxnInfo { id, shards: vec![0, 1], age_us: 39_000_000, durable: true }];
        let h = ClusterHealth::of(1, &reports, 3_000_000);
        assert!(!h.is_healthy());
        assert_eq!(
            h.summary(3),
            "1 of 1 shards with a leader; shard 0's watermark stuck 39.2 s behind its leader's clock (s0r0), \
             held by transaction 7/2 (shards 0,1, pending 39.0 s); 3 of 3 replicas up"
        );
    }

    /// DESIGN.md rule 22: a replica that judges its own clock beyond the bound makes the
    /// cluster degraded, and the summary says by how much; a replica that only sees one far
    /// peer does not.
    #[test]
    fn a_replica_beyond_the_clock_bound_is_degraded() {
        let mut reports =
            vec![report(0, 0, Some((false, 3))), report(0, 1, Some((true, 3))), report(0, 2, Some((false, 3)))];
        let far = |replica, offset_us| PeerClockOffset { replica, offset_us, error_us: 150 };
        reports[1].status.as_mut().unwrap().clock.peers = vec![far(0, 2_000_300), far(2, -1_000)];
        assert!(ClusterHealth::of(1, &reports, 3_000_000).is_healthy(), "one far peer is not a verdict");
        let s = reports[0].status.as_mut().unwrap();
        s.clock = luigi_txn::msg::ClockStatus {
            bound_us: 500_000,
            beyond_bound: true,
            peers: vec![far(1, -2_000_300), far(2, -2_001_000)],
        };
        let h = ClusterHealth::of(1, &reports, 3_000_000);
        assert!(!h.is_healthy());
        assert_eq!(
            h.summary(3),
            "1 of 1 shards with a leader; s0r0's clock is beyond the 500 ms clock bound from its group (2001.0 ms \
             ahead of s0r2's): it does not lead; 3 of 3 replicas up"
        );
        assert_eq!(largest_offset(&[]), None);
        assert_eq!(largest_offset(&[far(1, 5), far(2, -5), far(3, 4)]).map(|p| p.replica), Some(1));
    }

    #[tokio::test]
    async fn a_closed_port_is_reported_as_refused() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        assert_eq!(replica_status(addr, Duration::from_secs(1)).await, Err("connection refused".to_string()));
    }
}
