//! This replica's progress reports (rule 14): a follower's last durable acknowledgement, a
//! leader's commit index, sent to every connected client and to the other shards' leaders.

use luigi_txn::msg::ServerMsg;
use luigi_txn::peer::{PeerBody, PeerMsg};
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::types::{ShardId, TimeUs};

use super::ReplicaNode;
use crate::effect::Effect;

/// The last progress report sent, and when the next may go.
#[derive(Default)]
pub(super) struct ProgressSent {
    pub(super) last: Option<ProgressReport>,
    pub(super) next_at: TimeUs,
}

impl ReplicaNode {
    /// This replica's progress (rule 14): a follower's last durable acknowledgement, a
    /// leader's commit index; `None` for protocols that do not use it.
    pub(super) fn progress_report(&self) -> Option<ProgressReport> {
        if !self.factory.progress_reports() {
            return None;
        }
        let log = &self.log;
        let me = self.config.node;
        let (pos, committed) = if log.is_leader() {
            (LogPos { term: log.term(), index: log.commit_index() }, true)
        } else {
            let (term, index) = log.acked();
            (LogPos { term, index }, false)
        };
        Some(ProgressReport { shard: me.shard, replica: me.replica, term: log.term(), pos, committed })
    }

    /// Sends this replica's progress, when it moved and at most every watermark broadcast
    /// period, to every connected client and to the other shards' leaders (rule 14).
    pub(super) fn report_progress(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let report = self.progress_report();
        if report == self.progress.last || now < self.progress.next_at {
            return;
        }
        let Some(r) = report else { return };
        self.progress =
            ProgressSent { last: report, next_at: now.saturating_add(self.config.leader.watermark_broadcast_us) };
        fx.push(Effect::ToAllClients { msg: ServerMsg::Progress(r) });
        let me = self.config.node.shard;
        for shard in (0..self.config.replicas.len() as ShardId).filter(|s| *s != me) {
            // Best effort, never queued: a later report supersedes this one.
            if let Some(to) = self.routes.reachable_leader(shard) {
                let batch = PeerMsg { from: me, body: PeerBody::Progress(r) };
                fx.push(Effect::ToPeer { to, batch });
            }
        }
    }
}
