//! Scratch.
mod common;
#[path = "workload_sim/support.rs"]
mod support;

use luigi_proto::types::Protocol;
use luigi_sim::{failover_config, FaultConfig};

#[test]
fn scratch() {
    for seed in support::sweep(1, 4) {
        for p in [Protocol::Occ, Protocol::TwoPl] {
            let config = failover_config(seed, 2 + (seed % 2) as u32).protocol(p).probe(4);
            let r = support::must_pass("baseline_sim", "scratch", config, &FaultConfig::new());
            eprintln!("{p:?} {seed}: {r:?}");
        }
    }
}
