//! Known limitations found by the simulator, kept until the protocol addresses them. They
//! assert the desired behaviour, so they fail today and are ignored; run them with
//! `cargo test -p luigi-sim --test known_limits -- --ignored --nocapture`.

use luigi_sim::{run, SimConfig};

/// Design limitation rather than a code bug: DESIGN.md's "a transaction that finished before
/// another started must have the smaller timestamp" does not hold across shards when clocks
/// are skewed by more than a round trip. A is answered once its shard's watermark passes
/// ts(A), which is close to that leader's clock; B, dispatched next to another shard whose
/// clock runs behind, is stamped near that slower clock, below ts(A). With single-shard
/// transactions only this is still strictly serializable (the simulator's cycle check passes:
/// a real-time cycle needs a path back to the same shard, where the watermark forbids it), but
/// once cross-shard transactions exist, a transaction X with ts(B) < ts(X) < ts(A) that
/// conflicts with A on A's shard and with B on B's shard closes the cycle A -> B -> X -> A
/// (see `a_cycle_through_real_time_across_shards_is_not_serializable` in `checker.rs`).
/// E.g. seed 2 with 3 shards: c4#3 answered at 2.08 ms with ts 2776, then c3#1 dispatched at
/// 3.44 ms gets ts 2752 on another shard.
#[test]
#[ignore = "design limitation: cross-shard real-time order depends on clock skew"]
fn real_time_order_holds_across_shards_despite_clock_skew() {
    for seed in 1..=5 {
        let mut config = SimConfig::new(seed).shards(3);
        config.check_realtime_across_shards = true;
        if let Err(v) = run(config) {
            panic!("{v}");
        }
    }
}
