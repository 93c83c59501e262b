//! `luigi top`: a live view of a running cluster built only from its servers' Prometheus
//! metrics (`GET /metrics` at the cluster file's `metrics` addresses; docs/METRICS.md). Every
//! interval it scrapes every replica at once, each within its own timeout ([`scrape`]); works
//! out the interval's rates and latency quantiles from the two latest rounds ([`figures`],
//! with [`counter`] and [`histogram`]'s arithmetic); and draws one frame ([`render`], a pure
//! function of the figures) after clearing the screen with plain ANSI codes. A replica that
//! does not answer is shown with the reason, never fatal.

mod counter;
mod figures;
mod histogram;
mod names;
mod render;
mod scrape;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use luigi_runtime::config::{ClusterConfig, NodeId};

use render::Header;
use scrape::{Reading, Target};

/// Clears the screen and moves the cursor home (ANSI), before each live frame.
const CLEAR: &str = "\x1b[2J\x1b[H";

/// Appended to `luigi top --help`.
pub const TOP_HELP: &str = "\
Shard columns: the replica that leads (`elect`: elected, not serving yet; `none`), the
highest Raft term, transactions committed per second, commit latency and Raft log sync time
(median and 99th percentile over the interval, from the servers' histograms), the leader's
hold queue (transactions admitted, not executed), its watermark lag, fast-path accept records
written by every replica per commit (ACC/C: up to replicas - 1 when every transaction takes
the fast path; 0 when none does), and how many replicas answered. Replica lines: state (DOWN
with the reason), Raft role and term, log entries applied per second, leader changes seen
since the replica started, and its clock offset to each peer. `-`: no figure this interval.

Every shard of the cluster file needs its `metrics` addresses (docs/METRICS.md). Ctrl-C ends
the live view.";

/// `luigi top` options.
#[derive(Args)]
pub struct TopArgs {
    /// Cluster file (TOML) of the running servers, with a `metrics` address per replica.
    #[arg(long)]
    cluster: PathBuf,
    /// Seconds between frames, 0.1 to 3600 (rates and quantiles are over this interval).
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Milliseconds each replica has to answer a scrape (connect, ask, read it all), 1 to 60000.
    #[arg(long, default_value_t = 800)]
    timeout_ms: u64,
    /// Print one frame (from two scrapes one interval apart) without clearing the screen, and
    /// exit: for scripts and tests.
    #[arg(long)]
    once: bool,
}

/// Every replica's metrics address, by shard then replica.
fn targets(config: &ClusterConfig) -> anyhow::Result<Vec<Target>> {
    let mut targets = Vec::new();
    for (shard, s) in config.shards.iter().enumerate() {
        anyhow::ensure!(
            !s.metrics.is_empty(),
            "shard {shard} has no `metrics` addresses in the cluster file: luigi top reads the servers' \
             /metrics (docs/METRICS.md)"
        );
        for replica in 0..s.replicas.len() as u32 {
            let node = NodeId { shard: shard as u32, replica };
            let addr = config.metrics_addr(node).context("a checked cluster file has every metrics address")?;
            targets.push(Target { shard: shard as u32, replica, addr });
        }
    }
    Ok(targets)
}

/// The wall time as `HH:MM:SS UTC`.
fn utc_now() -> String {
    let s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// Runs `luigi top`.
pub fn top(args: TopArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.interval.is_finite() && (0.1..=3600.0).contains(&args.interval),
        "--interval must be 0.1 to 3600 seconds, not {}",
        args.interval
    );
    anyhow::ensure!((1..=60_000).contains(&args.timeout_ms), "--timeout-ms must be 1 to 60000");
    let config = ClusterConfig::load(&args.cluster)?;
    let targets = targets(&config)?;
    let view = View {
        targets,
        interval: Duration::from_secs_f64(args.interval),
        timeout: Duration::from_millis(args.timeout_ms),
        once: args.once,
        cluster: args.cluster.display().to_string(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async {
        if view.once {
            return view.frames().await;
        }
        // Registered once, before the first frame: a Ctrl-C while a scrape is under way is
        // not lost.
        let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("cannot watch for Ctrl-C")?;
        tokio::select! {
            result = view.frames() => result,
            _ = interrupt.recv() => Ok(ExitCode::SUCCESS),
        }
    })
}

/// What `luigi top` watches and how.
struct View {
    targets: Vec<Target>,
    interval: Duration,
    timeout: Duration,
    once: bool,
    cluster: String,
}

impl View {
    /// Scrapes every interval and draws a frame from each round and the one before; with
    /// `once`, the first frame that has a round before it, then returns.
    async fn frames(&self) -> anyhow::Result<ExitCode> {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is at once
        let mut previous: Option<Vec<Reading>> = None;
        loop {
            let current = scrape::read_all(&self.targets, self.timeout).await;
            if !self.once || previous.is_some() {
                let frame = figures::frame(&self.targets, previous.as_deref(), &current);
                match self.print(&frame) {
                    // Piped into `head` or the like: a reader that closed the pipe ends the view.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
                    written => written.context("writing to standard output")?,
                }
                if self.once {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            previous = Some(current);
            ticks.tick().await;
        }
    }

    /// Writes `frame` to standard output in one write (after clearing the screen, live).
    fn print(&self, frame: &figures::Frame) -> std::io::Result<()> {
        let header = Header { cluster: self.cluster.clone(), interval_s: self.interval.as_secs_f64(), time: utc_now() };
        let mut text = if self.once { String::new() } else { CLEAR.to_string() };
        for line in render::render(&header, frame) {
            text.push_str(&line);
            text.push('\n');
        }
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    }
}
