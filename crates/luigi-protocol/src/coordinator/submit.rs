//! Starting a transaction (DESIGN.md rules 1 and 2): stamp it and send the whole
//! transaction to every participant at once (the in-flight table numbers it and says which
//! answers are acknowledged, `acked_below`); and when a participant's answer counts, which
//! decides where resends go.

use std::sync::Arc;

use super::{fast, headroom, read_only, stamp_at, Coordinator, CoordinatorConfig, FlightState, InFlight};
use luigi_txn::client_core::ClientOutput;
use luigi_txn::client_core::{DispatchTo, FlightPolicy, InvalidPieces};
use luigi_txn::progress::Progress;
use luigi_txn::types::{ShardId, ShardPiece, TimeUs, Timestamp, Txn, TxnId};

impl Coordinator {
    /// Starts a transaction calling `procedure(args)` over `pieces` (one per participant):
    /// at a snapshot if it declares no writes and the read-only path is on
    /// ([`Coordinator::submit_read_only`]); refuses malformed pieces ([`issue`](crate::client_core::InFlightTable::issue)) without sending anything.
    pub fn submit(
        &mut self,
        now: TimeUs,
        procedure: &str,
        args: Vec<u8>,
        mut pieces: Vec<ShardPiece>,
        out: &mut Vec<ClientOutput>,
    ) -> Result<TxnId, InvalidPieces> {
        if self.config.read_only_path && read_only::reads_only(&pieces) {
            return self.submit_read_only(now, procedure, args, pieces, out);
        }
        let id = self.flights.issue(&mut pieces)?;
        let fast = self.fan_out.ask();
        self.stats.fanned_out += u64::from(fast);
        let (ts, headroom_us) = self.stamp_for(now, &pieces, fast);
        let txn = Arc::new(Txn { id, procedure: procedure.to_string(), args, pieces, ts });
        let accepts = vec![fast::Accepts::default(); txn.pieces.len()];
        let extra = FlightState { accepts, headroom_us };
        if self.flights.is_empty() {
            // Dispatches keep this client known to the participants for now.
            self.keepalive_at_us = now.saturating_add(self.config.keepalive_us);
        }
        let policy = Settle { progress: &self.progress, config: &self.config };
        self.flights.open(&policy, now, txn, fast, extra, out);
        Ok(id)
    }

    /// The timestamp of a transaction over `pieces` submitted at `now` (rule 1), and the
    /// headroom it carries when its answers are to feed the adaptive headroom. With
    /// adaptation, a transaction that gains nothing from arriving early
    /// ([`headroom::holds_nothing`]) is stamped at the smallest recent delay sample: it
    /// arrives at or after its time and is not held.
    fn stamp_for(&mut self, now: TimeUs, pieces: &[ShardPiece], asks_fast: bool) -> (Timestamp, Option<u64>) {
        let shards = || pieces.iter().map(|p| p.shard);
        let group = |s: ShardId| self.config.group_sizes.get(s as usize).copied().unwrap_or(0);
        if self.headroom.adaptive() && headroom::holds_nothing(pieces.len(), asks_fast, shards().map(group).min()) {
            let owd = shards().map(|s| self.owd_low_us(now, s)).max().unwrap_or(0);
            return (stamp_at(now, owd, 0), None);
        }
        let headroom_us = self.headroom_us(shards());
        self.stats.headroom_us_sum = self.stats.headroom_us_sum.saturating_add(headroom_us);
        let owd = shards().map(|s| self.owd_estimate_us(now, s)).max().unwrap_or(0);
        (stamp_at(now, owd, headroom_us), Some(headroom_us))
    }

    /// The shell lost its connection to the replica it sends `shard`'s messages to (the
    /// leader may have died): dispatches still waiting for `shard` are sent again soon, to
    /// whichever replica the shell picks next, instead of after the full retry timeout.
    pub fn shard_unreachable(&mut self, now: TimeUs, shard: ShardId) {
        let policy = Settle { progress: &self.progress, config: &self.config };
        self.flights.shard_unreachable(&policy, now, shard);
    }
}

/// Luigi's share of the retry rules: a dispatch goes to every participant whose answer does
/// not count yet ([`settled`]).
pub(super) struct Settle<'a> {
    pub(super) progress: &'a Progress,
    pub(super) config: &'a CoordinatorConfig,
}

impl FlightPolicy<FlightState> for Settle<'_> {
    fn settled(&self, flight: &InFlight, slot: usize) -> bool {
        settled(self.progress, self.config, flight, slot)
    }

    fn dispatch_to(&self) -> DispatchTo {
        DispatchTo::EachWaiting
    }
}

/// Participant `slot`'s answer counts: there, and its position proven committed (rule 14),
/// or committed on the fast path (`group_sizes`: replicas per shard).
/// An early answer (rule 21) counts only when every participant's answer commits on the
/// fast path: it rests on other shards' proposals that only their super-quorums fix.
pub(super) fn settled(progress: &Progress, config: &CoordinatorConfig, flight: &InFlight, slot: usize) -> bool {
    let Some(r) = flight.replies[slot].as_ref() else { return false };
    if r.early && !config.mutations.early_answers_count_alone {
        return (0..flight.replies.len()).all(|s| fast_settled(config, flight, s));
    }
    r.position.is_none_or(|pos| progress.proven(r.shard, pos)) || fast_settled(config, flight, slot)
}

/// Participant `slot`'s answer committed on the fast path.
pub(super) fn fast_settled(config: &CoordinatorConfig, flight: &InFlight, slot: usize) -> bool {
    let Some(r) = flight.replies[slot].as_ref() else { return false };
    let n = config.group_sizes.get(r.shard as usize).copied().unwrap_or(0);
    flight.extra.accepts[slot].fast_commits(r, flight.txn.ts, n, config.mutations.fast_ignores_order)
}

impl Coordinator {
    /// Every participant's answer counts (see [`settled`]).
    pub(super) fn all_settled(&self, flight: &InFlight) -> bool {
        Settle { progress: &self.progress, config: &self.config }.all_settled(flight)
    }
}
