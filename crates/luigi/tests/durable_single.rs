//! A one-replica shard is a Raft group of one, on the same log as a replicated shard: with
//! `--durability fsync` every acknowledged write survives `kill -9` (SIGKILL, no shutdown
//! path runs), and a restart on the same `--data-dir` loads the latest snapshot and replays
//! the log after it.

mod common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, ServerProc};

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::TxnOutcome;
use luigi_workloads::procedures::{micro_key, Micro, MicroOp, MicroOutput};

const EXE: &str = env!("CARGO_BIN_EXE_luigi");
/// Keys written per phase.
const KEYS: u64 = 300;
/// Concurrent writers.
const WRITERS: u64 = 8;
/// Keys read per transaction.
const READ_BATCH: u64 = 20;

/// A one-shard, one-replica cluster on loopback with its data directory and server log.
struct Single {
    config_path: PathBuf,
    config: ClusterConfig,
    port: u16,
    data: PathBuf,
    log: PathBuf,
}

impl Single {
    fn new(name: &str, snapshot_entries: Option<u64>) -> Self {
        let dir = scratch(name);
        let port = free_port();
        let protocol = snapshot_entries.map_or(String::new(), |n| format!("[protocol]\nsnapshot_entries = {n}\n"));
        let config_path = dir.join("cluster.toml");
        std::fs::write(
            &config_path,
            format!("net = \"none\"\n{protocol}[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n"),
        )
        .unwrap();
        let config = ClusterConfig::load(&config_path).unwrap();
        Single { config_path, config, port, data: dir.join("data"), log: dir.join("server.log") }
    }

    fn start(&self) -> ServerProc {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(EXE)
            .args(["server", "--exit-on-stdin-eof", "--durability", "fsync", "--node", "s0r0", "--config"])
            .arg(&self.config_path)
            .arg("--data-dir")
            .arg(&self.data)
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "server did not start listening; log: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        ServerProc(child)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Snapshot files in the replica's directory.
    fn snapshots(&self) -> usize {
        std::fs::read_dir(self.data.join("s0r0"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("snapshot-"))
            .count()
    }
}

fn kill_9(mut server: ServerProc) {
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Writes `value(k)` to every key in `keys` from concurrent writers and returns once every
/// write is acknowledged as committed.
fn write_all(config: &ClusterConfig, client_id: u64, keys: std::ops::Range<u64>, value: fn(u64) -> u64) {
    let rt = runtime();
    rt.block_on(async {
        let client = Client::connect(config, client_id).await.unwrap();
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let client = client.clone();
            let keys = keys.clone();
            writers.push(tokio::spawn(async move {
                for k in keys.filter(|k| k % WRITERS == w) {
                    let ops = vec![MicroOp { key: k, write: Some(value(k)) }];
                    let args = postcard::to_stdvec(&ops).unwrap();
                    let done = client.execute(Micro::NAME, args, vec![], vec![micro_key(k)]).await.unwrap();
                    assert!(done.outcome.is_committed(), "write of key {k}: {:?}", done.outcome);
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
    });
}

/// Reads every key in `keys` and checks it holds `value(k)`.
fn check_all(config: &ClusterConfig, client_id: u64, keys: std::ops::Range<u64>, value: fn(u64) -> u64) {
    let rt = runtime();
    rt.block_on(async {
        let client = Client::connect(config, client_id).await.unwrap();
        let all: Vec<u64> = keys.collect();
        for batch in all.chunks(READ_BATCH as usize) {
            let ops: Vec<MicroOp> = batch.iter().map(|&key| MicroOp { key, write: None }).collect();
            let reads = batch.iter().map(|&k| micro_key(k)).collect();
            let done = client.execute(Micro::NAME, postcard::to_stdvec(&ops).unwrap(), reads, vec![]).await.unwrap();
            let TxnOutcome::Ordered { results, .. } = done.outcome else { panic!("read failed: {:?}", done.outcome) };
            let out: MicroOutput = postcard::from_bytes(results[0].1.as_ref().unwrap()).unwrap();
            let expected: MicroOutput = batch.iter().map(|&k| (k, Some(value(k)))).collect();
            assert_eq!(out, expected, "acknowledged writes lost or changed across the restart");
        }
    });
}

fn first_value(k: u64) -> u64 {
    k * 1_000 + 7
}

fn second_value(k: u64) -> u64 {
    k * 1_000 + 9
}

/// Waits until the server answers a read (it elects itself and replays its log first);
/// returns how long that took.
fn time_to_serve(config: &ClusterConfig, client_id: u64) -> Duration {
    let started = Instant::now();
    let rt = runtime();
    rt.block_on(async {
        let client = Client::connect(config, client_id).await.unwrap();
        let ops = postcard::to_stdvec(&vec![MicroOp { key: 0, write: None }]).unwrap();
        let done = client.execute(Micro::NAME, ops, vec![micro_key(0)], vec![]).await.unwrap();
        assert!(done.outcome.is_committed(), "{:?}", done.outcome);
    });
    started.elapsed()
}

#[test]
fn acknowledged_writes_survive_kill_9_and_a_restart_from_the_log() {
    let c = Single::new("durable-log", None);
    let server = c.start();
    let first = time_to_serve(&c.config, 1);
    eprintln!("durable_single: fresh one-replica shard answered its first read after {} ms", first.as_millis());
    write_all(&c.config, 2, 0..KEYS, first_value);
    kill_9(server);
    assert_eq!(c.snapshots(), 0, "the default snapshot period is not reached: the restart replays the log alone");

    let started = Instant::now();
    let _server = c.start();
    // A new client id: the restarted leader remembers the old client's answered ids.
    check_all(&c.config, 3, 0..KEYS, first_value);
    eprintln!("durable_single: restarted and read {KEYS} keys back in {} ms", started.elapsed().as_millis());
    assert!(c.log_text().contains("restarting from the log"), "the restart did not recover its log");
}

#[test]
fn a_restart_after_snapshots_loads_the_latest_and_replays_the_rest() {
    // A snapshot every 100 applied records: a few hundred writes take several.
    let c = Single::new("durable-snap", Some(100));
    let server = c.start();
    write_all(&c.config, 1, 0..KEYS, first_value);
    kill_9(server);
    assert!(c.snapshots() > 0, "no snapshot taken; log: {}", c.log_text());

    let server = c.start();
    check_all(&c.config, 2, 0..KEYS, first_value);
    // Overwrite half the keys on top of the snapshot, crash again, and check both halves.
    write_all(&c.config, 3, 0..KEYS / 2, second_value);
    kill_9(server);

    let _server = c.start();
    check_all(&c.config, 4, 0..KEYS / 2, second_value);
    check_all(&c.config, 5, KEYS / 2..KEYS, first_value);
    let log = c.log_text();
    let restarts: Vec<&str> = log.lines().filter(|l| l.contains("restarting from the log")).collect();
    assert_eq!(restarts.len(), 2, "{log}");
    assert!(restarts.iter().all(|l| !l.contains("snapshot=0")), "a restart did not load a snapshot: {restarts:?}");
}
