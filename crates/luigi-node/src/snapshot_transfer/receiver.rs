//! The receiving side of a snapshot transfer: a begin (room, size, kind), chunks taken in
//! order with their CRCs, acknowledgements and resend requests, the whole checked and handed
//! on (see the parent module's protocol).

use super::*;

impl Transfers {
    pub(super) fn on_begin(
        &mut self,
        now: TimeUs,
        from: u64,
        transfer: TransferId,
        header: Header,
        wanted: impl FnOnce(&SnapshotKind) -> bool,
        out: &mut Vec<TransferEvent>,
    ) {
        if let Some(c) = self.completed.iter().find(|c| (c.from, c.id) == (from, transfer)) {
            let chunks = c.chunks;
            out.push(self.ack(from, transfer, chunks, false));
            return;
        }
        if let Some(pos) = self.incoming.iter().position(|inc| inc.from == from) {
            let inc = &mut self.incoming[pos];
            if inc.id == transfer && inc.header == header {
                // Sent again: answer where this transfer stands.
                inc.last_heard_us = now;
                let next = inc.next;
                out.push(self.ack(from, transfer, next, true));
                return;
            }
            // The sender moved on to another transfer (one at a time per sender).
            self.incoming.remove(pos);
            self.stats.dropped += 1;
        }
        let refusal = match header.chunks() {
            _ if !wanted(&header.kind) => Some(SnapshotRefusal::Unwanted),
            None => Some(SnapshotRefusal::Malformed),
            Some(_) if header.chunk_bytes > CHUNK_BYTES_MAX => Some(SnapshotRefusal::Malformed),
            Some(_) if matches!(&header.kind, SnapshotKind::Install { envelope } if envelope.len() > ENVELOPE_BYTES_MAX) => {
                Some(SnapshotRefusal::Malformed)
            }
            Some(_) if header.total_bytes > self.config.snapshot_bytes_max => Some(SnapshotRefusal::TooLarge),
            Some(_) if self.incoming.len() >= self.config.incoming_max => Some(SnapshotRefusal::Busy),
            Some(_) => None,
        };
        if let Some(reason) = refusal {
            self.stats.refused += 1;
            out.push(self.refuse(from, transfer, reason));
            return;
        }
        let chunks = header.chunks().expect("checked above");
        // The whole buffer is reserved now (at most `snapshot_bytes_max`; its pages are
        // committed as chunks fill it): growing it by doubling would copy hundreds of MB on
        // the event loop at a chunk's arrival.
        let mut buf = Vec::new();
        if buf.try_reserve_exact(header.total_bytes as usize).is_err() {
            self.stats.refused += 1;
            out.push(self.refuse(from, transfer, SnapshotRefusal::TooLarge));
            return;
        }
        self.incoming.push(Incoming {
            id: transfer,
            from,
            header,
            chunks,
            buf,
            next: 0,
            crc: crc32fast::Hasher::new(),
            last_heard_us: now,
        });
        if chunks == 0 {
            let pos = self.incoming.len() - 1;
            self.finish(pos, out);
        } else {
            out.push(self.ack(from, transfer, 0, true));
        }
    }

    #[allow(clippy::too_many_arguments)] // one chunk's fields
    pub(super) fn on_chunk(
        &mut self,
        now: TimeUs,
        from: u64,
        transfer: TransferId,
        seq: u32,
        crc32: u32,
        data: Vec<u8>,
        out: &mut Vec<TransferEvent>,
    ) {
        let Some(pos) = self.incoming.iter().position(|inc| (inc.from, inc.id) == (from, transfer)) else {
            let msg = match self.completed.iter().find(|c| (c.from, c.id) == (from, transfer)) {
                Some(c) => self.ack(from, transfer, c.chunks, false),
                None => self.refuse(from, transfer, SnapshotRefusal::Unknown),
            };
            out.push(msg);
            return;
        };
        let inc = &mut self.incoming[pos];
        inc.last_heard_us = now;
        let next = inc.next;
        if seq != next {
            // A duplicate (behind) is answered with where the transfer stands; a gap (ahead)
            // asks to resend from the first missing chunk.
            out.push(self.ack(from, transfer, next, seq > next));
            return;
        }
        let chunk = u64::from(inc.header.chunk_bytes);
        let expected = (inc.header.total_bytes - u64::from(seq) * chunk).min(chunk);
        if data.len() as u64 != expected || crc32fast::hash(&data) != crc32 {
            self.stats.damaged_chunks += 1;
            out.push(self.ack(from, transfer, next, true));
            return;
        }
        inc.buf.extend_from_slice(&data);
        inc.crc.update(&data);
        inc.next += 1;
        if inc.next == inc.chunks {
            self.finish(pos, out);
        } else {
            let next = inc.next;
            out.push(self.ack(from, transfer, next, false));
        }
    }

    /// Incoming transfer `pos` holds every chunk: checks the whole and hands it on.
    pub(super) fn finish(&mut self, pos: usize, out: &mut Vec<TransferEvent>) {
        let inc = self.incoming.remove(pos);
        if inc.crc.finalize() != inc.header.crc32 || inc.buf.len() as u64 != inc.header.total_bytes {
            self.stats.refused += 1;
            out.push(self.refuse(inc.from, inc.id, SnapshotRefusal::Corrupt));
            return;
        }
        if self.completed.len() >= COMPLETED_REMEMBERED {
            self.completed.pop_front();
        }
        self.completed.push_back(Completed { from: inc.from, id: inc.id, chunks: inc.chunks });
        self.stats.received += 1;
        out.push(self.ack(inc.from, inc.id, inc.chunks, false));
        out.push(TransferEvent::Received {
            from: inc.from,
            transfer: inc.id,
            kind: inc.header.kind,
            index: inc.header.index,
            data: Bytes::from(inc.buf),
            crc32: inc.header.crc32,
        });
    }

    pub(super) fn ack(&self, to: u64, transfer: TransferId, next: u32, resend: bool) -> TransferEvent {
        let msg = ReplicationMsg::SnapshotAck { shard: self.shard, from: self.me, transfer, next, resend };
        TransferEvent::Send { to, msg }
    }

    pub(super) fn refuse(&self, to: u64, transfer: TransferId, reason: SnapshotRefusal) -> TransferEvent {
        let msg = ReplicationMsg::SnapshotRefuse { shard: self.shard, from: self.me, transfer, reason };
        TransferEvent::Send { to, msg }
    }
}
