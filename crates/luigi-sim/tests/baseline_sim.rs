//! The baselines (`occ` and `2pl`: `luigi-baseline`) in the simulator's Raft model: the real
//! node with the baseline's replicas (`luigi_node::replicas_for`) on simulated disks, its
//! clients the `BaseClient`, under the fault injectors Luigi runs under (random crashes,
//! isolations and Raft-only cuts, leader kills at the baseline's counterparts of the kill
//! points, majority losses, lossy and reordering links, clock skew). After every seed: the
//! serial order derived from the shards' committed logs and real time (a cycle is a
//! violation), the replay of every committed transaction in that order (outputs and final
//! stores byte for byte; aborted ones must have left no trace), no serving leader left with
//! a prepared piece or anything in its care after healing, liveness (a probe must commit on
//! the healed cluster), and for TPC-C its twelve consistency conditions. `direct` is checked
//! for durability only (it is not transactional).
//!
//! `LUIGI_SIM_SEED=n` runs one seed, `LUIGI_SIM_TRACE=1` prints every event,
//! `LUIGI_SIM_SWEEP=n` / `LUIGI_SIM_SWEEP_FROM=n` size every sweep (defaults: 30 micro seeds
//! per protocol from 1, 8 TPC-C seeds per protocol from 1), e.g.
//! `LUIGI_SIM_SWEEP=1000 cargo test -p luigi-sim --test baseline_sim micro -- --nocapture`.

mod common;
#[path = "workload_sim/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use luigi_sim::checker::{check, derive_order, AnswerRecord, CheckOptions, History, Moment, Placement, TxnRecord};
use luigi_sim::{failover_config, run_replicated, FailoverReport, FaultConfig, KillPoint, SimConfig, ViolationKind};
use luigi_store::{Key, Store};
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::types::{KeySet, Protocol, ShardId, ShardPiece, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp, MicroOutput};
use luigi_workloads::tpcc::{Mix, TpccConfig, TpccLoad, TpccWorkload};

use common::{Catch, Trial};
use support::{gives_up, hosted_config, hosted_faults, one_seed, sweep};

const FILE: &str = "baseline_sim";

/// The transactional baselines.
const PROTOCOLS: [Protocol; 2] = [Protocol::Occ, Protocol::TwoPl];

/// The micro workload on 2 or 3 shards (by seed) of `failover_config`'s shape (half of the
/// transactions cross-shard, 6 keys per shard: many conflicts), 200 transactions and a
/// liveness probe, with by seed lossy or reordering client links, clock offsets up to
/// ±20 ms, and clients that give up (the resolution is then the answer).
fn micro(seed: u64, protocol: Protocol) -> SimConfig {
    let pick = |n: u64, salt: u64| (seed / salt) % n;
    let shards = 2 + (seed % 2) as u32;
    let mut c = failover_config(seed, shards)
        .protocol(protocol)
        .txns(200)
        .probe(4)
        .drop_rate([0.0, 0.0, 0.05, 0.1][pick(4, 5) as usize])
        .reorder(pick(2, 7) == 1)
        .clock_offset_max([0, 2_000, 20_000][pick(3, 11) as usize]);
    if gives_up(seed) {
        c.coordinator.max_attempts = 3;
    }
    c
}

/// TPC-C of `tpcc_sim`'s shape (2 or 3 shards, remote supply lines and payments raised) for
/// `protocol`, with `hosted_config`'s knobs drawn from `seed`.
fn tpcc(seed: u64, protocol: Protocol) -> SimConfig {
    let shards = 2 + (seed % 2) as u32;
    let warehouses = (shards + (seed / 2 % 2) as u32).min(3);
    let config = TpccConfig { warehouses, scale: 0.01, seed: seed ^ 0x7cc };
    let load = TpccLoad { mix: Mix::Standard, remote_item_pct: 10.0, remote_payment_pct: 50.0 };
    let w = TpccWorkload::new(config, load, shards).expect("valid TPC-C configuration");
    let population_seed = w.config().seed;
    hosted_config(seed, 100).hosting(Arc::new(w), population_seed).protocol(protocol)
}

fn sweep_protocols(test: &str, seeds: Vec<u64>, config: impl Fn(u64, Protocol) -> SimConfig) -> FailoverReport {
    let started = Instant::now();
    let mut total = FailoverReport::default();
    for seed in seeds {
        for protocol in PROTOCOLS {
            let config = config(seed, protocol);
            let faults = hosted_faults(seed, config.shards);
            let r = support::must_pass(FILE, test, config, &faults);
            if one_seed() {
                eprintln!("{protocol:?}: {r:?}");
            }
            total.absorb(&r);
        }
    }
    eprintln!("{test}: {total:?} in {:?}", started.elapsed());
    total
}

#[test]
fn micro_faults_sweep() {
    let total = sweep_protocols("micro_faults_sweep", sweep(1, 30), micro);
    if !one_seed() {
        assert!(total.committed > 0 && total.rejected > 0, "{total:?}");
        assert!(total.crashes > 0 && total.kills > 0 && total.cuts > 0 && total.outages > 0, "{total:?}");
        assert!(total.promotions > total.crashes, "{total:?}");
    }
}

#[test]
fn tpcc_faults_sweep() {
    let total = sweep_protocols("tpcc_faults_sweep", sweep(1, 8), tpcc);
    if !one_seed() {
        assert!(total.committed > 0 && total.crashes > 0, "{total:?}");
    }
}

/// Leaders killed at the baseline's counterparts of Luigi's kill points, every transaction
/// cross-shard: a participant right before (`PrepareCommitted`) or after (`ProposeSent`) it
/// sends its first vote (its `Prepare` is committed), a coordinator in the call that sends a
/// decision (`Decided`, its outputs lost), a participant in the call that installs a
/// committed piece (`Executed`), and a client that dies after its dispatch
/// (`CoordinatorPartial`). The new leaders must finish or abort every prepared piece.
#[test]
fn kill_points() {
    const POINTS: [KillPoint; 5] = [
        KillPoint::PrepareCommitted,
        KillPoint::ProposeSent,
        KillPoint::Decided,
        KillPoint::Executed,
        KillPoint::CoordinatorPartial,
    ];
    for point in POINTS {
        let mut kills = 0;
        for seed in sweep(100, 3) {
            for protocol in PROTOCOLS {
                let config = micro(seed, protocol).cross_shard(1.0).drop_rate(0.0);
                let r = support::must_pass(FILE, "kill_points", config, &FaultConfig::kill_at(point, 3));
                kills += r.kills;
            }
        }
        eprintln!("{point:?}: {kills} kills");
        if !one_seed() {
            assert!(kills > 0, "the kill point {point:?} never came up");
        }
    }
}

/// `direct` runs too, checked for durability only (every piece answered `Ok` took effect on
/// its shard, none answered with an error did, every replica holds the same store).
#[test]
fn direct_is_durable() {
    for seed in sweep(1, 6) {
        let config = micro(seed, Protocol::Direct);
        let faults = hosted_faults(seed, config.shards);
        support::must_pass(FILE, "direct_is_durable", config, &faults);
    }
}

/// Same seed, same run: the trace hash and the report are equal.
#[test]
fn runs_are_deterministic() {
    for protocol in PROTOCOLS {
        let config = micro(7, protocol);
        let faults = hosted_faults(7, config.shards);
        let a = run_replicated(&config, &faults).expect("correct run");
        let b = run_replicated(&config, &faults).expect("correct run");
        assert_eq!(a, b);
    }
}

// ---- the checks are not vacuous ----

fn id(client: u64, seq: u64) -> TxnId {
    TxnId { client, seq }
}

/// A single-shard micro transaction on shard 0 dispatched at `times.0` and answered
/// committed at `times.1` with `reads`.
fn txn(id: TxnId, ops: &[MicroOp], times: (u64, u64), reads: MicroOutput) -> TxnRecord {
    let rk: Vec<Key> = ops.iter().filter(|o| o.write.is_none()).map(|o| micro_key(o.key)).collect();
    let wk: Vec<Key> = ops.iter().filter(|o| o.write.is_some()).map(|o| micro_key(o.key)).collect();
    let output = postcard::to_stdvec(&reads).expect("encode");
    TxnRecord {
        id,
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(ops).expect("encode"),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(rk, wk) }],
        dispatched: Moment::at(times.0),
        answers: vec![AnswerRecord {
            at: Moment::at(times.1),
            outcome: TxnOutcome::Ordered { ts: 0, results: vec![(0 as ShardId, Ok(output))] },
            attempts: 1,
            read_only: false,
        }],
    }
}

fn placements(on_shard_0: &[(TxnId, Placement)]) -> Vec<BTreeMap<TxnId, Placement>> {
    vec![on_shard_0.iter().copied().collect()]
}

fn registry() -> luigi_txn::procedure::Registry {
    luigi_sim::SimConfig::new(0).registry()
}

/// A stale read: W writes key 1 and is answered; R, dispatched after, reads key 1 on a leader
/// whose log ended before W's install (a deposed leader that still serves) and sees nothing.
/// The logs put R before W, real time W before R: a cycle.
#[test]
fn derived_order_catches_a_stale_read() {
    let w = txn(id(1, 1), &[MicroOp { key: 1, write: Some(7) }], (0, 10), vec![]);
    let r = txn(id(2, 1), &[MicroOp { key: 1, write: None }], (20, 30), vec![(1, None)]);
    let history = History { txns: vec![w, r] };
    let order = placements(&[(id(1, 1), Placement::Installed(2)), (id(2, 1), Placement::ReadAt(1))]);
    let v = derive_order(&history, &BTreeMap::new(), &order).expect_err("a stale read");
    assert_eq!(v.kind, ViolationKind::NotSerializable, "{v}");
    // Read at the index of W's install, it is correct, and the replay agrees.
    let history = History {
        txns: vec![
            history.txns[0].clone(),
            txn(id(2, 1), &[MicroOp { key: 1, write: None }], (20, 30), vec![(1, Some(7))]),
        ],
    };
    let order = placements(&[(id(1, 1), Placement::Installed(2)), (id(2, 1), Placement::ReadAt(2))]);
    let (derived, _) = derive_order(&history, &BTreeMap::new(), &order).expect("serializable");
    let mut store = Store::new();
    store.put(micro_key(1), 7u64.to_le_bytes().to_vec());
    check(&derived, &registry(), &[&store], CheckOptions::default()).expect("the replay agrees");
}

/// A read answered with a value its place in the log does not give: the replay catches it.
#[test]
fn derived_order_replay_catches_a_wrong_answer() {
    let w = txn(id(1, 1), &[MicroOp { key: 1, write: Some(7) }], (0, 10), vec![]);
    // Concurrent with W (no real-time order), placed after W's install, but it saw nothing.
    let r = txn(id(2, 1), &[MicroOp { key: 1, write: None }], (5, 30), vec![(1, None)]);
    let history = History { txns: vec![w, r] };
    let order = placements(&[(id(1, 1), Placement::Installed(2)), (id(2, 1), Placement::ReadAt(2))]);
    let (derived, _) = derive_order(&history, &BTreeMap::new(), &order).expect("an order exists");
    let mut store = Store::new();
    store.put(micro_key(1), 7u64.to_le_bytes().to_vec());
    let v = check(&derived, &registry(), &[&store], CheckOptions::default()).expect_err("a wrong answer");
    assert_eq!(v.kind, ViolationKind::ResultMismatch, "{v}");
}

/// A committed answer that the final log does not hold (lost), and an aborted one that it
/// does (a trace), are caught before any order.
#[test]
fn derived_order_catches_lost_and_leaked_writes() {
    let w = txn(id(1, 1), &[MicroOp { key: 1, write: Some(7) }], (0, 10), vec![]);
    let lost = derive_order(&History { txns: vec![w.clone()] }, &BTreeMap::new(), &placements(&[]))
        .expect_err("a lost commit");
    assert_eq!(lost.kind, ViolationKind::NotDurable, "{lost}");
    let mut aborted = w;
    aborted.answers[0].outcome =
        TxnOutcome::Ordered { ts: 0, results: vec![(0, Err(luigi_txn::msg::TxnError::Aborted("conflict".into())))] };
    let leaked = derive_order(
        &History { txns: vec![aborted] },
        &BTreeMap::new(),
        &placements(&[(id(1, 1), Placement::Installed(1))]),
    )
    .expect_err("an aborted transaction installed");
    assert_eq!(leaked.kind, ViolationKind::Execution, "{leaked}");
}

/// A whole run with a broken disk (it acknowledges writes before they are synced, so a crash
/// loses what a quorum acknowledged): the baseline's checks catch lost or diverging writes.
#[test]
fn acknowledging_unsynced_writes_is_caught() {
    common::caught_as(
        FILE,
        "acknowledging_unsynced_writes_is_caught",
        &common::seeds(0..10),
        Catch::Kind(ViolationKind::Invariant),
        |seed| {
            Trial::replicated(
                failover_config(seed, 2).protocol(PROTOCOLS[(seed % 2) as usize]).txns(200),
                common::slow_sync_faults(),
            )
        },
        common::ack_before_sync,
    );
}
