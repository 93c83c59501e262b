//! Process-level tests: real `luigi` server processes on loopback.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, ServerProc};

use luigi_bench::report::read_json;
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_workloads::procedures::{micro_key, Micro, MicroOp, MicroOutput};

const EXE: &str = env!("CARGO_BIN_EXE_luigi");

fn start_server(config: &Path, node: &str, port: u16) -> ServerProc {
    // The log goes next to the cluster file (not to ./luigi-data, the default).
    let data = config.parent().unwrap().join("data");
    let child = Command::new(EXE)
        .args(["server", "--exit-on-stdin-eof", "--node", node, "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    ServerProc(child)
}

fn one_shard_config(dir: &Path, net: &str) -> (PathBuf, u16) {
    let port = free_port();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, format!("net = \"{net}\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n")).unwrap();
    (path, port)
}

#[test]
fn bench_micro_runs_a_real_cluster_and_writes_results() {
    let dir = scratch("bench");
    let json = dir.join("r.json");
    let out = Command::new(EXE)
        .args(["bench", "micro", "--duration", "1.5", "--warmup", "0.5", "--threads", "2"])
        .args(["--in-flight", "20", "--net", "same-region", "--keys", "1000", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("tps") && stdout.contains("same-region"), "table printed: {stdout}");
    let results = read_json(&json).unwrap();
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert_eq!((r.protocol.as_str(), r.workload.as_str(), r.shards, r.replicas), ("luigi", "micro", 1, 1));
    // One replica logs through Raft like several: the default durability applies.
    assert_eq!(r.durability, "fsync");
    assert_eq!((r.threads, r.in_flight, r.net.as_str()), (2, 20, "same-region"));
    assert!(r.committed > 100, "committed {}", r.committed);
    assert_eq!((r.rejected, r.unknown), (0, 0));
    // Every transaction crosses the emulated WAN twice (>= 1.5 ms each way).
    assert!(r.latency_us.p50 >= 3_000, "p50 {} µs is below two one-way delays", r.latency_us.p50);
    assert!(r.latency_us.p50 <= r.latency_us.p99);
    assert!((r.throughput_tps - r.committed as f64 / r.duration_s).abs() < 1.0);
}

#[test]
fn cross_shard_bench_runs_two_server_processes() {
    let dir = scratch("cross");
    let json = dir.join("r.json");
    let out = Command::new(EXE)
        .args(["bench", "micro", "--shards", "2", "--cross-shard", "100", "--duration", "1.5", "--warmup", "0.5"])
        .args(["--threads", "2", "--in-flight", "20", "--net", "same-region", "--keys", "2000", "--no-progress"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let r = &read_json(&json).unwrap()[0];
    assert_eq!((r.shards, r.replicas), (2, 1));
    assert!(r.committed > 100, "committed {}", r.committed);
    assert_eq!((r.rejected, r.unknown), (0, 0));
    assert_eq!(
        r.params["cross_shard_committed"],
        serde_json::json!(r.committed),
        "every transaction spans both shards"
    );
    // Client to leaders, leader to leader, leader to client: three hops of >= 1.5 ms.
    assert!(r.latency_us.p50 >= 4_500, "p50 {} µs is below three one-way delays", r.latency_us.p50);
    assert!((0.0..=1.0).contains(&r.second_round_rate));
}

#[test]
fn three_replica_shard_replicates_through_raft() {
    let dir = scratch("raft");
    let json = dir.join("r.json");
    let out = Command::new(EXE)
        .args(["bench", "micro", "--replicas", "3", "--duration", "1.5", "--warmup", "1", "--threads", "1"])
        .args(["--in-flight", "20", "--net", "same-region", "--durability", "fsync", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let r = &read_json(&json).unwrap()[0];
    assert_eq!((r.shards, r.replicas, r.durability.as_str()), (1, 3, "fsync"));
    assert!(r.committed > 100, "committed {}", r.committed);
    assert_eq!((r.rejected, r.unknown), (0, 0));
    // Client to leader, a replication round trip to a follower and back, leader to client.
    assert!(r.latency_us.p50 >= 6_000, "p50 {} µs is below four one-way delays", r.latency_us.p50);
}

#[test]
fn bench_ycsb_reports_every_operation_type_and_runs_an_open_loop() {
    let dir = scratch("ycsb");
    let json = dir.join("e.json");
    // Workload E on two shards: scans over both, inserts of new records.
    let out = Command::new(EXE)
        .args(["bench", "ycsb", "--workload", "e", "--shards", "2", "--records", "300", "--duration", "1.5"])
        .args(["--warmup", "0.5", "--threads", "2", "--in-flight", "8", "--net", "none", "--durability", "none"])
        .args(["--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ycsb.scan") && stdout.contains("p99.9 ms"), "per-type table printed: {stdout}");
    let r = &read_json(&json).unwrap()[0];
    assert_eq!((r.workload.as_str(), r.shards), ("ycsb-e", 2));
    assert_eq!((r.rejected, r.unknown), (0, 0));
    let kinds: Vec<&str> = r.by_kind.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["ycsb.insert", "ycsb.scan"]);
    let (scans, inserts) = (&r.by_kind["ycsb.scan"], &r.by_kind["ycsb.insert"]);
    assert!(scans.committed > 10 && inserts.committed > 0, "{scans:?} {inserts:?}");
    assert_eq!(scans.committed + inserts.committed, r.committed);
    assert_eq!(scans.cross_shard, scans.committed, "a scan reads every shard");
    assert_eq!(r.params["dist"], serde_json::json!("zipfian"));

    // Open loop: 200 tx/s over 2 threads for a 1.5 s measured interval intend 300
    // transactions; each is measured (committed, or failed) or counted as never started.
    let json = dir.join("open.json");
    let out = Command::new(EXE)
        .args(["bench", "ycsb", "--workload", "k2-50-50", "--dist", "uniform", "--rate", "200", "--duration", "1.5"])
        .args(["--warmup", "0.5", "--threads", "2", "--in-flight", "50", "--net", "none", "--durability", "none"])
        .args(["--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let r = &read_json(&json).unwrap()[0];
    assert_eq!(r.params["rate_tps"], serde_json::json!(200.0));
    let unstarted = r.params["open_loop_unstarted"].as_u64().unwrap();
    assert!(r.params["open_loop_delayed"].is_u64());
    let intended = r.committed + r.aborted + r.rolled_back + r.rejected + r.unknown + unstarted;
    assert!((299..=301).contains(&intended), "{intended} of the 300 intended accounted for: {r:?}");
    assert_eq!(r.by_kind.keys().map(String::as_str).collect::<Vec<_>>(), ["ycsb.read", "ycsb.update"]);
}

/// Reads what the server sends (its challenge comes first) until it closes the connection;
/// false if it is still open after a few reads.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    for _ in 0..8 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
    false
}

#[test]
fn client_library_reads_its_writes_and_server_survives_garbage() {
    let dir = scratch("garbage");
    let (config_path, port) = one_shard_config(&dir, "none");
    let _server = start_server(&config_path, "s0r0", port);

    // A malformed frame (length prefix claims 1 GiB) gets that connection closed...
    let mut bad = TcpStream::connect(("127.0.0.1", port)).unwrap();
    bad.write_all(&[0x40, 0, 0, 0, 1, 2, 3]).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(closed_by_server(&mut bad), "server closes a connection sending garbage");
    // ... and so does a well-framed payload that is not a message.
    let mut bad2 = TcpStream::connect(("127.0.0.1", port)).unwrap();
    bad2.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
    bad2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(closed_by_server(&mut bad2));

    // ... while the server keeps serving everyone else.
    let config = ClusterConfig::load(&config_path).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = Client::connect(&config, 77).await.unwrap();
        let write = vec![MicroOp { key: 5, write: Some(99) }];
        let done = client
            .execute(Micro::NAME, postcard::to_stdvec(&write).unwrap(), vec![], vec![micro_key(5)])
            .await
            .unwrap();
        assert!(done.outcome.is_committed(), "{:?}", done.outcome);
        let read = vec![MicroOp { key: 5, write: None }];
        let done = client
            .execute(Micro::NAME, postcard::to_stdvec(&read).unwrap(), vec![micro_key(5)], vec![])
            .await
            .unwrap();
        let luigi_txn::client_core::TxnOutcome::Ordered { results, .. } = done.outcome else {
            panic!("read not ordered: {:?}", done.outcome)
        };
        let out: MicroOutput = postcard::from_bytes(results[0].1.as_ref().unwrap()).unwrap();
        assert_eq!(out, vec![(5, Some(99))]);
        // An unknown procedure is an error answer, not a hang or a crash.
        let done = client.execute("no.such.proc", vec![], vec![], vec![micro_key(1)]).await.unwrap();
        assert!(
            matches!(&done.outcome, luigi_txn::client_core::TxnOutcome::Rejected(why) if why.contains("unknown procedure")),
            "{:?}",
            done.outcome
        );
    });
}

#[test]
fn bad_config_and_busy_port_fail_with_one_clear_line() {
    let dir = scratch("badcfg");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "net = \"mars\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let out = Command::new(EXE).args(["server", "--node", "s0r0", "--config"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("field `net`") && err.contains("mars") && err.contains("bad.toml"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let out = Command::new(EXE).args(["server", "--node", "s0r0", "--config", "/nonexistent.toml"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read cluster file /nonexistent.toml"));

    let (config_path, port) = one_shard_config(&dir, "none");
    let _holder = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let out = Command::new(EXE).args(["server", "--node", "s0r0", "--config"]).arg(&config_path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on 127.0.0.1:") && err.contains("s0r0"), "{err}");

    let out = Command::new(EXE).args(["server", "--node", "s5r0", "--config"]).arg(&config_path).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("node s5r0 is not in the cluster file"));
}

#[test]
fn unreachable_cluster_is_a_clear_error() {
    let dir = scratch("unreach");
    let (config_path, _port) = one_shard_config(&dir, "none");
    let out = Command::new(EXE)
        .args(["bench", "micro", "--duration", "1", "--warmup", "0", "--no-progress", "--cluster"])
        .arg(&config_path)
        .arg("--json")
        .arg(dir.join("r.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach any replica of shard 0 (127.0.0.1:"), "{err}");
}
