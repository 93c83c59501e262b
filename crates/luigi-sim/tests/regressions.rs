//! Regressions: seeds that once exposed a protocol bug, kept so the bug stays fixed.

use luigi_sim::{run, SimConfig};

/// Regression (found by the simulator, fixed by storing refusals as answers): a leader that
/// rejected a dispatch (here: its pending table is full) did not remember the rejection. A
/// retry of the same transaction arriving later (sent before the rejection reached the client,
/// or after a lost rejection) was admitted and executed, while the client had been told
/// `Rejected` ("never ordered or executed"). In seed 1: c1#1's dispatch reached the full
/// leader at 2.0 ms and was rejected (the client was told at 2.85 ms); the coordinator's
/// retry, sent at 2.26 ms, arrived at 2.94 ms, was admitted and executed at ts 2077; c1#6
/// (ts 3210) then read c1#1's write of key 29, which the replay (without the rejected c1#1)
/// does not have (`ResultMismatch`); seeds 2 and 3 ended with transactions admitted after
/// their rejection still pending. The simulator now also checks directly that no shard
/// executes a transaction whose client was told `Rejected`.
#[test]
fn a_rejected_transaction_is_never_executed_by_a_retry() {
    for seed in 1..=3 {
        let mut config = SimConfig::new(seed).clients(2).in_flight(4).txns(100);
        config.leader.max_pending = 2;
        config.coordinator.retry_timeout_us = 1_500; // below the ~2.7 ms round trip + hold
        config.coordinator.max_attempts = 100;
        match run(config) {
            Ok(report) => assert!(report.rejected > 0 && report.retries > 0, "seed {seed}: {report:?}"),
            Err(v) => panic!("{v}"),
        }
    }
}
