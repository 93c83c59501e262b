//! Partitions in the Raft cluster model (issue 26): one-way partitions (a replica's outgoing
//! or incoming messages cut) and partitions that hold messages as TCP does and deliver them
//! at the heal, in the random fault mix ([`FaultConfig::partitions`]), with the model's
//! liveness bound after every heal and the checker at the end, about every other seed with
//! read-only transactions at a snapshot mixed in (DESIGN.md rule 23, `common::reads_on`),
//! read from the nearest replicas, followers included; and a held partition of a
//! leader after which the clients' one-way delay estimates must be back to normal within a
//! virtual second (DESIGN.md rule 1's sample rules).
//!
//! `LUIGI_SIM_SWEEP=n` runs `n` seeds of `partitions_sweep` (default 40, from seed
//! `LUIGI_SIM_SWEEP_FROM`, default 6000).

mod common;

use luigi_sim::{failover_config, CutKind, CutMode, FailoverReport, FaultConfig, PlannedCut, SimConfig};

/// 2 or 3 shards by seed.
fn shards(seed: u64) -> u32 {
    2 + (seed % 2) as u32
}

/// The largest one-way delay estimate a correct client may hold in these runs: a sample
/// counts only if its round trip was within the resend timeout (60 ms in
/// [`failover_config`]), so none exceeds that plus the difference of two clocks (±2 ms
/// each) and a link's delay (1 ms ± 0.5 ms). A healthy estimate is a few milliseconds; a held
/// partition's late answers give its length.
const OWD_NORMAL_MAX_US: i64 = 70_000;

#[test]
fn partitions_sweep() {
    let faults = FaultConfig { partitions: true, ..FaultConfig::new() };
    let mut total = FailoverReport::default();
    for seed in common::sweep(6_000, 40) {
        let r = common::must_pass_replicated(
            "partitions",
            "partitions_sweep",
            common::with_reads_on_half(failover_config(seed, shards(seed))),
            &faults,
        );
        total.absorb(&r);
    }
    eprintln!("partitions: {total:?}");
    if !common::one_seed() {
        // Over the whole sweep: every new kind of cut happened, and held messages arrived.
        assert!(total.committed > 0 && total.one_way_cuts > 0 && total.held_cuts > 0, "{total:?}");
        assert!(total.held_delivered > 0, "{total:?}");
        assert!(total.read_only > 0 && total.committed > total.read_only, "no read answered: {total:?}");
        assert!(total.snapshot_reads_by_followers > 0, "no follower served a read: {total:?}");
    }
    assert!(
        total.owd_after_heal_max_us < OWD_NORMAL_MAX_US,
        "a client's delay estimate was {} us a second after a held partition healed",
        total.owd_after_heal_max_us
    );
}

/// 2 shards; every replica of shard 0 cut off (`kind`) for `down_us` from 20 ms on, what the
/// cut direction carries held as TCP holds it: the clients' keepalive pings and dispatches to
/// the shard wait and arrive at the heal, answered at once, as the seconds-late pongs of
/// issue 26 did.
fn held_partition(seed: u64, kind: CutKind, down_us: u64) -> (SimConfig, FaultConfig) {
    let config = failover_config(seed, 2).txns(3_000);
    let cut =
        |replica| PlannedCut { shard: 0, replica: Some(replica), kind, mode: CutMode::Held, at_us: 20_000, down_us };
    let faults = FaultConfig { random_faults: false, cuts: (0..3).map(cut).collect(), ..FaultConfig::new() };
    (config, faults)
}

/// Fails without the sample rules of `ecf9440` (checked by making `OwdEstimator::record`
/// count every sample: a second after the heal the largest estimate is then about the
/// partition's length, and every transaction is stamped that far ahead).
#[test]
fn delay_estimates_are_normal_a_second_after_a_held_partition_heals() {
    for (seed, kind) in [(1, CutKind::Incoming), (2, CutKind::BothWays)] {
        let (config, faults) = held_partition(seed, kind, 3_000_000);
        let test = "delay_estimates_are_normal_a_second_after_a_held_partition_heals";
        let r = common::must_pass_replicated("partitions", test, config, &faults);
        eprintln!(
            "shard 0 cut {kind:?} for 3 s: {} held messages delivered at the heal, {} lost; largest estimate a second \
             later: {} us ({} observations); {} committed",
            r.held_delivered, r.held_lost, r.owd_after_heal_max_us, r.owd_observations, r.committed
        );
        assert!(r.owd_observations >= 1, "the run ended before the estimates were read: {r:?}");
        assert!(r.held_delivered > 0, "nothing was held: {r:?}");
        assert!(
            r.owd_after_heal_max_us < OWD_NORMAL_MAX_US,
            "{kind:?}: a client's delay estimate was {} us a second after the held partition healed \
             (late answers counted as samples)",
            r.owd_after_heal_max_us
        );
    }
}
