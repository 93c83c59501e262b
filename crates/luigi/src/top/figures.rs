//! What one frame of `luigi top` shows, worked out from two rounds of scrapes (the previous
//! and the current one): per shard its leader, term, commit rate, latency quantiles, hold
//! queue, watermark lag and fast-path accepts per commit; per replica its state, role, clock offsets, or
//! why it did not answer. Plain figures: [`super::render`] draws them.

use std::net::SocketAddr;
use std::time::Instant;

use super::counter;
use super::histogram::{self, Bucket};
use super::names;
use super::scrape::{Metrics, Reading, Target};

/// A latency distribution's median and 99th percentile, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantiles {
    /// The median.
    pub p50: f64,
    /// The 99th percentile.
    pub p99: f64,
}

/// One shard's line. `None` is a figure that cannot be had: no replica answered twice, no
/// leader, no observation in the interval, or a metric the servers do not serve.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardFigures {
    /// The shard.
    pub shard: u32,
    /// Its replicas in the cluster file.
    pub replicas: usize,
    /// Those that answered this round.
    pub answered: usize,
    /// The replica that says it is the Raft leader (the one in the highest term if several).
    pub leader: Option<u32>,
    /// The leader serves (elected and caught up).
    pub serving: bool,
    /// The highest Raft term its replicas are in.
    pub term: Option<u64>,
    /// Transactions committed per second over the interval.
    pub commits_per_s: Option<f64>,
    /// Commit latency over the interval.
    pub commit_latency: Option<Quantiles>,
    /// Raft log sync time over the interval (every replica of the shard).
    pub fsync: Option<Quantiles>,
    /// The leader's transactions admitted and not executed yet (its hold queue).
    pub queue: Option<f64>,
    /// The serving leader's clock minus its watermark, seconds.
    pub watermark_lag_s: Option<f64>,
    /// Fast-path accept records written over the interval (every replica of the shard) per
    /// transaction committed: with n replicas, up to n - 1 when every transaction asks for
    /// the fast path and every follower accepts it; 0 when the fast path is not used.
    pub accepts_per_commit: Option<f64>,
}

/// A replica's measured clock offset to one peer.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerClock {
    /// The peer's replica index.
    pub peer: String,
    /// The offset, seconds (positive: the peer's clock is ahead).
    pub offset_s: f64,
}

/// What an answering replica says of itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaUp {
    /// Its Raft role (`leader`, `follower`, `candidate`, `pre_candidate`).
    pub role: Option<String>,
    /// Its Raft term.
    pub term: Option<u64>,
    /// Raft log entries applied per second over the interval.
    pub applied_per_s: Option<f64>,
    /// Leader changes it saw since it started.
    pub leader_changes: Option<f64>,
    /// Its clock offsets to its peers.
    pub clock: Vec<PeerClock>,
    /// Its clock is beyond the bound from a majority of its group.
    pub beyond_bound: bool,
}

/// A replica's line: what it says, or why it did not answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicaState {
    /// It answered.
    Up(ReplicaUp),
    /// It did not (connection refused, timed out, a bad answer...).
    Down(String),
}

/// One replica's line.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaFigures {
    /// Its shard.
    pub shard: u32,
    /// Its index in the shard.
    pub replica: u32,
    /// Its metrics address.
    pub addr: SocketAddr,
    /// What it said.
    pub state: ReplicaState,
}

/// A whole frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// One per shard, in order.
    pub shards: Vec<ShardFigures>,
    /// One per replica, by shard then replica.
    pub replicas: Vec<ReplicaFigures>,
}

/// One replica's current metrics and, if it answered the previous round too, those.
struct Pair<'a> {
    replica: u32,
    current: &'a Metrics,
    previous: Option<(&'a Metrics, Instant)>,
    at: Instant,
}

impl Pair<'_> {
    /// The rate of counter `metric{labels}` over the interval; a series absent before (a
    /// leader's counters appear when it starts serving) counted from 0, one absent now counts
    /// nothing. `None` without a previous reading.
    fn rate(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let (previous, then) = self.previous?;
        let Some(now) = self.current.value(metric, labels) else { return Some(0.0) };
        counter::rate(previous.value(metric, labels).unwrap_or(0.0), now, self.at.saturating_duration_since(then))
    }

    /// The observations of histogram `metric` in the interval.
    fn histogram(&self, metric: &str) -> Option<Vec<Bucket>> {
        let (previous, _) = self.previous?;
        let now = self.current.histogram(metric)?;
        Some(histogram::interval(&previous.histogram(metric).unwrap_or_default(), &now))
    }
}

/// Replica `i`'s pair of readings, or why it has none this round.
fn pair<'a>(
    i: usize,
    target: &Target,
    previous: Option<&'a [Reading]>,
    current: &'a [Reading],
) -> Result<Pair<'a>, String> {
    let reading = current.get(i).ok_or_else(|| "not scraped".to_string())?;
    let metrics = reading.metrics.as_ref().map_err(Clone::clone)?;
    let before = previous.and_then(|p| p.get(i)).and_then(|r| Some((r.metrics.as_ref().ok()?, r.at)));
    Ok(Pair { replica: target.replica, current: metrics, previous: before, at: reading.at })
}

/// The frame of `current` (the readings of `targets`, in order), with rates and quantiles
/// over the interval since `previous` (the round before, same order) if there is one.
pub fn frame(targets: &[Target], previous: Option<&[Reading]>, current: &[Reading]) -> Frame {
    let pairs: Vec<Result<Pair, String>> =
        targets.iter().enumerate().map(|(i, t)| pair(i, t, previous, current)).collect();
    let shard_count = targets.iter().map(|t| t.shard + 1).max().unwrap_or(0);
    let shards = (0..shard_count)
        .map(|shard| {
            let of_shard = || targets.iter().zip(&pairs).filter(move |(t, _)| t.shard == shard);
            let answered: Vec<&Pair> = of_shard().filter_map(|(_, p)| p.as_ref().ok()).collect();
            shard_figures(shard, of_shard().count(), &answered)
        })
        .collect();
    let replicas = targets
        .iter()
        .zip(&pairs)
        .map(|(t, p)| {
            let state = match p {
                Ok(pair) => ReplicaState::Up(replica_up(pair)),
                Err(reason) => ReplicaState::Down(reason.clone()),
            };
            ReplicaFigures { shard: t.shard, replica: t.replica, addr: t.addr, state }
        })
        .collect();
    Frame { shards, replicas }
}

/// The sum over the pairs that have one of `figure`; `None` if none has.
fn sum_of(pairs: &[&Pair], figure: impl Fn(&Pair) -> Option<f64>) -> Option<f64> {
    pairs.iter().filter_map(|p| figure(p)).fold(None, |total, v| Some(total.unwrap_or(0.0) + v))
}

/// The median and 99th percentile of histogram `metric` over the interval, summed over `pairs`.
fn quantiles(pairs: &[&Pair], metric: &str) -> Option<Quantiles> {
    let intervals: Vec<Vec<Bucket>> = pairs.iter().filter_map(|p| p.histogram(metric)).collect();
    let total = histogram::sum(intervals.iter().map(Vec::as_slice))?;
    Some(Quantiles { p50: histogram::quantile(0.5, &total)?, p99: histogram::quantile(0.99, &total)? })
}

/// A shard's figures from its answering replicas' `pairs` (of `replicas` in all).
fn shard_figures(shard: u32, replicas: usize, pairs: &[&Pair]) -> ShardFigures {
    let term_of = |p: &Pair| p.current.value(names::TERM, &[]).map(|t| t as u64);
    let leader = pairs
        .iter()
        .filter(|p| p.current.value(names::IS_LEADER, &[]) == Some(1.0))
        .max_by_key(|p| (term_of(p), std::cmp::Reverse(p.replica)))
        .copied();
    let committed = [("outcome", "committed"), ("path", "any")];
    let commits_per_s = sum_of(pairs, |p| p.rate(names::TRANSACTIONS, &committed));
    let serves_accepts = pairs.iter().any(|p| p.current.value(names::ACCEPTS_WRITTEN, &[]).is_some());
    let accepts_per_s = if serves_accepts { sum_of(pairs, |p| p.rate(names::ACCEPTS_WRITTEN, &[])) } else { None };
    let accepts_per_commit = match (accepts_per_s, commits_per_s) {
        (Some(a), Some(c)) if c > 0.0 => Some(a / c),
        _ => None,
    };
    ShardFigures {
        shard,
        replicas,
        answered: pairs.len(),
        leader: leader.map(|p| p.replica),
        serving: leader.is_some_and(|p| p.current.value(names::SERVING, &[]) == Some(1.0)),
        term: pairs.iter().filter_map(|p| term_of(p)).max(),
        commits_per_s,
        commit_latency: quantiles(pairs, names::COMMIT_LATENCY),
        fsync: quantiles(pairs, names::FSYNC),
        queue: leader.and_then(|p| p.current.value(names::PENDING, &[])),
        watermark_lag_s: leader.and_then(|p| p.current.value(names::WATERMARK_LAG, &[])),
        accepts_per_commit,
    }
}

/// Each peer's clock offset, in the order of the peers' indexes (the servers' own order is
/// their measurements').
fn peers_in_order(offsets: Vec<(String, f64)>) -> Vec<PeerClock> {
    let mut clock: Vec<PeerClock> = offsets.into_iter().map(|(peer, offset_s)| PeerClock { peer, offset_s }).collect();
    clock.sort_by_key(|p| (p.peer.parse::<u64>().ok(), p.peer.clone()));
    clock
}

/// What an answering replica says of itself.
fn replica_up(pair: &Pair) -> ReplicaUp {
    let m = pair.current;
    ReplicaUp {
        role: m.by_label(names::ROLE, "role").into_iter().find(|(_, v)| *v == 1.0).map(|(role, _)| role),
        term: m.value(names::TERM, &[]).map(|t| t as u64),
        applied_per_s: pair.rate(names::APPLIED, &[]),
        leader_changes: m.value(names::LEADER_CHANGES, &[]),
        clock: peers_in_order(m.by_label(names::CLOCK_OFFSET, "peer")),
        beyond_bound: m.value(names::CLOCK_BEYOND, &[]) == Some(1.0),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn target(shard: u32, replica: u32) -> Target {
        Target { shard, replica, addr: format!("127.0.0.1:{}", 9100 + 3 * shard + replica).parse().unwrap() }
    }

    /// A replica's exposition: leader or not, its term, committed count, fsync buckets
    /// (at most 1 ms, at most 2 ms, all).
    struct Fig {
        leader: bool,
        term: u64,
        committed: Option<f64>,
        fsync: [f64; 3],
    }

    fn exposition(f: &Fig) -> String {
        let mut t =
            String::from("# TYPE luigi_transactions counter\n# TYPE etcd_disk_wal_fsync_duration_seconds histogram\n");
        t += &format!(
            "etcd_server_is_leader {}\nluigi_serving {}\nluigi_raft_term {}\n",
            u8::from(f.leader),
            u8::from(f.leader),
            f.term
        );
        t += &format!("luigi_raft_role{{role=\"{}\"}} 1\n", if f.leader { "leader" } else { "follower" });
        if let Some(c) = f.committed {
            t += &format!("luigi_transactions_total{{outcome=\"committed\",path=\"any\"}} {c}\n");
            t += "etcd_server_proposals_pending 7\nluigi_watermark_lag_seconds 0.002\n";
        }
        for (le, count) in ["0.001", "0.002", "+Inf"].iter().zip(f.fsync) {
            t += &format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"{le}\"}} {count}\n");
        }
        t += "luigi_clock_offset_seconds{peer=\"2\"} -0.0001\nluigi_clock_offset_seconds{peer=\"1\"} 0.0005\n# EOF\n";
        t
    }

    fn reading(at: Instant, f: Option<&Fig>) -> Reading {
        let metrics = f.map_or(Err("connection refused".to_string()), |f| Ok(Metrics::parse(&exposition(f)).unwrap()));
        Reading { at, metrics }
    }

    #[test]
    fn a_shard_shows_its_leader_and_the_intervals_rates_and_quantiles() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let targets = [target(0, 0), target(0, 1), target(1, 0)];
        let leader = |committed, fsync| Fig { leader: true, term: 3, committed: Some(committed), fsync };
        let follower = |fsync| Fig { leader: false, term: 3, committed: None, fsync };
        let before = [
            reading(t0, Some(&leader(100.0, [10.0, 10.0, 10.0]))),
            reading(t0, Some(&follower([0.0; 3]))),
            reading(t0, None),
        ];
        let after = [
            reading(t1, Some(&leader(300.0, [10.0, 40.0, 50.0]))),
            reading(t1, Some(&follower([0.0, 0.0, 10.0]))),
            reading(t1, None),
        ];
        let frame = frame(&targets, Some(&before), &after);
        let s0 = &frame.shards[0];
        assert_eq!((s0.leader, s0.serving, s0.term, s0.answered, s0.replicas), (Some(0), true, Some(3), 2, 2));
        assert_eq!(s0.commits_per_s, Some(100.0), "200 commits in 2 s");
        assert_eq!((s0.queue, s0.watermark_lag_s), (Some(7.0), Some(0.002)));
        // The interval's fsyncs: 30 in (1, 2] ms and 20 above 2 ms, over both replicas: the
        // median is rank 25 of 50, 25/30 of the way through (1, 2] ms.
        let fsync = s0.fsync.unwrap();
        assert!((fsync.p50 - (0.001 + 0.001 * 25.0 / 30.0)).abs() < 1e-12, "{fsync:?}");
        assert_eq!(fsync.p99, 0.002, "in the +Inf bucket: the largest finite bound");
        assert_eq!((s0.commit_latency, s0.accepts_per_commit), (None, None), "not served");
        let s1 = &frame.shards[1];
        assert_eq!((s1.leader, s1.term, s1.commits_per_s, s1.fsync, s1.answered), (None, None, None, None, 0));
        assert_eq!(frame.replicas[2].state, ReplicaState::Down("connection refused".into()));
        let ReplicaState::Up(up) = &frame.replicas[0].state else { panic!() };
        assert_eq!(up.role.as_deref(), Some("leader"));
        let peer = |p: &str, offset_s| PeerClock { peer: p.into(), offset_s };
        assert_eq!(up.clock, vec![peer("1", 0.0005), peer("2", -0.0001)], "by peer index");
    }

    #[test]
    fn a_new_leaders_counters_and_a_restarted_servers_are_never_a_negative_rate() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let targets = [target(0, 0), target(0, 1)];
        // Replica 0 led and was demoted (its series are gone); replica 1 was elected and counts
        // from 0 (its series is new); then replica 1 restarted and counts from 0 again.
        let old = [
            reading(t0, Some(&Fig { leader: true, term: 1, committed: Some(500.0), fsync: [0.0; 3] })),
            reading(t0, Some(&Fig { leader: false, term: 1, committed: None, fsync: [0.0; 3] })),
        ];
        let new = [
            reading(t1, Some(&Fig { leader: false, term: 2, committed: None, fsync: [0.0; 3] })),
            reading(t1, Some(&Fig { leader: true, term: 2, committed: Some(40.0), fsync: [0.0; 3] })),
        ];
        let f = frame(&targets, Some(&old), &new);
        assert_eq!((f.shards[0].leader, f.shards[0].term, f.shards[0].commits_per_s), (Some(1), Some(2), Some(40.0)));
        assert_eq!(f.shards[0].fsync, None, "no fsync in the interval");
        let t2 = t1 + Duration::from_secs(1);
        let restarted =
            [new[0].clone(), reading(t2, Some(&Fig { leader: true, term: 2, committed: Some(15.0), fsync: [0.0; 3] }))];
        assert_eq!(frame(&targets, Some(&new), &restarted).shards[0].commits_per_s, Some(15.0));
    }

    #[test]
    fn without_an_earlier_round_there_are_no_rates_but_the_state_is_shown() {
        let targets = [target(0, 0)];
        let now =
            [reading(Instant::now(), Some(&Fig { leader: true, term: 5, committed: Some(9.0), fsync: [1.0; 3] }))];
        let f = frame(&targets, None, &now);
        assert_eq!(
            (f.shards[0].leader, f.shards[0].term, f.shards[0].commits_per_s, f.shards[0].fsync),
            (Some(0), Some(5), None, None)
        );
        // Of two replicas that both say they lead (an old leader not told yet), the later term's.
        let targets = [target(0, 0), target(0, 1)];
        let both = [
            reading(Instant::now(), Some(&Fig { leader: true, term: 5, committed: None, fsync: [0.0; 3] })),
            reading(Instant::now(), Some(&Fig { leader: true, term: 6, committed: None, fsync: [0.0; 3] })),
        ];
        assert_eq!(frame(&targets, None, &both).shards[0].leader, Some(1));
    }

    #[test]
    fn commit_latency_is_read_from_its_histogram_once_served() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let with_commits = |counts: [f64; 3]| {
            let mut text = exposition(&Fig { leader: true, term: 1, committed: Some(0.0), fsync: [0.0; 3] });
            text = text.replace("# EOF\n", "# TYPE tikv_raftstore_commit_log_duration_seconds histogram\n");
            for (le, count) in ["0.001", "0.004", "+Inf"].iter().zip(counts) {
                text += &format!("tikv_raftstore_commit_log_duration_seconds_bucket{{le=\"{le}\"}} {count}\n");
            }
            Reading { at: t1, metrics: Ok(Metrics::parse(&(text + "# EOF\n")).unwrap()) }
        };
        let before = [Reading { at: t0, ..with_commits([5.0, 5.0, 5.0]) }];
        // The interval's 100 commits: 50 at most 1 ms, 50 in (1, 4] ms.
        let after = [with_commits([55.0, 105.0, 105.0])];
        let latency = frame(&[target(0, 0)], Some(&before), &after).shards[0].commit_latency.unwrap();
        assert_eq!(latency.p50, 0.001);
        assert!((latency.p99 - (0.001 + 0.003 * 49.0 / 50.0)).abs() < 1e-12, "{latency:?}");
    }

    #[test]
    fn accepts_per_commit_are_every_replicas_accepts_over_the_commits_once_served() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let with_accepts = |committed: Option<f64>, accepts: f64| {
            let text = exposition(&Fig { leader: committed.is_some(), term: 1, committed, fsync: [0.0; 3] })
                .replace("# EOF\n", &format!("luigi_accept_log_entries_written_total {accepts}\n# EOF\n"));
            Metrics::parse(&text).unwrap()
        };
        let targets = [target(0, 0), target(0, 1), target(0, 2)];
        let at = |at, committed, accepts| Reading { at, metrics: Ok(with_accepts(committed, accepts)) };
        let before = [at(t0, Some(100.0), 0.0), at(t0, None, 50.0), at(t0, None, 50.0)];
        // 100 commits; the followers wrote 90 and 60 accept records.
        let after = [at(t1, Some(200.0), 0.0), at(t1, None, 140.0), at(t1, None, 110.0)];
        assert_eq!(frame(&targets, Some(&before), &after).shards[0].accepts_per_commit, Some(1.5));
        let idle = [at(t1, Some(100.0), 0.0), at(t1, None, 50.0), at(t1, None, 50.0)];
        assert_eq!(frame(&targets, Some(&before), &idle).shards[0].accepts_per_commit, None, "no commit");
    }
}
