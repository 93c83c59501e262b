//! The exchange of committed `Applied` markers between shard leaders (DESIGN.md rule 9):
//! what lets a participant stop keeping a cross-shard outcome once no other participant can
//! ask for it (`leader::outcomes`).
//!
//! A leader tells every other shard its committed marker when it moves (at most every
//! [`APPLIED_REPORT_US`]) and again to a shard's new leader (`PeerItem::Applied`). What it
//! hears it logs as `PeerApplied` records, and forgets at their commit, as its followers do.

use std::collections::BTreeMap;

use super::ShardLeader;
use crate::log::{LogRecord, ReplicatedLog};
use crate::msg::PeerItem;
use luigi_txn::types::{ShardId, TimeUs, Timestamp};

/// How often a leader reports its committed `Applied` marker to the other shards, and logs
/// the markers they reported, when they moved. Outcomes are kept about this much longer
/// than strictly needed.
pub const APPLIED_REPORT_US: u64 = 50_000;

/// What a leader sent and heard of committed markers.
#[derive(Debug, Default)]
pub(super) struct AppliedExchange {
    /// This shard's committed `Applied` marker.
    pub(super) committed: Timestamp,
    /// Per other shard, the marker last sent to it.
    sent: BTreeMap<ShardId, Timestamp>,
    /// Per other shard, the highest marker it reported.
    heard: BTreeMap<ShardId, Timestamp>,
    /// Per other shard, the highest marker proposed in a `PeerApplied` record.
    logged: BTreeMap<ShardId, Timestamp>,
    /// When the last report went out.
    reported_at: TimeUs,
}

impl<L: ReplicatedLog<LogRecord>> ShardLeader<L> {
    /// Shard `from` reported its committed marker `ts`.
    pub(super) fn on_peer_applied(&mut self, from: ShardId, ts: Timestamp) {
        if from == self.config.shard || from >= self.config.shards {
            return;
        }
        let heard = self.applied_exchange.heard.entry(from).or_default();
        *heard = (*heard).max(ts);
    }

    /// Every [`APPLIED_REPORT_US`]: sends this shard's committed marker to every shard that
    /// has not had it, and logs the markers heard since the last time.
    pub(super) fn exchange_applied(&mut self, log: &mut L, now: TimeUs) {
        if now < self.applied_exchange.reported_at.saturating_add(APPLIED_REPORT_US) {
            return;
        }
        self.applied_exchange.reported_at = now;
        let me = self.config.shard;
        let committed = self.applied_exchange.committed;
        for shard in (0..self.config.shards).filter(|s| *s != me) {
            let sent = self.applied_exchange.sent.entry(shard).or_default();
            if committed > *sent {
                *sent = committed;
                self.queue_peer(shard, PeerItem::Applied { ts: committed });
            }
        }
        let heard: Vec<(ShardId, Timestamp)> = self.applied_exchange.heard.iter().map(|(s, t)| (*s, *t)).collect();
        for (shard, ts) in heard {
            let logged = self.applied_exchange.logged.entry(shard).or_default();
            if ts > *logged {
                *logged = ts;
                if ts > self.answers.outcomes().floor(shard) {
                    self.propose_record(log, LogRecord::PeerApplied { shard, ts });
                }
            }
        }
    }

    /// When [`ShardLeader::exchange_applied`] has something to do, if anything.
    pub(super) fn applied_exchange_deadline(&self) -> Option<TimeUs> {
        let x = &self.applied_exchange;
        let me = self.config.shard;
        let to_send = (0..self.config.shards).any(|s| s != me && x.sent.get(&s).is_none_or(|sent| x.committed > *sent));
        let to_log = x.heard.iter().any(|(s, ts)| *ts > x.logged.get(s).copied().unwrap_or(0));
        (to_send || to_log).then(|| x.reported_at.saturating_add(APPLIED_REPORT_US))
    }

    /// Shard `shard` has a new leader: it is told this shard's marker at the next report.
    pub(super) fn applied_to_new_leader(&mut self, shard: ShardId) {
        self.applied_exchange.sent.remove(&shard);
    }
}
