//! The operator and data commands against real server processes on loopback: 2 shards x 3
//! replicas; `luigi put/get/scan/txn` (text and JSON), `luigi status` with every shard led,
//! then with a shard's leader and one follower killed (down replicas, no leader, non-zero
//! exit), and the exit statuses of a missing key, an unknown outcome and an unreachable cluster.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, ServerProc};
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_workloads::procedures::kv_key;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_luigi");

fn start(config: &Path, data: &Path, node: &str, port: u16, log: &Path) -> ServerProc {
    common::start_server(config, data, node, port, log, "none")
}

fn luigi(config: &Path, args: &[&str]) -> Output {
    Command::new(EXE).args(args).arg("--cluster").arg(config).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must succeed and returns its standard output.
fn ok(config: &Path, args: &[&str]) -> String {
    let o = luigi(config, args);
    assert_eq!(o.status.code(), Some(0), "luigi {args:?}: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn data_commands_and_status_against_a_real_cluster() {
    let dir = scratch("cli");
    let ports: Vec<[u16; 3]> = (0..2).map(|_| [free_port(), free_port(), free_port()]).collect();
    let mut toml = String::from("net = \"none\"\n");
    for p in &ports {
        toml.push_str(&format!(
            "[[shards]]\nreplicas = [\"127.0.0.1:{}\", \"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n",
            p[0], p[1], p[2]
        ));
    }
    let config = dir.join("cluster.toml");
    std::fs::write(&config, toml).unwrap();
    // A cluster nobody serves: the client gives up after its connect timeout (5 s), so that
    // command runs in the background meanwhile.
    let dead = dir.join("dead.toml");
    std::fs::write(&dead, format!("[[shards]]\nreplicas = [\"127.0.0.1:{}\"]\n", free_port())).unwrap();
    let unreachable = Command::new(EXE)
        .args(["get", "k", "--cluster"])
        .arg(&dead)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let log = dir.join("servers.log");
    let mut servers: Vec<Vec<Option<ServerProc>>> = Vec::new();
    for (shard, p) in ports.iter().enumerate() {
        let data = dir.join("data");
        servers.push(
            p.iter()
                .enumerate()
                .map(|(r, port)| Some(start(&config, &data, &format!("s{shard}r{r}"), *port, &log)))
                .collect(),
        );
    }

    let leaders = status_with_every_shard_led(&config);
    data_commands(&config);
    // Kill shard 1's leader and one follower: one replica is left, without a majority.
    let follower = (0..3).find(|r| *r != leaders[1]).unwrap();
    servers[1][leaders[1] as usize] = None;
    servers[1][follower as usize] = None;
    status_with_a_shard_without_leader(&config);

    let o = unreachable.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot reach any replica of shard 0"), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
}

/// `luigi status` (JSON and table) once both groups elected a leader that serves and every
/// follower has heard of a commit; returns each shard's leader.
fn status_with_every_shard_led(config: &Path) -> Vec<u64> {
    // A follower learns the commit index with the leader's next append or heartbeat, which
    // can come after the leader serves.
    let deadline = Instant::now() + Duration::from_secs(15);
    let committed_everywhere = |status: &Value| {
        status["replicas"]
            .as_array()
            .is_some_and(|rs| rs.iter().all(|r| r["status"]["commit_index"].as_u64().is_some_and(|c| c >= 1)))
    };
    let status = loop {
        let o = luigi(config, &["status", "--json"]);
        if o.status.success() {
            let status = json(&stdout(&o));
            if committed_everywhere(&status) {
                break status;
            }
        }
        assert!(Instant::now() < deadline, "no leader everywhere: {}{}", stdout(&o), stderr(&o));
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["healthy"], true);
    let leaders: Vec<u64> = (0..2).map(|s| status["shards"][s]["leader"].as_u64().expect("a leader")).collect();
    let replicas = status["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 6);
    for r in replicas {
        let shard = r["shard"].as_u64().unwrap() as usize;
        let leads = r["replica"].as_u64() == Some(leaders[shard]);
        assert_eq!(r["role"], if leads { "leader" } else { "follower" }, "{r}");
        assert!(r["status"]["term"].as_u64().unwrap() >= 1 && r["status"]["commit_index"].as_u64().unwrap() >= 1);
    }
    let table = ok(config, &["status"]);
    assert_eq!(table.lines().filter(|l| l.contains(" up ") && l.contains(" leader ")).count(), 2, "{table}");
    assert_eq!(table.lines().filter(|l| l.contains(" follower ")).count(), 4, "{table}");
    assert!(table.ends_with("cluster ok: 2 of 2 shards with a leader; 6 of 6 replicas up\n"), "{table}");
    leaders
}

/// `luigi put/get/scan/txn` in text and JSON, over keys on both shards, and their exit
/// statuses.
fn data_commands(config: &Path) {
    // The user keys below live on both shards, so the transaction and the scan cross shards.
    let p = HashPartitioner::new(2);
    let shards: Vec<u32> = ["user/1", "user/2", "user/3"].iter().map(|k| p.shard_of(&kv_key(k.as_bytes()))).collect();
    assert!(shards.contains(&0) && shards.contains(&1), "{shards:?}");

    assert_eq!(ok(config, &["put", "user/1", "alice"]), "OK\n");
    assert_eq!(ok(config, &["put", "user/2", "bob"]), "OK\n");
    assert_eq!(ok(config, &["get", "user/1"]), "alice\n");
    let missing = luigi(config, &["get", "user/9"]);
    assert_eq!((missing.status.code(), stdout(&missing).as_str()), (Some(1), ""), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("not found"));
    let txn = ok(config, &["txn", "--put", "user/3=carol", "--get", "user/3", "--delete", "user/2", "--scan", "user/"]);
    assert_eq!(
        txn,
        "put user/3: OK\nget user/3: carol\ndelete user/2: OK\nscan user/: 2 entries\n  user/1\talice\n  user/3\tcarol\n"
    );
    assert_eq!(ok(config, &["scan", "user/"]), "user/1\talice\nuser/3\tcarol\n");
    assert_eq!(ok(config, &["scan", "user/", "--limit", "1"]), "user/1\talice\n");
    let got = json(&ok(config, &["get", "user/3", "--json"]));
    assert_eq!((got["found"].clone(), got["value"].clone()), (Value::from(true), Value::from("carol")));
    let txn = json(&ok(config, &["txn", "--get", "user/2", "--put", "user/2=bob2", "--get", "user/2", "--json"]));
    assert_eq!(txn["results"][0]["found"], false);
    assert_eq!(txn["results"][2]["value"], "bob2");
    let bad = luigi(config, &["put", "", "x"]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(stderr(&bad).trim().lines().count(), 1, "{}", stderr(&bad));
}

/// `luigi status` with shard 1's leader and one follower down: the down replicas, no
/// leader, a non-zero exit; and a transaction there ends unknown.
fn status_with_a_shard_without_leader(config: &Path) {
    let o = luigi(config, &["status"]);
    let table = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{table}");
    let down: Vec<&str> = table.lines().filter(|l| l.contains("down (connection refused)")).collect();
    assert_eq!(down.len(), 2, "{table}");
    assert!(down.iter().all(|l| l.starts_with("1 ")), "{table}");
    assert_eq!(table.lines().filter(|l| l.contains(" leader ")).count(), 1, "shard 0 still led: {table}");
    let summary = stderr(&o);
    assert!(summary.contains("cluster degraded: shard 1 without a leader; 4 of 6 replicas up"), "{summary}");
    assert_eq!(summary.trim().lines().count(), 1, "{summary}");
    let status = json(&stdout(&luigi(config, &["status", "--json"])));
    assert_eq!((status["healthy"].clone(), status["shards"][1]["leader"].clone()), (Value::from(false), Value::Null));
    assert_eq!(status["replicas"].as_array().unwrap().iter().filter(|r| r["up"] == false).count(), 2);

    // Without a leader for shard 1 no transaction completes: the outcome is unknown.
    let o = luigi(config, &["put", "user/4", "dave", "--timeout", "1.5"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("outcome unknown") && stderr(&o).contains("may or may not have executed"));
}
