//! Real-process test of Raft state damaged on disk: one shard of 3 replicas on loopback with
//! fsync under a small bank-transfer load. A follower is `kill -9`ed and its data damaged:
//!
//! (a) its `raft-hardstate` deleted: the restart exits non-zero, naming the file and the way
//!     out (the file is then put back);
//! (b) its WAL's tail cut: the restart exits non-zero saying it lost acknowledged entries (at
//!     open, or at the leader's first heartbeat), and the next restart refuses at once, without
//!     rejoining the group (no crash loop);
//! (c) `luigi server --rejoin` moves its directory aside and rebuilds it from the leader while
//!     the load goes on: its applied index reaches the leader's;
//! (d) a data directory of this 1-shard cluster started with a 2-shard cluster file is refused.
//!
//! The messages are printed (`--nocapture`) for the record.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_runtime::status::replica_status;
use luigi_txn::msg::{ReplicaRole, ReplicaStatus};
use luigi_workloads::procedures::TransferArgs;

use common::{scratch, start_durable, three_replica_cluster, transfer, ServerProc, EXE};

/// Runs `luigi server` for `node` with `extra` arguments and waits (bounded) for it to exit;
/// returns its exit code and what it printed on stderr.
fn run_expecting_exit(config: &Path, data: &Path, node: &str, extra: &[&str], log: &Path) -> (Option<i32>, String) {
    let stderr = std::fs::File::create(log).unwrap();
    let mut child = Command::new(EXE)
        .args(["server", "--exit-on-stdin-eof", "--durability", "fsync", "--node", node, "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{node} did not exit; its log: {}", std::fs::read_to_string(log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), std::fs::read_to_string(log).unwrap())
}

/// The last line of `text` starting with `luigi: error:` (what the server exits with).
fn error_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| l.starts_with("luigi: error:"))
        .unwrap_or_else(|| panic!("no error line in: {text}"))
        .to_string()
}

fn status(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Option<ReplicaStatus> {
    rt.block_on(replica_status(addr, Duration::from_millis(500))).ok()
}

/// The serving leader of the shard and its status (waits for one, bounded).
fn leader(rt: &tokio::runtime::Runtime, addrs: &[SocketAddr]) -> (usize, ReplicaStatus) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        for (r, addr) in addrs.iter().enumerate() {
            if let Some(s) = status(rt, *addr) {
                if s.role == ReplicaRole::Leader && s.serving {
                    return (r, s);
                }
            }
        }
        assert!(Instant::now() < deadline, "the shard has no leader");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn discarded(data: &Path, node: &str) -> Vec<PathBuf> {
    std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{node}.discarded-")))
        .collect()
}

/// A small load of transfers on four tasks, for the whole test.
struct Load {
    committed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(rt: &tokio::runtime::Runtime, client: &Client) -> Self {
        let committed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..4u64)
            .map(|w| {
                let (client, committed, stop) = (client.clone(), committed.clone(), stop.clone());
                rt.spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let from = (w * 5 + n) % 16;
                        let args = TransferArgs { from, to: (from + 1 + n % 15) % 16, amount: 1 };
                        if transfer(&client, args).await.is_committed() {
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load { committed, stop, workers }
    }

    fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            rt.block_on(w).unwrap();
        }
    }
}

/// The damaged follower: its cluster file, the data directory, where the test writes, its
/// name and its directory.
struct Follower {
    config_path: PathBuf,
    data: PathBuf,
    dir: PathBuf,
    name: String,
    fdir: PathBuf,
}

/// (a) The hard state deleted: the restart exits naming the file and `--rejoin` (the file
/// is put back after).
fn lost_hard_state_is_refused(f: &Follower) {
    let hs = f.fdir.join("raft-hardstate");
    let saved = std::fs::read(&hs).unwrap();
    std::fs::remove_file(&hs).unwrap();
    let (code, out) = run_expecting_exit(&f.config_path, &f.data, &f.name, &[], &f.dir.join("a.log"));
    let line = error_line(&out);
    eprintln!("(a) exit {code:?}: {line}");
    assert_eq!(code, Some(1));
    assert!(line.contains(&hs.display().to_string()) && line.contains("--rejoin"), "{line}");
    assert!(!out.contains("panicked"), "{out}");
    std::fs::write(&hs, saved).unwrap();
}

/// (b) The WAL's tail cut: the restart exits saying it lost acknowledged entries, and so
/// does the next one, at once, without rejoining the group.
fn cut_log_tail_is_refused(f: &Follower) {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&f.fdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segments.sort();
    let last = segments.pop().expect("a WAL segment");
    let len = std::fs::metadata(&last).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&last).unwrap().set_len(len / 2).unwrap();
    let (code, out) = run_expecting_exit(&f.config_path, &f.data, &f.name, &[], &f.dir.join("b1.log"));
    let line = error_line(&out);
    eprintln!("(b) exit {code:?}: {line}");
    assert_eq!(code, Some(1));
    assert!(line.contains("lost acknowledged log entries") && line.contains("--rejoin"), "{line}");
    assert!(!out.contains("panicked"), "{out}");
    // Restarted again, it refuses at once: it does not rejoin the group to fail again.
    let t = Instant::now();
    let (code, out) = run_expecting_exit(&f.config_path, &f.data, &f.name, &[], &f.dir.join("b2.log"));
    let line = error_line(&out);
    eprintln!("(b) again, exit {code:?} after {} ms: {line}", t.elapsed().as_millis());
    assert_eq!(code, Some(1));
    assert!(line.contains("lost acknowledged log entries") && line.contains("--rejoin"), "{line}");
    assert!(!out.contains("raft role change") && !out.contains("restarting from the log"), "it refused first: {out}");
}

/// (c) `--rejoin`: the follower (replica `r`) is rebuilt from its peers while the load goes
/// on, until its applied index reaches the leader's; returns it.
fn rejoined(f: &Follower, rt: &tokio::runtime::Runtime, addrs: &[SocketAddr], r: usize, load: &Load) -> ServerProc {
    let before_rejoin = load.committed();
    let rejoin_log = f.dir.join("c.log");
    let rejoined_at = Instant::now();
    let stderr = std::fs::File::create(&rejoin_log).unwrap();
    let child = Command::new(EXE)
        .args(["server", "--exit-on-stdin-eof", "--durability", "fsync", "--rejoin", "--node", &f.name, "--config"])
        .arg(&f.config_path)
        .arg("--data-dir")
        .arg(&f.data)
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let server = ServerProc(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (caught_up, leader_applied) = loop {
        let (_, l) = leader(rt, addrs);
        if let Some(s) = status(rt, addrs[r]) {
            if s.applied_index >= l.applied_index && s.applied_index > 0 {
                break (s, l.applied_index);
            }
        }
        let text = std::fs::read_to_string(&rejoin_log).unwrap();
        assert!(!text.contains("luigi: error") && !text.contains("panicked"), "the rebuild failed: {text}");
        assert!(Instant::now() < deadline, "the rebuilt replica did not catch up: {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "(c) rebuilt {} caught up in {} ms: applied {} (leader's {leader_applied}), term {}; \
         {} transfers committed meanwhile",
        f.name,
        rejoined_at.elapsed().as_millis(),
        caught_up.applied_index,
        caught_up.term,
        load.committed() - before_rejoin
    );
    let text = std::fs::read_to_string(&rejoin_log).unwrap();
    for l in text.lines().filter(|l| l.contains("rebuilding") || l.contains("rejoin") || l.contains("snapshot")) {
        eprintln!("(c) log: {l}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&rejoin_log).unwrap().contains("rejoined: caught up") {
        assert!(Instant::now() < deadline, "no rejoin completion in the log");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// After the rebuild: the marker is gone, the old directory kept aside, and the cluster
/// keeps committing with it (a liveness check, not a speed one: a loaded machine may take
/// a while).
fn rebuilt_and_committing(f: &Follower, load: &Load) {
    assert!(!f.fdir.join("raft-rejoin").exists(), "the rejoin marker is gone once caught up");
    let aside = discarded(&f.data, &f.name);
    assert_eq!(aside.len(), 1, "the old directory is kept aside");
    assert!(aside[0].join("raft-damaged").exists());
    let now = load.committed();
    let deadline = Instant::now() + Duration::from_secs(10);
    while load.committed() <= now {
        assert!(Instant::now() < deadline, "no commits within 10 s after the rebuild");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (d) This 1-shard data directory with a 2-shard cluster file: refused.
fn other_shape_is_refused(dir: &Path, data: &Path) {
    let two = dir.join("two-shards");
    std::fs::create_dir_all(&two).unwrap();
    let (two_path, _) = three_replica_cluster(&two, 2, "none", "");
    let (code, out) = run_expecting_exit(&two_path, data, "s0r0", &[], &dir.join("d.log"));
    let line = error_line(&out);
    eprintln!("(d) exit {code:?}: {line}");
    assert_eq!(code, Some(1));
    assert!(line.contains("1 shard(s)") && line.contains("2 shard(s)") && line.contains("refusing"), "{line}");
}

#[test]
fn damaged_raft_state_is_refused_and_rejoin_rebuilds_the_replica() {
    let began = Instant::now();
    let dir = scratch("disk-faults");
    let data = dir.join("data");
    // Followers snapshot often, so the leader compacts and a rebuild may need a snapshot.
    let (config_path, ports) = three_replica_cluster(&dir, 1, "none", "snapshot_entries = 300\n");
    let ports = ports[0];
    let addrs: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
    let logs = dir.join("servers.log");
    let mut servers: Vec<Option<ServerProc>> =
        (0..3).map(|r| Some(start_durable(&config_path, &data, &format!("s0r{r}"), ports[r], &logs))).collect();
    let config = ClusterConfig::load(&config_path).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = rt.block_on(Client::connect(&config, 77)).unwrap();
    assert!(rt.block_on(transfer(&client, TransferArgs { from: 0, to: 1, amount: 0 })).is_committed());
    let load = Load::start(&rt, &client);
    std::thread::sleep(Duration::from_secs(2));
    let (lead, _) = leader(&rt, &addrs);
    let r = (lead + 1) % 3;
    let name = format!("s0r{r}");
    let fdir = data.join(&name);
    eprintln!("leader s0r{lead}, damaged follower {name}, {} transfers so far", load.committed());
    let follower = Follower { config_path, data: data.clone(), dir: dir.clone(), name, fdir };

    servers[r].take().unwrap().kill9();
    lost_hard_state_is_refused(&follower);
    std::thread::sleep(Duration::from_millis(500)); // the cluster commits more meanwhile
    cut_log_tail_is_refused(&follower);
    let before_rejoin = load.committed();
    servers[r] = Some(rejoined(&follower, &rt, &addrs, r, &load));
    rebuilt_and_committing(&follower, &load);
    assert!(load.committed() > before_rejoin);

    load.stop(&rt);
    for s in servers.iter_mut() {
        assert!(s.take().unwrap().shut_down(Duration::from_secs(10)), "a server did not stop");
    }
    other_shape_is_refused(&dir, &data);
    eprintln!("disk faults: done in {} ms; servers' log: {}", began.elapsed().as_millis(), logs.display());
}
