//! Hostile input against real servers on loopback: the frames of the security review, sent
//! over raw TCP connections to a 2 x 3 cluster with a cluster secret. Each is refused (a
//! `Refused` frame, then the connection closes where the sender is not authenticated), and
//! the cluster keeps committing cross-shard transactions, also after a leader is killed and
//! restarted from its data directory.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use luigi_proto::coordinator::TxnOutcome;
use luigi_proto::msg::{ClientMsg, ReplicationMsg, ServerMsg, TxnError, WireMsg};
use luigi_proto::procedures::{micro_key, Micro, MicroOp, TransferArgs};
use luigi_proto::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_runtime::net::codec::{decode_payload, encode_frame};

use common::{free_port, latest_leader, scratch, start_durable, three_replica_cluster_with, transfer, ServerProc};

const SECRET: &str = "a test cluster secret, 32 chars";

/// A raw connection speaking frames.
struct Raw(TcpStream);

impl Raw {
    /// Connects and reads the server's challenge.
    fn connect(port: u16) -> (Raw, [u8; 16]) {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut raw = Raw(stream);
        let Some(WireMsg::Challenge { nonce }) = raw.recv() else { panic!("no challenge from :{port}") };
        (raw, nonce)
    }

    fn send(&mut self, msg: &WireMsg) {
        let mut buf = BytesMut::new();
        encode_frame(msg, &mut buf).unwrap();
        self.0.write_all(&buf).unwrap();
    }

    /// The next message; `None` once the server closed the connection (or after 5 s).
    fn recv(&mut self) -> Option<WireMsg> {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).ok()?;
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        self.0.read_exact(&mut payload).ok()?;
        Some(decode_payload(&payload).unwrap())
    }

    /// The first of the next `frames_max` messages that `pick` takes, reading past the
    /// others (a connected client also receives broadcasts: watermarks, progress reports,
    /// floor promises); `None` if none does or the connection closes first.
    fn find<T>(&mut self, frames_max: usize, pick: impl Fn(WireMsg) -> Option<T>) -> Option<T> {
        for _ in 0..frames_max {
            if let Some(found) = pick(self.recv()?) {
                return Some(found);
            }
        }
        None
    }

    /// Reads until a `Refused` frame; returns its reason.
    fn refusal(&mut self) -> String {
        let reason = |msg| match msg {
            WireMsg::Refused { reason } => Some(reason),
            _ => None,
        };
        self.find(64, reason).expect("no refusal")
    }

    /// Reads until a `Pong`; false if none comes.
    fn pong(&mut self) -> bool {
        self.find(256, |msg| matches!(msg, WireMsg::Server(ServerMsg::Pong { .. })).then_some(())).is_some()
    }

    /// True once the server has closed the connection.
    fn closed(&mut self) -> bool {
        (0..64).any(|_| self.recv().is_none())
    }
}

/// The frames of the review, each sent on its own raw connection to `port`.
fn send_forged_frames(port: u16) {
    let forged = [
        (
            "snapshot chunk",
            WireMsg::Replication(ReplicationMsg::SnapshotChunk {
                shard: 0,
                from: 2,
                transfer: 1,
                seq: 0,
                crc32: 0,
                data: vec![7; 94],
            }),
        ),
        (
            "leader announcement",
            WireMsg::Replication(ReplicationMsg::LeaderIs { shard: 1, replica: 5, term: u64::MAX }),
        ),
        ("raft message", WireMsg::Replication(ReplicationMsg::Raft { shard: 0, from: 2, bytes: vec![1, 2, 3] })),
    ];
    for (what, msg) in forged {
        let (mut raw, _) = Raw::connect(port);
        raw.send(&msg);
        let why = raw.refusal();
        assert!(why.contains("not an authenticated peer"), "{what}: {why}");
        assert!(raw.closed(), "{what}: the connection stays open");
    }
    // A peer that does not know the secret.
    let (mut raw, _) = Raw::connect(port);
    raw.send(&WireMsg::PeerHello { shard: 1, replica: 0, proof: [0; 32] });
    assert!(raw.refusal().contains("failed to prove the cluster secret"));
    assert!(raw.closed());
}

fn poison(client: u64) -> WireMsg {
    let ops = vec![MicroOp { key: 1, write: Some(1) }];
    let txn = Txn {
        id: TxnId { client, seq: 1 },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![
            ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(1)]) },
            ShardPiece { shard: 5, keys: KeySet::new(vec![], vec![micro_key(2)]) },
        ],
        ts: 1,
    };
    WireMsg::Client(ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: 0, acked_below: 1, fast: true })
}

/// Runs `n` cross-shard transfers and requires them all to commit.
fn transfers_commit(config: &ClusterConfig, client_id: u64, n: u64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = Client::connect(config, client_id).await.unwrap();
        for i in 0..n {
            let args = TransferArgs { from: i % 7, to: 7 + i % 5, amount: 1 };
            let outcome = tokio::time::timeout(Duration::from_secs(30), transfer(&client, args)).await.unwrap();
            assert!(matches!(outcome, TxnOutcome::Ordered { .. }), "transfer {i}: {outcome:?}");
        }
    });
}

#[test]
fn forged_frames_are_refused_and_the_cluster_keeps_committing() {
    let dir = scratch("hostile");
    let data = dir.join("data");
    let (config_path, ports) =
        three_replica_cluster_with(&dir, 2, &format!("net = \"none\"\nsecret = \"{SECRET}\""), "");
    let log = dir.join("servers.log");
    let mut servers: Vec<Vec<Option<ServerProc>>> = (0..2)
        .map(|s| {
            (0..3).map(|r| Some(start_durable(&config_path, &data, &format!("s{s}r{r}"), ports[s][r], &log))).collect()
        })
        .collect();
    let config = ClusterConfig::load(&config_path).unwrap();
    transfers_commit(&config, 1, 5);

    // Forged server-to-server frames, to every replica of shard 0.
    for port in ports[0] {
        send_forged_frames(port);
    }
    // A poison transaction (a participant shard that does not exist) from a client that said
    // hello: refused by the leader as malformed, nothing admitted.
    let mut rejected = 0;
    for (r, port) in ports[0].iter().enumerate() {
        let (mut raw, _) = Raw::connect(*port);
        raw.send(&WireMsg::Client(ClientMsg::Hello {
            client: 900 + r as u64,
            proof: None,
            protocol: luigi_proto::types::Protocol::Luigi,
        }));
        raw.send(&poison(900 + r as u64));
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            match raw.recv() {
                Some(WireMsg::Server(ServerMsg::Reply(reply))) => {
                    match &reply.outcome {
                        Err(TxnError::Rejected(why)) => {
                            assert!(why.contains("shard 5 does not exist"), "{why}");
                            rejected += 1;
                        }
                        Err(TxnError::NotLeader { .. }) => {}
                        other => panic!("poison transaction answered {other:?}"),
                    }
                    break;
                }
                Some(_) => {}
                None => panic!("no answer to the poison transaction"),
            }
        }
    }
    assert_eq!(rejected, 1, "the leader refuses it; followers say they do not lead");
    // A second connection cannot take over a connected client's id.
    let (mut owner, _) = Raw::connect(ports[0][0]);
    owner.send(&WireMsg::Client(ClientMsg::Hello {
        client: 950,
        proof: None,
        protocol: luigi_proto::types::Protocol::Luigi,
    }));
    owner.send(&WireMsg::Client(ClientMsg::Ping { sent_us: 1 }));
    assert!(owner.pong(), "the owner's connection answers its ping");
    let (mut thief, _) = Raw::connect(ports[0][0]);
    thief.send(&WireMsg::Client(ClientMsg::Hello {
        client: 950,
        proof: None,
        protocol: luigi_proto::types::Protocol::Luigi,
    }));
    assert!(thief.refusal().contains("in use"));
    assert!(thief.closed());
    // A client cannot dispatch another client's transaction.
    owner.send(&poison(951));
    assert!(owner.refusal().contains("dispatched a transaction of client 951"));

    // The cluster still commits, and shard 0's leader restarts from its data after kill -9.
    transfers_commit(&config, 2, 20);
    let leader = latest_leader(&log, 0).expect("shard 0 has a leader") as usize;
    servers[0][leader].take().unwrap().kill9();
    servers[0][leader] = Some(start_durable(&config_path, &data, &format!("s0r{leader}"), ports[0][leader], &log));
    transfers_commit(&config, 3, 20);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("panicked"), "a server panicked: see {}", log.display());
    assert!(text.contains("refused a message"), "refusals are logged");
}

/// The server process's resident memory (KiB) and CPU time (clock ticks) from /proc.
fn rss_kib_and_cpu_ticks(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (rss, ticks)
}

/// Figures for the review (not an assertion of speed): a 1 x 1 server's memory and CPU idle,
/// with 200 idle clients, with 2000 idle connections, with 20 strangers announcing 16 MiB
/// frames, and with 20 clients that each send 7 MiB of an 8 MiB frame and stall. Run with
/// `cargo test --release -p luigi --test hostile -- --ignored --nocapture`.
#[test]
#[ignore = "prints resource figures; run by hand"]
fn idle_and_stalled_connections_cost_little() {
    let dir = scratch("hostile-resources");
    let port = free_port();
    let config_path = dir.join("cluster.toml");
    std::fs::write(&config_path, format!("net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n")).unwrap();
    let server = start_durable(&config_path, &dir.join("data"), "s0r0", port, &dir.join("server.log"));
    let pid = server.0.id();
    let config = ClusterConfig::load(&config_path).unwrap();
    transfers_commit(&config, 1, 5);
    let tick_ms = 10; // USER_HZ = 100 on Linux
    let window = Duration::from_secs(10);
    let (_, cpu_a) = rss_kib_and_cpu_ticks(pid);
    std::thread::sleep(window);
    let (rss0, cpu0) = rss_kib_and_cpu_ticks(pid);
    eprintln!("idle server: CPU {} ms over {window:?}, rss {} MiB", (cpu0 - cpu_a) * tick_ms, rss0 / 1024);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let clients: Vec<Client> = rt.block_on(async {
        let mut v = Vec::new();
        for id in 0..200 {
            v.push(Client::connect(&config, 10_000 + id).await.unwrap());
        }
        v
    });
    // A client is sent watermarks for 2 s after it last spoke (its connect pings).
    std::thread::sleep(Duration::from_secs(3));
    let (_, cpu1) = rss_kib_and_cpu_ticks(pid);
    std::thread::sleep(window);
    let (rss2, cpu2) = rss_kib_and_cpu_ticks(pid);
    eprintln!(
        "200 idle clients: server CPU {} ms over {window:?} ({:.1} % of a core), rss {} MiB (connecting and the first 3 s took {} ms of CPU)",
        (cpu2 - cpu1) * tick_ms,
        (cpu2 - cpu1) as f64 * tick_ms as f64 / window.as_millis() as f64 * 100.0,
        rss2 / 1024,
        (cpu1 - cpu0) * tick_ms
    );
    drop(clients);

    let idle: Vec<(Raw, [u8; 16])> = (0..2000).map(|_| Raw::connect(port)).collect();
    let (_, cpu3) = rss_kib_and_cpu_ticks(pid);
    std::thread::sleep(window);
    let (rss4, cpu4) = rss_kib_and_cpu_ticks(pid);
    eprintln!(
        "2000 idle connections: server CPU {} ms over {window:?}, rss {} MiB",
        (cpu4 - cpu3) * tick_ms,
        rss4 / 1024
    );
    drop(idle);

    let started = Instant::now();
    for _ in 0..20 {
        let (mut raw, _) = Raw::connect(port);
        raw.0.write_all(&(16u32 << 20).to_be_bytes()).unwrap();
        let _ = raw.0.write_all(&[0u8; 1 << 16]);
        assert!(raw.closed(), "a stranger's 16 MiB frame is refused at its length prefix");
    }
    let (rss_s, _) = rss_kib_and_cpu_ticks(pid);
    eprintln!(
        "20 strangers announcing 16 MiB frames: all closed within {:?}; rss {} MiB",
        started.elapsed(),
        rss_s / 1024
    );

    let chunk = vec![0u8; 7 << 20];
    let mut stalled: Vec<TcpStream> = Vec::new();
    for i in 0..20 {
        let (mut raw, _) = Raw::connect(port);
        raw.send(&WireMsg::Client(ClientMsg::Hello {
            client: 20_000 + i,
            proof: None,
            protocol: luigi_proto::types::Protocol::Luigi,
        }));
        raw.0.write_all(&(8u32 << 20).to_be_bytes()).unwrap();
        raw.0.write_all(&chunk).unwrap();
        stalled.push(raw.0);
    }
    std::thread::sleep(Duration::from_secs(2));
    let (rss5, _) = rss_kib_and_cpu_ticks(pid);
    eprintln!("20 clients stalled 7 MiB into 8 MiB frames: rss {} MiB", rss5 / 1024);
    let started = Instant::now();
    let mut buf = [0u8; 64];
    for s in &mut stalled {
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    }
    let closed_after = started.elapsed() + Duration::from_secs(2);
    std::thread::sleep(Duration::from_secs(2));
    let (rss6, _) = rss_kib_and_cpu_ticks(pid);
    eprintln!("the server closed them after {closed_after:?}; rss then {} MiB", rss6 / 1024);
    transfers_commit(&config, 2, 200);
    std::thread::sleep(Duration::from_secs(2));
    let (rss7, _) = rss_kib_and_cpu_ticks(pid);
    eprintln!("after 200 more transactions: rss {} MiB", rss7 / 1024);
}
