//! `luigi server`: one server node of a cluster, until Ctrl-C, SIGTERM or (for `bench`'s
//! local clusters) the end of its standard input.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use luigi_runtime::config::{ClusterConfig, NodeId};
use luigi_runtime::server::{Server, StorageOptions};

use crate::DurabilityArg;

#[derive(Args)]
pub(crate) struct ServerArgs {
    /// Cluster file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Node to run, e.g. s0r0 (shard 0, replica 0).
    #[arg(long)]
    node: String,
    /// Directory for the replica's Raft log and snapshots (one sub-directory per node), with
    /// one replica per shard or more; a restart on the same directory recovers from it.
    #[arg(long, default_value = "luigi-data")]
    data_dir: PathBuf,
    /// fsync: every log batch is fdatasync'ed before it counts; none: written, not synced.
    #[arg(long, default_value = "fsync")]
    durability: DurabilityArg,
    /// Rebuild this replica from its peers: move its data directory aside (to
    /// `<dir>.discarded-<unix time>`) and start it empty; it catches up from the shard's
    /// leader and neither votes nor campaigns until it has. For a replica refused at start
    /// (lost or damaged Raft state). The rest of its shard must have a leader.
    #[arg(long)]
    rejoin: bool,
    /// Exit when standard input closes (used by `bench` so servers never outlive it).
    #[arg(long, hide = true)]
    exit_on_stdin_eof: bool,
    /// Run this server's clock this many microseconds ahead (negative: behind) of the
    /// machine's: for tests of clock skew (DESIGN.md rule 22), never for a real cluster.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    clock_offset_us: i64,
}

/// Runs the server until it is told to stop.
pub(crate) fn server(args: ServerArgs) -> anyhow::Result<()> {
    let config = ClusterConfig::load(&args.config)?;
    let node: NodeId = args.node.parse().map_err(anyhow::Error::msg)?;
    luigi_runtime::clock::set_offset_us(args.clock_offset_us);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let result = rt.block_on(async move {
        let storage =
            StorageOptions { data_dir: args.data_dir.clone(), durability: args.durability.wal(), rejoin: args.rejoin };
        let server = Server::bind(config, node, luigi_workloads::procedures::builtins(), storage).await?;
        let exit_on_eof = args.exit_on_stdin_eof;
        let shutdown = async move {
            let stdin_closed = async {
                if exit_on_eof {
                    use tokio::io::AsyncReadExt;
                    let mut buf = [0u8; 64];
                    let mut stdin = tokio::io::stdin();
                    while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
                } else {
                    std::future::pending::<()>().await;
                }
            };
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let terminated = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = stdin_closed => {}
                _ = terminated => {}
            }
        };
        server.run(shutdown).await
    });
    // A server stopping on an error may have a blocking read of stdin in flight: do not wait
    // for it.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}
