//! Helpers shared by the process-level test files.

#![allow(dead_code)] // each test file uses a subset

pub mod history;
pub mod subset;

pub mod load;
pub mod netns;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use luigi_runtime::client::Client;
use luigi_runtime::net::codec::{decode_payload, encode_frame};
use luigi_runtime::wire::WireMsg;
use luigi_txn::client_core::TxnOutcome;
use luigi_workloads::procedures::{account_key, Transfer, TransferArgs};

/// The `luigi` binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_luigi");

/// A fresh scratch directory for test `name`, unique to this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("luigi-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    // The OS may hand the same free port out again once its listener is closed: never give
    // one out twice in a process (a cluster file with a port twice is refused).
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A server process killed on drop.
pub struct ServerProc(pub Child);

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ServerProc {
    /// `kill -9`: no shutdown path runs.
    pub fn kill9(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    /// Closes the server's stdin (it logs its stats and exits) and waits up to `timeout` for
    /// it to exit; returns false (and kills it) if it did not.
    pub fn shut_down(mut self, timeout: Duration) -> bool {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false // dropped: killed
    }
}

/// A cluster file with `shards` shards of 3 replicas on fresh loopback ports, network scenario
/// `net` and the `[protocol]` lines `protocol` (may be empty), written to `dir/cluster.toml`.
pub fn three_replica_cluster(dir: &Path, shards: u32, net: &str, protocol: &str) -> (PathBuf, Vec<[u16; 3]>) {
    three_replica_cluster_with(dir, shards, &format!("net = \"{net}\""), protocol)
}

/// Like [`three_replica_cluster`] with the file's top-level lines given whole (`net`, `secret`).
pub fn three_replica_cluster_with(
    dir: &Path,
    shards: u32,
    top_level: &str,
    protocol: &str,
) -> (PathBuf, Vec<[u16; 3]>) {
    let ports: Vec<[u16; 3]> = (0..shards).map(|_| [free_port(), free_port(), free_port()]).collect();
    let mut toml = format!("{top_level}\n[protocol]\n{protocol}");
    for p in &ports {
        toml.push_str(&format!(
            "[[shards]]\nreplicas = [\"127.0.0.1:{}\", \"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n",
            p[0], p[1], p[2]
        ));
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, toml).unwrap();
    (path, ports)
}

/// Starts every replica of cluster file `config` (its `ports`, by shard) with fsync
/// durability, data under `data` and logs appended to `log`; slot `3 * shard + replica`.
pub fn start_all(config: &Path, data: &Path, ports: &[[u16; 3]], log: &Path) -> Vec<Option<ServerProc>> {
    let mut servers = Vec::new();
    for (shard, p) in ports.iter().enumerate() {
        for (replica, port) in p.iter().enumerate() {
            servers.push(Some(start_durable(config, data, &format!("s{shard}r{replica}"), *port, log)));
        }
    }
    servers
}

/// Starts server `node` of cluster file `config` with fsync durability and its data under
/// `data`, appending its log (`RUST_LOG=info`) to `log`, and waits until it listens on `port`.
pub fn start_durable(config: &Path, data: &Path, node: &str, port: u16, log: &Path) -> ServerProc {
    start_server(config, data, node, port, log, "fsync")
}

/// Like [`start_durable`] with the given `--durability`.
pub fn start_server(config: &Path, data: &Path, node: &str, port: u16, log: &Path, durability: &str) -> ServerProc {
    start_server_skewed(config, data, node, port, log, durability, 0)
}

/// Like [`start_server`], the server's clock `clock_offset_us` ahead of the machine's
/// (negative: behind; DESIGN.md rule 22).
pub fn start_server_skewed(
    config: &Path,
    data: &Path,
    node: &str,
    port: u16,
    log: &Path,
    durability: &str,
    clock_offset_us: i64,
) -> ServerProc {
    let mut command = Command::new(EXE);
    server_args(&mut command, config, data, node, durability).arg(format!("--clock-offset-us={clock_offset_us}"));
    spawn_server(command, node, SocketAddr::from(([127, 0, 0, 1], port)), log)
}

/// Adds `server` and its arguments for node `node` of cluster file `config` to `command`.
pub fn server_args<'a>(
    command: &'a mut Command,
    config: &Path,
    data: &Path,
    node: &str,
    durability: &str,
) -> &'a mut Command {
    command
        .args(["server", "--exit-on-stdin-eof", "--durability", durability, "--node", node, "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(data)
}

/// Spawns `command` (a server, `RUST_LOG=info`, its log appended to `log`, its stdin held so
/// that it exits with the test) and waits until it listens on `addr`.
pub fn spawn_server(mut command: Command, node: &str, addr: SocketAddr, log: &Path) -> ServerProc {
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = command.env("RUST_LOG", "info").stdin(Stdio::piped()).stderr(stderr).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{node} did not start listening on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    ServerProc(child)
}

/// The replica of `shard` that most recently logged that it serves as the shard leader in the
/// servers' shared log `log`.
pub fn latest_leader(log: &Path, shard: u32) -> Option<u32> {
    let text = std::fs::read_to_string(log).unwrap();
    (0..3u32)
        .filter_map(|r| text.rfind(&format!("serving as the shard leader node=s{shard}r{r}")).map(|at| (at, r)))
        .max()
        .map(|(_, r)| r)
}

/// Runs one bank transfer (a zero amount reads both balances) and returns its outcome.
pub async fn transfer(client: &Client, args: TransferArgs) -> TxnOutcome {
    let keys = vec![account_key(args.from), account_key(args.to)];
    let done =
        client.execute(Transfer::NAME, postcard::to_stdvec(&args).unwrap(), vec![], keys).await.expect("client alive");
    done.outcome
}

/// The balances of the accounts in `pairs`, read with one zero transfer per pair (it returns
/// both balances, from every participant).
pub fn read_balances(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    pairs: impl IntoIterator<Item = (u64, u64)>,
) -> BTreeMap<u64, i64> {
    let mut balances = BTreeMap::new();
    for (from, to) in pairs {
        let outcome = rt.block_on(transfer(client, TransferArgs { from, to, amount: 0 }));
        let TxnOutcome::Ordered { results, .. } = outcome else { panic!("read failed: {outcome:?}") };
        for (_, r) in results {
            let read: Vec<(u64, i64)> = postcard::from_bytes(&r.expect("read committed")).unwrap();
            balances.extend(read);
        }
    }
    balances
}

/// Writes `msgs` as frames in one write (a server reads the later ones right behind the
/// first): what a hand-made client sends.
pub fn send_frames(stream: &mut TcpStream, msgs: &[&WireMsg]) -> std::io::Result<()> {
    let mut buf = bytes::BytesMut::new();
    for msg in msgs {
        encode_frame(*msg, &mut buf).unwrap();
    }
    stream.write_all(&buf)
}

/// The next frame on `stream`; `None` once the server closed it (or its read timeout passed).
pub fn recv_frame(stream: &mut TcpStream) -> Option<WireMsg> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).ok()?;
    let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut payload).ok()?;
    Some(decode_payload(&payload).unwrap())
}
