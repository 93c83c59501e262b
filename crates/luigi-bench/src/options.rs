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
use luigi_runtime::net::wan::Scenario;
use luigi_txn::types::Protocol;

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
/// much).
pub const MAX_HEADROOM_US: u64 = 60_000_000;

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
    /// `--json`.
    pub json: PathBuf,
    /// `--cluster`.
    pub cluster: Option<PathBuf>,
    /// `--protocol` (default: luigi, or the cluster file's `[protocol] kind`), as given.
    pub protocol: Option<String>,
    /// `--fast-path on|off` (local cluster only): the cluster file's `[protocol] fast_path`
    /// (DESIGN.md, "The fast path"). Default: on for Luigi's runs; `on` is Luigi's only.
    pub fast_path: Option<bool>,
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
    /// Results file, checked writable.
    pub json: PathBuf,
    /// The protocols to run, each in turn for every network and thread count (side by side,
    /// same run): written into each local cluster's file; a cluster file's own (which
    /// `--protocol` may only repeat).
    pub protocols: Vec<Protocol>,
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
        let asked = match &self.protocol {
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
        };
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
            },
        };
        let protocols = match (&target, asked) {
            (Target::Local { .. }, Some(asked)) if self.fast_path == Some(true) && asked != [Protocol::Luigi] => {
                let asked: Vec<&str> = asked.iter().map(|p| p.name()).collect();
                bail!(invalid("--protocol", asked.join(","), "--fast-path on is Luigi's: use --protocol luigi"));
            }
            (Target::Local { .. }, asked) => asked.unwrap_or_else(|| vec![Protocol::Luigi]),
            (Target::File { path, config }, asked) => {
                let runs = config.protocol();
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
        };
        check_writable(&self.json)?;
        Ok(BenchPlan {
            target,
            threads: self.threads.clone(),
            in_flight: self.in_flight,
            duration: Duration::from_secs_f64(self.duration_s),
            warmup: Duration::from_secs_f64(self.warmup_s),
            headroom_us: self.headroom_us,
            json: self.json.clone(),
            protocols,
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
            ]
            .into_iter()
            .filter_map(|(name, given)| given.then_some(name))
            .collect();
            ensure!(
                local_only.is_empty(),
                "{} cannot be used with --cluster: the cluster file and its running servers decide the shards, \
                 replicas, network scenario, durability and fast path (these options only shape the local cluster the \
                 benchmark starts without --cluster)",
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
mod tests {
    use super::*;

    fn ok_options(dir: &Path) -> BenchOptions {
        BenchOptions {
            threads: vec![1],
            in_flight: 200,
            duration_s: 10.0,
            warmup_s: 2.0,
            json: dir.join("results").join("micro.json"),
            ..BenchOptions::default()
        }
    }

    /// The refusal of `options`: one line, naming `needle`.
    fn refused(options: &BenchOptions, needle: &str) -> String {
        let msg = format!("{:#}", options.validate().expect_err("accepted"));
        assert_eq!(msg.lines().count(), 1, "one line: {msg}");
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
        msg
    }

    #[test]
    fn defaults_are_a_local_cluster_and_the_json_check_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let plan = ok_options(dir.path()).validate().unwrap();
        let Target::Local { shards, replicas, nets, durability, fast_path } = &plan.target else { panic!("local") };
        assert_eq!(
            (*shards, *replicas, nets.as_slice(), *durability, *fast_path),
            (1, 1, &[Scenario::SameRegion][..], "fsync", true)
        );
        assert_eq!(plan.shards(), 1);
        assert_eq!((plan.duration, plan.warmup), (Duration::from_secs(10), Duration::from_secs(2)));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no probe file or directory left");
    }

    #[test]
    fn the_protocol_is_luigi_unless_asked_and_a_cluster_file_decides_it() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        assert_eq!(base.validate().unwrap().protocols, vec![Protocol::Luigi]);
        for p in Protocol::ALL {
            let plan = BenchOptions { protocol: Some(p.name().into()), ..base.clone() }.validate().unwrap();
            assert_eq!(plan.protocols, vec![p]);
        }
        let all = BenchOptions { protocol: Some("luigi,occ, 2pl,direct".into()), ..base.clone() };
        assert_eq!(all.validate().unwrap().protocols, Protocol::ALL.to_vec());
        let msg =
            refused(&BenchOptions { protocol: Some("occ,occ".into()), ..base.clone() }, "invalid --protocol occ,occ:");
        assert!(msg.contains("occ is listed twice"), "{msg}");
        let msg = refused(&BenchOptions { protocol: Some("2pc".into()), ..base.clone() }, "invalid --protocol 2pc:");
        assert!(msg.contains("luigi, occ, 2pl, direct"), "the allowed values: {msg}");
        refused(&BenchOptions { protocol: Some("".into()), ..base.clone() }, "invalid --protocol :");
        // A cluster file's protocol: taken, repeated, or contradicted.
        let file = dir.path().join("occ.toml");
        std::fs::write(&file, "[protocol]\nkind = \"occ\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
        let on_file = BenchOptions { cluster: Some(file.clone()), ..base.clone() };
        assert_eq!(on_file.validate().unwrap().protocols, vec![Protocol::Occ]);
        let same = BenchOptions { protocol: Some("occ".into()), ..on_file.clone() };
        assert_eq!(same.validate().unwrap().protocols, vec![Protocol::Occ]);
        let msg = refused(&BenchOptions { protocol: Some("2pl".into()), ..on_file.clone() }, "invalid --protocol 2pl:");
        assert!(msg.contains("run occ") && msg.contains("occ.toml"), "{msg}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[protocol]\nkind = \"paxos\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
        let msg = refused(&BenchOptions { cluster: Some(bad), ..base }, "protocol.kind");
        assert!(msg.contains("'paxos'"), "{msg}");
    }

    #[test]
    fn edges_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let edges = BenchOptions {
            shards: Some(MAX_SHARDS),
            replicas: Some(MAX_REPLICAS),
            threads: vec![1, MAX_THREADS],
            in_flight: (MAX_OUTSTANDING / u64::from(MAX_THREADS)) as u32,
            duration_s: MAX_SECONDS,
            warmup_s: 0.0,
            headroom_us: Some(MAX_HEADROOM_US),
            ..ok_options(dir.path())
        };
        edges.validate().unwrap();
        let small = BenchOptions { threads: vec![1], in_flight: MAX_IN_FLIGHT, duration_s: MIN_DURATION_S, ..edges };
        small.validate().unwrap();
    }

    #[test]
    fn shards_and_replicas_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        refused(&BenchOptions { shards: Some(0), ..base.clone() }, "invalid --shards 0:");
        refused(&BenchOptions { shards: Some(65), ..base.clone() }, "invalid --shards 65: a local cluster");
        refused(&BenchOptions { shards: Some(u32::MAX), ..base.clone() }, "at most 64 shards");
        refused(&BenchOptions { replicas: Some(0), ..base.clone() }, "invalid --replicas 0:");
        refused(&BenchOptions { replicas: Some(8), ..base.clone() }, "invalid --replicas 8: a local cluster");
        refused(&BenchOptions { net: Some(vec![]), ..base }, "invalid --net");
    }

    #[test]
    fn every_thread_count_is_checked_before_any_run() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        refused(&BenchOptions { threads: vec![], ..base.clone() }, "invalid --threads");
        refused(&BenchOptions { threads: vec![1, 0], ..base.clone() }, "invalid --threads 0:");
        refused(&BenchOptions { threads: vec![1, 2, 1025], ..base.clone() }, "invalid --threads 1025: at most 1024");
        refused(&BenchOptions { threads: vec![u32::MAX], ..base }, "invalid --threads 4294967295");
    }

    #[test]
    fn in_flight_is_bounded_per_thread_and_in_all() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        refused(&BenchOptions { in_flight: 0, ..base.clone() }, "invalid --in-flight 0:");
        refused(
            &BenchOptions { in_flight: u32::MAX, ..base.clone() },
            "invalid --in-flight 4294967295: at most 100000",
        );
        let msg =
            refused(&BenchOptions { threads: vec![1, 1024], in_flight: 1000, ..base }, "invalid --in-flight 1000");
        assert!(msg.contains("with --threads 1024") && msg.contains("1024000 transactions outstanding"), "{msg}");
    }

    #[test]
    fn duration_and_warmup_are_finite_and_at_most_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        for bad in [f64::INFINITY, f64::NAN, 1e30, 0.0, -1.0, 0.05, MAX_SECONDS + 1.0] {
            refused(&BenchOptions { duration_s: bad, ..base.clone() }, &format!("invalid --duration {bad:?}:"));
        }
        for bad in [f64::INFINITY, f64::NAN, -1.0, 1e30, f64::NEG_INFINITY] {
            refused(&BenchOptions { warmup_s: bad, ..base.clone() }, &format!("invalid --warmup {bad:?}:"));
        }
        refused(&BenchOptions { warmup_s: -1.0, ..base }, "from 0 to 86400 seconds (a day)");
    }

    #[test]
    fn headroom_is_at_most_a_minute() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        refused(
            &BenchOptions { headroom_us: Some(MAX_HEADROOM_US + 1), ..base.clone() },
            "invalid --headroom-us 60000001",
        );
        refused(&BenchOptions { headroom_us: Some(u64::MAX), ..base.clone() }, "(60 s)");
        BenchOptions { headroom_us: Some(0), ..base }.validate().unwrap();
    }

    fn cluster_file(dir: &Path) -> PathBuf {
        let path = dir.join("cluster.toml");
        std::fs::write(
            &path,
            "net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[shards]]\nreplicas = [\"127.0.0.1:2\"]\n",
        )
        .unwrap();
        path
    }

    #[test]
    fn the_fast_path_is_a_local_luigi_clusters_and_on_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        let local_fast = |plan: &BenchPlan| matches!(plan.target, Target::Local { fast_path, .. } if fast_path);
        assert!(local_fast(&base.validate().unwrap()), "on by default");
        let both = BenchOptions { protocol: Some("luigi,occ".into()), ..base.clone() };
        assert!(local_fast(&both.validate().unwrap()), "for Luigi's runs (the baselines have none)");
        let off = BenchOptions { fast_path: Some(false), ..base.clone() };
        assert!(!local_fast(&off.validate().unwrap()));
        let on = BenchOptions { fast_path: Some(true), ..base.clone() };
        let luigi = BenchOptions { protocol: Some("luigi".into()), ..on.clone() };
        assert_eq!(luigi.validate().unwrap().protocols, vec![Protocol::Luigi]);
        let msg = refused(&BenchOptions { protocol: Some("luigi,occ".into()), ..on }, "invalid --protocol luigi,occ:");
        assert!(msg.contains("--fast-path on is Luigi's"), "{msg}");
    }

    #[test]
    fn a_cluster_file_excludes_the_local_cluster_options() {
        let dir = tempfile::tempdir().unwrap();
        let base = BenchOptions { cluster: Some(cluster_file(dir.path())), ..ok_options(dir.path()) };
        let plan = base.validate().unwrap();
        assert_eq!(plan.shards(), 2);
        assert!(matches!(&plan.target, Target::File { config, .. } if config.shard_count() == 2));
        let msg = refused(&BenchOptions { shards: Some(1), ..base.clone() }, "--shards cannot be used with --cluster");
        assert!(msg.contains("the cluster file and its running servers decide"), "{msg}");
        refused(&BenchOptions { replicas: Some(3), ..base.clone() }, "--replicas cannot be used with --cluster");
        refused(
            &BenchOptions { net: Some(vec![Scenario::Geo]), ..base.clone() },
            "--net cannot be used with --cluster",
        );
        refused(
            &BenchOptions { durability: Some("none"), ..base.clone() },
            "--durability cannot be used with --cluster",
        );
        refused(&BenchOptions { fast_path: Some(false), ..base.clone() }, "--fast-path cannot be used with --cluster");
        refused(
            &BenchOptions { shards: Some(2), net: Some(vec![Scenario::None]), ..base.clone() },
            "--shards, --net cannot be used",
        );
        // The headroom is the client's: it applies to a cluster file too.
        let plan = BenchOptions { headroom_us: Some(900), ..base.clone() }.validate().unwrap();
        assert_eq!(plan.headroom_us, Some(900));
        // A missing or broken cluster file is refused up front.
        let missing = BenchOptions { cluster: Some(dir.path().join("nope.toml")), ..base };
        refused(&missing, "invalid --cluster");
    }

    #[test]
    fn an_unwritable_json_path_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let base = ok_options(dir.path());
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        // Under a regular file: refused even for root (permissions would not be).
        refused(&BenchOptions { json: file.join("r.json"), ..base.clone() }, "is not a directory");
        refused(&BenchOptions { json: file.join("deeper").join("r.json"), ..base.clone() }, "invalid --json");
        refused(&BenchOptions { json: dir.path().to_path_buf(), ..base.clone() }, "is a directory");
        refused(&BenchOptions { json: PathBuf::from("/"), ..base.clone() }, "not a file path");
        // A missing directory is fine (write_json creates it), and so is an existing file,
        // which is left as it was.
        let deep = dir.path().join("x").join("y").join("r.json");
        BenchOptions { json: deep, ..base.clone() }.validate().unwrap();
        assert!(!dir.path().join("x").exists(), "the check creates nothing");
        BenchOptions { json: file.clone(), ..base }.validate().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    }
}
