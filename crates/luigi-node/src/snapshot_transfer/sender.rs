//! The sending side of a snapshot transfer: acknowledgements and refusals in, chunks out up
//! to the window, probes, restarts and giving up (see the parent module's protocol).

use super::*;

impl Transfers {
    pub(super) fn on_ack(
        &mut self,
        now: TimeUs,
        from: u64,
        transfer: TransferId,
        next: u32,
        resend: bool,
        out: &mut Vec<TransferEvent>,
    ) {
        let Some(pos) = self.outgoing.iter().position(|o| (o.to, o.id) == (from, transfer)) else {
            return; // an earlier transfer's, or one that ended
        };
        if next > self.outgoing[pos].chunks {
            let o = self.outgoing.remove(pos);
            self.abandon(o, TransferFailure::BadAck, out);
            return;
        }
        let timeout = self.config.ack_timeout_us;
        let o = &mut self.outgoing[pos];
        let first_answer = !o.accepted;
        let answers_probe = o.probing && resend;
        o.accepted = true;
        if next > o.acked || first_answer || answers_probe {
            // Progress, or the receiver's answer to a begin: it is there, and this is where
            // it stands.
            if next > o.acked {
                o.probes = 0;
            }
            o.acked = next;
            o.deadline_us = now.saturating_add(timeout);
        }
        if o.rewound_to.is_some_and(|r| next > r) {
            o.rewound_to = None;
        }
        if next == o.chunks {
            let o = self.outgoing.remove(pos);
            self.stats.delivered += 1;
            out.push(TransferEvent::Sent {
                to: o.to,
                transfer: o.id,
                kind: o.header.kind,
                index: o.header.index,
                outcome: Ok(()),
            });
            return;
        }
        if first_answer {
            // Nothing was sent yet: start where the receiver stands.
            o.probing = false;
            o.sent = next;
        } else if resend && o.rewound_to != Some(next) {
            // Chunks from `next` on were lost or damaged (or, answering a probe, may have
            // been): send them again, once per position until the receiver moves past it.
            if answers_probe {
                o.probing = false;
            } else {
                o.probes += 1; // a loss counts against the transfer
            }
            o.sent = next;
            o.rewound_to = Some(next);
            if o.probes > self.config.probes_max {
                let o = self.outgoing.remove(pos);
                self.abandon(o, TransferFailure::NoProgress, out);
                return;
            }
        }
        o.sent = o.sent.max(next);
        self.fill(pos, out);
    }

    pub(super) fn on_refuse(
        &mut self,
        now: TimeUs,
        from: u64,
        transfer: TransferId,
        reason: SnapshotRefusal,
        out: &mut Vec<TransferEvent>,
    ) {
        let Some(pos) = self.outgoing.iter().position(|o| (o.to, o.id) == (from, transfer)) else { return };
        let restartable = matches!(reason, SnapshotRefusal::Unknown | SnapshotRefusal::Corrupt);
        if restartable && self.outgoing[pos].restarts < self.config.restarts_max {
            let o = &mut self.outgoing[pos];
            o.restarts += 1;
            o.accepted = false;
            (o.acked, o.sent, o.rewound_to, o.probing, o.probes) = (0, 0, None, false, 0);
            o.deadline_us = now.saturating_add(self.config.ack_timeout_us);
            self.stats.restarts += 1;
            let begin = self.begin(&self.outgoing[pos]);
            out.push(TransferEvent::Send { to: from, msg: begin });
            return;
        }
        let o = self.outgoing.remove(pos);
        self.stats.failed += 1;
        out.push(TransferEvent::Sent {
            to: o.to,
            transfer: o.id,
            kind: o.header.kind,
            index: o.header.index,
            outcome: Err(TransferFailure::Refused(reason)),
        });
    }

    /// Sends chunks of outgoing transfer `pos` up to its window.
    pub(super) fn fill(&mut self, pos: usize, out: &mut Vec<TransferEvent>) {
        let (shard, me) = (self.shard, self.me);
        let window = self.config.window_chunks.max(1);
        let o = &mut self.outgoing[pos];
        while o.accepted && o.sent < o.chunks && o.sent < o.acked.saturating_add(window) {
            let seq = o.sent;
            let chunk = u64::from(o.header.chunk_bytes);
            let start = (u64::from(seq) * chunk) as usize;
            let end = (start as u64 + chunk).min(o.header.total_bytes) as usize;
            let data = o.data[start..end].to_vec();
            let msg = ReplicationMsg::SnapshotChunk {
                shard,
                from: me,
                transfer: o.id,
                seq,
                crc32: crc32fast::hash(&data),
                data,
            };
            out.push(TransferEvent::Send { to: o.to, msg });
            self.stats.chunks_sent += 1;
            if seq < o.sent_max {
                self.stats.chunks_resent += 1;
            }
            o.sent += 1;
            o.sent_max = o.sent_max.max(o.sent);
        }
    }

    /// Ends outgoing transfer `o`: its receiver is told, the node hears of the failure.
    pub(super) fn abandon(&mut self, o: Outgoing, why: TransferFailure, out: &mut Vec<TransferEvent>) {
        self.stats.failed += 1;
        let msg = ReplicationMsg::SnapshotCancel { shard: self.shard, from: self.me, transfer: o.id };
        out.push(TransferEvent::Send { to: o.to, msg });
        out.push(TransferEvent::Sent {
            to: o.to,
            transfer: o.id,
            kind: o.header.kind,
            index: o.header.index,
            outcome: Err(why),
        });
    }

    pub(super) fn begin(&self, o: &Outgoing) -> ReplicationMsg {
        let h = &o.header;
        ReplicationMsg::SnapshotBegin {
            shard: self.shard,
            from: self.me,
            transfer: o.id,
            kind: h.kind.clone(),
            index: h.index,
            total_bytes: h.total_bytes,
            chunk_bytes: h.chunk_bytes,
            crc32: h.crc32,
        }
    }
}
