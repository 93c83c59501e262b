//! The client factory: the client core of a cluster's protocol, beside its replica factory
//! (`luigi_node::replicas_for`). The tokio client and the simulator both call it,
//! so each drives Luigi's coordinator or the baselines' client through [`ClientCore`] alone.

use crate::base_client::{BaseClient, BaseClientConfig};
use luigi_protocol::coordinator::{Coordinator, CoordinatorConfig};
use luigi_txn::client_core::ClientCore;
use luigi_txn::types::Protocol;

/// The client core of `protocol` for client `config.client`. Luigi's coordinator takes
/// `config` whole; a baseline's client takes its retry knobs (`retry_timeout_us`,
/// `max_attempts`, `not_leader_retry_us`) and ignores the rest (it stamps nothing and waits
/// for no watermark).
pub fn client_for(protocol: Protocol, config: CoordinatorConfig) -> Box<dyn ClientCore> {
    match protocol {
        Protocol::Luigi => Box::new(Coordinator::new(config)),
        Protocol::Occ | Protocol::TwoPl | Protocol::Direct => Box::new(BaseClient::new(BaseClientConfig {
            retry_timeout_us: config.retry_timeout_us,
            max_attempts: config.max_attempts,
            not_leader_retry_us: config.not_leader_retry_us,
            shards: config.shards,
            ..BaseClientConfig::new(config.client, protocol)
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each protocol gets its own client, with the caller's retry knobs.
    #[test]
    fn each_protocol_gets_its_client() {
        for protocol in [Protocol::Luigi, Protocol::Occ, Protocol::TwoPl, Protocol::Direct] {
            let config = CoordinatorConfig { max_attempts: 3, ..CoordinatorConfig::new(7) };
            let core = client_for(protocol, config);
            assert_eq!((core.protocol(), core.client()), (protocol, 7));
            assert!(core.can_submit());
            assert_eq!((core.in_flight(), core.unresolved(), core.next_deadline()), (0, 0, None));
        }
    }
}
