//! Real-process metrics tests: a shard of three `luigi server` processes on loopback, each
//! serving `GET /metrics` (read with the runtime's scrape client, which parses the exposition
//! with a Prometheus text parser).
//! - Transactions commit, the leader is killed (`kill -9`), and every survivor's exposition
//!   shows the leader change (`etcd_server_leader_changes_seen_total` moved), and the new
//!   leader's committed counters move again once it serves.
//! - A peer that proves the cluster secret and then sends garbled replication messages: each
//!   is counted (`luigi_replication_messages_not_taken_total`), the server's log warns of them
//!   at most once a second, and the shard goes on committing.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use luigi_protocol::msg::ReplicationMsg;
use luigi_runtime::auth;
use luigi_runtime::client::Client;
use luigi_runtime::config::{ClusterConfig, NodeId};
use luigi_runtime::metrics::scrape::{fetch, Metrics};
use luigi_runtime::wire::WireMsg;
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

use common::{free_port, scratch, start_durable, ServerProc};

const SECRET: &str = "metrics-leader-kill-0123456789";

/// `GET /metrics` from `addr`, parsed (`None` if it does not answer 200).
fn scrape(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Option<Metrics> {
    rt.block_on(fetch(addr, Duration::from_secs(10))).ok()
}

/// One shard of three servers, each serving metrics, started with fsync durability.
struct Shard {
    dir: PathBuf,
    config: ClusterConfig,
    ports: Vec<u16>,
    metrics: Vec<u16>,
    servers: Vec<Option<ServerProc>>,
    log: PathBuf,
}

impl Shard {
    fn start(name: &str) -> Shard {
        let dir = scratch(name);
        let (ports, metrics): (Vec<u16>, Vec<u16>) = (0..3).map(|_| (free_port(), free_port())).unzip();
        let list = |ps: &[u16]| ps.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect::<Vec<_>>().join(", ");
        let path = dir.join("cluster.toml");
        let toml = format!(
            "net = \"none\"\nsecret = \"{SECRET}\"\n[[shards]]\nreplicas = [{}]\nmetrics = [{}]\n",
            list(&ports),
            list(&metrics)
        );
        std::fs::write(&path, toml).unwrap();
        let config = ClusterConfig::load(&path).unwrap();
        let log = dir.join("servers.log");
        let servers =
            (0..3).map(|r| Some(start_durable(&path, &dir.join("data"), &format!("s0r{r}"), ports[r], &log))).collect();
        Shard { dir, config, ports, metrics, servers, log }
    }

    fn metrics_addr(&self, replica: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.metrics[replica]))
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
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
    let mut shard = Shard::start("metrics-leader-kill");
    let config = shard.config.clone();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let metrics = shard.metrics.clone();
    let addr = |r: usize| SocketAddr::from(([127, 0, 0, 1], metrics[r]));
    commit(&rt, &config, 1, 0, 10);
    let before: Vec<Metrics> = (0..3).map(|r| scrape(&rt, addr(r)).expect("every server answers")).collect();
    let leader = (0..3).find(|r| before[*r].value("etcd_server_is_leader", &[]) == Some(1.0)).expect("a leader");
    assert!(before[leader].value("luigi_transactions_total", &COMMITTED).unwrap() >= 10.0, "the leader counted");
    shard.servers[leader].take().unwrap().kill9();
    let survivors: Vec<usize> = (0..3).filter(|r| *r != leader).collect();
    let changes = |s: &Metrics| s.value("etcd_server_leader_changes_seen_total", &[]).unwrap();
    // Bounded wait: an election takes one to two election timeouts (about a second each).
    let mut elected = None;
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(100));
        let now: Vec<Metrics> = survivors.iter().map(|r| scrape(&rt, addr(*r)).expect("a survivor answers")).collect();
        let new_leader = survivors.iter().zip(&now).find(|(_, s)| s.value("etcd_server_is_leader", &[]) == Some(1.0));
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
    let at = |m: &Metrics| m.value("luigi_transactions_total", &COMMITTED).unwrap_or(0.0);
    let log_committed = |m: &Metrics| m.value("etcd_server_proposals_committed_total", &[]).unwrap();
    let elected_at = scrape(&rt, addr(new_leader)).unwrap();
    commit(&rt, &config, 2, 100, 10);
    for (i, r) in survivors.iter().enumerate() {
        let end = scrape(&rt, addr(*r)).unwrap();
        assert!(log_committed(&end) > log_committed(&after_election[i]), "s0r{r}'s log committed again");
        if *r == new_leader {
            let (from, to) = (at(&elected_at), at(&end));
            eprintln!("s0r{r} (new leader): committed {from} -> {to}");
            assert!(to >= from + 10.0, "the new leader's committed transactions moved: {from} -> {to}");
        }
    }
}

/// Garbled replication messages from a peer that proved the cluster secret (a bug or a
/// compromised peer): none is taken, each is counted, the log warns of them at most once a
/// second (a line per message would flood it), and the shard goes on committing.
#[test]
fn an_authenticated_peers_garbled_replication_messages_are_counted_and_warned_of_once_a_second() {
    let shard = Shard::start("metrics-garbled");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    commit(&rt, &shard.config, 1, 0, 5);
    let not_taken = |m: &Metrics| m.value("luigi_replication_messages_not_taken_total", &[]).unwrap();
    let before = not_taken(&scrape(&rt, shard.metrics_addr(0)).expect("s0r0 answers"));
    let mut raw = TcpStream::connect(("127.0.0.1", shard.ports[0])).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let Some(WireMsg::Challenge { nonce }) = common::recv_frame(&mut raw) else { panic!("no challenge") };
    let (me, to) = (NodeId { shard: 0, replica: 2 }, NodeId { shard: 0, replica: 0 });
    let hello = WireMsg::PeerHello { shard: 0, replica: 2, proof: auth::peer_proof(SECRET, &nonce, to, me) };
    // Raft id 3 is replica 2; the bytes are no protobuf message (an unterminated varint).
    let garbled = WireMsg::Replication(ReplicationMsg::Raft { shard: 0, from: 3, bytes: vec![0xff; 24] });
    const SENT: usize = 500;
    let started = Instant::now();
    let mut frames = vec![&hello];
    frames.extend(std::iter::repeat_n(&garbled, SENT));
    common::send_frames(&mut raw, &frames).unwrap();
    let mut counted = before;
    for _ in 0..300 {
        counted = not_taken(&scrape(&rt, shard.metrics_addr(0)).expect("s0r0 answers"));
        if counted >= before + SENT as f64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = started.elapsed();
    assert_eq!(counted, before + SENT as f64, "every garbled message counted once");
    let text = std::fs::read_to_string(&shard.log).unwrap();
    let warned = text.matches("replication message not taken").count() as u64;
    eprintln!("{SENT} garbled messages in {elapsed:?}: {warned} warnings");
    assert!(warned >= 1, "the first is warned of");
    assert!(warned <= 2 + elapsed.as_secs(), "{warned} warnings for {SENT} messages in {elapsed:?}");
    commit(&rt, &shard.config, 2, 100, 5);
}
