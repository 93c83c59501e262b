//! Regressions: seeds that once exposed a protocol bug, kept so the bug stays fixed.

use luigi_sim::{run, SimConfig, ViolationKind};

/// Regression (found by the simulator, fixed by storing refusals as answers): a leader that
/// rejected a dispatch did not remember it. Before the fix: a leader that rejects a dispatch (here: its pending table is full) does not remember the
/// rejection. A retry of the same transaction that arrives later (sent before the rejection
/// reached the client, or after a lost rejection) is admitted and executed, while the client
/// was already told `Rejected` ("never ordered or executed"). The writes of a transaction the
/// client believes rejected are in the store; the late `Ok` reply is dropped by the
/// coordinator as a duplicate. In seed 1 below: c1#1's dispatch reaches the full leader at
/// 2.0 ms and is rejected (the client is told `Rejected` at 2.85 ms); the coordinator's retry,
/// sent at 2.26 ms, arrives at 2.94 ms, is admitted and executes at ts 2077; c1#6 (ts 3210)
/// then reads c1#1's write of key 29, which the replay (without the rejected c1#1) does not
/// have. The checker reports `ResultMismatch` naming the rejected writer; seeds 2 and 3 end
/// with admitted-after-rejection transactions still pending ("shard 0 still has N
/// transactions pending after every transaction was answered"). The default 2 s retry
/// timeout only hides it: a rejection reply delayed past the retry timeout does the same.
#[test]
fn a_rejected_transaction_is_never_executed_by_a_retry() {
    for seed in 1..=3 {
        let mut config = SimConfig::new(seed).clients(2).in_flight(4).txns(100);
        config.leader.max_pending = 2;
        config.coordinator.retry_timeout_us = 1_500; // below the ~2.7 ms round trip + hold
        config.coordinator.max_attempts = 100;
        if let Err(v) = run(config) {
            assert!(
                !matches!(
                    v.kind,
                    ViolationKind::ResultMismatch
                        | ViolationKind::StateMismatch
                        | ViolationKind::Invariant
                ),
                "{v}"
            );
        }
    }
}
