//! Snapshot transfers between the replicas of a shard, sans I/O: [`Transfers`].
//!
//! A store's image can be gigabytes, and a frame on a server's connection is at most 16 MiB,
//! so a snapshot never travels as one message. Two kinds travel this way, both within a
//! shard's group (DESIGN.md rule 11): the leader's snapshot to a follower that lags behind
//! its compaction (Raft's `MsgSnapshot`, whose data `luigi-raft` hands out apart from the
//! message, [`SnapshotKind::Install`]), and a follower's own snapshot offered to its leader
//! ([`SnapshotKind::Offer`]).
//!
//! # The protocol
//!
//! ```text
//! sender                                             receiver
//!   SnapshotBegin{id, kind, index, size, chunk size, CRC of the whole} -->
//!                                         (checks size, kind, room; keeps a buffer)
//!   <-- SnapshotAck{id, next: 0, resend}     (or SnapshotRefuse{id, reason}: over)
//!   SnapshotChunk{id, 0, crc, bytes} ... up to `window_chunks` past the last ack -->
//!                                         (takes chunk `next` only: checks its CRC and size)
//!   <-- SnapshotAck{id, next}                one per chunk; `resend` after a gap or a
//!                                            damaged chunk
//!   ...
//!   <-- SnapshotAck{id, next: chunks}        whole, and its CRC matched: handed on
//!                                            ([`TransferEvent::Received`])
//! ```
//!
//! - **Flow control**: at most `window_chunks` chunks past the receiver's last
//!   acknowledgement are in flight; the receiver holds only what it acknowledged (in order),
//!   no out-of-order buffer.
//! - **Losses**: a gap or a damaged chunk makes the receiver ask to resend from the first
//!   missing chunk (once per position until it moves: go-back-N). If nothing moves for
//!   `ack_timeout_us`, the sender sends its `SnapshotBegin` again, which the receiver
//!   answers with where it stands (a transfer resumes after a broken link this way), and
//!   gives up after `probes_max` such attempts in a row without progress.
//! - **Restarts**: a receiver that lost the transfer (it restarted) answers a chunk with
//!   `Unknown`, and one whose reassembled snapshot fails the whole CRC with `Corrupt`; the
//!   sender starts again from chunk 0, at most `restarts_max` times. Other refusals end the
//!   transfer. A receiver drops a transfer whose sender has been silent longer than the
//!   sender could still be probing.
//! - **Bounds**: at most `outgoing_max` transfers out (one per receiver: a new one to the same
//!   receiver replaces the old) and `incoming_max` in (one per sender); an incoming
//!   snapshot is at most `snapshot_bytes_max` bytes, its buffer reserved at its begin (and
//!   refused `TooLarge` if the memory cannot be had) and filled by the chunks acknowledged;
//!   the last `COMPLETED_REMEMBERED` finished transfers are remembered to answer a sender
//!   whose final acknowledgement was lost.
//!
//! The node ([`crate::ReplicaNode`]) decides what to send and what a received snapshot
//! becomes; the shells only carry the messages ([`crate::Effect::Replicate`]).

use std::collections::VecDeque;

use bytes::Bytes;
use luigi_protocol::msg::{ReplicationMsg, SnapshotKind, SnapshotRefusal, TransferId};
use luigi_txn::types::{ShardId, TimeUs};

use crate::tuning::Tuning;

/// Default size of a chunk, bytes: far below a frame's 16 MiB, large enough that a chunk's
/// message overhead and acknowledgement cost nothing.
pub const CHUNK_BYTES_DEFAULT: u32 = 1 << 20;
/// The largest chunk a receiver takes, bytes (a chunk's frame must stay below 16 MiB).
pub const CHUNK_BYTES_MAX: u32 = 8 << 20;
/// Default window: chunks in flight past the receiver's last acknowledgement.
pub const WINDOW_CHUNKS_DEFAULT: u32 = 16;
/// Default silences in a row after which a sender gives up.
pub const PROBES_MAX_DEFAULT: u32 = 5;
/// Default number of times a sender starts over after the receiver lost or refused the data.
pub const RESTARTS_MAX_DEFAULT: u32 = 3;
/// Default bound on transfers a replica sends at once.
pub const OUTGOING_MAX_DEFAULT: usize = 4;
/// Default bound on transfers a replica receives at once.
pub const INCOMING_MAX_DEFAULT: usize = 2;
/// Default largest snapshot a replica takes, bytes (its memory for one incoming transfer).
pub const SNAPSHOT_BYTES_MAX_DEFAULT: u64 = 32 << 30;
/// Largest Raft envelope of an install, bytes (a `MsgSnapshot`'s metadata is ~100 bytes).
pub const ENVELOPE_BYTES_MAX: usize = 64 << 10;
/// Finished incoming transfers remembered to answer a sender that did not hear the end.
pub const COMPLETED_REMEMBERED: usize = 16;

/// The transfers' parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferConfig {
    /// Size of every chunk but the last, bytes.
    pub chunk_bytes: u32,
    /// Chunks in flight past the receiver's last acknowledgement.
    pub window_chunks: u32,
    /// Silence after which the sender asks where the receiver stands, µs.
    pub ack_timeout_us: u64,
    /// Attempts in a row without progress (silences, resends of the same chunk) before the
    /// sender gives up.
    pub probes_max: u32,
    /// Times a sender starts over from chunk 0 (the receiver lost the transfer, or the whole
    /// did not match its CRC).
    pub restarts_max: u32,
    /// Transfers sent at once.
    pub outgoing_max: usize,
    /// Transfers received at once.
    pub incoming_max: usize,
    /// Largest snapshot received, bytes.
    pub snapshot_bytes_max: u64,
}

impl TransferConfig {
    /// The defaults, with the sender's timeout from `tuning`.
    pub fn new(tuning: &Tuning) -> Self {
        TransferConfig {
            chunk_bytes: CHUNK_BYTES_DEFAULT,
            window_chunks: WINDOW_CHUNKS_DEFAULT,
            ack_timeout_us: tuning.snapshot_ack_timeout_us,
            probes_max: PROBES_MAX_DEFAULT,
            restarts_max: RESTARTS_MAX_DEFAULT,
            outgoing_max: OUTGOING_MAX_DEFAULT,
            incoming_max: INCOMING_MAX_DEFAULT,
            snapshot_bytes_max: SNAPSHOT_BYTES_MAX_DEFAULT,
        }
    }

    /// How long a receiver keeps a transfer whose sender is silent, µs: longer than the
    /// sender goes on probing.
    pub fn idle_timeout_us(&self) -> u64 {
        self.ack_timeout_us.saturating_mul(u64::from(self.probes_max) + 2)
    }
}

/// Why an outgoing transfer failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferFailure {
    /// The receiver refused it.
    Refused(SnapshotRefusal),
    /// The receiver stopped answering, or kept losing the same chunk.
    NoProgress,
    /// A newer transfer to the same receiver replaced it.
    Superseded,
    /// The node cancelled it (its reason to send is gone, e.g. it no longer leads).
    Cancelled,
    /// The receiver's acknowledgement made no sense (past the last chunk).
    BadAck,
}

/// Why [`Transfers::send`] did not start a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendRefused {
    /// `outgoing_max` transfers are under way to other replicas.
    Busy,
    /// The snapshot has more chunks than a transfer can number.
    TooLarge,
    /// The destination is this replica.
    ToSelf,
}

/// What the transfers ask of the node.
#[derive(Debug, PartialEq)]
pub enum TransferEvent {
    /// Send `msg` to replica `to` (Raft id) of this shard.
    Send {
        /// Destination (Raft id).
        to: u64,
        /// The message.
        msg: ReplicationMsg,
    },
    /// An outgoing transfer ended: the receiver holds the snapshot whole (`Ok`), or not.
    Sent {
        /// The receiver (Raft id).
        to: u64,
        /// The transfer.
        transfer: TransferId,
        /// What it carried.
        kind: SnapshotKind,
        /// The snapshot's log index.
        index: u64,
        /// How it ended.
        outcome: Result<(), TransferFailure>,
    },
    /// An incoming snapshot is whole and matched its CRC.
    Received {
        /// The sender (Raft id).
        from: u64,
        /// The transfer.
        transfer: TransferId,
        /// What it is for.
        kind: SnapshotKind,
        /// Its log index.
        index: u64,
        /// Its bytes.
        data: Bytes,
        /// Their CRC-32.
        crc32: u32,
    },
}

/// Counters of the transfers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Transfers started.
    pub started: u64,
    /// Transfers the receiver holds whole.
    pub delivered: u64,
    /// Transfers that failed (refused, no progress, superseded, cancelled).
    pub failed: u64,
    /// Chunks sent, first sends and resends.
    pub chunks_sent: u64,
    /// Chunks sent again (after a loss, a damaged chunk or a restart).
    pub chunks_resent: u64,
    /// Times a sender started a transfer over from chunk 0.
    pub restarts: u64,
    /// Incoming transfers received whole.
    pub received: u64,
    /// Incoming transfers refused (at their start, or corrupt at their end).
    pub refused: u64,
    /// Incoming transfers dropped: cancelled by their sender, replaced, or silent too long.
    pub dropped: u64,
    /// Chunks refused for a bad size or CRC.
    pub damaged_chunks: u64,
}

/// What a transfer carries, as its sender described it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    kind: SnapshotKind,
    index: u64,
    total_bytes: u64,
    chunk_bytes: u32,
    crc32: u32,
}

impl Header {
    fn chunks(&self) -> Option<u32> {
        if self.chunk_bytes == 0 {
            return None;
        }
        u32::try_from(self.total_bytes.div_ceil(u64::from(self.chunk_bytes))).ok()
    }
}

struct Outgoing {
    id: TransferId,
    to: u64,
    header: Header,
    data: Bytes,
    chunks: u32,
    /// The receiver answered the begin.
    accepted: bool,
    /// The receiver holds every chunk below.
    acked: u32,
    /// The next chunk to send.
    sent: u32,
    /// Highest chunk ever sent + 1 (below it, a send is a resend).
    sent_max: u32,
    /// Where the last resend started (a request to resend from there again is ignored until
    /// the receiver moves past it).
    rewound_to: Option<u32>,
    /// A begin was sent again after a silence; its answer rewinds without counting.
    probing: bool,
    /// Attempts in a row without progress.
    probes: u32,
    restarts: u32,
    /// When the sender next asks where the receiver stands.
    deadline_us: TimeUs,
}

struct Incoming {
    id: TransferId,
    from: u64,
    header: Header,
    chunks: u32,
    buf: Vec<u8>,
    next: u32,
    crc: crc32fast::Hasher,
    last_heard_us: TimeUs,
}

#[derive(Clone, Copy)]
struct Completed {
    from: u64,
    id: TransferId,
    chunks: u32,
}

/// The snapshot transfers of one replica, in and out (see the module docs). Time and
/// messages in, [`TransferEvent`]s out.
pub struct Transfers {
    shard: ShardId,
    me: u64,
    config: TransferConfig,
    next_id: TransferId,
    outgoing: Vec<Outgoing>,
    incoming: Vec<Incoming>,
    completed: VecDeque<Completed>,
    stats: TransferStats,
}

impl Transfers {
    /// The transfers of replica `me` (Raft id) of `shard`.
    pub fn new(shard: ShardId, me: u64, config: TransferConfig) -> Self {
        Transfers {
            shard,
            me,
            config,
            next_id: 1,
            outgoing: Vec::new(),
            incoming: Vec::new(),
            completed: VecDeque::new(),
            stats: TransferStats::default(),
        }
    }

    /// The parameters.
    pub fn config(&self) -> &TransferConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> TransferStats {
        self.stats
    }

    /// Transfers under way: (out, in).
    pub fn in_flight(&self) -> (usize, usize) {
        (self.outgoing.len(), self.incoming.len())
    }

    /// Whether a transfer to `to` is under way.
    pub fn sending_to(&self, to: u64) -> bool {
        self.outgoing.iter().any(|o| o.to == to)
    }

    /// When [`Transfers::tick`] has work: the next sender timeout or receiver expiry.
    pub fn next_deadline(&self) -> Option<TimeUs> {
        let idle = self.config.idle_timeout_us();
        let out = self.outgoing.iter().map(|o| o.deadline_us);
        let inc = self.incoming.iter().map(|i| i.last_heard_us.saturating_add(idle));
        out.chain(inc).min()
    }

    /// Starts sending the snapshot `data` (at log `index`, of CRC-32 `crc32`) to replica `to`
    /// for `kind`. A transfer already going to `to` is replaced (and reported
    /// [`TransferFailure::Superseded`]). Returns the transfer's number.
    ///
    /// # Errors
    /// No room for another transfer, a snapshot too large to number its chunks, or `to` is
    /// this replica; nothing was sent.
    #[allow(clippy::too_many_arguments)] // one transfer's description, named at the call
    pub fn send(
        &mut self,
        now: TimeUs,
        to: u64,
        kind: SnapshotKind,
        index: u64,
        data: Bytes,
        crc32: u32,
        out: &mut Vec<TransferEvent>,
    ) -> Result<TransferId, SendRefused> {
        if to == self.me {
            return Err(SendRefused::ToSelf);
        }
        let header =
            Header { kind, index, total_bytes: data.len() as u64, chunk_bytes: self.config.chunk_bytes, crc32 };
        let chunks = header.chunks().ok_or(SendRefused::TooLarge)?;
        if let Some(pos) = self.outgoing.iter().position(|o| o.to == to) {
            let old = self.outgoing.remove(pos);
            self.abandon(old, TransferFailure::Superseded, out);
        } else if self.outgoing.len() >= self.config.outgoing_max {
            return Err(SendRefused::Busy);
        }
        let id = self.next_id.max(now);
        self.next_id = id + 1;
        let o = Outgoing {
            id,
            to,
            header,
            data,
            chunks,
            accepted: false,
            acked: 0,
            sent: 0,
            sent_max: 0,
            rewound_to: None,
            probing: false,
            probes: 0,
            restarts: 0,
            deadline_us: now.saturating_add(self.config.ack_timeout_us),
        };
        out.push(TransferEvent::Send { to, msg: self.begin(&o) });
        self.outgoing.push(o);
        self.stats.started += 1;
        Ok(id)
    }

    /// Ends the outgoing transfers for which `keep(to, kind)` is false, telling their
    /// receivers (reported [`TransferFailure::Cancelled`]).
    pub fn cancel_outgoing(&mut self, mut keep: impl FnMut(u64, &SnapshotKind) -> bool, out: &mut Vec<TransferEvent>) {
        let mut i = 0;
        while i < self.outgoing.len() {
            if keep(self.outgoing[i].to, &self.outgoing[i].header.kind) {
                i += 1;
            } else {
                let o = self.outgoing.remove(i);
                self.abandon(o, TransferFailure::Cancelled, out);
            }
        }
    }

    /// Drops the incoming transfers for which `keep(from, kind)` is false, telling their
    /// senders ([`SnapshotRefusal::Unwanted`]).
    pub fn refuse_incoming(&mut self, mut keep: impl FnMut(u64, &SnapshotKind) -> bool, out: &mut Vec<TransferEvent>) {
        let mut i = 0;
        while i < self.incoming.len() {
            if keep(self.incoming[i].from, &self.incoming[i].header.kind) {
                i += 1;
            } else {
                let inc = self.incoming.remove(i);
                self.stats.refused += 1;
                out.push(self.refuse(inc.from, inc.id, SnapshotRefusal::Unwanted));
            }
        }
    }

    /// The link to replica `peer` came back: its outgoing transfers ask at once where it
    /// stands (and resume from there) instead of waiting for their timeout.
    pub fn link_up(&mut self, now: TimeUs, peer: u64, out: &mut Vec<TransferEvent>) {
        let timeout = self.config.ack_timeout_us;
        for i in 0..self.outgoing.len() {
            if self.outgoing[i].to == peer {
                let begin = self.begin(&self.outgoing[i]);
                let o = &mut self.outgoing[i];
                o.probing = true;
                o.rewound_to = None;
                o.deadline_us = now.saturating_add(timeout);
                out.push(TransferEvent::Send { to: peer, msg: begin });
            }
        }
    }

    /// Timeouts due at `now`: silent receivers are probed (or given up on), silent senders'
    /// transfers dropped.
    pub fn tick(&mut self, now: TimeUs, out: &mut Vec<TransferEvent>) {
        let mut i = 0;
        while i < self.outgoing.len() {
            if self.outgoing[i].deadline_us > now {
                i += 1;
                continue;
            }
            let o = &mut self.outgoing[i];
            o.probes += 1;
            if o.probes > self.config.probes_max {
                let o = self.outgoing.remove(i);
                self.abandon(o, TransferFailure::NoProgress, out);
                continue;
            }
            o.probing = true;
            o.rewound_to = None;
            o.deadline_us = now.saturating_add(self.config.ack_timeout_us);
            let to = o.to;
            let begin = self.begin(&self.outgoing[i]);
            out.push(TransferEvent::Send { to, msg: begin });
            i += 1;
        }
        let idle = self.config.idle_timeout_us();
        let before = self.incoming.len();
        self.incoming.retain(|inc| inc.last_heard_us.saturating_add(idle) > now);
        self.stats.dropped += (before - self.incoming.len()) as u64;
    }

    /// A transfer message from replica `from` (Raft id) of this shard. `wanted(kind)` says
    /// whether this replica takes a new snapshot of that kind now (asked at a transfer's
    /// begin).
    ///
    /// # Errors
    /// `msg` is not a transfer message (nothing happened).
    pub fn on_message(
        &mut self,
        now: TimeUs,
        from: u64,
        msg: ReplicationMsg,
        wanted: impl FnOnce(&SnapshotKind) -> bool,
        out: &mut Vec<TransferEvent>,
    ) -> Result<(), String> {
        match msg {
            ReplicationMsg::SnapshotBegin { transfer, kind, index, total_bytes, chunk_bytes, crc32, .. } => {
                let header = Header { kind, index, total_bytes, chunk_bytes, crc32 };
                self.on_begin(now, from, transfer, header, wanted, out);
            }
            ReplicationMsg::SnapshotChunk { transfer, seq, crc32, data, .. } => {
                self.on_chunk(now, from, transfer, seq, crc32, data, out)
            }
            ReplicationMsg::SnapshotAck { transfer, next, resend, .. } => {
                self.on_ack(now, from, transfer, next, resend, out)
            }
            ReplicationMsg::SnapshotCancel { transfer, .. } => {
                let before = self.incoming.len();
                self.incoming.retain(|inc| (inc.from, inc.id) != (from, transfer));
                self.stats.dropped += (before - self.incoming.len()) as u64;
            }
            ReplicationMsg::SnapshotRefuse { transfer, reason, .. } => self.on_refuse(now, from, transfer, reason, out),
            ReplicationMsg::Raft { .. }
            | ReplicationMsg::LeaderIs { .. }
            | ReplicationMsg::LeaderLost { .. }
            | ReplicationMsg::AcceptsQuery { .. }
            | ReplicationMsg::Accepts { .. }
            | ReplicationMsg::ClockProbe { .. }
            | ReplicationMsg::ClockEcho { .. } => return Err("not a snapshot transfer message".into()),
        }
        Ok(())
    }
}

// The two sides of a transfer, each an `impl Transfers` block of its own.
mod receiver;
mod sender;
