//! Helpers shared by the simulator's test files: the one seed runner (seed selection,
//! tracing, a run that fails with the command that reruns its seed, a sweep that lists every
//! failing seed), the mutation tests' check, and the cross-shard configurations.

#![allow(dead_code)] // each test file uses a subset

use luigi_sim::{
    run, run_replicated, FailoverReport, FaultConfig, Node, RunReport, SimConfig, Violation, ViolationKind, SEED_ENV,
    TRACE_ENV,
};

/// The seeds to run: `range`, or only the one named by `LUIGI_SIM_SEED`.
pub fn seeds(range: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var(SEED_ENV) {
        Ok(s) => vec![s.trim().parse().unwrap_or_else(|_| panic!("{SEED_ENV}={s} is not a seed"))],
        Err(_) => range.collect(),
    }
}

/// The seeds of a sweep: `LUIGI_SIM_SWEEP` of them (default `count`) from
/// `LUIGI_SIM_SWEEP_FROM` (default `from`), or only `LUIGI_SIM_SEED`.
pub fn sweep(from: u64, count: u64) -> Vec<u64> {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .map_or(default, |v| v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a number")))
    };
    let from = env("LUIGI_SIM_SWEEP_FROM", from);
    seeds(from..from + env("LUIGI_SIM_SWEEP", count))
}

/// True when `LUIGI_SIM_SEED` picks one seed (sweep-wide assertions are skipped then).
pub fn one_seed() -> bool {
    std::env::var(SEED_ENV).is_ok()
}

/// Turns on event tracing when `LUIGI_SIM_TRACE` is set.
pub fn traced(mut config: SimConfig) -> SimConfig {
    config.trace = std::env::var(TRACE_ENV).is_ok_and(|v| v != "0");
    config
}

/// The command that reruns `seed` of `test` (in the test file `file`) alone.
pub fn rerun(file: &str, test: &str, seed: u64) -> String {
    format!(
        "rerun this seed alone: {SEED_ENV}={seed} cargo test -p luigi-sim --test {file} {test} -- --include-ignored \
         --nocapture (add {TRACE_ENV}=1 for every event)"
    )
}

/// Where a run happens: over the ideal log, or over Raft groups under these faults.
#[derive(Clone, Debug)]
pub enum World {
    /// `luigi_sim::run`: the ideal-log configuration, one node per shard over a disk that
    /// never fails, no faults.
    Ideal,
    /// `luigi_sim::run_replicated` with these faults.
    Replicated(FaultConfig),
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every check passed over the ideal log.
    Ideal(RunReport),
    /// Every check passed over Raft groups.
    Replicated(FailoverReport),
    /// A check failed.
    Violated(Violation),
    /// The code panicked (an assertion in a core, or raft-rs's own), with this message.
    Panicked(String),
}

impl Outcome {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Ideal(_) | Outcome::Replicated(_))
    }

    /// What the outcome says, in a line.
    pub fn summary(&self) -> String {
        match self {
            Outcome::Ideal(_) | Outcome::Replicated(_) => "passed".into(),
            Outcome::Violated(v) => format!("{:?}: {}", v.kind, v.message.chars().take(200).collect::<String>()),
            Outcome::Panicked(what) => format!("a panic: {}", what.chars().take(200).collect::<String>()),
        }
    }
}

/// Runs `config` (traced when `LUIGI_SIM_TRACE` is set) in `world`, a panic included.
pub fn outcome(config: &SimConfig, world: &World) -> Outcome {
    let config = traced(config.clone());
    // The run's state is dropped after a panic, so nothing broken is seen again.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match world {
        World::Ideal => run(config).map(Outcome::Ideal),
        World::Replicated(faults) => run_replicated(&config, faults).map(Outcome::Replicated),
    }));
    match ran {
        Ok(Ok(passed)) => passed,
        Ok(Err(v)) => Outcome::Violated(v),
        Err(panic) => Outcome::Panicked(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default(),
        ),
    }
}

/// Runs `config` in `world`; on a violation or a panic, fails with it and the command that
/// reruns the seed.
fn must_pass_in(file: &str, test: &str, config: &SimConfig, world: &World) -> Outcome {
    let seed = config.seed;
    match outcome(config, world) {
        Outcome::Violated(v) => panic!("{test}: {v}\n  {}", rerun(file, test, seed)),
        Outcome::Panicked(what) => panic!("{test}: seed {seed} panicked: {what}\n  {}", rerun(file, test, seed)),
        passed @ (Outcome::Ideal(_) | Outcome::Replicated(_)) => passed,
    }
}

/// Runs `config` over the ideal log; on a violation (or a panic), fails with it and the
/// command that reruns the seed.
pub fn must_pass(file: &str, test: &str, config: SimConfig) -> RunReport {
    match must_pass_in(file, test, &config, &World::Ideal) {
        Outcome::Ideal(report) => report,
        other => unreachable!("an ideal-log run ended as {other:?}"),
    }
}

/// Runs `config` over Raft groups with `faults`; on a violation (or a panic), fails with it
/// and the command that reruns the seed.
pub fn must_pass_replicated(file: &str, test: &str, config: SimConfig, faults: &FaultConfig) -> FailoverReport {
    match must_pass_in(file, test, &config, &World::Replicated(faults.clone())) {
        Outcome::Replicated(report) => report,
        other => unreachable!("a replicated run ended as {other:?}"),
    }
}

/// Runs `config(seed)` over the ideal log for every seed of `seeds`, printing each failure
/// with the command that reruns it, and fails at the end listing the failing seeds.
pub fn sweep_all(file: &str, test: &str, seeds: &[u64], config: impl Fn(u64) -> SimConfig) {
    let start = std::time::Instant::now();
    let mut failures = Vec::new();
    for &seed in seeds {
        let got = outcome(&config(seed), &World::Ideal);
        if let Outcome::Violated(_) | Outcome::Panicked(_) = got {
            let what = match got {
                Outcome::Violated(v) => v.to_string(),
                other => format!("seed {seed}: {}", other.summary()),
            };
            eprintln!("{what}\n  {}\n", rerun(file, test, seed));
            failures.push(seed);
        }
    }
    eprintln!("{test}: {} seeds in {:?}, {} failed: {failures:?}", seeds.len(), start.elapsed(), failures.len());
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
}

/// What a mutation test expects to catch its broken rule.
#[derive(Clone, Copy, Debug)]
pub enum Catch {
    /// A violation of this kind.
    Kind(ViolationKind),
    /// A panic whose message holds this text: an assertion in the code that the broken rule
    /// trips before any check of the simulator could (the test says which).
    Panic(&'static str),
}

impl Catch {
    fn matches(self, outcome: &Outcome) -> bool {
        match (self, outcome) {
            (Catch::Kind(kind), Outcome::Violated(v)) => v.kind == kind,
            (Catch::Panic(text), Outcome::Panicked(what)) => what.contains(text),
            (Catch::Kind(_) | Catch::Panic(_), _) => false,
        }
    }
}

/// One run of a mutation test: its configuration and its world.
#[derive(Clone, Debug)]
pub struct Trial {
    /// The run's configuration.
    pub config: SimConfig,
    /// Where it runs.
    pub world: World,
}

impl Trial {
    /// `config` over the ideal log.
    pub fn ideal(config: SimConfig) -> Self {
        Trial { config, world: World::Ideal }
    }

    /// `config` over Raft groups under `faults`.
    pub fn replicated(config: SimConfig, faults: FaultConfig) -> Self {
        Trial { config, world: World::Replicated(faults) }
    }
}

/// The check of a mutation test: for each seed of `seeds`, runs `trial(seed)` with `mutate`
/// applied (a broken rule: a `Mutations` flag, a lying disk, a broken workload) and counts
/// the seeds on which it is caught as `catch`; a violation of another kind, another panic or
/// no catch at all is printed and not counted. The unmutated `trial(seed)` of the first seed
/// caught must pass: the control, showing that the mutation is what was caught. Fails when
/// no seed catches it as `catch`, listing what each gave. Returns the number of seeds caught
/// and the first catch.
pub fn caught_as(
    file: &str,
    test: &str,
    seeds: &[u64],
    catch: Catch,
    trial: impl Fn(u64) -> Trial,
    mutate: impl Fn(&mut Trial),
) -> (usize, Outcome) {
    let mut first = None;
    let mut caught = 0;
    let mut missed = Vec::new();
    for &seed in seeds {
        let mut mutated = trial(seed);
        mutate(&mut mutated);
        let got = outcome(&mutated.config, &mutated.world);
        if !catch.matches(&got) {
            eprintln!("{test}: seed {seed}: not caught as {catch:?}: {}", got.summary());
            missed.push((seed, got.summary()));
            continue;
        }
        caught += 1;
        eprintln!("{test}: seed {seed}: caught as {catch:?}");
        if first.is_none() {
            let control = trial(seed);
            must_pass_in(file, test, &control.config, &control.world);
            first = Some(got);
        }
    }
    let Some(first) = first else { panic!("{test}: no seed caught the mutation as {catch:?}: {missed:?}") };
    eprintln!("{test}: caught as {catch:?} on {caught} of {} seeds", seeds.len());
    (caught, first)
}

/// The faults of the lying-disk mutation tests: slow syncs (20 ± 10 ms) and frequent faults
/// (every 15 ± 10 ms), so that crashes find writes acknowledged but not yet synced.
pub fn slow_sync_faults() -> FaultConfig {
    FaultConfig {
        sync: luigi_sim::Delay::new(20_000, 10_000),
        fault_gap: luigi_sim::Delay::new(15_000, 10_000),
        ..FaultConfig::new()
    }
}

/// The lying-disk mutation: the disk acknowledges writes before it syncs them.
pub fn ack_before_sync(trial: &mut Trial) {
    if let World::Replicated(faults) = &mut trial.world {
        faults.ack_before_sync = true;
    }
}

/// A cross-shard run shaped by `seed`: 2-5 shards, 2-5 clients with 1-4 in flight, 2-6 keys
/// per shard, 30-100% cross-shard transactions (2 to all shards each), every directed link
/// with its own delay (50 us to 10 ms means, jitter up to 80%), clock offsets from none to
/// ±20 ms (100x the 200 us headroom), log commits from none to 2 ms, FIFO or reordering
/// client links, FIFO or reordering leader links (never lossy).
pub fn cross(seed: u64) -> SimConfig {
    let pick = |options: &[u64], salt: u64| options[((seed / salt) % options.len() as u64) as usize];
    let shards = 2 + (seed % 4) as u32;
    let (lo, hi) = [(50, 400), (200, 3_000), (1_000, 10_000)][pick(&[0, 1, 2], 3) as usize];
    let commit = pick(&[0, 300, 2_000], 7);
    let mut c = SimConfig::new(seed)
        .shards(shards)
        .clients(2 + (seed / 4 % 4) as u32)
        .in_flight(1 + (seed / 16 % 4) as usize)
        .txns(150)
        .keys(u64::from(shards) * pick(&[2, 3, 6], 5))
        .cross_shard([0.3, 0.6, 1.0][(seed / 11 % 3) as usize])
        .clock_offset_max(pick(&[0, 150, 2_000, 20_000], 13))
        .reorder(seed % 2 == 1)
        .log_commit(commit, commit / 2)
        .per_link_delays(lo, hi, pick(&[0, 20, 80], 17));
    c.peer_links_fifo = !seed.is_multiple_of(3);
    c
}

/// Every transaction cross-shard, leaders' clocks 5-35 ms apart, no headroom and no pings
/// (the coordinator's delay estimate would otherwise absorb the offsets): the participants'
/// proposals differ often, so the second round runs a lot.
pub fn skewed(seed: u64) -> SimConfig {
    let mut c = cross(seed).cross_shard(1.0).clock_offset_max(0).per_link_delays(200, 3_000, 90);
    c.ping_first = false;
    c.coordinator.headroom_us = 0;
    // Fixed: the adaptive headroom (rule 1) would learn the offsets and agree.
    c.coordinator.adaptive_headroom = false;
    for s in 0..c.shards {
        let offset = ((seed * 7 + u64::from(s) * 13) % 8) as i64 * 5_000 - 17_500;
        c = c.clock_offset(Node::Leader(s), offset);
    }
    c
}

/// `cross(seed)` with 1-3 transactions pending per leader at most, so leaders refuse and the
/// other participants abort. Its delays are `cross`'s, so an agreement item may overtake a
/// dispatch: an early item dropped from a full early buffer dooms its transaction, refused
/// when its dispatch comes (this shape once kept leaders far apart to avoid a stall there,
/// fixed in 2f7ea76).
pub fn refusing(seed: u64) -> SimConfig {
    let mut c = cross(seed);
    c.leader.max_pending = 1 + (seed % 3) as usize;
    c
}

/// `config` with read-only transactions at a snapshot mixed in (DESIGN.md rule 23): the
/// clients read every transaction that declares no writes from the nearest replicas, with
/// the clock bound covering the run's clock offsets; most operations read, so many
/// transactions declare no writes; replicas keep 10 s of versions and log a marker on an
/// idle shard every 100 ms (more often, the markers would keep the logs of a healed cluster from ever settling).
pub fn with_reads(mut config: SimConfig) -> SimConfig {
    let explicit = config.clock_offsets.values().map(|o| o.unsigned_abs()).max().unwrap_or(0);
    let widest = config.clock_offset_max_us.max(explicit);
    config.coordinator.read_only_path = true;
    config.coordinator.max_clock_offset_us = 2 * widest;
    config.leader.snapshot_retention_us = 10_000_000;
    config.leader.idle_marker_us = 100_000;
    config.read_ratio = config.read_ratio.max(0.8);
    config
}

/// Whether `seed` of a sweep runs with read-only transactions mixed in ([`with_reads`]):
/// about every other seed, so that a sweep covers reads without more seeds (issue 31). The
/// top bit of the seed's Fibonacci hash decides, not its low bits, from which the sweeps draw
/// their shapes (shard counts, harsh networks), so that seeds with reads take every shape.
pub fn reads_on(seed: u64) -> bool {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63 == 1
}

/// `config` with reads mixed in ([`with_reads`]) if its seed is one of those that take them
/// ([`reads_on`]).
pub fn with_reads_on_half(config: SimConfig) -> SimConfig {
    if reads_on(config.seed) {
        with_reads(config)
    } else {
        config
    }
}
