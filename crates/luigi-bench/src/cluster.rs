//! A local cluster of server processes on loopback, started from the `luigi` binary itself
//! (`luigi server --config FILE --node ID`), with their cluster file, logs and data in a
//! fresh temporary directory (`$TMPDIR/luigi-bench-XXXXXX`).
//!
//! The processes are stopped and the directory removed when the cluster is dropped (on
//! error and on panic included), and on SIGINT, SIGTERM and SIGHUP (see [`crate::cleanup`]).
//! Each server also exits by itself when its standard input closes, so no server outlives the
//! benchmark even if it is killed with SIGKILL (the directory then stays).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use luigi_runtime::config::{ClusterConfig, NodeId};

use crate::cleanup::{self, Cleanup};

/// How long servers get to start listening.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Running server processes.
pub struct LocalCluster {
    config: ClusterConfig,
    procs: Arc<Procs>,
    durability: String,
}

/// What a local cluster leaves on the machine: its server processes and its directory. Also
/// registered for [`cleanup::cleanup_all`] (signals, watchdog).
struct Procs {
    children: Mutex<Vec<(NodeId, Child)>>,
    /// Removed when dropped, after the servers are stopped (see `Drop for Procs`).
    dir: tempfile::TempDir,
}

impl Procs {
    /// A fresh directory under `parent`, registered for cleanup.
    fn new(parent: &Path) -> anyhow::Result<Arc<Self>> {
        let dir = tempfile::Builder::new()
            .prefix("luigi-bench-")
            .tempdir_in(parent)
            .with_context(|| format!("cannot create a directory in {}", parent.display()))?;
        let procs = Arc::new(Procs { children: Mutex::new(Vec::new()), dir });
        let registered: Arc<dyn Cleanup> = procs.clone();
        cleanup::register(&registered);
        Ok(procs)
    }

    fn children(&self) -> MutexGuard<'_, Vec<(NodeId, Child)>> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kills and reaps every server.
    fn stop(&self) {
        kill_all(&mut self.children());
    }
}

fn kill_all(children: &mut Vec<(NodeId, Child)>) {
    for (_, child) in children.iter_mut() {
        let _ = child.kill();
    }
    for (_, child) in children.iter_mut() {
        let _ = child.wait();
    }
    children.clear();
}

impl Cleanup for Procs {
    fn cleanup(&self) {
        let mut children = self.children();
        kill_all(&mut children);
        // Still under the lock, which servers are started under: one started after this
        // finds no directory for its log and is not started.
        let _ = std::fs::remove_dir_all(self.dir.path());
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        // Before the fields drop: the servers stop writing before their directory goes.
        self.stop();
    }
}

impl LocalCluster {
    /// Writes `config` (its addresses are replaced by free loopback ports, and each server
    /// is given a metrics address with `metrics`, none without) into a fresh temporary
    /// directory and starts one `exe server` process per node.
    pub fn start(exe: &Path, config: ClusterConfig, durability: &str, metrics: bool) -> anyhow::Result<Self> {
        Self::start_in(&std::env::temp_dir(), exe, config, durability, metrics)
    }

    /// [`LocalCluster::start`] with the temporary directory made under `parent`.
    pub fn start_in(
        parent: &Path,
        exe: &Path,
        mut config: ClusterConfig,
        durability: &str,
        metrics: bool,
    ) -> anyhow::Result<Self> {
        cleanup::install_signal_handlers()?;
        let procs = Procs::new(parent)?;
        let dir = procs.dir.path().to_path_buf();
        assign_ports(&mut config, metrics)?;
        if config.secret.is_none() {
            // The servers authenticate each other as in production; the file is private to
            // this run's directory.
            config.secret = Some(random_secret());
        }
        let path = dir.join("cluster.toml");
        std::fs::write(&path, config.to_toml()).with_context(|| format!("cannot write {}", path.display()))?;
        let mut cluster = LocalCluster { config, procs, durability: durability.to_string() };
        for (s, shard) in cluster.config.shards.iter().enumerate() {
            for r in 0..shard.replicas.len() {
                let node = NodeId { shard: s as u32, replica: r as u32 };
                // Under the lock: a signal's cleanup either sees this child or waits for it.
                let mut children = cluster.procs.children();
                let child = cluster.spawn(exe, &path, node)?;
                children.push((node, child));
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
            .arg(self.dir().join("data"))
            .arg("--config")
            .arg(config_path)
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {} server {}", exe.display(), node.name()))
    }

    fn log_path(&self, node: NodeId) -> PathBuf {
        self.dir().join(format!("{}.log", node.name()))
    }

    /// The directory of the cluster file, the logs and the data (removed with the cluster).
    pub fn dir(&self) -> &Path {
        self.procs.dir.path()
    }

    /// The process ids of the servers.
    pub fn pids(&self) -> Vec<u32> {
        self.procs.children().iter().map(|(_, child)| child.id()).collect()
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let nodes: Vec<NodeId> = self.procs.children().iter().map(|(node, _)| *node).collect();
        for (i, node) in nodes.into_iter().enumerate() {
            let addr = self.config.node_addr(node).expect("node of this config");
            loop {
                let exited = match self.procs.children().get_mut(i) {
                    Some((_, child)) => child.try_wait()?,
                    None => bail!("the servers were stopped during start-up"),
                };
                if let Some(status) = exited {
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
        let mut exited = None;
        for (node, child) in self.procs.children().iter_mut() {
            if let Some(status) = child.try_wait()? {
                exited = Some((*node, status));
                break;
            }
        }
        if let Some((node, status)) = exited {
            bail!("server {} exited ({status}):\n{}", node.name(), self.log_tail(node));
        }
        Ok(())
    }

    /// Stops every server (also done on drop, which then removes the directory).
    pub fn stop(&mut self) {
        self.procs.stop();
    }
}

/// Gives every server of `config` a free loopback port, and with `metrics` a metrics address
/// of its own (docs/METRICS.md): the benchmark's servers serve their metrics unless told not
/// to (`luigi bench --metrics off`, to measure what serving them costs).
fn assign_ports(config: &mut ClusterConfig, metrics: bool) -> anyhow::Result<()> {
    // Every listener is held until all ports are picked, so no port is handed out twice.
    let mut held = Vec::new();
    for shard in &mut config.shards {
        for addr in &mut shard.replicas {
            let listener = free_loopback_listener()?;
            *addr = listener.local_addr()?.to_string();
            held.push(listener);
        }
        shard.metrics.clear();
        let served = if metrics { shard.replicas.len() } else { 0 };
        for _ in 0..served {
            let listener = free_loopback_listener()?;
            shard.metrics.push(listener.local_addr()?.to_string());
            held.push(listener);
        }
    }
    Ok(())
}

fn free_loopback_listener() -> anyhow::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port")
}

/// 128 random bits as hex, from the standard library's per-process random hash keys.
fn random_secret() -> String {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id().into());
        h.finish()
    };
    format!("{:016x}{:016x}", half(), half())
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_wan::Scenario;

    fn one_node() -> ClusterConfig {
        ClusterConfig::local(1, Scenario::None, &[0])
    }

    /// A cluster whose "servers" are `sleep` processes, in a directory under `parent`.
    fn sleeping_cluster(parent: &Path, n: usize) -> (LocalCluster, PathBuf, Vec<u32>) {
        let procs = Procs::new(parent).unwrap();
        for replica in 0..n as u32 {
            let child = Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().unwrap();
            procs.children().push((NodeId { shard: 0, replica }, child));
        }
        let cluster = LocalCluster { config: one_node(), procs, durability: "none".into() };
        let dir = cluster.dir().to_path_buf();
        let pids = cluster.pids();
        assert!(dir.is_dir() && pids.len() == n);
        (cluster, dir, pids)
    }

    fn gone(pid: u32) -> bool {
        // Reaped processes leave /proc (Linux); elsewhere this check is vacuous.
        !Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn every_server_gets_a_port_and_a_metrics_address_the_file_accepts() {
        let mut config = ClusterConfig::local(2, Scenario::None, &[0, 0]);
        config.shards[1].replicas.push("127.0.0.1:0".into());
        let mut without = config.clone();
        assign_ports(&mut config, true).unwrap();
        for shard in &config.shards {
            assert_eq!(shard.metrics.len(), shard.replicas.len(), "one metrics address per replica");
        }
        assign_ports(&mut without, false).unwrap();
        assert!(without.shards.iter().all(|s| s.metrics.is_empty()), "--metrics off: none served");
        let path = Path::new("generated.toml");
        let reread = ClusterConfig::parse(&config.to_toml(), path).expect("valid: every address distinct");
        assert!(reread.metrics_addr(NodeId { shard: 1, replica: 1 }).is_some());
    }

    #[test]
    fn a_failed_start_leaves_no_directory() {
        let parent = tempfile::tempdir().unwrap();
        let err =
            LocalCluster::start_in(parent.path(), Path::new("/bin/false"), one_node(), "none", true).err().unwrap();
        assert!(format!("{err:#}").contains("exited"), "{err:#}");
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "directory removed");
    }

    #[test]
    fn a_panic_stops_the_servers_and_removes_the_directory() {
        let parent = tempfile::tempdir().unwrap();
        let (cluster, dir, pids) = sleeping_cluster(parent.path(), 2);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _cluster = cluster;
            panic!("a bench panics");
        }));
        assert!(panicked.is_err());
        assert!(!dir.exists(), "directory removed while unwinding");
        assert!(pids.iter().all(|&pid| gone(pid)), "servers killed and reaped");
    }

    #[test]
    fn the_signal_cleanup_stops_the_servers_and_removes_the_directory() {
        let parent = tempfile::tempdir().unwrap();
        let (cluster, dir, pids) = sleeping_cluster(parent.path(), 2);
        // What the signal handler and the watchdog run (through the registry) before exiting.
        Cleanup::cleanup(&*cluster.procs);
        assert!(!dir.exists());
        assert!(pids.iter().all(|&pid| gone(pid)));
        assert!(cluster.pids().is_empty());
        drop(cluster); // and dropping after it is harmless
    }
}
