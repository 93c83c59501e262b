//! Read-only transactions at a snapshot (DESIGN.md rule 23) in the simulator: mixed into the
//! fault sweeps (crashes, partitions, lossy and reordering links, skewed clocks, leader kills,
//! a shard without a majority), read from the nearest replica (followers included), the
//! whole history checked for strict serializability; and the mutation that serves a read
//! before the replica's safe time reaches it is caught.

mod common;

use std::time::Instant;

use common::{Catch, Trial};
use luigi_sim::{
    failover_config, CutKind, CutMode, FailoverReport, FaultConfig, KillPoint, PlannedCut, SimConfig, ViolationKind,
};

const FILE: &str = "read_only";

fn shards(seed: u64) -> u32 {
    2 + (seed % 2) as u32
}

/// Random faults, reordering and lossy links and skewed clocks drawn from `seed`.
fn faulty(seed: u64) -> (SimConfig, FaultConfig) {
    let pick = |n: u64, salt: u64| (seed / salt) % n;
    let mut c = failover_config(seed, shards(seed))
        .cross_shard([0.0, 0.3, 0.7][pick(3, 3) as usize])
        .drop_rate([0.0, 0.02][pick(2, 5) as usize])
        .reorder(pick(2, 7) == 1)
        .clock_offset_max([0, 2_000, 20_000][pick(3, 11) as usize]);
    c.txns = 200;
    let kill = [None, Some(KillPoint::Executed), Some(KillPoint::SpeculativeAnswer)][pick(3, 13) as usize];
    let faults = FaultConfig { kill, kills: 2, kill_gap_us: 50_000, ..FaultConfig::new() };
    (common::with_reads(c), faults)
}

/// Seed 31 found that a snapshot read answered as soon as its participants served it let a
/// later writer on another shard go below the snapshot (a cycle through a cross-shard writer
/// the read saw): the client now answers a read under the commit rule of the read-write
/// path, once every shard's watermark passed its snapshot (rule 23, (d)).
#[test]
fn read_only_transactions_under_random_faults_are_strictly_serializable() {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    for seed in common::sweep(1, 40) {
        let (config, faults) = faulty(seed);
        let r = common::must_pass_replicated(
            FILE,
            "read_only_transactions_under_random_faults_are_strictly_serializable",
            config,
            &faults,
        );
        total.absorb(&r);
    }
    eprintln!("read-only under faults: {total:?} in {:?}", started.elapsed());
    if !common::one_seed() {
        assert!(total.read_only > 0 && total.committed > total.read_only, "{total:?}");
        assert!(total.snapshot_reads_by_followers > 0, "no follower served a read: {total:?}");
        assert!(total.crashes > 0 && total.promotions > 0, "{total:?}");
    }
}

#[test]
fn serving_a_read_before_the_safe_time_is_caught() {
    let test = "serving_a_read_before_the_safe_time_is_caught";
    let trial = |seed: u64| {
        let (config, _) = faulty(seed);
        Trial::replicated(config, FaultConfig::new())
    };
    let seeds = common::seeds(1..6);
    common::caught_as(FILE, test, &seeds, Catch::Kind(ViolationKind::ResultMismatch), trial, |t| {
        t.config.leader.mutations.serve_reads_before_safe_time = true;
    });
}

/// Rule 23 (e): a leader serves a read above its committed marker once the writes it
/// executed to the read's keys are committed. Few keys (a read often meets a write not
/// committed yet), clocks in step (a snapshot at the client's now, soon below the leader's
/// watermark), leaders killed right after they execute (losing what they executed ahead of
/// its commit). These seeds do not lose a write a read saw; the mutation that skips the
/// commit check is caught below (`serving_reads_ahead_of_uncommitted_writes_is_caught`) and
/// in the leader's transcript (`leader::tests_speculation`).
#[test]
fn reads_at_leaders_killed_right_after_executing_are_strictly_serializable() {
    let mut total = FailoverReport::default();
    for seed in common::sweep(1, 10) {
        let mut c = failover_config(seed, 2);
        c.txns = 200;
        c.keys = 4;
        let faults =
            FaultConfig { kill: Some(KillPoint::Executed), kills: 4, kill_gap_us: 20_000, ..FaultConfig::new() };
        let test = "reads_at_leaders_killed_right_after_executing_are_strictly_serializable";
        total.absorb(&common::must_pass_replicated(FILE, test, common::with_reads(c), &faults));
    }
    if !common::one_seed() {
        assert!(total.read_only > 0 && total.kills > 0, "{total:?}");
    }
}

/// Shard 0's leader cut from its group (clients still reach it) while it keeps executing:
/// its writes cannot commit, the reads it serves ahead see them, and a new leader elected
/// without them orders those writes again later (the clients resend). One shard, few keys
/// and clocks in step, so that reads meet those writes.
fn leader_cut_from_its_group(seed: u64) -> Trial {
    let mut c = failover_config(seed, 1);
    c.txns = 300;
    c.keys = 4;
    let cut = PlannedCut {
        shard: 0,
        replica: None,
        kind: CutKind::FromGroup,
        mode: CutMode::Lost,
        at_us: 30_000,
        down_us: 400_000,
    };
    let faults = FaultConfig { random_faults: false, cuts: vec![cut], ..FaultConfig::new() };
    Trial::replicated(common::with_reads(c), faults)
}

/// Rule 23 (e) broken at the leader: reads served above its committed marker name no
/// position for the uncommitted writes of their keys, so the client counts them at once; the
/// replay of those reads does not match once the writes are ordered again.
#[test]
fn serving_reads_ahead_without_their_writes_position_is_caught() {
    let test = "serving_reads_ahead_without_their_writes_position_is_caught";
    let seeds = common::seeds(1..6);
    common::caught_as(FILE, test, &seeds, Catch::Kind(ViolationKind::ResultMismatch), leader_cut_from_its_group, |t| {
        t.config.leader.mutations.serve_ahead_unsettled = true;
    });
}

/// Rule 23 (e) broken at the client: it counts a read served on a position not proven.
#[test]
fn counting_reads_on_unproven_positions_is_caught() {
    let test = "counting_reads_on_unproven_positions_is_caught";
    let seeds = common::seeds(1..6);
    common::caught_as(FILE, test, &seeds, Catch::Kind(ViolationKind::ResultMismatch), leader_cut_from_its_group, |t| {
        t.config.coordinator.mutations.count_unproven_reads = true;
    });
}
