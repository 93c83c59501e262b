//! Time-driven work: resending dispatches to silent participants, reporting transactions
//! out of attempts as unknown (still asked afterwards until answered), and keepalive pings to
//! the shards whose watermarks the commit rule waits on.

use std::collections::BTreeSet;

use super::replies::{report, Tally};
use super::submit::Settle;
use super::{CommitRule, Coordinator};
use luigi_txn::client_core::{ClientOutput, TxnOutcome};
use luigi_txn::msg::ClientMsg;
use luigi_txn::types::{ShardId, TimeUs};

impl Coordinator {
    /// The shards whose watermarks the commit rule waits on for what is in flight.
    pub(super) fn watched_shards(&self) -> BTreeSet<ShardId> {
        match self.config.commit_rule {
            CommitRule::AllShards { shards } => (0..shards).collect(),
            CommitRule::Participants => self.flights.flights().flat_map(|(_, f)| f.txn.shards()).collect(),
        }
    }

    /// Retries dispatches that timed out and reports as unknown those out of attempts (they
    /// are still asked, every retry timeout, until every participant answers); pings the
    /// watched shards while anything is in flight.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<ClientOutput>) {
        let busy = !self.flights.is_empty() || !self.reads.is_empty();
        if busy && now >= self.keepalive_at_us {
            self.keepalive_at_us = now + self.config.keepalive_us;
            for shard in self.watched_shards() {
                out.push(ClientOutput::Send { shard, msg: ClientMsg::Ping { sent_us: now } });
            }
        }
        self.tick_reads(now, out);
        let policy = Settle { progress: &self.progress, config: &self.config };
        let (config, stats, fan_out) = (&self.config, &mut self.stats, &mut self.fan_out);
        let (awaiting_watermark, observed_ts) = (&mut self.awaiting_watermark, &mut self.reads.observed_ts);
        self.flights.tick(&policy, now, out, |flights, id, why, out| {
            let tally = Tally { config, stats, fan_out, observed_ts: &mut *observed_ts };
            report(flights, tally, id, TxnOutcome::Unknown(why), out);
            if config.mutations.acknowledge_unknown {
                awaiting_watermark.remove(&id);
                flights.forget(id);
                return false;
            }
            true
        });
    }

    /// The earliest time [`Coordinator::tick`] has work to do.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let retry = self.flights.next_retry().map(|retry| retry.min(self.keepalive_at_us));
        let keepalive = (!self.reads.is_empty()).then_some(self.keepalive_at_us);
        [retry, self.reads.next_due(), keepalive].into_iter().flatten().min()
    }
}
