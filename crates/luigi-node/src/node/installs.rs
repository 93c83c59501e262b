//! Snapshot transfers seen from the node (the transfers themselves are
//! [`crate::snapshot_transfer`]'s): the leader's snapshot sent to a replica Raft finds
//! behind (with a back-off after a failure and a grace after a delivery), what the transfers
//! ask for turned into effects, Raft told how each install went, and the checks of what was
//! received.

use luigi_protocol::msg::SnapshotKind;
use luigi_raft::SnapshotData;
use luigi_txn::types::TimeUs;

use super::{replica_of, PendingCheck, ReplicaNode, SnapshotCrc};
use crate::effect::Effect;
use crate::snapshot_transfer::TransferEvent;
use crate::snapshots::SnapshotCheck;

/// How many snapshot acknowledgement timeouts a replica that received the leader's snapshot
/// whole gets to check, decode and install it before the same snapshot is sent to it again.
const INSTALL_GRACE_TIMEOUTS: u64 = 8;

/// The leader's snapshot delivered whole to a replica: until `until`, none is sent to it
/// again unless its log is known to have reached `index`.
#[derive(Clone, Copy)]
pub(super) struct Delivered {
    index: u64,
    until: TimeUs,
}

/// How a transfer of a snapshot out ended ([`TransferEvent::Sent`]).
struct SentSnapshot {
    /// The receiver (Raft id).
    to: u64,
    kind: SnapshotKind,
    index: u64,
    delivered: bool,
}

impl ReplicaNode {
    /// The transfers' timeouts, and the end of those whose reason is gone: the leader's
    /// snapshots go out only while this replica leads, offers only to the leader it knows,
    /// and it takes the leader's snapshot only while it does not lead, offers only while it
    /// serves.
    pub(super) fn tend_transfers(&mut self, now: TimeUs, fx: &mut Vec<Effect>) {
        let log = &self.log;
        let (leads, leader, serving) = (log.is_leader(), log.leader_id(), self.replica.is_serving());
        let events = &mut self.transfer_events;
        self.transfers.tick(now, events);
        self.transfers.cancel_outgoing(
            |to, kind| match kind {
                SnapshotKind::Install { .. } => leads,
                SnapshotKind::Offer => leader == Some(to),
            },
            events,
        );
        self.transfers.refuse_incoming(
            |_, kind| match kind {
                SnapshotKind::Install { .. } => !leads,
                SnapshotKind::Offer => serving,
            },
            events,
        );
        self.install_backoff.retain(|_, until| *until > now);
        self.installs_delivered.retain(|_, d| d.until > now);
        self.transfer_effects(fx);
    }

    /// Turns what the transfers asked for into effects and calls: messages, the outcome of
    /// the leader's snapshot for Raft, checks of what was received.
    pub(super) fn transfer_effects(&mut self, fx: &mut Vec<Effect>) {
        let node = self.config.node;
        let mut events = std::mem::take(&mut self.transfer_events);
        for ev in events.drain(..) {
            match ev {
                TransferEvent::Send { to, msg } => fx.push(Effect::Replicate { to: replica_of(node.shard, to), msg }),
                TransferEvent::Sent { to, transfer, kind, index, outcome } => {
                    let to_node = replica_of(node.shard, to);
                    let install = matches!(kind, SnapshotKind::Install { .. });
                    match &outcome {
                        Ok(()) => {
                            tracing::info!(node = %node, to = %to_node, transfer, index, install, "snapshot sent")
                        }
                        Err(why) => {
                            tracing::warn!(node = %node, to = %to_node, transfer, index, install, ?why, "snapshot transfer failed")
                        }
                    }
                    self.snapshot_sent(SentSnapshot { to, kind, index, delivered: outcome.is_ok() });
                }
                TransferEvent::Received { from, transfer, kind, index, data, crc32 } => {
                    if self.checks.len() >= self.transfers.config().incoming_max {
                        tracing::warn!(node = %node, from = %replica_of(node.shard, from), index, "too many snapshots being checked; dropped");
                        continue;
                    }
                    let install = matches!(kind, SnapshotKind::Install { .. });
                    let token = self.next_check;
                    self.next_check += 1;
                    let check = SnapshotCheck::new(token, self.decoder.clone(), index, install, data.clone());
                    self.checks.push(PendingCheck { token, from, transfer, kind, index, data, crc32 });
                    fx.push(Effect::CheckSnapshot(check));
                }
            }
        }
        self.transfer_events = events;
    }

    /// A transfer out ended: for the leader's snapshot, a back-off after a failure or a grace
    /// after a delivery, and Raft hears how it went.
    fn snapshot_sent(&mut self, sent: SentSnapshot) {
        if !matches!(sent.kind, SnapshotKind::Install { .. }) {
            return;
        }
        if sent.delivered {
            let until = self.now_us.saturating_add(INSTALL_GRACE_TIMEOUTS * self.transfers.config().ack_timeout_us);
            self.installs_delivered.insert(sent.to, Delivered { index: sent.index, until });
        } else {
            let retry_at = self.now_us.saturating_add(self.transfers.config().ack_timeout_us);
            self.install_backoff.insert(sent.to, retry_at);
        }
        self.log.report_snapshot(sent.to, sent.delivered);
    }

    /// The leader's snapshot for replica `to` (Raft id), whose Raft message (`envelope`) left
    /// without it: sent as a transfer, unless one to `to` failed a moment ago or there is no
    /// room (then Raft hears at once that it failed, and tries again after a heartbeat).
    pub(super) fn send_install(&mut self, to: u64, envelope: Vec<u8>, snap: SnapshotData, fx: &mut Vec<Effect>) {
        let node = self.config.node;
        let now = self.now_us;
        if self.install_backoff.get(&to).is_some_and(|until| *until > now) {
            self.log.report_snapshot(to, false);
            return;
        }
        // Delivered already and being installed: Raft tries again after a heartbeat, and by
        // then (or after the grace) the replica's log has moved or it gets the snapshot anew.
        if let Some(delivered) = self.installs_delivered.get(&to).copied() {
            let installed = self.log.matched(to).is_some_and(|m| m >= delivered.index);
            if !installed && delivered.until > now {
                self.log.report_snapshot(to, false);
                return;
            }
            self.installs_delivered.remove(&to);
        }
        let crc32 = match self.snapshot_crc {
            Some(known) if known.index == snap.index => known.crc32,
            // Not known (a restart loaded the snapshot from disk): computed once, here.
            _ => {
                let crc32 = crc32fast::hash(&snap.data);
                self.snapshot_crc = Some(SnapshotCrc { index: snap.index, crc32 });
                crc32
            }
        };
        let kind = SnapshotKind::Install { envelope };
        let bytes = snap.data.len();
        match self.transfers.send(now, to, kind, snap.index, snap.data, crc32, &mut self.transfer_events) {
            Ok(transfer) => {
                tracing::info!(node = %node, to, transfer, index = snap.index, bytes, "sending the leader's snapshot")
            }
            Err(why) => {
                tracing::warn!(node = %node, to, index = snap.index, ?why, "snapshot not sent; raft tries again later");
                self.install_backoff.insert(to, now.saturating_add(self.transfers.config().ack_timeout_us));
                self.log.report_snapshot(to, false);
            }
        }
        self.transfer_effects(fx);
    }
}
