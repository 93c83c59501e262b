//! The baseline protocols Luigi is measured against, as sans-I/O cores like Luigi's own: an
//! event and the time go in, [`BaseOutput`](msg::BaseOutput)s come out,
//! and every shard's writes are replicated through its log (the
//! [`ReplicatedLog`](luigi_protocol::log::ReplicatedLog) seam: Raft in servers and the
//! simulator's failover model, an in-memory log in unit tests).
//!
//! - [`Mode::Occ`]: optimistic concurrency control with two-phase commit among the
//!   participant leaders, in the style of Mako. The coordinator is the leader of the
//!   transaction's first participant shard. Round 1 executes every participant's piece on its
//!   current state (writes buffered, versions of the declared keys noted); round 2 locks the
//!   declared keys (no-wait), validates the versions and logs the writes durably (PREPARE);
//!   once every participant's PREPARE is durable the transaction is committed, the client is
//!   answered and the writes are installed.
//! - [`Mode::TwoPl`]: two-phase locking (no-wait) with two-phase commit: round 1 locks the
//!   declared keys, then executes; round 2 logs PREPARE; the rest as OCC.
//! - [`Mode::Direct`]: no transaction at all: each participant's leader runs its own piece at
//!   once, installs it and answers once it is durable. The lower bound of seed 004 ("direct
//!   RPC"), neither atomic nor isolated.
//!
//! A single-shard transaction (every protocol) runs at once on its leader, which installs its
//! writes before they are durable (speculatively, as Mako does) and answers once they are:
//! anything that read them is logged after them, so it cannot outlive them.
//!
//! The commit point of a cross-shard transaction is "every participant has durably prepared
//! it": a coordinator that loses its state (a crash) is replaced by any leader that asks every
//! participant for its durable state ([`BaseItem::Status`](msg::BaseItem)); a
//! participant that never prepared the transaction first logs that it never will. Every
//! decider computes the same function of durable, monotone facts, so they all agree. See
//! `docs/BASELINES.md` for the protocol, its round trips and its recovery.

pub mod base_client;
pub mod client;
pub mod leader;
pub mod locks;
pub mod msg;
pub mod record;
pub mod replica;
pub mod state;

pub use client::client_for;
pub use leader::{BaseConfig, BaseLeader};
pub use record::BaseRecord;
pub use replica::{BaseImages, BaseProtocol, BaseReplica, BaseReplicas};
pub use state::ShardState;

use luigi_txn::types::Protocol;

/// Which baseline a leader runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Optimistic concurrency control with two-phase commit (Mako-style).
    Occ,
    /// Two-phase locking (no-wait) with two-phase commit.
    TwoPl,
    /// No transaction: each piece runs independently on its shard.
    Direct,
}

impl Mode {
    /// The mode of `protocol`, if it is a baseline.
    pub fn of(protocol: Protocol) -> Option<Mode> {
        match protocol {
            Protocol::Luigi => None,
            Protocol::Occ => Some(Mode::Occ),
            Protocol::TwoPl => Some(Mode::TwoPl),
            Protocol::Direct => Some(Mode::Direct),
        }
    }

    /// The protocol it implements.
    pub fn protocol(self) -> Protocol {
        match self {
            Mode::Occ => Protocol::Occ,
            Mode::TwoPl => Protocol::TwoPl,
            Mode::Direct => Protocol::Direct,
        }
    }
}
