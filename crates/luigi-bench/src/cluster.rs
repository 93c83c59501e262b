//! A local cluster of server processes on loopback, started from the `luigi` binary itself
//! (`luigi server --config FILE --node ID`). The processes are stopped when the cluster is
//! dropped, on error included; each also exits by itself when its standard input closes, so
//! no server outlives the benchmark even if the benchmark is killed.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use luigi_runtime::config::{ClusterConfig, NodeId};

/// How long servers get to start listening.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Running server processes.
pub struct LocalCluster {
    config: ClusterConfig,
    dir: PathBuf,
    children: Vec<(NodeId, Child)>,
    durability: String,
}

impl LocalCluster {
    /// Writes `config` (its addresses are replaced by free loopback ports) into a fresh
    /// directory and starts one `exe server` process per node.
    pub fn start(exe: &Path, mut config: ClusterConfig, durability: &str) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("luigi-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // Every listener is held until all ports are picked, so no port is handed out twice.
        let mut held = Vec::new();
        for shard in &mut config.shards {
            for addr in &mut shard.replicas {
                let listener = free_loopback_listener()?;
                *addr = listener.local_addr()?.to_string();
                held.push(listener);
            }
        }
        drop(held);
        let path = dir.join("cluster.toml");
        std::fs::write(&path, config.to_toml()).with_context(|| format!("cannot write {}", path.display()))?;
        let mut cluster = LocalCluster { config, dir, children: Vec::new(), durability: durability.to_string() };
        for (s, shard) in cluster.config.shards.clone().iter().enumerate() {
            for r in 0..shard.replicas.len() {
                let node = NodeId { shard: s as u32, replica: r as u32 };
                let child = cluster.spawn(exe, &path, node)?;
                cluster.children.push((node, child));
            }
        }
        cluster.wait_ready()?;
        Ok(cluster)
    }

    fn spawn(&self, exe: &Path, config_path: &Path, node: NodeId) -> anyhow::Result<Child> {
        let log_path = self.log_path(node);
        let log = std::fs::File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
        Command::new(exe)
            .args(["server", "--exit-on-stdin-eof", "--node", &node.name(), "--durability", &self.durability])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--config")
            .arg(config_path)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {} server {}", exe.display(), node.name()))
    }

    fn log_path(&self, node: NodeId) -> PathBuf {
        self.dir.join(format!("{}.log", node.name()))
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        for i in 0..self.children.len() {
            let node = self.children[i].0;
            let addr = self.config.node_addr(node).expect("node of this config");
            loop {
                if let Some(status) = self.children[i].1.try_wait()? {
                    bail!("server {} exited ({status}) during start-up:\n{}", node.name(), self.log_tail(node));
                }
                if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "server {} not listening on {addr} after {READY_TIMEOUT:?}:\n{}",
                        node.name(),
                        self.log_tail(node)
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// The last lines of a node's log.
    pub fn log_tail(&self, node: NodeId) -> String {
        let text = std::fs::read_to_string(self.log_path(node)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The cluster file as the servers read it.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Errors if a server died.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for i in 0..self.children.len() {
            let node = self.children[i].0;
            if let Some(status) = self.children[i].1.try_wait()? {
                bail!("server {} exited ({status}):\n{}", node.name(), self.log_tail(node));
            }
        }
        Ok(())
    }

    /// Stops every server (also done on drop).
    pub fn stop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
        }
        for (_, child) in &mut self.children {
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_loopback_listener() -> anyhow::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
