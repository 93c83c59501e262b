//! The knobs of one simulated run.

use std::collections::BTreeMap;

use luigi_proto::coordinator::CoordinatorConfig;
use luigi_proto::leader::{LeaderConfig, Mutations};
use rand::Rng;

use crate::net::Node;

/// A delay drawn uniformly from `[mean - jitter, mean + jitter]` microseconds (never negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delay {
    /// Mean, µs.
    pub mean_us: u64,
    /// Largest deviation from the mean either way, µs.
    pub jitter_us: u64,
}

impl Delay {
    /// `mean ± jitter` µs.
    pub const fn new(mean_us: u64, jitter_us: u64) -> Self {
        Self { mean_us, jitter_us }
    }

    /// No delay at all.
    pub const ZERO: Delay = Delay::new(0, 0);

    /// Draws one delay.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        if self.jitter_us == 0 {
            return self.mean_us;
        }
        let lo = self.mean_us.saturating_sub(self.jitter_us);
        let hi = self.mean_us.saturating_add(self.jitter_us);
        rng.gen_range(lo..=hi)
    }
}

/// How one directed link behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Per-message one-way delay.
    pub delay: Delay,
    /// Probability that a message is lost (0 = reliable). The coordinator's retries and the
    /// leader's duplicate handling recover from losses.
    pub drop_rate: f64,
}

impl LinkConfig {
    /// A reliable link with `delay`.
    pub const fn reliable(delay: Delay) -> Self {
        Self {
            delay,
            drop_rate: 0.0,
        }
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self::reliable(Delay::new(1_000, 500))
    }
}

/// Everything that defines a run. Together with the code, `seed` and these fields fully
/// determine the run: same config, same trace hash, same report.
///
/// Build one with [`SimConfig::new`] and the chainable setters, or with struct update syntax
/// (`SimConfig { shards: 2, ..SimConfig::new(seed) }`).
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The one seed every random choice derives from.
    pub seed: u64,
    /// Number of shards (one leader each), `>= 1`.
    pub shards: u32,
    /// Number of clients (one coordinator each), `>= 1`. Client ids are `1..=clients`.
    pub clients: u32,
    /// Transactions each client keeps in flight (closed loop, no think time), `>= 1`.
    pub in_flight: usize,
    /// Transactions submitted in total over all clients; the run ends when all are answered.
    pub txns: u64,
    /// Size of the micro key space (key numbers `0..keys`, key `k` lives on shard `k % shards`).
    /// Small key spaces give many conflicts. Must be `>= shards`.
    pub keys: u64,
    /// Operations per transaction are drawn uniformly from `1..=max_ops`.
    pub max_ops: usize,
    /// Probability that an operation is a read.
    pub read_ratio: f64,
    /// Probability that a transaction draws its keys from every shard (it then usually is
    /// cross-shard); otherwise all its keys live on one uniformly chosen shard.
    pub cross_shard_ratio: f64,
    /// The link used between any two nodes unless overridden in `links`.
    pub link: LinkConfig,
    /// Per directed link overrides, `(from, to)`.
    pub links: BTreeMap<(Node, Node), LinkConfig>,
    /// When false, every link is FIFO (a message never overtakes an earlier one on the same
    /// link); when true, messages on a link may be reordered by their delays.
    pub reorder: bool,
    /// Each node's clock is offset from virtual time by a value drawn uniformly from
    /// `[-max, +max]` µs (local clock = virtual time + offset, clamped at 0).
    pub clock_offset_max_us: u64,
    /// Time between a leader appending a log record and the record being committed
    /// (a replication round). Commits happen in log order. `Delay::ZERO` behaves exactly like
    /// `luigi_proto::log::LocalLog` (commit on append).
    pub log_commit: Delay,
    /// Clients ping every leader at time 0 to seed their one-way-delay estimates.
    pub ping_first: bool,
    /// Each client starts submitting at a time drawn uniformly from `[0, start_spread_us]`.
    pub start_spread_us: u64,
    /// Template for every leader's configuration (`shard` is overwritten).
    pub leader: LeaderConfig,
    /// Template for every coordinator's configuration (`client` is overwritten).
    pub coordinator: CoordinatorConfig,
    /// A run that has not answered every transaction by this virtual time fails.
    pub max_virtual_us: u64,
    /// A run that processes more events than this fails (guards against livelock).
    pub max_events: u64,
    /// Also require `ts(A) < ts(B)` when A was answered before B was dispatched and they share
    /// no shard. The protocol only guarantees it with synchronized clocks (see the crate docs);
    /// strict serializability itself is always checked.
    pub check_realtime_across_shards: bool,
    /// Print every event to stderr (for debugging one seed).
    pub trace: bool,
}

impl SimConfig {
    /// Defaults with `seed`: 1 shard, 4 clients × 4 in flight, 200 transactions over 32 keys,
    /// 1-10 operations (half reads), links of 1 ms ± 0.5 ms FIFO, clocks within ±2 ms, log
    /// commits after 0.5 ms ± 0.25 ms.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            shards: 1,
            clients: 4,
            in_flight: 4,
            txns: 200,
            keys: 32,
            max_ops: 10,
            read_ratio: 0.5,
            cross_shard_ratio: 0.0,
            link: LinkConfig::default(),
            links: BTreeMap::new(),
            reorder: false,
            clock_offset_max_us: 2_000,
            log_commit: Delay::new(500, 250),
            ping_first: true,
            start_spread_us: 5_000,
            leader: LeaderConfig::new(0),
            coordinator: CoordinatorConfig::new(0),
            max_virtual_us: 600_000_000,
            max_events: 5_000_000,
            check_realtime_across_shards: false,
            trace: false,
        }
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the number of shards.
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = shards;
        self
    }

    /// Sets the number of clients.
    pub fn clients(mut self, clients: u32) -> Self {
        self.clients = clients;
        self
    }

    /// Sets the transactions in flight per client.
    pub fn in_flight(mut self, in_flight: usize) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// Sets the total number of transactions.
    pub fn txns(mut self, txns: u64) -> Self {
        self.txns = txns;
        self
    }

    /// Sets the key-space size.
    pub fn keys(mut self, keys: u64) -> Self {
        self.keys = keys;
        self
    }

    /// Sets the default link delay.
    pub fn delay(mut self, mean_us: u64, jitter_us: u64) -> Self {
        self.link.delay = Delay::new(mean_us, jitter_us);
        self
    }

    /// Sets the default link's loss probability.
    pub fn drop_rate(mut self, drop_rate: f64) -> Self {
        self.link.drop_rate = drop_rate;
        self
    }

    /// Sets the largest clock offset.
    pub fn clock_offset_max(mut self, max_us: u64) -> Self {
        self.clock_offset_max_us = max_us;
        self
    }

    /// Allows (or forbids) reordering within a link.
    pub fn reorder(mut self, reorder: bool) -> Self {
        self.reorder = reorder;
        self
    }

    /// Sets the log commit delay.
    pub fn log_commit(mut self, mean_us: u64, jitter_us: u64) -> Self {
        self.log_commit = Delay::new(mean_us, jitter_us);
        self
    }

    /// Sets the leaders' fault-injection switches.
    pub fn mutations(mut self, mutations: Mutations) -> Self {
        self.leader.mutations = mutations;
        self
    }

    /// The link from `from` to `to`.
    pub fn link(&self, from: Node, to: Node) -> LinkConfig {
        self.links.get(&(from, to)).copied().unwrap_or(self.link)
    }

    /// Checks the configuration for values the simulator cannot run.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.shards == 0 {
            problems.push("shards must be >= 1".to_string());
        }
        if self.clients == 0 {
            problems.push("clients must be >= 1".to_string());
        }
        if self.in_flight == 0 {
            problems.push("in_flight must be >= 1".to_string());
        }
        if self.max_ops == 0 {
            problems.push("max_ops must be >= 1".to_string());
        }
        if self.keys < u64::from(self.shards) {
            problems.push(format!(
                "keys ({}) must be >= shards ({}) so every shard owns a key",
                self.keys, self.shards
            ));
        }
        for (name, p) in [
            ("read_ratio", self.read_ratio),
            ("cross_shard_ratio", self.cross_shard_ratio),
        ] {
            if !(0.0..=1.0).contains(&p) {
                problems.push(format!("{name} must lie in [0, 1], got {p}"));
            }
        }
        let links = std::iter::once(&self.link).chain(self.links.values());
        for link in links {
            if !(0.0..1.0).contains(&link.drop_rate) {
                problems.push(format!(
                    "drop_rate must lie in [0, 1), got {}",
                    link.drop_rate
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// A one-line summary of the knobs that shape a run (for failure messages).
    pub fn summary(&self) -> String {
        format!(
            "seed={} shards={} clients={} in_flight={} txns={} keys={} max_ops={} \
             delay={}±{}us drop={} reorder={} clock_offset=±{}us log_commit={}±{}us \
             cross_shard={} read_ratio={} ping_first={} headroom={}us retry={}us×{} \
             floor_lookahead={}us max_pending={} mutations={:?}",
            self.seed,
            self.shards,
            self.clients,
            self.in_flight,
            self.txns,
            self.keys,
            self.max_ops,
            self.link.delay.mean_us,
            self.link.delay.jitter_us,
            self.link.drop_rate,
            self.reorder,
            self.clock_offset_max_us,
            self.log_commit.mean_us,
            self.log_commit.jitter_us,
            self.cross_shard_ratio,
            self.read_ratio,
            self.ping_first,
            self.coordinator.headroom_us,
            self.coordinator.retry_timeout_us,
            self.coordinator.max_attempts,
            self.leader.floor_lookahead_us,
            self.leader.max_pending,
            self.leader.mutations,
        )
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self::new(0)
    }
}
