//! Figures for the defaults (heartbeat 1 tick, election timeout drawn from [10, 20) ticks,
//! message delays of 1-4 units with 10 units per tick): how many ticks an election takes, and
//! how many messages a committed batch costs. Print them with
//!
//! ```sh
//! cargo test -p luigi-raft --test figures -- --nocapture
//! ```

mod common;

use common::{Cluster, TICK};
use luigi_raft::eraftpb::MessageType;

fn stats(xs: &[u64]) -> (u64, f64, u64) {
    let min = *xs.iter().min().unwrap();
    let max = *xs.iter().max().unwrap();
    (min, xs.iter().sum::<u64>() as f64 / xs.len() as f64, max)
}

#[test]
fn election_ticks() {
    for n in [3u64, 5] {
        let mut first = Vec::new();
        let mut failover = Vec::new();
        for seed in 1..=50 {
            let mut c = Cluster::new(n, seed);
            let units = c.run_until(100 * TICK, |c| c.live_leader().is_some()).expect("elected");
            first.push(units.div_ceil(TICK));
            c.run(5 * TICK);
            let old = c.live_leader().unwrap();
            c.isolated.insert(old);
            let units = c.run_until(100 * TICK, |c| c.live_leader().is_some_and(|l| l != old)).expect("failover");
            failover.push(units.div_ceil(TICK));
        }
        let (a, b) = (stats(&first), stats(&failover));
        println!(
            "n={n}: first election {}..{} ticks (mean {:.1}); failover after the leader dies {}..{} ticks (mean {:.1})",
            a.0, a.2, a.1, b.0, b.2, b.1
        );
        // Timeout in [10, 20) plus a pre-vote and a vote round trip (< 1 tick each here); the
        // per-term permutation of timeouts avoids split votes, so one round always suffices.
        assert!(a.0 >= 10 && a.2 <= 21, "{a:?}");
        assert!(b.0 >= 10 && b.2 <= 21, "{b:?}");
    }
}

/// Messages per committed batch of `batch` records, heartbeats excluded: `(append +
/// append-response messages, every non-heartbeat message)` per batch. `gap` units pass between
/// batches: `None` = wait until every replica applied the batch before proposing the next
/// (isolated batches), `Some(g)` = a steady stream, one batch every `g` units.
fn messages_per_batch(n: u64, batch: usize, skip_bcast_commit: bool, gap: Option<u64>) -> (f64, f64) {
    let mut c = Cluster::build(n, 3, None, |cfg| cfg.skip_bcast_commit = skip_bcast_commit);
    let leader = c.elect(100 * TICK);
    c.run(3 * TICK);
    let rounds = 40;
    let types = [MessageType::MsgAppend, MessageType::MsgAppendResponse];
    let hb = |c: &Cluster| c.sent_of(MessageType::MsgHeartbeat) + c.sent_of(MessageType::MsgHeartbeatResponse);
    let appends_before: u64 = types.iter().map(|&t| c.sent_of(t)).sum();
    let (sent_before, hb_before) = (c.sent, hb(&c));
    let start = c.reference.len();
    for _ in 0..rounds {
        let target = c.reference.len() + batch;
        c.propose_batch(leader, batch).expect("leader");
        match gap {
            None => {
                c.run_until(10 * TICK, |c| c.all_applied_equal() && c.reference.len() == target).expect("applied");
            }
            Some(g) => c.run(g),
        }
    }
    let total = start + rounds * batch;
    c.run_until(10 * TICK, |c| c.all_applied_equal() && c.reference.len() == total).expect("all applied");
    let appends: u64 = types.iter().map(|&t| c.sent_of(t)).sum::<u64>() - appends_before;
    let all = c.sent - sent_before - (hb(&c) - hb_before);
    (appends as f64 / rounds as f64, all as f64 / rounds as f64)
}

#[test]
fn messages_per_committed_batch() {
    for n in [3u64, 5] {
        for skip in [false, true] {
            for (label, gap) in [("isolated", None), ("stream every 2 units", Some(2))] {
                for batch in [1, 10] {
                    let (appends, all) = messages_per_batch(n, batch, skip, gap);
                    println!(
                        "n={n} skip_bcast_commit={skip:5} {label:>20}, {batch:2} records/batch: {appends:4.1} append+response messages per batch ({all:.1} non-heartbeat)"
                    );
                    // Records proposed together go out as one append per follower and one
                    // response each (batch_append), plus, without skip, one commit-announcing
                    // append and its response. A heartbeat response that arrives while an
                    // acknowledgement is in flight makes the leader send one more (empty)
                    // append: hence the slack.
                    let floor = 2.0 * (n - 1) as f64;
                    assert!(appends >= floor - 0.01, "n={n} skip={skip} batch={batch}: {appends}");
                    assert!(appends <= 3.0 * floor, "n={n} skip={skip} batch={batch}: {appends}");
                    assert_eq!(appends, all, "only appends and their responses besides heartbeats");
                }
            }
        }
    }
}
