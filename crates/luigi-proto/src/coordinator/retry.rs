//! Time-driven work: resending dispatches to silent participants, reporting transactions
//! out of attempts as unknown (still asked afterwards until answered), and keepalive pings to
//! the shards whose watermarks the commit rule waits on.

use std::collections::BTreeSet;

use super::{CommitRule, CoordOutput, Coordinator, TxnOutcome, NOT_LEADER_RESENDS_MAX};
use crate::msg::ClientMsg;
use crate::types::{ShardId, TimeUs, TxnId};

impl Coordinator {
    /// The shards whose watermarks the commit rule waits on for what is in flight.
    pub(super) fn watched_shards(&self) -> BTreeSet<ShardId> {
        match self.config.commit_rule {
            CommitRule::AllShards { shards } => (0..shards).collect(),
            CommitRule::Participants => self.in_flight.values().flat_map(|f| f.txn.shards()).collect(),
        }
    }

    /// Retries dispatches that timed out and reports as unknown those out of attempts (they
    /// are still asked, every retry timeout, until every participant answers); pings the
    /// watched shards while anything is in flight.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<CoordOutput>) {
        if !self.in_flight.is_empty() && now >= self.keepalive_at_us {
            self.keepalive_at_us = now + self.config.keepalive_us;
            for shard in self.watched_shards() {
                out.push(CoordOutput::Send { shard, msg: ClientMsg::Ping { sent_us: now } });
            }
        }
        let timeout = self.config.retry_timeout_us;
        let due: Vec<TxnId> = self.in_flight.iter().filter(|(_, f)| now >= f.retry_at_us).map(|(id, _)| *id).collect();
        for id in due {
            // Every participant answered (with proven answers) and only a watermark is
            // missing: the outcome is settled, the answer waits for the commit rule (never
            // reported unknown). An unproven answer may be lost: asked again like silence.
            let silent = !self.all_settled(&self.in_flight[&id]);
            let flight = self.in_flight.get_mut(&id).expect("listed");
            let mut gave_up = None;
            if flight.leader_wait {
                flight.leader_wait = false;
                flight.leader_waits += 1;
                if silent && flight.leader_waits > NOT_LEADER_RESENDS_MAX && flight.reported.is_none() {
                    gave_up = Some(format!("no leader after {} resends", flight.leader_waits - 1));
                }
            } else if silent && flight.attempts >= self.config.max_attempts && flight.reported.is_none() {
                gave_up = Some(format!("no complete answer after {} attempts", flight.attempts));
            } else {
                flight.attempts += 1;
                self.stats.retries += 1;
            }
            if let Some(why) = gave_up {
                self.stats.unknown += 1;
                self.report(id, TxnOutcome::Unknown(why), out);
                if self.config.mutations.acknowledge_unknown {
                    self.forget(id);
                    continue;
                }
            }
            let flight = self.in_flight.get_mut(&id).expect("still in flight");
            flight.retry_at_us = now + timeout;
            let flight = &self.in_flight[&id];
            self.send_dispatch(now, flight, out);
        }
    }

    /// The earliest time [`Coordinator::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let retry = self.in_flight.values().map(|f| f.retry_at_us).min()?;
        Some(retry.min(self.keepalive_at_us))
    }
}
