//! The node's seam ([`ShardReplica`]), implemented once for every protocol's
//! [`RoleMachine`], and the snapshot decoder it hands out.

use std::sync::Arc;

use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ReplicaStatus, StalledTxnInfo};
use luigi_txn::peer::{NodeOutput, PeerMsg, PeerVocabulary};
use luigi_txn::types::{ClientId, ShardId, TimeUs, Timestamp, TxnId};

use super::{BatchOf, FollowerCore, FollowerImages, LeaderCore, ReplicaProtocol, Role, RoleMachine};
use crate::replica_api::{
    FastPathReplica, LeaderFigures, LeaderTotals, ShardReplica, SnapshotDecoder, SnapshotJob, StateBox, Transition,
};
use luigi_raft::{RaftError, RaftLog};

/// A protocol's snapshot images read off the event loop, through its [`FollowerImages`].
struct Decoder<I>(I);

impl<I: FollowerImages> SnapshotDecoder for Decoder<I> {
    fn check(&self, index: u64, data: &[u8]) -> Result<(), String> {
        self.0.check(index, data)
    }

    fn decode(&self, data: &[u8]) -> Result<StateBox, String> {
        Ok(Box::new(self.0.load(data)?))
    }
}

impl<P: ReplicaProtocol> RoleMachine<P> {
    /// Hands the leader core's typed outputs to the node, batches encoded, and keeps the
    /// scratch vector for the next call.
    fn hand_over(&mut self, mut typed: Vec<super::OutputOf<P>>, out: &mut Vec<NodeOutput>) {
        out.extend(typed.drain(..).map(luigi_txn::peer::ReplicaOutput::encoded));
        self.typed_out = typed;
    }
}

impl<P: ReplicaProtocol> ShardReplica for RoleMachine<P> {
    fn on_client(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        client: ClientId,
        msg: ClientMsg,
        out: &mut Vec<NodeOutput>,
    ) {
        let mut typed = std::mem::take(&mut self.typed_out);
        RoleMachine::on_client(self, log, now, client, msg, &mut typed);
        self.hand_over(typed, out);
    }

    fn on_peer(&mut self, log: &mut RaftLog, now: TimeUs, msg: PeerMsg, out: &mut Vec<NodeOutput>) -> bool {
        let batch = match BatchOf::<P>::decode(msg) {
            Ok(batch) => batch,
            Err(e) => {
                // Peers are authenticated, but a garbled frame must not take the server
                // down: it is dropped like a batch a follower does not take.
                self.stats.undecodable_peer += 1;
                if let Some(logged) = self.undecodable_warns.occurred(now) {
                    tracing::warn!(error = %e, unlogged_before = logged.suppressed, "peer message dropped");
                }
                return false;
            }
        };
        let mut typed = std::mem::take(&mut self.typed_out);
        let taken = RoleMachine::on_peer(self, log, now, batch, &mut typed);
        self.hand_over(typed, out);
        taken
    }

    fn peer_leader_changed(&mut self, shard: ShardId) {
        RoleMachine::peer_leader_changed(self, shard)
    }

    fn turn(
        &mut self,
        log: &mut RaftLog,
        now: TimeUs,
        out: &mut Vec<NodeOutput>,
    ) -> Result<Option<Transition>, RaftError> {
        let mut typed = std::mem::take(&mut self.typed_out);
        let turned = RoleMachine::turn(self, log, now, &mut typed);
        self.hand_over(typed, out);
        turned
    }

    fn take_executed(&mut self) -> Vec<(TxnId, Timestamp)> {
        RoleMachine::take_executed(self)
    }

    fn next_deadline(&self) -> Option<TimeUs> {
        RoleMachine::next_deadline(self)
    }

    fn is_serving(&self) -> bool {
        RoleMachine::is_serving(self)
    }

    fn leader_hint(&self, log: &RaftLog) -> Option<u32> {
        RoleMachine::leader_hint(self, log)
    }

    fn store(&self) -> &Store {
        RoleMachine::store(self)
    }

    fn own_snapshot_due(&self, log: &RaftLog, next_at: u64) -> Result<Option<SnapshotJob>, RaftError> {
        RoleMachine::own_snapshot_due(self, log, next_at)
    }

    fn snapshot_decoder(&self) -> Arc<dyn SnapshotDecoder> {
        Arc::new(Decoder(self.protocol.images().clone()))
    }

    fn install_snapshot(&mut self, data: &[u8]) -> Result<Option<StateBox>, RaftError> {
        let restored = self.protocol.images().load(data).map_err(RaftError::Invalid)?;
        Ok(self.install_follower(restored).map(|f| Box::new(f) as StateBox))
    }

    fn install_decoded(&mut self, state: StateBox) -> Result<Option<StateBox>, RaftError> {
        let restored = state
            .downcast::<P::Follower>()
            .map_err(|_| RaftError::Invalid("the decoded snapshot is not this protocol's follower state".into()))?;
        Ok(self.install_follower(*restored).map(|f| Box::new(f) as StateBox))
    }

    fn status(&self, now: TimeUs, status: &mut ReplicaStatus) {
        match &self.role {
            Role::Leader(l) => l.status(now, status),
            Role::Follower(f) => f.status(status),
            Role::Switching => {}
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match &self.role {
            Role::Leader(l) => l.check_invariants(),
            Role::Follower(f) => f.check_invariants(),
            Role::Switching => Ok(()),
        }
    }

    fn stats_line(&self) -> String {
        let core = match &self.role {
            Role::Leader(l) => Some(l.stats_line()),
            Role::Follower(f) => f.stats_line(),
            Role::Switching => None,
        };
        match core {
            Some(core) => format!("{core} {:?}", self.stats),
            None => format!("{:?}", self.stats),
        }
    }

    fn fast_path(&self) -> Option<&dyn FastPathReplica> {
        P::fast_path(self)
    }

    fn fast_path_mut(&mut self) -> Option<&mut dyn FastPathReplica> {
        P::fast_path_mut(self)
    }

    fn leader_figures(&self) -> Option<LeaderFigures> {
        self.leader().map(LeaderCore::figures)
    }

    fn leader_totals(&self) -> LeaderTotals {
        RoleMachine::leader_totals(self)
    }

    fn snapshot_read_stats(&self) -> (crate::snapshot_reads::SnapshotReadStats, usize) {
        RoleMachine::snapshot_read_stats(self)
    }

    fn stalled(&self, now: TimeUs) -> Vec<StalledTxnInfo> {
        self.leader().map(|l| l.stalled(now)).unwrap_or_default()
    }
}
