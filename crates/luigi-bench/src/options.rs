//! The options every benchmark shares (the cluster to run against, the client threads, the
//! timing, the results file), checked in one place before anything starts: no server is
//! spawned and no directory made for options that [`BenchOptions::validate`] refuses. Each
//! refusal is one line naming the `luigi bench` option and the value refused. The workload's
//! own parameters are checked by the workload (e.g.
//! [`MicroOptions::validate`](crate::workload::micro::MicroOptions::validate)).

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use luigi_runtime::config::ClusterConfig;
use luigi_txn::types::Protocol;
use luigi_wan::Scenario;

/// Most shards of a local cluster: each replica is a server process on this machine.
pub const MAX_SHARDS: u32 = 64;
/// Most replicas per shard of a local cluster (64 x 7 = 448 server processes at most).
pub const MAX_REPLICAS: u32 = 7;
/// Most client threads: each is an OS thread with its own client and its connections to
/// every replica.
pub const MAX_THREADS: u32 = 1024;
/// Most transactions a thread keeps outstanding: each holds client memory until answered
/// (a window of 4294967295 reached 9.5 GB in 8 s), and past the cluster's capacity a larger
/// window only queues transactions up, it adds no load.
pub const MAX_IN_FLIGHT: u32 = 100_000;
/// Most transactions outstanding over all threads (threads x in-flight), for the same reason.
pub const MAX_OUTSTANDING: u64 = 1_000_000;
/// Longest measured interval and warm-up: a day.
pub const MAX_SECONDS: f64 = 86_400.0;
/// Shortest measured interval: below it a run measures next to nothing (and a zero-length
/// interval would divide by zero).
pub const MIN_DURATION_S: f64 = 0.1;
/// Largest coordinator headroom, in µs: 60 s (the headroom delays every transaction by that
/// much), the cluster file's own bound.
pub const MAX_HEADROOM_US: u64 = luigi_runtime::config::HEADROOM_US_MAX;
/// Highest open-loop rate, transactions per second over all threads (far above what one
/// machine's cluster commits; a schedule finer than this measures the client, not it).
pub const MAX_RATE_TPS: f64 = 10_000_000.0;

/// The shared options, as given on the command line (`None`: not given).
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// `--shards` (local cluster only; default 1).
    pub shards: Option<u32>,
    /// `--replicas` (local cluster only; default 1).
    pub replicas: Option<u32>,
    /// `--net` (local cluster only; default same-region).
    pub net: Option<Vec<Scenario>>,
    /// `--durability` (local cluster only; default fsync): "fsync" or "none".
    pub durability: Option<&'static str>,
    /// `--threads`: each entry is a run.
    pub threads: Vec<u32>,
    /// `--in-flight`.
    pub in_flight: u32,
    /// `--duration`, seconds.
    pub duration_s: f64,
    /// `--warmup`, seconds.
    pub warmup_s: f64,
    /// `--headroom-us`.
    pub headroom_us: Option<u64>,
    /// `--adaptive-headroom on|off` (`[protocol] adaptive_headroom`; DESIGN.md rule 1):
    /// applies to a cluster file too (the client's coordinator applies it).
    pub adaptive_headroom: Option<bool>,
    /// `--json`.
    pub json: PathBuf,
    /// `--cluster`.
    pub cluster: Option<PathBuf>,
    /// `--protocol` (default: luigi, or the cluster file's `[protocol] kind`), as given.
    pub protocol: Option<String>,
    /// `--fast-path on|off` (local cluster only): the cluster file's `[protocol] fast_path`
    /// (DESIGN.md, "The fast path"). Default: on for Luigi's runs; `on` is Luigi's only.
    pub fast_path: Option<bool>,
    /// `--rate`: open loop at this many transactions per second over all threads (`None`:
    /// closed loop); `--in-flight` is then each thread's bound.
    pub rate: Option<f64>,
    /// `--metrics on|off` (default on): the servers' metrics served (a local cluster) and
    /// scraped around the measured interval.
    pub metrics: Option<bool>,
    /// `--read-only-path on|off` (`[protocol] read_only_path`; DESIGN.md rule 23): written into
    /// the local cluster's file (default: on for Luigi's runs; `on` is Luigi's only). With a
    /// cluster file, `off` applies to this client only (its read-only transactions take the
    /// read-write path) and `on` only repeats the file: its servers keep versions or not.
    pub read_only_path: Option<bool>,
    /// `--max-clock-offset-us` (local cluster only): the cluster file's `[protocol]
    /// max_clock_offset_us`, the clock bound (DESIGN.md rule 22) a snapshot read waits out.
    pub max_clock_offset_us: Option<u64>,
    /// `--client-near REPLICA` (local cluster only): the client sits next to replica
    /// `REPLICA` of every shard (`[[links]]` between `client` and `s<shard>r<REPLICA>` with
    /// no delay, both ways); every other link keeps the scenario's delay.
    pub client_near: Option<u32>,
}

/// The cluster a benchmark runs against.
#[derive(Clone, Debug)]
pub enum Target {
    /// A local cluster started for each run, one per network scenario.
    Local {
        /// Shards.
        shards: u32,
        /// Replicas per shard.
        replicas: u32,
        /// Network scenarios, each run in turn.
        nets: Vec<Scenario>,
        /// "fsync" or "none".
        durability: &'static str,
        /// Luigi's fast path on (for Luigi's runs; the baselines have none).
        fast_path: bool,
        /// The client next to this replica of every shard (`None`: the scenario's delay).
        client_near: Option<u32>,
    },
    /// The servers of a cluster file (already running).
    File {
        /// The cluster file.
        path: PathBuf,
        /// Its content, as loaded and checked.
        config: Box<ClusterConfig>,
    },
}

/// Validated options: what the runs use.
#[derive(Clone, Debug)]
pub struct BenchPlan {
    /// The cluster.
    pub target: Target,
    /// Client threads, one run per entry.
    pub threads: Vec<u32>,
    /// Outstanding transactions per thread.
    pub in_flight: u32,
    /// Measured interval.
    pub duration: Duration,
    /// Warm-up.
    pub warmup: Duration,
    /// Coordinator headroom override (applies to the cluster file too: the headroom is
    /// applied by the client's coordinator only, the servers do not use it).
    pub headroom_us: Option<u64>,
    /// Adaptive headroom override (`[protocol] adaptive_headroom`), likewise the client's.
    pub adaptive_headroom: Option<bool>,
    /// Read-only path override (`[protocol] read_only_path`): a local cluster's (its servers
    /// and clients), or a cluster file's client's, turned off only.
    pub read_only_path: Option<bool>,
    /// The local cluster's clock bound (`[protocol] max_clock_offset_us`), if given.
    pub max_clock_offset_us: Option<u64>,
    /// Results file, checked writable.
    pub json: PathBuf,
    /// The protocols to run, each in turn for every network and thread count (side by side,
    /// same run): written into each local cluster's file; a cluster file's own (which
    /// `--protocol` may only repeat).
    pub protocols: Vec<Protocol>,
    /// Open-loop rate, transactions per second (`None`: closed loop).
    pub rate_tps: Option<f64>,
    /// Serve (a local cluster) and scrape the servers' metrics.
    pub metrics: bool,
}

impl BenchPlan {
    /// Shards of the target cluster.
    pub fn shards(&self) -> u32 {
        match &self.target {
            Target::Local { shards, .. } => *shards,
            Target::File { config, .. } => config.shard_count(),
        }
    }
}

fn invalid(option: &str, value: impl Display, why: impl Display) -> anyhow::Error {
    anyhow!("invalid {option} {value}: {why}")
}

impl BenchOptions {
    /// Checks every option, then loads the cluster file (if any) and checks that the results
    /// file can be written; starts nothing.
    pub fn validate(&self) -> anyhow::Result<BenchPlan> {
        self.check_ranges()?;
        let asked = self.asked_protocols()?;
        let target = match &self.cluster {
            Some(path) => {
                // The error's own text only: its source repeats it.
                let config = ClusterConfig::load(path).map_err(|e| invalid("--cluster", path.display(), e))?;
                Target::File { path: path.clone(), config: Box::new(config) }
            }
            None => Target::Local {
                shards: self.shards.unwrap_or(1),
                replicas: self.replicas.unwrap_or(1),
                nets: self.net.clone().unwrap_or_else(|| vec![Scenario::SameRegion]),
                durability: self.durability.unwrap_or("fsync"),
                fast_path: self.fast_path.unwrap_or(true),
                client_near: self.client_near,
            },
        };
        let protocols = self.protocols(&target, asked)?;
        check_writable(&self.json)?;
        Ok(BenchPlan {
            target,
            threads: self.threads.clone(),
            in_flight: self.in_flight,
            duration: Duration::from_secs_f64(self.duration_s),
            warmup: Duration::from_secs_f64(self.warmup_s),
            headroom_us: self.headroom_us,
            adaptive_headroom: self.adaptive_headroom,
            read_only_path: self.read_only_path,
            max_clock_offset_us: self.max_clock_offset_us,
            json: self.json.clone(),
            protocols,
            rate_tps: self.rate,
            metrics: self.metrics.unwrap_or(true),
        })
    }

    /// `--protocol`'s list, each named once (`None`: not given).
    fn asked_protocols(&self) -> anyhow::Result<Option<Vec<Protocol>>> {
        Ok(match &self.protocol {
            Some(list) => {
                let mut protocols = Vec::new();
                for name in list.split(',') {
                    let p = name.trim().parse::<Protocol>().map_err(|e| invalid("--protocol", name, e))?;
                    ensure!(!protocols.contains(&p), invalid("--protocol", list, format_args!("{p} is listed twice")));
                    protocols.push(p);
                }
                Some(protocols)
            }
            None => None,
        })
    }

    /// The protocols to run on `target`, of those `asked`: Luigi's switches turned on refuse
    /// the others on a local cluster, and a cluster file's servers run their own.
    fn protocols(&self, target: &Target, asked: Option<Vec<Protocol>>) -> anyhow::Result<Vec<Protocol>> {
        Ok(match (target, asked) {
            (Target::Local { .. }, Some(asked)) if asked != [Protocol::Luigi] => {
                for (option, on) in [("--fast-path", self.fast_path), ("--read-only-path", self.read_only_path)] {
                    let asked: Vec<&str> = asked.iter().map(|p| p.name()).collect();
                    let why = format_args!("{option} on is Luigi's: use --protocol luigi");
                    ensure!(on != Some(true), invalid("--protocol", asked.join(","), why));
                }
                asked
            }
            (Target::Local { .. }, asked) => asked.unwrap_or_else(|| vec![Protocol::Luigi]),
            (Target::File { path, config }, asked) => {
                let runs = config.protocol();
                ensure!(
                    self.read_only_path != Some(true) || config.read_only_path(),
                    invalid(
                        "--read-only-path",
                        "on",
                        format_args!(
                            "the servers of {} run without it (its [protocol] read_only_path, off by default \
                             only): they keep no versions for snapshot reads",
                            path.display()
                        )
                    )
                );
                if let Some(asked) = asked.filter(|a| *a != [runs]) {
                    let asked: Vec<&str> = asked.iter().map(|p| p.name()).collect();
                    bail!(invalid(
                        "--protocol",
                        asked.join(","),
                        format_args!(
                            "the servers of {} run {runs} (its [protocol] kind): with --cluster, the file decides",
                            path.display()
                        )
                    ));
                }
                vec![runs]
            }
        })
    }

    /// Every rule that needs no file system.
    fn check_ranges(&self) -> anyhow::Result<()> {
        self.check_cluster_shape()?;
        self.check_load()?;
        self.check_times()
    }

    /// The local cluster's shape: options only a local cluster takes, its shards and
    /// replicas, its network scenarios.
    fn check_cluster_shape(&self) -> anyhow::Result<()> {
        if self.cluster.is_some() {
            let local_only: Vec<&str> = [
                ("--shards", self.shards.is_some()),
                ("--replicas", self.replicas.is_some()),
                ("--net", self.net.is_some()),
                ("--durability", self.durability.is_some()),
                ("--fast-path", self.fast_path.is_some()),
                ("--client-near", self.client_near.is_some()),
                ("--max-clock-offset-us", self.max_clock_offset_us.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, given)| given.then_some(name))
            .collect();
            ensure!(
                local_only.is_empty(),
                "{} cannot be used with --cluster: the cluster file and its running servers decide the shards, \
                 replicas, network scenario and links, durability and fast path (these options only shape the local \
                 cluster the benchmark starts without --cluster)",
                local_only.join(", ")
            );
        }
        if let Some(shards) = self.shards {
            ensure!(shards >= 1, invalid("--shards", shards, "a cluster needs at least 1 shard"));
            ensure!(
                shards <= MAX_SHARDS,
                invalid(
                    "--shards",
                    shards,
                    format_args!(
                        "a local cluster runs every replica as a process on this machine: at most {MAX_SHARDS} shards \
                         (of at most {MAX_REPLICAS} replicas)"
                    )
                )
            );
        }
        if let Some(replicas) = self.replicas {
            ensure!(replicas >= 1, invalid("--replicas", replicas, "a shard needs at least 1 replica"));
            ensure!(
                replicas <= MAX_REPLICAS,
                invalid(
                    "--replicas",
                    replicas,
                    format_args!(
                        "a local cluster runs every replica as a process on this machine: at most {MAX_REPLICAS} \
                         replicas per shard (and {MAX_SHARDS} shards)"
                    )
                )
            );
        }
        if let Some(net) = &self.net {
            ensure!(!net.is_empty(), "invalid --net: give at least one network scenario");
        }
        if let Some(near) = self.client_near {
            let replicas = self.replicas.unwrap_or(1);
            ensure!(
                near < replicas,
                invalid(
                    "--client-near",
                    near,
                    format_args!("a replica index of the shards' {replicas} replica(s): from 0 to {}", replicas - 1)
                )
            );
        }
        Ok(())
    }

    /// The offered load: client threads, transactions outstanding per thread and in all.
    fn check_load(&self) -> anyhow::Result<()> {
        ensure!(!self.threads.is_empty(), "invalid --threads: give at least one thread count");
        // The whole list, before the first run starts.
        for &threads in &self.threads {
            ensure!(threads >= 1, invalid("--threads", threads, "a run needs at least 1 client thread"));
            ensure!(
                threads <= MAX_THREADS,
                invalid(
                    "--threads",
                    threads,
                    format_args!(
                        "at most {MAX_THREADS} client threads (each is an OS thread with its own connections to every \
                         replica)"
                    )
                )
            );
        }
        ensure!(self.in_flight >= 1, invalid("--in-flight", 0, "each thread needs at least 1 transaction outstanding"));
        ensure!(
            self.in_flight <= MAX_IN_FLIGHT,
            invalid(
                "--in-flight",
                self.in_flight,
                format_args!(
                    "at most {MAX_IN_FLIGHT} transactions outstanding per thread (each holds client memory until \
                     answered; past the cluster's capacity more only queue up)"
                )
            )
        );
        let most_threads = self.threads.iter().copied().max().unwrap_or(1);
        let outstanding = u64::from(most_threads) * u64::from(self.in_flight);
        ensure!(
            outstanding <= MAX_OUTSTANDING,
            invalid(
                "--in-flight",
                format_args!("{} with --threads {most_threads}", self.in_flight),
                format_args!(
                    "{outstanding} transactions outstanding; at most {MAX_OUTSTANDING} over all threads (threads x \
                     in-flight)"
                )
            )
        );
        Ok(())
    }

    /// The measured interval, the warm-up and the headroom.
    fn check_times(&self) -> anyhow::Result<()> {
        ensure!(
            self.duration_s.is_finite() && (MIN_DURATION_S..=MAX_SECONDS).contains(&self.duration_s),
            invalid(
                "--duration",
                format_args!("{:?}", self.duration_s),
                format_args!("the measured interval must be from {MIN_DURATION_S} to {MAX_SECONDS} seconds (a day)")
            )
        );
        ensure!(
            self.warmup_s.is_finite() && (0.0..=MAX_SECONDS).contains(&self.warmup_s),
            invalid(
                "--warmup",
                format_args!("{:?}", self.warmup_s),
                format_args!("the warm-up must be from 0 to {MAX_SECONDS} seconds (a day)")
            )
        );
        if let Some(rate) = self.rate {
            ensure!(
                rate.is_finite() && rate > 0.0 && rate <= MAX_RATE_TPS,
                invalid(
                    "--rate",
                    format_args!("{rate:?}"),
                    format_args!(
                        "an open-loop rate is a number of transactions per second above 0, at most {MAX_RATE_TPS}"
                    )
                )
            );
        }
        if let Some(bound) = self.max_clock_offset_us {
            ensure!(
                bound <= MAX_HEADROOM_US,
                invalid("--max-clock-offset-us", bound, format_args!("at most {MAX_HEADROOM_US} µs (60 s)"))
            );
        }
        if let Some(headroom) = self.headroom_us {
            ensure!(
                headroom <= MAX_HEADROOM_US,
                invalid(
                    "--headroom-us",
                    headroom,
                    format_args!("at most {MAX_HEADROOM_US} µs (60 s): every transaction waits out the headroom")
                )
            );
        }
        Ok(())
    }
}

/// Checks that results can be written to `path` the way
/// [`write_json`](crate::report::write_json) writes them (the missing directories created, a
/// temporary file written in the directory, then renamed over `path`), leaving nothing behind:
/// a probe file is created in the nearest existing directory and removed at once.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.file_name().is_none() {
        bail!(invalid("--json", shown, "not a file path"));
    }
    if path.is_dir() {
        bail!(invalid("--json", shown, "is a directory"));
    }
    let mut dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // The nearest existing ancestor: write_json creates the others in it.
    loop {
        match std::fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => bail!(invalid("--json", shown, format_args!("{} is not a directory", dir.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                dir = match dir.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                    _ => PathBuf::from("."),
                };
            }
            Err(e) => bail!(invalid("--json", shown, format_args!("cannot use {}: {e}", dir.display()))),
        }
    }
    tempfile::Builder::new()
        .prefix(".luigi-json-probe-")
        .tempfile_in(&dir)
        .map_err(|e| invalid("--json", shown, format_args!("cannot write in {}: {e}", dir.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests;
