//! A workload the simulator hosts instead of its built-in micro one: any
//! [`luigi_workloads::Workload`] (TPC-C, micro with a population, a test's own), composed into
//! a run through [`SimConfig::hosting`](crate::SimConfig::hosting).
//!
//! What the run takes from it, and where:
//! - its procedures ([`HostedWorkload::registry`]): every replica and leader registers them, and
//!   the checker replays through them;
//! - its population ([`HostedWorkload::initial`]): every replica starts from
//!   `populate(seed, shard)` (a restarted or rebuilt one too: the node's
//!   [`InitialStore`](luigi_replica::InitialStore)), and so does the checker's replay;
//! - its generators ([`HostedWorkload::generator`]): one per client, with multi-step business
//!   transactions ([`TxnGenerator::next_step`]) honoured by the clients;
//! - its partitioner: the run has as many shards as it partitions over;
//! - its consistency check ([`HostedWorkload::check`]) on the final stores, after the replay.
//!
//! The population is built once per shard and cloned for every replica that needs it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use luigi_replica::InitialStore;
use luigi_store::Store;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, Timestamp, TxnId};
use luigi_workloads::{TxnGenerator, Workload};

use crate::checker::{self, CheckOptions, CheckSummary, History};
use crate::config::SimConfig;
use crate::violation::{Violation, ViolationKind};

/// A workload with the seed of its population, as a run hosts it. Cheap to clone (clones
/// share the workload and the population once built).
#[derive(Clone)]
pub struct HostedWorkload {
    workload: Arc<dyn Workload>,
    seed: u64,
    population: Arc<OnceLock<Vec<Arc<Store>>>>,
}

impl HostedWorkload {
    /// `workload`, populated from `seed` (the servers' population seed, e.g.
    /// `TpccConfig::seed`).
    pub fn new(workload: Arc<dyn Workload>, seed: u64) -> Self {
        Self { workload, seed, population: Arc::new(OnceLock::new()) }
    }

    /// The workload.
    pub fn workload(&self) -> &Arc<dyn Workload> {
        &self.workload
    }

    /// The population seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How many shards the workload partitions over.
    pub fn shards(&self) -> u32 {
        self.workload.partitioner().shards()
    }

    /// The built-in procedures plus the workload's.
    pub fn registry(&self) -> Registry {
        self.workload.registry()
    }

    fn population(&self) -> &[Arc<Store>] {
        self.population
            .get_or_init(|| (0..self.shards()).map(|s| Arc::new(self.workload.populate(self.seed, s))).collect())
    }

    /// Shard `shard`'s initial store.
    pub fn initial(&self, shard: ShardId) -> Store {
        self.population().get(shard as usize).map(|s| Store::clone(s)).unwrap_or_default()
    }

    /// Shard `shard`'s initial store as a node builds it (at its first start, and whenever it
    /// rebuilds its state from the start of the log).
    pub fn initial_store(&self, shard: ShardId) -> InitialStore {
        let store = self.population().get(shard as usize).cloned().unwrap_or_default();
        Arc::new(move || Store::clone(&store))
    }

    /// A generator seeded with `seed`.
    pub fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        self.workload.generator(seed)
    }

    /// The workload's consistency check over the final `stores` (shard `s`'s at index `s`).
    pub fn check(&self, stores: &[&Store]) -> Result<(), String> {
        self.workload.check(self.seed, stores)
    }
}

// A run that panics is abandoned, and the workload is only read through `&self` (the
// population is built once, behind a `OnceLock`), so a test may run a hosted configuration
// under `catch_unwind`, as it does the built-in one.
impl std::panic::RefUnwindSafe for HostedWorkload {}
impl std::panic::UnwindSafe for HostedWorkload {}

impl fmt::Debug for HostedWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(seed {:#x})", self.workload.name(), self.seed)
    }
}

/// The end-of-run checks both cluster models share, over the final `stores` (one per shard):
/// the checker's replay of `history` (and the executed `orphans`) from the initial stores
/// through `config`'s registry, then the hosted workload's own consistency check.
pub(crate) fn check_run(
    config: &SimConfig,
    history: &History,
    orphans: &BTreeMap<TxnId, Option<Timestamp>>,
    stores: &[&Store],
) -> Result<CheckSummary, Violation> {
    let options = CheckOptions { realtime_across_shards: config.check_realtime_across_shards };
    let initial: Vec<Store> = (0..stores.len() as ShardId).map(|s| config.initial(s)).collect();
    let summary = checker::check_from(history, orphans, &config.registry(), &initial, stores, options)?;
    if let Some(hosted) = &config.workload {
        hosted.check(stores).map_err(|why| {
            Violation::new(ViolationKind::Consistency, format!("the {hosted:?} workload's check: {why}"))
        })?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_workloads::micro::{MicroConfig, MicroWorkload, Placement};

    fn micro(shards: u32) -> Arc<dyn Workload> {
        let config =
            MicroConfig { keys: 12, ops: 3, placement: Placement::Modulo, populate: true, ..MicroConfig::default() };
        Arc::new(MicroWorkload::new(config, shards).expect("valid"))
    }

    #[test]
    fn every_replica_and_the_replay_start_from_the_population() {
        let hosted = HostedWorkload::new(micro(3), 9);
        assert_eq!(hosted.shards(), 3);
        for s in 0..3 {
            let expected = hosted.workload().populate(9, s);
            assert_eq!(expected.len(), 4);
            assert_eq!(hosted.initial(s), expected);
            assert_eq!((hosted.initial_store(s))(), expected);
            assert_eq!(hosted.clone().initial(s), expected, "clones share the population");
        }
        assert!(hosted.registry().contains(luigi_workloads::micro::Micro::NAME));
    }

    #[test]
    fn a_hosted_workload_sets_the_shards_and_is_validated() {
        let config = SimConfig::new(1).hosting(micro(2), 5);
        assert_eq!(config.shards, 2);
        assert_eq!(config.initial(1), config.workload.as_ref().expect("hosted").initial(1));
        config.validate().expect("valid");
        let wrong = SimConfig { shards: 3, ..config };
        assert!(wrong.validate().expect_err("refused").contains("partitions over 2 shards"));
        assert!(SimConfig::new(1).initial(0).is_empty(), "the built-in micro workload starts empty");
    }
}
