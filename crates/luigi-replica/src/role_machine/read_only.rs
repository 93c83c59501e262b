//! Snapshot reads at any replica (DESIGN.md rule 23), written once for every protocol: a
//! read is answered from the role's [`SnapshotView`] once its safe time reaches the read's
//! snapshot, held until then ([`SnapshotReads`], bounded), and refused clearly by a protocol
//! that serves none (the baselines). No agreement, no hold queue, no log record.

use luigi_raft::RaftLog;
use luigi_txn::msg::ServerMsg;
use luigi_txn::read_only::{ReadRefusal, SnapshotRead, SnapshotReadReply};
use luigi_txn::types::{ClientId, ShardId, TimeUs};

use super::{OutputOf, ReplicaProtocol, Role, RoleMachine, SnapshotView};
use crate::role_machine::{FollowerCore, LeaderCore};
use crate::snapshot_reads::{Arrival, SnapshotReadConfig, SnapshotReadStats, WaitingRead};

/// The view the replica's current role serves reads from.
fn view_of<P: ReplicaProtocol>(role: &Role<P>) -> Option<SnapshotView<'_>> {
    match role {
        Role::Leader(l) => l.snapshot_view(),
        Role::Follower(f) => f.snapshot_view(),
        Role::Switching => unreachable!("not observable"),
    }
}

/// The answer at `now` to `w` from replica `replica` of `shard`: served from `view`, or refused.
fn answer<P: ReplicaProtocol>(
    now: TimeUs,
    shard: ShardId,
    replica: u32,
    w: WaitingRead,
    outcome: Result<&SnapshotView<'_>, ReadRefusal>,
) -> OutputOf<P> {
    let read = &w.read;
    let (outcome, position) = match outcome {
        Ok(view) => {
            let a = view.registry.read_at(&read.procedure, &read.args, view.store, &read.keys, shard, read.ts);
            (Ok(a.result), view.position_for(read.ts, &read.keys, &a.scanned))
        }
        Err(why) => (Err(why), None),
    };
    let (arrival_delta_us, held_us) = (w.arrival_delta_us, now.saturating_sub(w.arrived));
    let (id, ts) = (read.id, read.ts);
    let reply = SnapshotReadReply { id, shard, replica, ts, outcome, arrival_delta_us, held_us, position };
    OutputOf::<P>::ToClient { client: w.client, msg: ServerMsg::SnapshotRead(reply) }
}

/// This replica's index (from 0) in its shard: Raft ids are indexes + 1.
fn replica_index(log: &RaftLog) -> u32 {
    log.id().saturating_sub(1) as u32
}

impl<P: ReplicaProtocol> RoleMachine<P> {
    /// A snapshot read: served now if the safe time covers it, held, or refused.
    pub(super) fn on_snapshot_read(
        &mut self,
        log: &RaftLog,
        now: TimeUs,
        client: ClientId,
        read: SnapshotRead,
        out: &mut Vec<OutputOf<P>>,
    ) {
        let (shard, replica) = (self.protocol.shard(), replica_index(log));
        let view = view_of(&self.role);
        let refusal = if read.shard != shard {
            Some(ReadRefusal::Malformed(format!("asks shard {} of shard {shard}'s replica", read.shard)))
        } else if let Err(why) = read.check_shape() {
            Some(ReadRefusal::Malformed(why))
        } else if view.is_none() {
            Some(ReadRefusal::NotSupported("this cluster's protocol reads only through its leaders".into()))
        } else {
            None
        };
        let Some(view) = view.filter(|_| refusal.is_none()) else {
            self.reads.refused_other();
            let arrival_delta_us = luigi_txn::msg::arrival_delta_us(now, read.sent_us);
            let w = WaitingRead { client, read, arrival_delta_us, arrived: now, deadline: now };
            out.push(answer::<P>(now, shard, replica, w, Err(refusal.expect("refused"))));
            return;
        };
        match self.reads.arrive(now, client, read, view.serves_up_to()) {
            Arrival::Serve(w) => out.push(answer::<P>(now, shard, replica, w, Ok(&view))),
            Arrival::Held => {}
            Arrival::Refuse(w, why) => out.push(answer::<P>(now, shard, replica, w, Err(why))),
        }
    }

    /// Serves the held reads the safe time now covers and refuses those held too long.
    pub(super) fn tend_reads(&mut self, log: &RaftLog, now: TimeUs, out: &mut Vec<OutputOf<P>>) {
        if self.reads.is_empty() {
            return;
        }
        let (shard, replica) = (self.protocol.shard(), replica_index(log));
        let Some(view) = view_of(&self.role) else { return };
        for w in self.reads.ready(view.serves_up_to()) {
            out.push(answer::<P>(now, shard, replica, w, Ok(&view)));
        }
        let safe_ts = view.safe_ts;
        for w in self.reads.expired(now) {
            out.push(answer::<P>(now, shard, replica, w, Err(ReadRefusal::TimedOut { safe_ts })));
        }
    }

    /// Sets the bounds of the waiting reads (a replica starts with its protocol's,
    /// [`ReplicaProtocol::snapshot_reads`]; tests set small ones).
    pub fn set_snapshot_reads(&mut self, config: SnapshotReadConfig) {
        self.reads.set_config(config);
    }

    /// The snapshot reads' counters and how many wait now.
    pub fn snapshot_read_stats(&self) -> (SnapshotReadStats, usize) {
        (self.reads.stats(), self.reads.len())
    }
}
