//! What a failed run reports.

use std::fmt;

/// The environment variable the seed-sweeping tests read to run a single seed.
pub const SEED_ENV: &str = "LUIGI_SIM_SEED";
/// The environment variable the tests read to print every event of a run.
pub const TRACE_ENV: &str = "LUIGI_SIM_TRACE";
/// The environment variable naming a file to which every run appends one line when it ends
/// (test name, seed, events, messages, end time, trace hash): the digest that shows a refactor
/// left every simulated run as it was (`scripts/trace_digest.sh`).
pub const DIGEST_ENV: &str = "LUIGI_SIM_DIGEST";

/// The class of a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// The configuration cannot be simulated.
    Config,
    /// The run did not answer every transaction within its virtual-time or event budget.
    Stuck,
    /// A submitted transaction was never answered.
    Unanswered,
    /// A transaction was answered more than once.
    DuplicateAnswer,
    /// A transaction was answered `Failed` although the run injected no fault that excuses it.
    Failed,
    /// An answer differs from the sequential replay in timestamp order.
    ResultMismatch,
    /// A shard's final store differs from the sequential replay.
    StateMismatch,
    /// A transaction answered before another was dispatched has a timestamp that is not
    /// smaller.
    RealTime,
    /// The conflict order plus the real-time order has a cycle: no serial order explains the
    /// run (not strictly serializable).
    NotSerializable,
    /// On some shard, two conflicting transactions executed out of final-timestamp order, or
    /// out of the order that shard's own committed log gives them (the timestamps a replica
    /// or a new leader replaying the log would use): a timestamp inversion.
    ExecutionOrder,
    /// A cross-shard transaction was executed on some shard before every participant's
    /// `PREPARE` was committed, or (proposals having differed) before every participant's
    /// committed log held the final timestamp (DESIGN.md rule 4's second round).
    NotDurable,
    /// A transaction the client was told was rejected (refused or aborted) was executed on
    /// some shard, an ordered one was not executed on one of its participants, or one was
    /// executed twice on a shard.
    Execution,
    /// Participants or retries reported different timestamps for one transaction.
    TimestampMismatch,
    /// The hosted workload's own consistency check (e.g. TPC-C's twelve conditions) failed
    /// on the final stores.
    Consistency,
    /// A protocol invariant checked during the run failed (watermark went back, a timestamp
    /// at or below a published watermark, a reply below its own watermark, ...).
    Invariant,
}

/// A failed run: what went wrong, in which seed, and how to run it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The class of the failure.
    pub kind: ViolationKind,
    /// A description naming the transactions involved, expected versus observed.
    pub message: String,
    /// The seed of the run (`None` for a checker run over a hand-made history).
    pub seed: Option<u64>,
    /// A summary of the run's configuration.
    pub config: String,
    /// Virtual time (µs) at which the violation was detected, if during the run.
    pub at_us: Option<u64>,
}

impl Violation {
    /// A violation of `kind` described by `message`.
    pub fn new(kind: ViolationKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), seed: None, config: String::new(), at_us: None }
    }

    /// Attaches the run's seed and configuration summary.
    pub fn in_run(mut self, seed: u64, config: String) -> Self {
        self.seed = Some(seed);
        self.config = config;
        self
    }

    /// Attaches the virtual time of detection.
    pub fn at(mut self, at_us: u64) -> Self {
        self.at_us = Some(at_us);
        self
    }

    /// The command that reruns just this seed in the seed-sweeping tests.
    pub fn rerun_hint(&self) -> Option<String> {
        self.seed.map(|seed| {
            format!(
                "{SEED_ENV}={seed} cargo test -p luigi-sim -- --nocapture \
                 (add {TRACE_ENV}=1 to print every event)"
            )
        })
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seed {
            Some(seed) => write!(f, "{:?} violation in seed {seed}", self.kind)?,
            None => write!(f, "{:?} violation", self.kind)?,
        }
        if let Some(at) = self.at_us {
            write!(f, " at virtual time {at} us")?;
        }
        write!(f, ": {}", self.message)?;
        if !self.config.is_empty() {
            write!(f, "\n  config: {}", self.config)?;
        }
        if let Some(hint) = self.rerun_hint() {
            write!(f, "\n  rerun only this seed: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}
