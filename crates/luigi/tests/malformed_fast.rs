//! A hand-made client sends the followers of a 1 x 3 shard fast-path dispatches its leader
//! would refuse (issue 26, DESIGN.md rule 22), then the leader is killed. Before rule 22 the
//! followers accepted them, the next leader recovered them from their accepts, and it
//! executed what the old leader had answered `Rejected` (or waited an hour for a timestamp an
//! hour ahead). Now no follower accepts them: nothing of them is visible after the failover,
//! and the shard commits on.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use luigi_runtime::wire::WireMsg;
use luigi_txn::msg::{ClientMsg, ServerMsg};
use luigi_txn::types::{KeySet, Protocol, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{kv_args, kv_key, Kv, KvOp};

use common::{latest_leader, scratch, start_all, three_replica_cluster_with, EXE};

fn luigi(config: &Path, args: &[&str]) -> Output {
    Command::new(EXE).args(args).args(["--timeout", "20", "--cluster"]).arg(config).output().unwrap()
}

/// A client connection speaking raw frames.
struct Conn(TcpStream);

impl Conn {
    fn open(port: u16, client: u64) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut c = Conn(stream);
        assert!(matches!(c.recv(), Some(WireMsg::Challenge { .. })), "no challenge from :{port}");
        c.send(&WireMsg::Client(ClientMsg::Hello { client, proof: None, protocol: Protocol::Luigi }));
        c
    }

    fn send(&mut self, msg: &WireMsg) {
        common::send_frames(&mut self.0, &[msg]).unwrap();
    }

    fn recv(&mut self) -> Option<WireMsg> {
        common::recv_frame(&mut self.0)
    }

    /// Whether a `FastAccept` comes within about a second (reading past broadcasts).
    fn accepted(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if let Some(WireMsg::Server(ServerMsg::FastAccept { .. })) = self.recv() {
                return true;
            }
        }
        false
    }
}

/// A put of `key` whose shard-0 piece is replaced by `pieces`, stamped `ts`.
fn put(seq: u64, key: &str, pieces: Vec<ShardPiece>, ts: u64) -> WireMsg {
    let ops = [KvOp::Put { key: key.as_bytes().to_vec(), value: b"bad".to_vec() }];
    let txn = Txn { id: TxnId { client: 77, seq }, procedure: Kv::NAME.into(), args: kv_args(&ops), pieces, ts };
    WireMsg::Client(ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: ts, acked_below: 1, fast: true })
}

fn piece(shard: u32, reads: &[&str], writes: &[&str]) -> ShardPiece {
    let keys = |list: &[&str]| list.iter().map(|k| kv_key(k.as_bytes())).collect();
    ShardPiece { shard, keys: KeySet { reads: keys(reads), writes: keys(writes) } }
}

#[test]
fn followers_accept_nothing_the_leader_refuses_and_a_new_leader_executes_none_of_it() {
    let dir = scratch("malformed-fast");
    let (config, ports) = three_replica_cluster_with(&dir, 1, "net = \"none\"", "");
    let (data, log) = (dir.join("data"), dir.join("servers.log"));
    let mut servers = start_all(&config, &data, &ports, &log);
    assert_eq!(luigi(&config, &["put", "warm", "1"]).status.code(), Some(0));
    let leader = latest_leader(&log, 0).expect("a leader logged") as usize;
    let soon = luigi_runtime::clock::now_us() + 3_000_000;
    let dispatches = [
        put(1, "bad-unsorted", vec![piece(0, &[], &["bad-unsorted", "a-first"])], soon),
        put(2, "bad-missing-shard", vec![piece(0, &[], &["bad-missing-shard"]), piece(5, &[], &["x"])], soon),
        put(3, "bad-twice", vec![piece(0, &[], &["bad-twice"]), piece(0, &[], &["bad-twice"])], soon),
        put(4, "bad-overlap", vec![piece(0, &["bad-overlap"], &["bad-overlap"])], soon),
        put(5, "bad-ahead", vec![piece(0, &[], &["bad-ahead"])], soon + 3_600_000_000),
    ];
    for (replica, port) in ports[0].iter().enumerate().filter(|(r, _)| *r != leader) {
        let mut conn = Conn::open(*port, 77);
        for d in &dispatches {
            conn.send(d);
            assert!(!conn.accepted(), "s0r{replica} accepted {d:?}");
        }
    }
    servers[leader].take().expect("running").kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    while latest_leader(&log, 0) == Some(leader as u32) {
        assert!(Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past every timestamp but the hour-ahead one: nothing of them ran, and the shard commits.
    std::thread::sleep(Duration::from_millis(soon.saturating_sub(luigi_runtime::clock::now_us()) / 1000 + 500));
    let started = Instant::now();
    assert_eq!(luigi(&config, &["put", "after", "2"]).status.code(), Some(0));
    println!("a put after the failover took {} ms", started.elapsed().as_millis());
    for key in ["bad-unsorted", "bad-missing-shard", "bad-twice", "bad-overlap", "bad-ahead"] {
        let got = luigi(&config, &["get", key]);
        assert_eq!(got.status.code(), Some(1), "{key}: {}", String::from_utf8_lossy(&got.stdout));
    }
}
