//! Real processes with wrong clocks (DESIGN.md rule 22, issue 26). A command-line client
//! whose clock runs an hour ahead once froze a shard: its transaction waited for its own
//! timestamp, and after a restart or a failover the new leader admitted nothing below that
//! hour. Now the skewed client is refused with the reason (exit 2), and the shard keeps
//! committing at normal latency after a restart of a 1x1 shard and after a leader kill on
//! 1x3. Each step prints its exit status and latency.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{free_port, latest_leader, scratch, start_all, start_durable, three_replica_cluster_with, EXE};

const HOUR_US: &str = "3600000000";

/// Runs `luigi <args> --cluster <config>` with the clock shifted by `offset_us`, prints
/// what it took, and returns its output.
fn luigi(config: &Path, offset_us: &str, args: &[&str]) -> Output {
    let started = Instant::now();
    let out = Command::new(EXE)
        .args(args)
        .args(["--timeout", "20", "--clock-offset-us", offset_us, "--cluster"])
        .arg(config)
        .output()
        .unwrap();
    println!(
        "luigi {} (clock {offset_us} us): exit {:?} in {} ms; {}{}",
        args.join(" "),
        out.status.code(),
        started.elapsed().as_millis(),
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    out
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The skewed client's put is refused with the reason, and nothing of it is visible.
fn skewed_put_is_refused(config: &Path) {
    let out = luigi(config, HOUR_US, &["put", "skewed", "x"]);
    assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("s ahead of this server's clock; bound"), "{err}");
    assert!(err.contains("is the client's clock right?"), "{err}");
}

/// Correct clients read and write, and see nothing of the refused put.
fn shard_commits(config: &Path, key: &str, value: &str) {
    assert_exit(&luigi(config, "0", &["put", key, value]), 0);
    let got = luigi(config, "0", &["get", key]);
    assert_exit(&got, 0);
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), value);
    assert_exit(&luigi(config, "0", &["get", "skewed"]), 1);
}

#[test]
fn a_client_an_hour_ahead_is_refused_and_a_restarted_shard_commits_on() {
    let dir = scratch("clock-skew-1x1");
    let port = free_port();
    let config = dir.join("cluster.toml");
    let toml = format!(
        "net = \"none\"\nsecret = \"a-long-test-secret-0123\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n"
    );
    std::fs::write(&config, toml).unwrap();
    let (data, log) = (dir.join("data"), dir.join("servers.log"));
    let server = start_durable(&config, &data, "s0r0", port, &log);
    assert_exit(&luigi(&config, "0", &["put", "a", "1"]), 0);
    skewed_put_is_refused(&config);
    shard_commits(&config, "b", "2");
    server.kill9();
    let _server = start_durable(&config, &data, "s0r0", port, &log);
    shard_commits(&config, "c", "3");
    skewed_put_is_refused(&config);
    shard_commits(&config, "a", "4");
}

#[test]
fn a_client_an_hour_ahead_is_refused_and_the_next_leader_commits_on() {
    let dir = scratch("clock-skew-1x3");
    let (config, ports) =
        three_replica_cluster_with(&dir, 1, "net = \"none\"\nsecret = \"a-long-test-secret-0123\"", "");
    let (data, log) = (dir.join("data"), dir.join("servers.log"));
    let mut servers = start_all(&config, &data, &ports, &log);
    assert_exit(&luigi(&config, "0", &["put", "a", "1"]), 0);
    skewed_put_is_refused(&config);
    let leader = latest_leader(&log, 0).expect("a leader logged");
    servers[leader as usize].take().expect("running").kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    while latest_leader(&log, 0) == Some(leader) {
        assert!(Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    shard_commits(&config, "b", "2");
    skewed_put_is_refused(&config);
    let port = ports[0][leader as usize];
    servers[leader as usize] = Some(start_durable(&config, &data, &format!("s0r{leader}"), port, &log));
    shard_commits(&config, "c", "3");
}
