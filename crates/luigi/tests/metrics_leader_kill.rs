//! Real-process metrics test: a shard of three `luigi server` processes on loopback, each
//! serving `GET /metrics`; transactions commit, the leader is killed (`kill -9`), and every
//! survivor's exposition, parsed with a Prometheus text parser, shows the leader change
//! (`etcd_server_leader_changes_seen_total` moved), and the new leader's committed counters
//! move again once it serves.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};
use prometheus_parse::{Sample, Scrape, Value};

use common::{free_port, scratch, start_durable, ServerProc};

/// `GET /metrics` from `addr`, parsed (`None` if it does not answer 200).
fn scrape(addr: SocketAddr) -> Option<Vec<Sample>> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    Some(Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses").samples)
}

/// The value of the sample `metric` whose labels include `labels`.
fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let s = samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))?;
    match s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

const COMMITTED: [(&str, &str); 2] = [("outcome", "committed"), ("path", "any")];

/// Runs `n` micro transactions from key `from` on, each of which must commit.
fn commit(rt: &tokio::runtime::Runtime, config: &ClusterConfig, client_id: u64, from: u64, n: u64) {
    rt.block_on(async {
        let client = Client::connect(config, client_id).await.unwrap();
        for k in from..from + n {
            let args = postcard::to_stdvec(&vec![MicroOp { key: k, write: Some(k) }]).unwrap();
            let done = client.execute(Micro::NAME, args, vec![], vec![micro_key(k)]).await.unwrap();
            assert!(done.outcome.is_committed(), "{:?}", done.outcome);
        }
    });
}

#[test]
fn killing_the_leader_moves_the_survivors_leader_change_counters_and_the_new_leader_commits() {
    let dir = scratch("metrics-leader-kill");
    let (ports, metrics): (Vec<u16>, Vec<u16>) = (0..3).map(|_| (free_port(), free_port())).unzip();
    let list = |ps: &[u16]| ps.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect::<Vec<_>>().join(", ");
    let path = dir.join("cluster.toml");
    let toml = format!(
        "net = \"none\"\nsecret = \"metrics-leader-kill-0123456789\"\n[[shards]]\nreplicas = [{}]\nmetrics = [{}]\n",
        list(&ports),
        list(&metrics)
    );
    std::fs::write(&path, toml).unwrap();
    let config = ClusterConfig::load(&path).unwrap();
    let log = dir.join("servers.log");
    let mut servers: Vec<Option<ServerProc>> =
        (0..3).map(|r| Some(start_durable(&path, &dir.join("data"), &format!("s0r{r}"), ports[r], &log))).collect();
    let addr = |r: usize| SocketAddr::from(([127, 0, 0, 1], metrics[r]));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    commit(&rt, &config, 1, 0, 10);
    let before: Vec<Vec<Sample>> = (0..3).map(|r| scrape(addr(r)).expect("every server answers")).collect();
    let leader = (0..3).find(|r| value(&before[*r], "etcd_server_is_leader", &[]) == Some(1.0)).expect("a leader");
    assert!(value(&before[leader], "luigi_transactions_total", &COMMITTED).unwrap() >= 10.0, "the leader counted");
    servers[leader].take().unwrap().kill9();
    let survivors: Vec<usize> = (0..3).filter(|r| *r != leader).collect();
    let changes = |s: &[Sample]| value(s, "etcd_server_leader_changes_seen_total", &[]).unwrap();
    // Bounded wait: an election takes one to two election timeouts (about a second each).
    let mut elected = None;
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(100));
        let now: Vec<Vec<Sample>> = survivors.iter().map(|r| scrape(addr(*r)).expect("a survivor answers")).collect();
        let new_leader = survivors.iter().zip(&now).find(|(_, s)| value(s, "etcd_server_is_leader", &[]) == Some(1.0));
        let all_moved = survivors.iter().zip(&now).all(|(r, s)| changes(s) > changes(&before[*r]));
        if let (Some((r, _)), true) = (new_leader, all_moved) {
            elected = Some((*r, now));
            break;
        }
    }
    let (new_leader, after_election) = elected.expect("a survivor leads and every survivor counted the change");
    for (r, s) in survivors.iter().zip(&after_election) {
        eprintln!("s0r{r}: leader changes {} -> {}", changes(&before[*r]), changes(s));
    }
    let at = |samples: &[Sample]| value(samples, "luigi_transactions_total", &COMMITTED).unwrap_or(0.0);
    let log_committed = |s: &[Sample]| value(s, "etcd_server_proposals_committed_total", &[]).unwrap();
    let elected_at = scrape(addr(new_leader)).unwrap();
    commit(&rt, &config, 2, 100, 10);
    for (i, r) in survivors.iter().enumerate() {
        let end = scrape(addr(*r)).unwrap();
        assert!(log_committed(&end) > log_committed(&after_election[i]), "s0r{r}'s log committed again");
        if *r == new_leader {
            let (from, to) = (at(&elected_at), at(&end));
            eprintln!("s0r{r} (new leader): committed {from} -> {to}");
            assert!(to >= from + 10.0, "the new leader's committed transactions moved: {from} -> {to}");
        }
    }
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
