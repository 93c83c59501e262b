//! The servers' Prometheus metrics, end to end: a shard of three replicas on loopback, each
//! serving `GET /metrics` on the address its cluster file gives; transactions run; every
//! scrape is parsed with a Prometheus text parser (not string matching) and the committed
//! counters are checked to have moved.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use luigi_runtime::client::Client;
use luigi_runtime::config::{ClusterConfig, NodeId};
use luigi_runtime::server::{Server, StorageOptions};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};
use prometheus_parse::{Sample, Scrape, Value};

const SECRET: &str = "metrics-test-secret-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A shard of `replicas` replicas with a metrics address each, written to `dir/cluster.toml`.
fn cluster(dir: &Path, replicas: usize) -> ClusterConfig {
    let addrs = |n| (0..n).map(|_| format!("\"127.0.0.1:{}\"", free_port())).collect::<Vec<_>>().join(", ");
    let toml = format!(
        "net = \"none\"\nsecret = \"{SECRET}\"\n[[shards]]\nreplicas = [{}]\nmetrics = [{}]\n",
        addrs(replicas),
        addrs(replicas)
    );
    let path = dir.join("cluster.toml");
    std::fs::write(&path, toml).unwrap();
    ClusterConfig::load(&path).unwrap()
}

/// `GET /metrics` from `addr`: the status line and the body.
fn get(addr: SocketAddr) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// One scrape of `addr`, parsed.
fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let (status, body) = get(addr);
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses").samples
}

/// The value of the sample `metric` whose labels include `labels`.
fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(|s| {
        match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(_) | Value::Summary(_) => panic!("{metric} is not a single value"),
        }
    })
}

/// The sample count of histogram `metric` (its `+Inf` bucket).
fn histogram_count(samples: &[Sample], metric: &str) -> Option<f64> {
    samples.iter().find(|s| s.metric == metric).map(|s| match &s.value {
        Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
        other => panic!("{metric} is not a histogram: {other:?}"),
    })
}

/// Servers running on a runtime, each stopped when its sender is dropped.
struct Running {
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Each replica's metrics address.
    metrics: HashMap<u32, SocketAddr>,
}

/// One replica's server running on a runtime.
struct Replica {
    stop: tokio::sync::oneshot::Sender<()>,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
    metrics: SocketAddr,
}

/// Starts `replica` of shard 0 of `config` on `rt`, fsyncing under `dir` (its data from an
/// earlier run of it, if any). Binding is retried for a few seconds: a stopped server's
/// ports are released as its tasks end.
fn start_one(rt: &tokio::runtime::Runtime, config: &ClusterConfig, dir: &Path, replica: u32) -> Replica {
    let node = NodeId { shard: 0, replica };
    let storage =
        StorageOptions { data_dir: dir.join("data"), durability: luigi_wal::Durability::Fsync, rejoin: false };
    let mut tries = 0;
    let server = loop {
        let bound =
            rt.block_on(Server::bind(config.clone(), node, luigi_workloads::procedures::builtins(), storage.clone()));
        match bound {
            Ok(server) => break server,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("replica {replica} not bound yet: {e:#}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("replica {replica}: {e:#}"),
        }
    };
    let metrics = server.metrics_addr().expect("configured: served");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let done = rt.spawn(server.run(async {
        let _ = stopped.await;
    }));
    Replica { stop, done, metrics }
}

/// Stops `r` and waits until its server has finished (its disk closed).
fn stop_one(rt: &tokio::runtime::Runtime, r: Replica) {
    drop(r.stop);
    let _ = rt.block_on(r.done);
}

/// Starts every replica of shard 0 of `config` on `rt`, fsyncing under `dir`.
fn start(rt: &tokio::runtime::Runtime, config: &ClusterConfig, dir: &Path) -> Running {
    let mut stops = Vec::new();
    let mut metrics = HashMap::new();
    for replica in 0..config.shards[0].replicas.len() as u32 {
        let r = start_one(rt, config, dir, replica);
        metrics.insert(replica, r.metrics);
        stops.push(r.stop);
    }
    Running { stops, metrics }
}

#[test]
fn every_replica_serves_metrics_and_the_committed_counters_move() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), 3);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let Running { stops, metrics } = start(&rt, &config, dir.path());
    const TXNS: u64 = 20;
    let (before, after) = rt.block_on(async {
        let client = Client::connect(&config, 1).await.unwrap();
        // One first transaction: the shard has elected its leader once it commits.
        run_micro(&client, 0).await;
        let before = scrape(metrics[&0]);
        for i in 1..=TXNS {
            run_micro(&client, i).await;
        }
        (before, scrape(metrics[&0])) // the client still connected
    });
    let committed = [("outcome", "committed"), ("path", "any")];
    let txns_before = value(&before, "luigi_transactions_total", &committed).expect("the leader counts commits");
    let txns_after = value(&after, "luigi_transactions_total", &committed).unwrap();
    assert!(txns_after >= txns_before + TXNS as f64, "committed {txns_before} -> {txns_after}");
    // Every commit here is of the micro procedure: its own counter moves with the total.
    let micro = [("procedure", Micro::NAME)];
    let micro_before = value(&before, "luigi_procedure_commits_total", &micro).expect("counted by procedure");
    let micro_after = value(&after, "luigi_procedure_commits_total", &micro).unwrap();
    assert_eq!(micro_after - micro_before, txns_after - txns_before, "every commit is a micro one");
    let labels = [("shard", "0"), ("replica", "0"), ("protocol", "luigi")];
    assert_eq!(value(&after, "etcd_server_is_leader", &labels), Some(1.0), "replica 0 leads a fresh shard");
    let raft_before = value(&before, "etcd_server_proposals_committed_total", &[]).unwrap();
    let raft_after = value(&after, "etcd_server_proposals_committed_total", &[]).unwrap();
    assert!(raft_after > raft_before, "the log committed entries: {raft_before} -> {raft_after}");
    assert!(histogram_count(&after, "etcd_disk_wal_fsync_duration_seconds").unwrap() > 0.0, "fsyncs are timed");
    assert!(histogram_count(&after, "luigi_turn_duration_seconds").unwrap() > 0.0, "turns are timed");
    assert_eq!(value(&after, "luigi_connections", &[("kind", "client")]), Some(1.0), "one client connected");
    for replica in 0..3 {
        let samples = scrape(metrics[&replica]);
        let me = [("replica", replica.to_string())];
        let me: Vec<(&str, &str)> = me.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(value(&samples, "etcd_server_has_leader", &me), Some(1.0), "replica {replica}");
        assert!(value(&samples, "etcd_server_leader_changes_seen_total", &me).unwrap() >= 1.0, "replica {replica}");
        assert!(
            value(&samples, "etcd_server_proposals_applied_total", &me).unwrap() >= raft_before,
            "replica {replica} applied what was committed before"
        );
        let offsets = samples.iter().filter(|s| s.metric == "luigi_clock_offset_seconds").count();
        assert!(offsets <= 2, "at most one offset per peer: {offsets}");
    }
    // A bad request is answered, and the responder goes on.
    let mut s = TcpStream::connect(metrics[&1]).unwrap();
    s.write_all(b"GET /nothing HTTP/1.1\r\n\r\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), "HTTP/1.1 404 Not Found");
    assert_eq!(get(metrics[&1]).0, "HTTP/1.1 200 OK");
    drop(stops);
    rt.shutdown_timeout(Duration::from_secs(5));
}

/// etcd's `leader_changes_seen_total`: when the leader stops, the replicas left elect another
/// and count the change.
#[test]
fn the_leader_change_counter_moves_when_the_leader_stops() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), 3);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let Running { mut stops, metrics } = start(&rt, &config, dir.path());
    rt.block_on(async {
        let client = Client::connect(&config, 2).await.unwrap();
        run_micro(&client, 0).await;
    });
    let changes = |replica: u32| value(&scrape(metrics[&replica]), "etcd_server_leader_changes_seen_total", &[]);
    let before = changes(1).expect("counted");
    assert_eq!(value(&scrape(metrics[&0]), "etcd_server_is_leader", &[]), Some(1.0), "replica 0 leads first");
    drop(stops.remove(0)); // the leader stops
                           // Bounded wait: an election takes one to two election timeouts (about a second each).
    let mut after = before;
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(100));
        let samples = scrape(metrics[&1]);
        let has = value(&samples, "etcd_server_has_leader", &[]) == Some(1.0);
        after = value(&samples, "etcd_server_leader_changes_seen_total", &[]).unwrap();
        if has && after > before {
            break;
        }
    }
    assert!(after > before, "a new leader was seen: {before} -> {after}");
    drop(stops);
    rt.shutdown_timeout(Duration::from_secs(5));
}

/// Writes key `i` in one micro transaction, which must commit.
async fn run_micro(client: &Client, i: u64) {
    let write = vec![MicroOp { key: i, write: Some(i) }];
    let done =
        client.execute(Micro::NAME, postcard::to_stdvec(&write).unwrap(), vec![], vec![micro_key(i)]).await.unwrap();
    assert!(done.outcome.is_committed(), "{:?}", done.outcome);
}

/// The counters (`..._total`) of a scrape, by series (metric and labels).
fn counters(samples: &[Sample]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = samples
        .iter()
        .filter(|s| s.metric.ends_with("_total"))
        .filter_map(|s| match s.value {
            Value::Counter(v) | Value::Untyped(v) => {
                let mut labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                labels.sort();
                Some((format!("{}{{{}}}", s.metric, labels.join(",")), v))
            }
            Value::Gauge(_) | Value::Histogram(_) | Value::Summary(_) => None,
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every counter series of `before` is served again in `after`, not lower.
fn never_lower(before: &[Sample], after: &[Sample], when: &str) {
    let after = counters(after);
    for (series, was) in counters(before) {
        let now = after.iter().find(|(s, _)| *s == series).map(|(_, v)| *v);
        assert!(now.is_some_and(|now| now >= was), "{when}: {series} went from {was} to {now:?}");
    }
}

/// Waits (bounded) until `addr`'s replica reads `is_leader` (1 or 0); its last scrape.
fn until_leader_is(addr: SocketAddr, is_leader: bool) -> Option<Vec<Sample>> {
    for _ in 0..300 {
        let samples = scrape(addr);
        if value(&samples, "etcd_server_is_leader", &[]) == Some(f64::from(u8::from(is_leader))) {
            return Some(samples);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// The replica of `running` that leads, once one does (bounded wait).
fn leader_of(running: &HashMap<u32, Replica>) -> Option<u32> {
    for _ in 0..300 {
        for (replica, r) in running {
            if value(&scrape(r.metrics), "etcd_server_is_leader", &[]) == Some(1.0) {
                return Some(*replica);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Prometheus counters never go back for the life of a process: a replica that leads, is
/// demoted (it lost its group) and leads again serves every `_total` series it served, never
/// lower, the transaction counters of both its terms as leader summed.
#[test]
fn a_replica_that_leads_again_serves_no_counter_lower_than_before() {
    let dir = tempfile::tempdir().unwrap();
    let config = cluster(dir.path(), 3);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut running: HashMap<u32, Replica> = (0..3).map(|r| (r, start_one(&rt, &config, dir.path(), r))).collect();
    let me = running[&0].metrics;
    let committed = |s: &[Sample]| value(s, "luigi_transactions_total", &[("outcome", "committed"), ("path", "any")]);
    rt.block_on(async {
        let client = Client::connect(&config, 3).await.unwrap();
        for i in 0..5 {
            run_micro(&client, i).await;
        }
    });
    let first_term = scrape(me);
    assert_eq!(value(&first_term, "etcd_server_is_leader", &[]), Some(1.0), "replica 0 leads a fresh shard");
    let first_committed = committed(&first_term).expect("counted");
    // Its followers stop: it no longer hears a quorum and steps down.
    for r in [1, 2] {
        stop_one(&rt, running.remove(&r).unwrap());
    }
    let demoted = until_leader_is(me, false).expect("replica 0 steps down without a quorum");
    never_lower(&first_term, &demoted, "demoted");
    assert_eq!(committed(&demoted), Some(first_committed), "a demoted replica still serves its leaders' totals");
    // They come back; whoever leads is stopped until replica 0 is elected again (each
    // election is replica 0's about every other time: bounded attempts).
    for r in [1, 2] {
        running.insert(r, start_one(&rt, &config, dir.path(), r));
    }
    let mut last = demoted;
    let mut stopped = None;
    for _ in 0..16 {
        let leader = leader_of(&running).expect("the shard elects a leader");
        let now = scrape(me);
        never_lower(&last, &now, "an election later");
        last = now;
        eprintln!("replica {leader} leads");
        if leader == 0 {
            break;
        }
        stop_one(&rt, running.remove(&leader).unwrap());
        if let Some(r) = stopped.replace(leader) {
            running.insert(r, start_one(&rt, &config, dir.path(), r));
        }
    }
    let again = until_leader_is(me, true).expect("replica 0 leads again");
    if let Some(r) = stopped.take() {
        running.insert(r, start_one(&rt, &config, dir.path(), r));
    }
    rt.block_on(async {
        let client = Client::connect(&config, 4).await.unwrap();
        for i in 5..10 {
            run_micro(&client, i).await;
        }
    });
    let second_term = scrape(me);
    never_lower(&again, &second_term, "leading again");
    never_lower(&first_term, &second_term, "since its first term");
    let both = committed(&second_term).unwrap();
    eprintln!("replica 0 committed {first_committed} in its first term, {both} in both");
    assert!(both >= first_committed + 5.0, "both terms' commits summed: {first_committed} then {both}");
    for (_, r) in running.drain() {
        stop_one(&rt, r);
    }
    rt.shutdown_timeout(Duration::from_secs(5));
}
