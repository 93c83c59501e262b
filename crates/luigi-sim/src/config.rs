//! The knobs of one simulated run.

use std::collections::BTreeMap;

use std::sync::Arc;

use luigi_protocol::coordinator::{CommitRule, CoordinatorConfig};
use luigi_protocol::leader::{LeaderConfig, Mutations};
use luigi_store::Store;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{Protocol, ShardId};
use luigi_workloads::micro::{MicroConfig, Placement, Spread};
use luigi_workloads::Workload;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::hosted::HostedWorkload;
use crate::net::Node;
use crate::procedure;

/// A delay drawn uniformly from `[mean - jitter, mean + jitter]` microseconds (never
/// negative): the server's own delay model.
pub use luigi_wan::DelayDist as Delay;

/// How one directed link behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Per-message one-way delay.
    pub delay: Delay,
    /// Probability that a message is lost (0 = reliable). The coordinator's retries and the
    /// leader's duplicate handling recover from losses. Ignored on leader-to-leader links,
    /// which are never lossy (like TCP: leaders do not retransmit agreement items).
    pub drop_rate: f64,
}

impl LinkConfig {
    /// A reliable link with `delay`.
    pub const fn reliable(delay: Delay) -> Self {
        Self { delay, drop_rate: 0.0 }
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
    /// Probability that a transaction is cross-shard: it then touches between 2 and all
    /// shards (uniformly), with at least one operation on each and the others spread over
    /// them; otherwise all its keys live on one uniformly chosen shard.
    pub cross_shard_ratio: f64,
    /// The link used between any two nodes unless overridden in `links`.
    pub link: LinkConfig,
    /// Per directed link overrides, `(from, to)`.
    pub links: BTreeMap<(Node, Node), LinkConfig>,
    /// When false, every link is FIFO (a message never overtakes an earlier one on the same
    /// link); when true, messages on a link may be reordered by their delays. Messages on
    /// different links are never ordered with respect to each other.
    pub reorder: bool,
    /// Keep leader-to-leader links FIFO even when `reorder` is set (like TCP). Clear it to let
    /// agreement items overtake each other on one link too (e.g. a `Confirm` before the
    /// `Propose` sent ahead of it).
    pub peer_links_fifo: bool,
    /// Each node's clock is offset from virtual time by a value drawn uniformly from
    /// `[-max, +max]` µs (local clock = virtual time + offset, clamped at 0).
    pub clock_offset_max_us: u64,
    /// Per-node clock offsets (µs) that replace the drawn ones (the draw still happens, so
    /// the rest of the run's randomness is unchanged).
    pub clock_offsets: BTreeMap<Node, i64>,
    /// Time a shard's disk takes to make what its node asks to sync durable, in the
    /// ideal-log runs ([`crate::run`]): a record commits one sync after it is appended (its
    /// group has one replica), in log order. `Delay::ZERO` commits at the same virtual
    /// instant, after the call that appended it.
    pub log_commit: Delay,
    /// Clients ping every leader at time 0 to seed their one-way-delay estimates.
    pub ping_first: bool,
    /// Each client starts submitting at a time drawn uniformly from `[0, start_spread_us]`.
    pub start_spread_us: u64,
    /// Micro workload: from each client's transaction number `from_seq` on, no transaction
    /// touches `shard` (drawn again until it does not). What a test uses to go on loading the
    /// other shards while one is down, with none of them waiting on it.
    pub retired_shard: Option<RetiredShard>,
    /// Template for every leader's configuration (`shard` is overwritten).
    pub leader: LeaderConfig,
    /// Template for every coordinator's configuration (`client` is overwritten, and so is the
    /// shard count of [`CommitRule::AllShards`]). The default commit rule is `AllShards`, as in
    /// the runtime.
    pub coordinator: CoordinatorConfig,
    /// A run that has not answered every transaction by this virtual time fails.
    pub max_virtual_us: u64,
    /// A run that processes more events than this fails (guards against livelock).
    pub max_events: u64,
    /// Once every transaction is answered, an ideal-log run goes on until every leader is
    /// idle (nothing pending, every record committed and applied), for at most this long
    /// (virtual µs); a leader still busy then fails the run.
    pub drain_us: u64,
    /// Also require `ts(A) < ts(B)` when A was answered before B was dispatched and they share
    /// no shard (on by default). [`CommitRule::AllShards`] guarantees it whatever the clocks
    /// do; with [`CommitRule::Participants`] it depends on clock skew (see the crate docs).
    /// Strict serializability itself is always checked.
    pub check_realtime_across_shards: bool,
    /// Check, whenever a shard executes a cross-shard transaction, that every participant's
    /// `PREPARE` is committed and that every participant's committed log already holds the
    /// final timestamp (its `PREPARE` or a `DECIDE` at that timestamp): DESIGN.md rule 4's
    /// second round. On by default; a test may turn it off to see what the other checks make
    /// of a protocol that skips the second round.
    pub check_durable_decisions: bool,
    /// After the run, check that on every shard conflicting transactions executed in the
    /// order of that shard's own committed log (the timestamps a replica or a new leader
    /// replaying it would use). On by default. (Final-timestamp order is always checked.)
    pub check_log_order: bool,
    /// The workload the clients run: `None` for the built-in micro workload (the knobs above,
    /// run as [`procedure::NAME`] with unique write values, on empty stores); otherwise any
    /// [`Workload`], its procedures registered on every server, every replica starting from
    /// its population, its generators (one per client, multi-step business transactions
    /// honoured) and its own consistency check after the run (see [`SimConfig::hosting`]).
    /// The micro knobs (`keys`, `max_ops`, `read_ratio`, `cross_shard_ratio`) are then unused.
    pub workload: Option<HostedWorkload>,
    /// Liveness after the faults: once the run has settled (every fault healed, the cluster
    /// converged), the clients submit this many more transactions, which must all be
    /// answered in the settling time, and at least one must commit. 0: no such probe.
    pub probe_txns: u64,
    /// The transaction protocol the servers and clients run (default [`Protocol::Luigi`]).
    /// The baselines ([`Protocol::Occ`], [`Protocol::TwoPl`], [`Protocol::Direct`]) run only
    /// in the Raft model ([`crate::run_replicated`]): their nodes are built with
    /// `luigi_node::replicas_for`, their clients are `BaseClient`s, and the checks that
    /// are about Luigi's timestamps and agreement are replaced by the baseline's (see
    /// [`crate::failover`]).
    pub protocol: Protocol,
    /// Print every event to stderr (for debugging one seed).
    pub trace: bool,
}

impl SimConfig {
    /// Defaults with `seed`: 1 shard, 4 clients × 4 in flight, 200 transactions over 32 keys,
    /// 1-10 operations (half reads), no cross-shard transactions, links of 1 ms ± 0.5 ms FIFO
    /// (leader links too), clocks within ±2 ms, log commits after 0.5 ms ± 0.25 ms,
    /// coordinators on `CommitRule::AllShards`, every check on (real-time order across shards
    /// and rule 4's durability included).
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
            retired_shard: None,
            link: LinkConfig::default(),
            links: BTreeMap::new(),
            reorder: false,
            peer_links_fifo: true,
            clock_offset_max_us: 2_000,
            clock_offsets: BTreeMap::new(),
            log_commit: Delay::new(500, 250),
            ping_first: true,
            start_spread_us: 5_000,
            leader: LeaderConfig::new(0, 1),
            coordinator: CoordinatorConfig {
                commit_rule: CommitRule::AllShards { shards: 1 },
                ..CoordinatorConfig::new(0)
            },
            max_virtual_us: 600_000_000,
            max_events: 5_000_000,
            drain_us: 10_000_000,
            check_realtime_across_shards: true,
            check_durable_decisions: true,
            check_log_order: true,
            workload: None,
            probe_txns: 0,
            protocol: Protocol::Luigi,
            trace: false,
        }
    }

    /// Runs `workload` (populated from `seed`) instead of the micro workload, over as many
    /// shards as its partitioner has.
    pub fn hosting(mut self, workload: Arc<dyn Workload>, seed: u64) -> Self {
        let hosted = HostedWorkload::new(workload, seed);
        self.shards = hosted.shards();
        self.workload = Some(hosted);
        self
    }

    /// Runs `protocol` (see [`SimConfig::protocol`]).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Sets the number of liveness-probe transactions (see [`SimConfig::probe_txns`]).
    pub fn probe(mut self, txns: u64) -> Self {
        self.probe_txns = txns;
        self
    }

    /// The procedures every server registers and the checker replays through: the hosted
    /// workload's (with the built-ins), else the built-ins plus `sim-micro`.
    pub fn registry(&self) -> Registry {
        match &self.workload {
            Some(w) => w.registry(),
            None => procedure::registry(),
        }
    }

    /// Shard `shard`'s initial store: the hosted workload's population, else empty.
    pub fn initial(&self, shard: ShardId) -> Store {
        match &self.workload {
            Some(w) => w.initial(shard),
            None => Store::new(),
        }
    }

    /// Retires `shard` from each client's transaction `from_seq` on ([`SimConfig::retired_shard`]).
    pub fn retire_shard(mut self, shard: ShardId, from_seq: u64) -> Self {
        self.retired_shard = Some(RetiredShard { shard, from_seq });
        self
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

    /// Sets the default link's loss probability (not that of the `links` overrides).
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

    /// Sets the probability that a transaction is cross-shard.
    pub fn cross_shard(mut self, ratio: f64) -> Self {
        self.cross_shard_ratio = ratio;
        self
    }

    /// Sets the coordinators' commit rule (the shard count of `AllShards` is filled in).
    pub fn commit_rule(mut self, rule: CommitRule) -> Self {
        self.coordinator.commit_rule = rule;
        self
    }

    /// Gives every directed link between the run's nodes (clients to leaders, leaders to
    /// clients, leaders to leaders) its own delay: a mean drawn uniformly from
    /// `[min_mean_us, max_mean_us]` and a jitter of up to `jitter_pct` percent of it, drawn
    /// from a generator seeded by the run's seed (call it after setting `shards` and
    /// `clients`). The default link's loss rate is kept (and ignored between leaders).
    pub fn per_link_delays(self, min_mean_us: u64, max_mean_us: u64, jitter_pct: u64) -> Self {
        self.draw_links(0x0011_4b5d_e1a0, |_, _| true, min_mean_us, max_mean_us, jitter_pct)
    }

    /// Like [`SimConfig::per_link_delays`], for the leader-to-leader links only.
    pub fn peer_link_delays(self, min_mean_us: u64, max_mean_us: u64, jitter_pct: u64) -> Self {
        let peer = |a: Node, b: Node| matches!((a, b), (Node::Leader(_), Node::Leader(_)));
        self.draw_links(0x9ee7_de1a, peer, min_mean_us, max_mean_us, jitter_pct)
    }

    fn draw_links(
        mut self,
        salt: u64,
        which: impl Fn(Node, Node) -> bool,
        min_mean_us: u64,
        max_mean_us: u64,
        jitter_pct: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ salt);
        let leaders = (0..self.shards).map(Node::Leader);
        let clients = (1..=u64::from(self.clients)).map(Node::Client);
        let nodes: Vec<Node> = leaders.chain(clients).collect();
        for &from in &nodes {
            for &to in &nodes {
                let client_pair = matches!((from, to), (Node::Client(_), Node::Client(_)));
                if from == to || client_pair || !which(from, to) {
                    continue;
                }
                let mean = rng.gen_range(min_mean_us..=max_mean_us);
                let jitter = rng.gen_range(0..=mean * jitter_pct.min(100) / 100);
                let link = LinkConfig { delay: Delay::new(mean, jitter), drop_rate: self.link.drop_rate };
                self.links.insert((from, to), link);
            }
        }
        self
    }

    /// Sets the clock offset of `node` (µs, may be negative).
    pub fn clock_offset(mut self, node: Node, offset_us: i64) -> Self {
        self.clock_offsets.insert(node, offset_us);
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

    /// The micro workload this run draws from: `keys`, `1..=max_ops` operations whose keys may
    /// repeat, `read_ratio`, and `cross_shard_ratio` of transactions over 2 to all shards;
    /// key `k` lives on shard `k % shards`.
    pub fn micro(&self) -> MicroConfig {
        MicroConfig {
            keys: self.keys,
            ops: u32::try_from(self.max_ops).unwrap_or(u32::MAX),
            vary_ops: true,
            read_ratio: self.read_ratio,
            cross_shard: self.cross_shard_ratio,
            spread: Spread::Random,
            zipf: None,
            distinct_keys: false,
            placement: Placement::Modulo,
            populate: false,
        }
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
        if self.leader.max_pending == 0 {
            problems.push("leader.max_pending must be >= 1".to_string());
        }
        match &self.workload {
            Some(w) if w.shards() != self.shards => problems.push(format!(
                "the hosted workload {w:?} partitions over {} shards, the run has {}",
                w.shards(),
                self.shards
            )),
            Some(_) => {}
            None => self.validate_micro(&mut problems),
        }
        let links = std::iter::once(&self.link).chain(self.links.values());
        for link in links {
            if !(0.0..1.0).contains(&link.drop_rate) {
                problems.push(format!("drop_rate must lie in [0, 1), got {}", link.drop_rate));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    fn validate_micro(&self, problems: &mut Vec<String>) {
        if self.max_ops == 0 {
            problems.push("max_ops must be >= 1".to_string());
        }
        if self.keys < u64::from(self.shards) {
            problems
                .push(format!("keys ({}) must be >= shards ({}) so every shard owns a key", self.keys, self.shards));
        }
        for (name, p) in [("read_ratio", self.read_ratio), ("cross_shard_ratio", self.cross_shard_ratio)] {
            if !(0.0..=1.0).contains(&p) {
                problems.push(format!("{name} must lie in [0, 1], got {p}"));
            }
        }
        if problems.is_empty() {
            if let Err(why) = self.micro().check(self.shards) {
                problems.push(format!("workload: {why}"));
            }
        }
    }

    /// A one-line summary of the knobs that shape a run (for failure messages).
    pub fn summary(&self) -> String {
        let hosted = match &self.workload {
            Some(w) => format!(" workload={w:?} probe_txns={}", self.probe_txns),
            None => String::new(),
        };
        format!(
            "protocol={} seed={} shards={} clients={} in_flight={} txns={} keys={} max_ops={} \
             delay={}±{}us drop={} reorder={} clock_offset=±{}us log_commit={}±{}us \
             cross_shard={} read_ratio={} ping_first={} headroom={}us retry={}us×{} \
             floor_lookahead={}us max_pending={} mutations={:?} commit_rule={:?} \
             link_overrides={} peer_links_fifo={} clock_offset_overrides={:?}{hosted}",
            self.protocol.name(),
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
            match self.coordinator.commit_rule {
                CommitRule::AllShards { .. } => CommitRule::AllShards { shards: self.shards },
                rule @ CommitRule::Participants => rule,
            },
            self.links.len(),
            self.peer_links_fifo,
            self.clock_offsets,
        )
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self::new(0)
    }
}

/// A shard the micro workload stops touching ([`SimConfig::retired_shard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetiredShard {
    /// The shard.
    pub shard: ShardId,
    /// Each client's first transaction number that avoids it.
    pub from_seq: u64,
}
