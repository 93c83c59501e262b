//! Real-process fault test of the baselines (docs/BASELINES.md): 2 shards x 3 replicas on
//! loopback under a bank-transfer load; `kill -9` the leader of shard 0 (the coordinator of
//! every transfer whose first participant it is, and a participant of others), restart it
//! from its data directory later, keep the load running; then check that every transfer got a
//! definite answer and that nothing answered was lost or applied twice. Rule B8 (a new leader
//! re-locks and decides the prepared pieces it finds) and B6/B7 (resolution after a lost
//! coordinator) are what keeps it so.
//!
//! For `occ` and `2pl` a transfer's effect is all or nothing, so every balance is the sum of
//! the committed transfers. `direct` has no atomicity: each shard's piece stands alone, so
//! every balance is the sum of the pieces answered as done on its shard.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_txn::types::ShardId;
use luigi_workloads::procedures::{account_key, TransferArgs};

use common::{read_balances, scratch, start_all, start_durable as start, three_replica_cluster, transfer};

const ACCOUNTS: u64 = 16;
const WORKERS: u64 = 8;

/// Worker `w`'s closed loop of transfers until `stop`: what was answered goes into `done`
/// (with the shards whose piece was done); the unknown outcomes are returned.
async fn transfers(
    w: u64,
    client: &Client,
    done: &Mutex<Vec<Done>>,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<TxnOutcome> {
    let (mut n, mut unknown) = (0u64, Vec::new());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let from = (w * 7 + n * 3) % ACCOUNTS;
        let to = (from + 1 + (n * 5 + w) % (ACCOUNTS - 1)) % ACCOUNTS;
        let args = TransferArgs { from, to, amount: (n % 9 + 1) as i64 };
        let outcome = transfer(client, args).await;
        if let TxnOutcome::Ordered { results, .. } = &outcome {
            let shards_done = results.iter().filter(|(_, r)| r.is_ok()).map(|(s, _)| *s).collect();
            done.lock().unwrap().push(Done { at: Instant::now(), args, shards_done });
        }
        if matches!(outcome, TxnOutcome::Unknown(_)) {
            unknown.push(outcome);
        }
    }
    unknown
}

/// A transfer and the shards whose piece was answered done.
#[derive(Clone)]
struct Done {
    at: Instant,
    args: TransferArgs,
    shards_done: Vec<ShardId>,
}

/// Kills shard 0's first leader under a transfer load on a `protocol` cluster and restarts
/// it: nothing ends unknown, transfers commit after the kill and after the restart, and the
/// balances are those of the transfers answered done.
fn run(protocol: &str) {
    let dir = scratch(&format!("baseline-failover-{protocol}"));
    let data = dir.join("data");
    let extra = format!("kind = \"{protocol}\"\nsnapshot_entries = 2000\n");
    let (config_path, ports) = three_replica_cluster(&dir, 2, "none", &extra);
    let logs = dir.join("servers.log");
    let mut servers = start_all(&config_path, &data, &ports, &logs);
    let config = ClusterConfig::load(&config_path).unwrap();
    assert_eq!(config.protocol().name(), protocol);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = rt.block_on(Client::connect(&config, 601)).unwrap();
    // Warm up: until both groups have elected their leaders, a transfer may abort (its
    // coordinator's round timed out waiting for the other shard); it is retried.
    let ready_by = Instant::now() + Duration::from_secs(30);
    loop {
        let first = rt.block_on(transfer(&client, TransferArgs { from: 0, to: 1, amount: 0 }));
        if first.is_committed() {
            break;
        }
        assert!(Instant::now() < ready_by, "{protocol}: the cluster never committed a first transfer: {first:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let done: Arc<Mutex<Vec<Done>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (client, done, stop) = (client.clone(), done.clone(), stop.clone());
        workers.push(rt.spawn(async move { transfers(w, &client, &done, &stop).await }));
    }
    std::thread::sleep(Duration::from_secs(3));
    let killed_at = Instant::now();
    servers[0].take().unwrap().kill9();
    std::thread::sleep(Duration::from_secs(4));
    let restarted_at = Instant::now();
    servers[0] = Some(start(&config_path, &data, "s0r0", ports[0][0], &logs));
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut unknown = Vec::new();
    for w in workers {
        unknown.extend(rt.block_on(w).unwrap());
    }
    assert!(unknown.is_empty(), "{protocol}: transfers ended with an unknown outcome: {unknown:?}");

    let done = done.lock().unwrap().clone();
    let complete = |d: &&Done| d.shards_done.len() == participants(&d.args).len();
    let committed_after_kill = done.iter().filter(complete).filter(|d| d.at > killed_at).count();
    let committed_after_restart = done.iter().filter(complete).filter(|d| d.at > restarted_at).count();
    assert!(committed_after_kill > 0, "{protocol}: nothing committed after the kill");
    assert!(committed_after_restart > 0, "{protocol}: nothing committed after the restart");
    let shard_of = HashPartitioner::new(2);
    let mut expected = vec![0i64; ACCOUNTS as usize];
    for d in &done {
        let all_or_nothing = protocol != "direct";
        if all_or_nothing && !complete(&d) {
            // Not committed: it must have left no trace. (A piece answered done with another
            // piece failed would break atomicity: the balances below would show it.)
            continue;
        }
        for (account, delta) in [(d.args.from, -d.args.amount), (d.args.to, d.args.amount)] {
            if d.shards_done.contains(&shard_of.shard_of(&account_key(account))) {
                expected[account as usize] += delta;
            }
        }
    }
    let read = read_balances(&rt, &client, (0..ACCOUNTS).step_by(2).map(|a| (a, a + 1)));
    let actual: Vec<i64> = (0..ACCOUNTS).map(|a| *read.get(&a).expect("every account read")).collect();
    assert_eq!(actual, expected, "{protocol}: balances differ from the answered transfers: lost or doubled");
    let aborted = done.iter().filter(|d| !complete(d)).count();
    eprintln!(
        "{protocol} failover: {} transfers answered ({} committed, {aborted} aborted or failed), {committed_after_kill} \
         committed after the kill, {committed_after_restart} after the restart; servers' log: {}",
        done.len(),
        done.len() - aborted,
        logs.display()
    );
}

fn participants(args: &TransferArgs) -> Vec<ShardId> {
    let shard_of = HashPartitioner::new(2);
    let mut s: Vec<ShardId> = [args.from, args.to].iter().map(|a| shard_of.shard_of(&account_key(*a))).collect();
    s.sort_unstable();
    s.dedup();
    s
}

#[test]
fn occ_loses_and_doubles_nothing_when_a_leader_is_killed() {
    run("occ");
}

#[test]
fn two_phase_locking_loses_and_doubles_nothing_when_a_leader_is_killed() {
    run("2pl");
}

#[test]
fn direct_loses_and_doubles_no_answered_piece_when_a_leader_is_killed() {
    run("direct");
}
