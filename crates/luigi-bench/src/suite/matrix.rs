//! The experiment matrix, as data: every study of `luigi bench suite` is a list of points,
//! each a stable id, its study, and the exact `luigi bench ...` arguments that measure it.
//! Nothing here runs anything; [`crate::suite::runner`] does.
//!
//! The durations are chosen so that the default suite fits in an hour on a 2-core machine
//! and `--quick` in five minutes (see [`estimate_s`]); the cost of a point is its warm-up
//! and measured interval plus the start-up of its cluster ([`startup_s`], measured on this
//! project's 2-core machine).

use serde::{Deserialize, Serialize};

/// The four network scenarios of the seeds' tables (seed 000: same region 2 ms, same
/// continent 30 ms, cross continent 80 ms, geo-distributed 150 ms one-way).
pub const SEED_NETS: [&str; 4] = ["same-region", "same-continent", "cross-continent", "geo"];
/// The seeds' cluster shapes: (shards, replicas).
pub const SEED_SHAPES: [Shape; 4] = [Shape::new(1, 1), Shape::new(1, 3), Shape::new(2, 1), Shape::new(2, 3)];

/// A cluster shape: shards of so many replicas each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// Shards.
    pub shards: u32,
    /// Replicas per shard.
    pub replicas: u32,
}

impl Shape {
    /// `shards` shards of `replicas` replicas.
    pub const fn new(shards: u32, replicas: u32) -> Self {
        Shape { shards, replicas }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.shards, self.replicas)
    }
}
/// The seeds' thread counts (the rows of their micro tables).
pub const SEED_THREADS: [u32; 4] = [1, 2, 4, 8];
/// The TPC-C tables' thread counts: 1 and 8 only, as the seeds' TPC-C tables (seed 002), so that the
/// default suite fits its hour (a TPC-C point populates its cluster first).
pub const TPCC_THREADS: [u32; 2] = [1, 8];
/// TPC-C's scale in the suite: 10,000 items and 300 customers per district instead of the
/// spec's 100,000 and 3,000 (population took 17 s of a 21 s point at scale 1 on 2x3). The
/// contended rows (warehouse and district YTDs, next order ids) are the same at every scale.
pub const TPCC_SCALE: &str = "0.1";
/// Every protocol, in the order the report shows them.
pub const PROTOCOLS: [&str; 4] = ["luigi", "occ", "2pl", "direct"];
/// The cross-shard study's NewOrder remote-item percentages.
pub const REMOTE_ITEM_PCTS: [u32; 4] = [5, 10, 15, 20];
/// The cross-shard study's knob label for `pct` % remote items (`remote 5 %`).
pub fn remote_items_knob(pct: u32) -> String {
    format!("remote {pct} %")
}

/// Times a repeated micro point runs (its first run included).
pub const REPEATS: u32 = 2;
/// Times a repeated TPC-C point runs (its first run included; a TPC-C point costs more).
pub const TPCC_REPEATS: u32 = 2;
/// The commit-latency study's transactions in flight per thread: low enough that nothing
/// queues (the latency is the protocol's), high enough for its counts.
pub const LATENCY_IN_FLIGHT: u32 = 16;
/// The least committed transactions for which the report prints a p99 (fewer: p50/p90 only).
pub const P99_MIN_COMMITTED: u64 = 1_000;

/// A study: one table (or a family of tables) of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Study {
    /// The seeds' micro tables: rows threads, columns networks, per shape and protocol.
    SeedsMicro,
    /// The seeds' TPC-C tables.
    SeedsTpcc,
    /// TPC-C 2x3 geo 8 threads, NewOrder only, remote items 5-20 %.
    CrossShard,
    /// Seed 004: direct RPC against two-phase commit over two databases on loopback.
    Seed004,
    /// Shards 1-8 at 3 replicas, replicas 3-7 on one shard, micro under geo.
    Scale,
    /// Commit latency in one-way delays under geo, one thread, low in-flight.
    Latency,
    /// YCSB A-F and seed 003's K2 mixes, every protocol, 2x3 under none and geo.
    Ycsb,
}

impl Study {
    /// The study's name as ids and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Study::SeedsMicro => "seeds-micro",
            Study::SeedsTpcc => "seeds-tpcc",
            Study::CrossShard => "cross-shard",
            Study::Seed004 => "seed004",
            Study::Scale => "scale",
            Study::Latency => "latency",
            Study::Ycsb => "ycsb",
        }
    }
}

/// One measured point: one workload, cluster shape, network, thread count and protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Stable id, e.g. `micro-2x3-geo-t8-luigi` (a repeat ends in `-r2`, `-r3`).
    pub id: String,
    /// The study it belongs to.
    pub study: Study,
    /// `luigi bench` sub-command: `micro` or `tpcc`.
    pub workload: String,
    /// Shards.
    pub shards: u32,
    /// Replicas per shard.
    pub replicas: u32,
    /// Network scenario.
    pub net: String,
    /// Client threads.
    pub threads: u32,
    /// Transactions in flight per thread.
    pub in_flight: u32,
    /// Protocol.
    pub protocol: String,
    /// Measured seconds.
    pub duration_s: f64,
    /// Warm-up seconds.
    pub warmup_s: f64,
    /// The study's own knob, as the report labels it (e.g. `remote 5 %`), if any.
    pub knob: Option<String>,
    /// Workload arguments beyond the shared ones (e.g. `--mix new-order`).
    pub extra: Vec<String>,
    /// 1 for the first run of a cell, 2.. for its repeats.
    pub repeat: u32,
    /// Part of `--quick`.
    pub quick: bool,
}

impl Point {
    /// The id of the cell this point measures (its repeats share it).
    pub fn cell_id(&self) -> &str {
        match self.id.rfind("-r") {
            Some(i) if self.repeat > 1 && self.id[i + 2..].parse::<u32>().is_ok() => &self.id[..i],
            _ => &self.id,
        }
    }

    /// The point's cluster shape.
    pub fn shape(&self) -> Shape {
        Shape::new(self.shards, self.replicas)
    }

    /// The arguments after the binary: `bench <workload> ... --json <json> --no-progress`.
    pub fn argv(&self, json: &str) -> Vec<String> {
        let mut a: Vec<String> = vec!["bench".into(), self.workload.clone()];
        let mut opt = |name: &str, value: String| {
            a.push(format!("--{name}"));
            a.push(value);
        };
        opt("shards", self.shards.to_string());
        opt("replicas", self.replicas.to_string());
        opt("net", self.net.clone());
        opt("threads", self.threads.to_string());
        opt("in-flight", self.in_flight.to_string());
        opt("protocol", self.protocol.clone());
        opt("duration", format!("{}", self.duration_s));
        opt("warmup", format!("{}", self.warmup_s));
        a.extend(self.extra.iter().cloned());
        a.extend(["--json".to_string(), json.to_string(), "--no-progress".to_string()]);
        a
    }

    /// Estimated wall time of the point, seconds: warm-up, measured interval, start-up.
    pub fn estimate_s(&self) -> f64 {
        self.warmup_s + self.duration_s + startup_s(self)
    }
}

/// Seconds a point spends outside its warm-up and measured interval: servers started (TPC-C:
/// populated, then checked), leaders elected, a first commit on every shard, and the load
/// drained (the transactions still in flight when the interval ends are waited for: under
/// OCC and 2PL with WAN delays, retries make that the longest part). Fitted to runs of the
/// debug build on the project's 2-core machine (within 10 %: micro 1x1 same-region 0.4 s,
/// micro 2x3 geo luigi 2.8 s, occ 11.4 s, TPC-C at scale 0.1 2x3 geo luigi 6.8 s, occ 14.5
/// s); a release build is faster.
pub fn startup_s(p: &Point) -> f64 {
    // A round trip of the scenario.
    let rtt = match p.net.as_str() {
        "same-region" => 0.004,
        "same-continent" => 0.06,
        "cross-continent" => 0.16,
        "geo" => 0.3,
        _ => 0.0,
    };
    let processes = f64::from(p.shards * p.replicas);
    let population = if p.workload == "tpcc" { 0.5 + 1.5 * f64::from(p.shards) } else { 0.0 };
    let drain = match p.protocol.as_str() {
        "occ" | "2pl" => 30.0 * rtt,
        _ => 4.0 * rtt,
    };
    0.4 + 0.25 * processes + population + drain
}

/// Durations of the points of one study, seconds.
#[derive(Clone, Copy, Debug)]
struct Timing {
    duration_s: f64,
    warmup_s: f64,
}

/// The timing of every study, default or quick, on network `net`: the warm-up covers a few
/// transactions' latency (under geo with 8 threads of 200 in flight a transaction takes
/// 0.5-1.8 s; with a shorter warm-up the measured interval starts before the pipeline is
/// full, and a 1 s interval on 4x3 under geo committed nothing).
fn timing(study: Study, quick: bool, net: &str) -> Timing {
    let wan = match net {
        "geo" => 2,
        "cross-continent" => 1,
        _ => 0,
    };
    let (duration_s, warmup_s) = match (study, quick, wan) {
        (Study::SeedsMicro | Study::SeedsTpcc, false, 2) => (2.0, 1.5),
        (Study::SeedsMicro | Study::SeedsTpcc, false, 1) => (2.0, 1.0),
        (Study::SeedsMicro | Study::SeedsTpcc, false, _) => (1.5, 0.5),
        (Study::CrossShard, false, _) => (3.0, 2.0),
        (Study::Seed004, false, _) => (3.0, 0.5),
        (Study::Scale, false, _) => (4.0, 3.0),
        (Study::Latency, false, _) => (6.0, 1.5),
        (Study::Ycsb, false, 2) => (2.0, 1.5),
        (Study::Ycsb, false, _) => (1.5, 0.5),
        (Study::Latency, true, _) => (6.0, 1.5),
        (Study::CrossShard | Study::Scale, true, _) => (2.0, 2.0),
        (_, true, 2) => (2.0, 1.5),
        (_, true, _) => (1.5, 1.0),
    };
    Timing { duration_s, warmup_s }
}

/// The description of one cell, before timing and repeats.
struct Cell<'a> {
    study: Study,
    prefix: &'a str,
    workload: &'a str,
    shape: Shape,
    net: &'a str,
    threads: u32,
    in_flight: u32,
    protocol: &'a str,
    /// The study's own knob: its label and its arguments.
    knob: Option<(String, Vec<String>)>,
    /// Arguments common to the study (not part of the id).
    extra: Vec<String>,
    repeats: u32,
    /// How many of its runs `--quick` makes: 0 (not part of it), 1, or 2 (one repeat).
    quick_runs: u32,
}

impl Cell<'_> {
    /// The cell's points (one per repeat), timed for `quick` or not.
    fn points(self, quick: bool) -> Vec<Point> {
        let t = timing(self.study, quick, self.net);
        let knob_id = self.knob.as_ref().map(|(k, _)| format!("-{}", k.replace([' ', '%'], ""))).unwrap_or_default();
        let base = format!(
            "{}{}-{}-{}-t{}{}-{}",
            self.prefix, self.workload, self.shape, self.net, self.threads, knob_id, self.protocol
        );
        let (knob, mut extra) = match self.knob {
            Some((k, e)) => (Some(k), e),
            None => (None, Vec::new()),
        };
        extra.extend(self.extra);
        (1..=self.repeats)
            .map(|repeat| Point {
                id: if repeat == 1 { base.clone() } else { format!("{base}-r{repeat}") },
                study: self.study,
                workload: self.workload.into(),
                shards: self.shape.shards,
                replicas: self.shape.replicas,
                net: self.net.into(),
                threads: self.threads,
                in_flight: self.in_flight,
                protocol: self.protocol.into(),
                duration_s: t.duration_s,
                warmup_s: t.warmup_s,
                knob: knob.clone(),
                extra: extra.clone(),
                repeat,
                quick: repeat <= self.quick_runs,
            })
            .collect()
    }
}

/// The seeds' matrix for `workload`: every shape, network, thread count and protocol.
/// Repeated cells: 1x1 same-region and 2x3 geo at 8 threads, every protocol.
fn seeds_points(workload: &str, quick: bool) -> Vec<Point> {
    let (study, thread_counts, extra): (Study, &[u32], Vec<String>) = if workload == "tpcc" {
        (Study::SeedsTpcc, seed_threads(Study::SeedsTpcc), vec!["--scale".into(), TPCC_SCALE.into()])
    } else {
        (Study::SeedsMicro, seed_threads(Study::SeedsMicro), Vec::new())
    };
    let mut points = Vec::new();
    for shape in SEED_SHAPES {
        for net in SEED_NETS {
            for &threads in thread_counts {
                for protocol in PROTOCOLS {
                    let corner = threads == 8
                        && matches!((shape.to_string().as_str(), net), ("1x1", "same-region") | ("2x3", "geo"));
                    // Quick: 8 threads; micro on 1x1 and 2x3 under same-region and geo (Luigi's
                    // repeated once), TPC-C on 2x3 under geo.
                    let in_quick = threads == 8
                        && match workload {
                            "micro" => {
                                matches!(shape.to_string().as_str(), "1x1" | "2x3")
                                    && matches!(net, "same-region" | "geo")
                            }
                            _ => shape == Shape::new(2, 3) && net == "geo",
                        };
                    let quick_runs = match (in_quick, corner && protocol == "luigi" && workload == "micro") {
                        (false, _) => 0,
                        (true, false) => 1,
                        (true, true) => 2,
                    };
                    let cell = Cell {
                        study,
                        prefix: "",
                        workload,
                        shape,
                        net,
                        threads,
                        in_flight: 200,
                        protocol,
                        knob: None,
                        extra: extra.clone(),
                        repeats: match (corner, workload) {
                            (false, _) => 1,
                            (true, "tpcc") => TPCC_REPEATS,
                            (true, _) => REPEATS,
                        },
                        quick_runs,
                    };
                    points.extend(cell.points(quick));
                }
            }
        }
    }
    points
}

/// The thread counts (table rows) of a seeds study.
pub fn seed_threads(study: Study) -> &'static [u32] {
    match study {
        Study::SeedsTpcc => &TPCC_THREADS,
        _ => &SEED_THREADS,
    }
}

/// The cross-shard study: TPC-C NewOrder only, 2x3, geo, 8 threads, remote items 5-20 %.
fn cross_shard_points(quick: bool) -> Vec<Point> {
    let mut points = Vec::new();
    for pct in REMOTE_ITEM_PCTS {
        for protocol in PROTOCOLS {
            let extra = vec!["--mix".into(), "new-order".into(), "--remote-item-pct".into(), pct.to_string()];
            let scale = vec!["--scale".to_string(), TPCC_SCALE.to_string()];
            let cell = Cell {
                study: Study::CrossShard,
                prefix: "cross-",
                workload: "tpcc",
                shape: Shape::new(2, 3),
                net: "geo",
                threads: 8,
                in_flight: 200,
                protocol,
                knob: Some((remote_items_knob(pct), extra)),
                extra: scale,
                repeats: 1,
                quick_runs: u32::from(matches!(pct, 5 | 20) && protocol == "luigi"),
            };
            points.extend(cell.points(quick));
        }
    }
    points
}

/// Seed 004: each transaction writes one key on each of 2 shards of 1 replica, on loopback
/// (`none`), in memory (durability `none`, as the seed's databases), 1 client with one
/// transaction in flight (sequential), then 10.
fn seed004_points(quick: bool) -> Vec<Point> {
    let mut points = Vec::new();
    for threads in [1, 10] {
        for protocol in PROTOCOLS {
            let extra = ["--ops", "2", "--read-ratio", "0", "--cross-shard", "100", "--durability", "none"];
            let cell = Cell {
                study: Study::Seed004,
                prefix: "seed004-",
                workload: "micro",
                shape: Shape::new(2, 1),
                net: "none",
                threads,
                in_flight: 1,
                protocol,
                knob: Some(("memory".into(), extra.iter().map(|s| s.to_string()).collect())),
                extra: Vec::new(),
                repeats: 1,
                quick_runs: u32::from(matches!(protocol, "direct" | "2pl")),
            };
            points.extend(cell.points(quick));
        }
    }
    points
}

/// The scale study, Luigi only: shards 1, 2, 4, 8 of 3 replicas, and replicas 3, 5, 7 on one
/// shard (1x3 once), micro under geo, 8 threads.
fn scale_points(quick: bool) -> Vec<Point> {
    let shapes = [(1, 3), (2, 3), (4, 3), (8, 3), (1, 5), (1, 7)].map(|(s, r)| Shape::new(s, r));
    let mut points = Vec::new();
    for shape in shapes {
        let cell = Cell {
            study: Study::Scale,
            prefix: "scale-",
            workload: "micro",
            shape,
            net: "geo",
            threads: 8,
            in_flight: 200,
            protocol: "luigi",
            knob: None,
            extra: Vec::new(),
            repeats: 1,
            quick_runs: u32::from(matches!(shape.to_string().as_str(), "1x3" | "1x5")),
        };
        points.extend(cell.points(quick));
    }
    points
}

/// Commit latency in one-way delays: geo (150 ms +- 20 every hop), 1 thread of
/// [`LATENCY_IN_FLIGHT`] transactions over 100,000 keys (no contention, no queueing), every
/// seed shape and protocol, 6 s each. Luigi committed 45 tx/s on 1x3 and 28 tx/s on 2x3 in
/// a --quick run (2.3 and 3.8 D on average): about 270 and 170 transactions per point, fewer
/// for a protocol of more round trips. Enough for the average, p50 and p90 the report
/// prints; it prints a p99 only from [`P99_MIN_COMMITTED`], which these points do not reach.
fn latency_points(quick: bool) -> Vec<Point> {
    let mut points = Vec::new();
    for shape in SEED_SHAPES {
        for protocol in PROTOCOLS {
            let cell = Cell {
                study: Study::Latency,
                prefix: "latency-",
                workload: "micro",
                shape,
                net: "geo",
                threads: 1,
                in_flight: LATENCY_IN_FLIGHT,
                protocol,
                knob: None,
                extra: Vec::new(),
                repeats: 1,
                quick_runs: u32::from(matches!(shape.to_string().as_str(), "1x3" | "2x3") && protocol == "luigi"),
            };
            points.extend(cell.points(quick));
        }
    }
    points
}

/// YCSB's variants: the core workloads A-F with their own request distributions (zipfian;
/// latest for D) and seed 003's K2 mixes, uniform and scrambled zipfian. Each is its label
/// (part of the id) and its `luigi bench ycsb` arguments.
pub const YCSB_VARIANTS: [(&str, &[&str]); 10] = [
    ("a", &["--workload", "a"]),
    ("b", &["--workload", "b"]),
    ("c", &["--workload", "c"]),
    ("d", &["--workload", "d"]),
    ("e", &["--workload", "e"]),
    ("f", &["--workload", "f"]),
    ("k2-95-5-uniform", &["--workload", "k2-95-5", "--dist", "uniform"]),
    ("k2-95-5-zipfian", &["--workload", "k2-95-5", "--dist", "zipfian"]),
    ("k2-50-50-uniform", &["--workload", "k2-50-50", "--dist", "uniform"]),
    ("k2-50-50-zipfian", &["--workload", "k2-50-50", "--dist", "zipfian"]),
];

/// The networks of the YCSB study: loopback (the CPU's cost, K2's setting) and geo.
pub const YCSB_NETS: [&str; 2] = ["none", "geo"];

/// YCSB: every variant of [`YCSB_VARIANTS`] under every protocol on 2x3, 8 threads, under
/// `none`, and the zipfian K2 mixes under `geo` too (more under geo would take the default
/// suite past its hour: [`extended_points`] has the rest), one operation per transaction
/// (the default), YCSB's default table (1,000 records of 10 fields of 100 bytes). `--quick`
/// runs the K2 95/5 zipfian mix on `none` for Luigi and OCC.
pub fn ycsb_points(quick: bool) -> Vec<Point> {
    ycsb_points_where(quick, |net, label| net == "none" || in_default_geo(label))
}

/// Whether YCSB variant `label` runs under `geo` in the default suite (the zipfian K2 mixes).
fn in_default_geo(label: &str) -> bool {
    label.starts_with("k2-") && label.ends_with("-zipfian")
}

/// The points `luigi bench suite --extended` adds to the default matrix: YCSB A-F and the
/// uniform K2 mixes under `geo`, every protocol (32 points, about six minutes), so that every
/// YCSB variant is measured under both networks. They are not in the default suite, which
/// keeps its hour.
pub fn extended_points() -> Vec<Point> {
    ycsb_points_where(false, |net, label| net != "none" && !in_default_geo(label))
}

/// The YCSB points of the variants and networks `keep(net, label)` selects.
fn ycsb_points_where(quick: bool, keep: impl Fn(&str, &str) -> bool) -> Vec<Point> {
    let mut points = Vec::new();
    for net in YCSB_NETS {
        for (label, args) in YCSB_VARIANTS {
            if !keep(net, label) {
                continue;
            }
            for protocol in PROTOCOLS {
                let cell = Cell {
                    study: Study::Ycsb,
                    prefix: "",
                    workload: "ycsb",
                    shape: Shape::new(2, 3),
                    net,
                    threads: 8,
                    in_flight: 200,
                    protocol,
                    knob: Some((label.to_string(), args.iter().map(|a| a.to_string()).collect())),
                    extra: Vec::new(),
                    repeats: 1,
                    quick_runs: u32::from(
                        net == "none" && label == "k2-95-5-zipfian" && matches!(protocol, "luigi" | "occ"),
                    ),
                };
                points.extend(cell.points(quick));
            }
        }
    }
    points
}

/// Every point of the default suite (`quick == false`) or of `--quick` (the points marked
/// quick, with the quick durations).
pub fn matrix(quick: bool) -> Vec<Point> {
    let mut points = seeds_points("micro", quick);
    points.extend(seeds_points("tpcc", quick));
    points.extend(cross_shard_points(quick));
    points.extend(seed004_points(quick));
    points.extend(scale_points(quick));
    points.extend(latency_points(quick));
    points.extend(ycsb_points(quick));
    if quick {
        points.retain(|p| p.quick);
    }
    points
}

/// Whether `id` matches `pattern`: a glob (`*` any run of characters, `?` one) when the
/// pattern has `*` or `?`, else a substring.
pub fn matches(pattern: &str, id: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return id.contains(pattern);
    }
    glob(pattern.as_bytes(), id.as_bytes())
}

/// Glob match over bytes, iterative with one backtrack point (linear in practice).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Estimated wall time of `points`, seconds.
pub fn estimate_s(points: &[Point]) -> f64 {
    points.iter().map(Point::estimate_s).sum()
}

#[cfg(test)]
mod tests;
