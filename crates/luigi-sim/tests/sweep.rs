//! A long randomized sweep over extreme configurations (delays from 0 to 40 ms, clock offsets
//! up to ±200 ms, lossy and reordering links, log commits up to 100 ms, retry timeouts below the
//! round trip, zero headroom, cross-shard transactions, per-link delay matrices, reordering
//! leader links). Ignored by default because it is slow;
//! run it with
//! `LUIGI_SIM_SWEEP=2000 cargo test -p luigi-sim --test sweep -- --ignored --nocapture`
//! (`LUIGI_SIM_SWEEP_FROM=n` picks the first seed, `LUIGI_SIM_SEED=n` runs one seed).

mod common;

use luigi_sim::{Delay, SimConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A configuration drawn from `seed`.
fn draw(seed: u64) -> SimConfig {
    let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let shards = r.gen_range(1..=4);
    let mut c = SimConfig::new(seed)
        .shards(shards)
        .clients(r.gen_range(1..=6))
        .in_flight(r.gen_range(1..=8))
        .txns(r.gen_range(20..=300))
        .keys(r.gen_range(u64::from(shards)..=40))
        .reorder(r.gen_bool(0.5))
        .clock_offset_max([0, 100, 2_000, 20_000, 200_000][r.gen_range(0..5)]);
    let mean = [0, 50, 1_000, 20_000][r.gen_range(0..4)];
    c = c.delay(mean, r.gen_range(0..=mean));
    let commit = [0, 300, 5_000, 50_000][r.gen_range(0..4)];
    c.log_commit = Delay::new(commit, r.gen_range(0..=commit));
    if r.gen_bool(0.3) {
        c.link.drop_rate = r.gen_range(0.0..0.2);
    }
    c.read_ratio = r.gen_range(0.0..=1.0);
    c.max_ops = r.gen_range(1..=12);
    if shards > 1 && r.gen_bool(0.3) {
        c.cross_shard_ratio = r.gen_range(0.0..=1.0);
    }
    c.ping_first = r.gen_bool(0.7);
    c.coordinator.headroom_us = [0, 200, 5_000][r.gen_range(0..3)];
    c.coordinator.retry_timeout_us = [2_000, 20_000, 300_000, 2_000_000][r.gen_range(0..4)];
    c.coordinator.max_attempts = 1_000;
    // The floor promise must be logged further ahead than a commit takes (LeaderConfig docs).
    c.leader.floor_lookahead_us = [1_000, 100_000, 1_000_000][r.gen_range(0..3)].max(4 * commit);
    // One run in five: a small pending limit, so leaders refuse under load (and clients
    // retry, and the other participants of a refused cross-shard transaction abort).
    let small_pending = r.gen_range(1..=10);
    if r.gen_bool(0.2) {
        c.leader.max_pending = small_pending;
    }
    c.max_virtual_us = 3_600_000_000;
    // A floor promise of 1 ms is renewed every 125 µs, each renewal a record of each shard's
    // node: its write, its sync and the node's turn after it are events. Seed 188 (4 shards,
    // 48 s of virtual time on lossy links) needs about 6 million.
    c.max_events = 20_000_000;
    // Drawn last so that the draws above stay what they were.
    c.peer_links_fifo = r.gen_bool(0.5);
    if r.gen_bool(0.3) {
        let hi = r.gen_range(0..=2 * mean.max(100));
        c = c.per_link_delays(r.gen_range(0..=hi), hi, r.gen_range(0..=100));
    }
    c
}

#[test]
#[ignore = "slow randomized sweep; see the module docs"]
fn sweep_random_configurations() {
    common::sweep_all("sweep", "sweep_random_configurations", &common::sweep(0, 2_000), draw);
}

/// The first seeds of the sweep, in the default suite.
#[test]
fn sweep_quick() {
    common::sweep_all("sweep", "sweep_quick", &common::seeds(0..150), draw);
}

/// The first seeds of the sweep with read-only transactions at a snapshot mixed in (rule 23).
#[test]
fn sweep_quick_with_reads() {
    let test = "sweep_quick_with_reads";
    common::sweep_all("sweep", test, &common::seeds(0..40), |seed| common::with_reads(draw(seed)));
}
