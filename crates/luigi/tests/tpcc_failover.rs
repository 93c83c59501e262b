//! Real-process fault test of TPC-C: 2 shards x 3 replicas on loopback hosting 2 warehouses
//! (a small scale), the standard mix with more remote lines and payments than the spec (so
//! cross-shard transactions are common), `kill -9` of shard 0's leader under load and its
//! restart from its data directory. At the end: every transaction had a definite answer (none
//! unknown), transactions committed after the kill and after the restart, and the twelve
//! consistency conditions of clause 3.3.2 hold, read by `luigi check tpcc` (one transaction
//! over every shard) as a user would.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luigi_bench::client::{TxnClient, TxnStatus};
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_workloads::tpcc::{Mix, TpccConfig, TpccLoad, TpccWorkload};
use luigi_workloads::Workload;

use common::{latest_leader, scratch, start_all, start_durable as start, three_replica_cluster_with};

const WORKERS: u64 = 6;
const WAREHOUSES: u32 = 2;
const SCALE: f64 = 0.02;

/// A business transaction that ended, with its final status.
#[derive(Clone, Copy)]
struct Ended {
    at: Instant,
    status: TxnStatus,
}

#[test]
fn tpcc_survives_a_leader_kill_with_every_condition_holding() {
    let dir = scratch("tpcc-failover");
    let data = dir.join("data");
    let top = format!("net = \"none\"\n[workload]\nkind = \"tpcc\"\nwarehouses = {WAREHOUSES}\nscale = {SCALE}\n");
    let (config_path, ports) = three_replica_cluster_with(&dir, 2, &top, "snapshot_entries = 1500\n");
    let logs = dir.join("servers.log");
    let mut servers = start_all(&config_path, &data, &ports, &logs);
    let config = ClusterConfig::load(&config_path).unwrap();
    let tpcc = TpccConfig { warehouses: WAREHOUSES, scale: SCALE, ..TpccConfig::default() };
    let load = TpccLoad { mix: Mix::Standard, remote_item_pct: 10.0, remote_payment_pct: 30.0 };
    let workload = Arc::new(TpccWorkload::new(tpcc, load, 2).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = rt.block_on(Client::connect(&config, 601)).unwrap();

    // Counts per final status, and when the last commit came.
    let outcomes: Arc<Mutex<Vec<Ended>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (client, outcomes, stop, workload) = (client.clone(), outcomes.clone(), stop.clone(), workload.clone());
        workers.push(rt.spawn(async move { business_transactions(w, &client, &workload, &outcomes, &stop).await }));
    }

    let committed_after =
        |t: Instant| outcomes.lock().unwrap().iter().filter(|e| e.at > t && e.status == TxnStatus::Committed).count();
    let started = Instant::now();
    while committed_after(started) < 50 {
        assert!(started.elapsed() < Duration::from_secs(60), "the cluster did not commit 50 transactions in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let leader = latest_leader(&logs, 0).expect("shard 0 has a leader") as usize;
    let killed_at = Instant::now();
    servers[leader].take().unwrap().kill9();
    std::thread::sleep(Duration::from_secs(4));
    let restarted_at = Instant::now();
    servers[leader] = Some(start(&config_path, &data, &format!("s0r{leader}"), ports[0][leader], &logs));
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        rt.block_on(w).unwrap();
    }

    let outcomes = outcomes.lock().unwrap().clone();
    let count = |s: TxnStatus| outcomes.iter().filter(|e| e.status == s).count();
    eprintln!(
        "tpcc failover: {} committed, {} rolled back, {} aborted, {} rejected, {} unknown; {} committed after the kill, \
         {} after the restart; servers' log: {}",
        count(TxnStatus::Committed),
        count(TxnStatus::RolledBack),
        count(TxnStatus::Aborted),
        count(TxnStatus::Rejected),
        count(TxnStatus::Unknown),
        committed_after(killed_at),
        committed_after(restarted_at),
        logs.display()
    );
    assert_eq!(count(TxnStatus::Unknown), 0, "every transaction has a definite answer");
    assert_eq!(count(TxnStatus::Aborted), 0, "no TPC-C procedure fails (rollbacks are the 1 % on purpose)");
    assert!(committed_after(killed_at) > 0, "nothing committed after the kill");
    assert!(committed_after(restarted_at) > 0, "nothing committed after the restart");

    twelve_conditions_hold(&config_path);
}

/// Worker `w`'s business transactions (each step after a committed one) until `stop`, each
/// noted in `outcomes` when it ends.
async fn business_transactions(
    w: u64,
    client: &Client,
    workload: &TpccWorkload,
    outcomes: &Mutex<Vec<Ended>>,
    stop: &AtomicBool,
) {
    let mut generator = workload.generator(0x7e57 + w);
    while !stop.load(Ordering::Relaxed) {
        let mut spec = generator.next_txn().unwrap();
        let status = loop {
            let done = client.submit(spec.clone()).await.unwrap();
            if done.status != TxnStatus::Committed {
                break done.status;
            }
            match generator.next_step(&spec, &done.outputs).unwrap() {
                Some(next) => spec = next,
                None => break TxnStatus::Committed,
            }
        };
        outcomes.lock().unwrap().push(Ended { at: Instant::now(), status });
    }
}

/// The twelve conditions of clause 3.3.2, as a user checks them (`luigi check tpcc`).
fn twelve_conditions_hold(config_path: &std::path::Path) {
    let check = Command::new(env!("CARGO_BIN_EXE_luigi"))
        .args(["check", "tpcc", "--cluster"])
        .arg(config_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "luigi check tpcc failed");
    assert!(stdout.contains("12 of 12 conditions hold"), "{stdout}");
}
