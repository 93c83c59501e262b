//! Real-process fault test: 2 shards x 3 replicas on loopback under a bank-transfer load;
//! `kill -9` the leader of shard 0, restart it from its data directory (snapshot + log) later,
//! then kill the next leader of shard 0 and restart it too, keeping the load running; then
//! check that nothing answered was lost or applied twice, and report the longest interval
//! without a commit (the failover pause). Followers snapshot every 2000 records here and
//! offer their snapshots to their leaders, which compact behind them, so restarts load
//! snapshots and lagging replicas may be sent one.
//!
//! Why transfers: every account's final balance is a sum over the committed transfers that
//! touch it, in any order. A lost answered transfer or one applied twice changes some balance.
//! Beside them, micro transactions read and write a small key space with unique values, and
//! every transaction of the run is recorded and checked for strict serializability by the
//! simulator's history checker (`common::history`).
//!
//! The same runs again with the six servers' clocks skewed (DESIGN.md rule 22, issue 26):
//! ±50 ms and ±500 ms (the default clock bound) around the machine's, alternating by
//! replica, so every failover hands a shard to a leader whose clock differs from its
//! predecessor's.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_workloads::procedures::{account_key, MicroOp, TransferArgs};

use common::history::Recorder;
use common::load::{assert_no_unknown, expected_balances, Done, TransferLoad, ACCOUNTS};
use common::{latest_leader, scratch, start_server_skewed, three_replica_cluster};

const WORKERS: u64 = 8;
/// Workers running micro transactions, and the keys they share.
const MICRO_WORKERS: u64 = 4;
const MICRO_KEYS: u64 = 24;

#[test]
fn killing_a_shard_leader_under_load_loses_and_doubles_nothing() {
    failover_under_load("failover", 0);
}

#[test]
fn with_server_clocks_50_ms_apart_a_failover_loses_and_doubles_nothing() {
    failover_under_load("failover-skew-50ms", 50_000);
}

#[test]
fn with_server_clocks_at_the_bound_a_failover_loses_and_doubles_nothing() {
    failover_under_load("failover-skew-500ms", 500_000);
}

/// The clock offset of replica `replica` of `shard` in a run skewed by `skew_us`: +, -, +
/// by replica, shard 1 the other way round.
fn offset(shard: u32, replica: u32, skew_us: i64) -> i64 {
    if (shard + replica).is_multiple_of(2) {
        skew_us
    } else {
        -skew_us
    }
}

/// Kills shard 0's leader under load, restarts it, kills the next one and restarts it, with
/// the servers' clocks `skew_us` apart around the machine's (see [`offset`]), and checks
/// the balances against the committed transfers.
fn failover_under_load(name: &str, skew_us: i64) {
    let dir = scratch(name);
    let data = dir.join("data");
    let (config_path, ports) =
        three_replica_cluster(&dir, 2, "none", "snapshot_entries = 2000\nread_only_path = true\n");
    let logs = dir.join("servers.log");
    let start = |node: &str, port: u16| {
        let (shard, replica) = (node[1..2].parse().unwrap(), node[3..4].parse().unwrap());
        start_server_skewed(&config_path, &data, node, port, &logs, "fsync", offset(shard, replica, skew_us))
    };
    let mut servers: Vec<Option<common::ServerProc>> = Vec::new();
    for (shard, p) in ports.iter().enumerate() {
        for (replica, port) in p.iter().enumerate() {
            servers.push(Some(start(&format!("s{shard}r{replica}"), *port)));
        }
    }
    let config = ClusterConfig::load(&config_path).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = rt.block_on(Client::connect(&config, 501)).unwrap();
    let recorder = Recorder::new(client, 2);

    // Warm up: the first transfer waits for both groups to elect their leaders.
    let first = rt.block_on(recorder.transfer(TransferArgs { from: 0, to: 1, amount: 0 }));
    assert!(first.is_committed(), "{first:?}");

    let load = TransferLoad::start(&rt, WORKERS, {
        let recorder = recorder.clone();
        move |args| {
            let recorder = recorder.clone();
            async move { recorder.transfer(args).await }
        }
    });
    let micro_stop = Arc::new(AtomicBool::new(false));
    let micro_workers: Vec<_> = (0..MICRO_WORKERS)
        .map(|w| {
            let (recorder, stop) = (recorder.clone(), micro_stop.clone());
            rt.spawn(async move { micro_load(&recorder, w, &stop).await })
        })
        .collect();

    let start_at = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let before_kill = load.count();
    assert!(before_kill > 0, "no transfer committed before the kill");
    let mut times = two_failovers(&mut servers, &start, &ports[0], &logs, start_at);
    let (done, mut not_committed) = load.stop(&rt);
    micro_stop.store(true, Ordering::Relaxed);
    for w in micro_workers {
        not_committed.extend(rt.block_on(w).unwrap());
    }
    times.ended_at = Instant::now();
    let Timeline { restarted_at, killed_at, ended_at, .. } = times;

    // Every transaction got a definite answer: no failures with unknown effects.
    assert_no_unknown(&not_committed);
    let after_restart = done.iter().filter(|d| d.at > restarted_at).count();
    assert!(done.iter().any(|d| d.at > killed_at), "no transfer committed after the leader was killed");
    assert!(after_restart > 0, "no transfer committed after the restart");

    check_balances_and_history(&rt, &recorder, &done, skew_us);
    // Every replica compacted its log behind a snapshot, leaders included (s1r0 led all along:
    // it compacts behind the snapshots its followers offer it). Not with skewed clocks: every
    // commit waits for the watermark of the shard whose clock is behind, and too few commit
    // for a snapshot.
    if skew_us == 0 {
        check_snapshots(&data);
    }
    report_pause(&done, &times);
    eprintln!(
        "failover (server clocks ±{} ms): {} transfers committed in {:.1} s ({} before the kill, {} after the \
         restart), {} not committed (rejected or aborted); servers' log: {}",
        skew_us / 1000,
        done.len(),
        (ended_at - start_at).as_secs_f64(),
        before_kill,
        after_restart,
        not_committed.len(),
        logs.display()
    );
}

/// Reads every account (a zero transfer returns both balances) and compares with the sum of
/// the committed transfers `done`; then checks the whole history.
fn check_balances_and_history(rt: &tokio::runtime::Runtime, recorder: &Recorder, done: &[Done], skew_us: i64) {
    let expected = expected_balances(done);
    let stores = rt.block_on(recorder.read_stores(ACCOUNTS, MICRO_KEYS));
    let shard_of = HashPartitioner::new(2);
    let balance = |a: u64| {
        let value =
            stores[shard_of.shard_of(&account_key(a)) as usize].get(&account_key(a)).expect("every account read");
        i64::from_le_bytes(value.as_slice().try_into().unwrap())
    };
    let actual: Vec<i64> = (0..ACCOUNTS).map(balance).collect();
    assert_eq!(actual, expected, "balances differ from the committed transfers: something was lost or doubled");
    let summary = recorder.check(&stores);
    eprintln!(
        "failover (server clocks ±{} ms): history checker: {} transactions ordered ({} committed, {} of them read \
         at a snapshot, {} rejected), {} conflict edges, strictly serializable",
        skew_us / 1000,
        summary.ordered,
        summary.committed,
        recorder.read_only_answers(),
        summary.rejected,
        summary.conflict_edges
    );
    // The cluster runs the read-only path: the micro load's reads took it (rule 23).
    assert!(recorder.read_only_answers() > 0, "no read-only transaction was read at a snapshot");
}

/// Every replica of both shards holds a snapshot in its directory under `data`.
fn check_snapshots(data: &std::path::Path) {
    for shard in 0..2 {
        for replica in 0..3 {
            let dir = data.join(format!("s{shard}r{replica}"));
            let snapshots = std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("snapshot-"))
                .count();
            assert!(snapshots > 0, "no snapshot in {}", dir.display());
        }
    }
}

/// Kills shard 0's leader (`s0r0`, replica `servers[0]`), restarts it after 3 s, then kills
/// whoever leads shard 0 two seconds later and brings it back after 2 s (`start` starts a
/// server, `ports` are shard 0's); returns when (the run started at `start_at`).
fn two_failovers(
    servers: &mut [Option<common::ServerProc>],
    start: &dyn Fn(&str, u16) -> common::ServerProc,
    ports: &[u16; 3],
    logs: &std::path::Path,
    start_at: Instant,
) -> Timeline {
    let killed_at = Instant::now();
    servers[0].take().unwrap().kill9();
    std::thread::sleep(Duration::from_secs(3));
    let restarted_at = Instant::now();
    servers[0] = Some(start("s0r0", ports[0]));
    std::thread::sleep(Duration::from_secs(2));
    // Kill whoever leads shard 0 now, and bring it back a little later.
    let second = latest_leader(logs, 0).expect("shard 0 has a leader") as usize;
    let second_killed_at = Instant::now();
    servers[second].take().unwrap().kill9();
    std::thread::sleep(Duration::from_secs(2));
    servers[second] = Some(start(&format!("s0r{second}"), ports[second]));
    std::thread::sleep(Duration::from_secs(2));
    Timeline { start_at, killed_at, restarted_at, second_killed_at, ended_at: Instant::now(), second }
}

/// When the run's faults happened.
struct Timeline {
    start_at: Instant,
    killed_at: Instant,
    restarted_at: Instant,
    second_killed_at: Instant,
    ended_at: Instant,
    /// The replica of shard 0 killed second.
    second: usize,
}

/// The longest interval without a commit from the first kill on, and when it began.
fn longest_gap(times: &mut [Instant], killed_at: Instant) -> (Duration, Duration) {
    times.sort();
    let mut longest = times.first().map_or(Duration::ZERO, |t| *t - killed_at);
    let mut from = Duration::ZERO; // after the kill
    for w in times.windows(2) {
        if w[1] - w[0] > longest {
            longest = w[1] - w[0];
            from = w[0] - killed_at;
        }
    }
    (longest, from)
}

/// Reports the failover pause: the longest interval without a commit from the kill to the
/// end, over all transfers and over those touching shard 0 (the one whose leaders die).
fn report_pause(done: &[Done], t: &Timeline) {
    let shard_of = HashPartitioner::new(2);
    let killed_at = t.killed_at;
    let touches_0 = |d: &Done| [d.args.from, d.args.to].iter().any(|a| shard_of.shard_of(&account_key(*a)) == 0);
    let mut shard0: Vec<Instant> =
        done.iter().filter(|d| touches_0(d)).map(|d| d.at).filter(|t| *t >= killed_at).collect();
    let (longest_0, _) = longest_gap(&mut shard0, killed_at);
    let mut times: Vec<Instant> = done.iter().map(|d| d.at).filter(|t| *t >= killed_at).collect();
    let (longest, longest_from) = longest_gap(&mut times, killed_at);
    eprintln!(
        "failover: the longest interval starts {} ms after the first kill (the restart was {} ms after it, \
         the second kill of s0r{} {} ms after it)",
        longest_from.as_millis(),
        (t.restarted_at - killed_at).as_millis(),
        t.second,
        (t.second_killed_at - killed_at).as_millis()
    );
    let first_after_kill = times.first().map_or(0, |t| (*t - killed_at).as_millis());
    let per_100ms: Vec<usize> = (0..10)
        .map(|i| {
            let lo = killed_at + Duration::from_millis(100 * i);
            times.iter().filter(|t| **t >= lo && **t < lo + Duration::from_millis(100)).count()
        })
        .collect();
    eprintln!(
        "failover: first commit {first_after_kill} ms after the kill; commits per 100 ms after it: {per_100ms:?}"
    );
    eprintln!(
        "failover: {} s run; longest interval without a commit after the kill: {} ms (without a commit touching \
         shard 0: {} ms)",
        (t.ended_at - t.start_at).as_secs_f64(),
        longest.as_millis(),
        longest_0.as_millis()
    );
}

/// One micro worker's closed loop until `stop`: one to three reads and writes of
/// [`MICRO_KEYS`] keys, each written value unique to the run; returns what did not commit.
async fn micro_load(recorder: &Recorder, worker: u64, stop: &AtomicBool) -> Vec<TxnOutcome> {
    let mut n = 0u64;
    let mut other = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let ops: Vec<MicroOp> = (0..1 + n % 3)
            .map(|i| {
                let key = (worker * 5 + n * 7 + i * 11) % MICRO_KEYS;
                let write = (n + i).is_multiple_of(2).then_some((worker + 1) << 40 | n << 4 | i);
                MicroOp { key, write }
            })
            .collect();
        let outcome = recorder.micro(&ops).await;
        if !outcome.is_committed() {
            other.push(outcome);
        }
    }
    other
}
