//! The wide-area network model every shell draws from: a link's one-way delay distribution
//! ([`DelayDist`]), the named deployments of the benchmarks ([`Scenario`]) and per-link
//! overrides ([`DelayModel`]). The tokio runtime's delay line (`luigi_runtime::net::wan`)
//! and the simulator's network both use these, so a scenario means the same delays in both.

mod delay;
mod scenario;

pub use delay::DelayDist;
pub use scenario::{DelayModel, ParseScenarioError, Scenario};

#[cfg(test)]
mod tests;
