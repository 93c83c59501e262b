//! A replica that must not lead (DESIGN.md rule 22: its clock is beyond the clock bound from
//! its group's majority): it does not campaign, and, leading, it hands leadership over.

use raft::StateRole;

use super::RaftLog;

impl RaftLog {
    /// While `abstaining`, this replica starts no election: its election clock runs (so its
    /// lease on a silent leader lapses as usual, and it grants other candidates' votes) but
    /// a timeout starts nothing, [`RaftLog::campaign`] and the majority-lost-the-leader rule
    /// do nothing, and a leader's `TimeoutNow` (a leadership transfer to it) is dropped. It
    /// still votes and replicates. A candidate or pre-candidate that starts abstaining goes
    /// back to following (its round would only disrupt the group). A leader is not deposed
    /// by this: the caller hands leadership over ([`RaftLog::transfer_leader`]). Cleared, the
    /// replica takes part in elections again from its next timeout.
    pub fn set_abstaining(&mut self, abstaining: bool) {
        if abstaining == self.abstaining {
            return;
        }
        self.abstaining = abstaining;
        let raft = &mut self.raw.raft;
        if abstaining && matches!(raft.state, StateRole::Candidate | StateRole::PreCandidate) {
            let term = raft.term;
            raft.become_follower(term, raft::INVALID_ID);
            self.after_call();
        }
    }

    /// Whether this replica abstains from elections (see [`RaftLog::set_abstaining`]).
    pub fn is_abstaining(&self) -> bool {
        self.abstaining
    }

    /// For a leader: the replica it is handing leadership to, while the transfer is pending.
    pub fn transferring_leader(&self) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        self.raw.raft.lead_transferee
    }

    /// raft-rs's tick of a follower or candidate (`tick_election`) without what it does when
    /// the timeout passes: the elapsed count grows, and nothing is started.
    pub(super) fn tick_without_campaign(&mut self) {
        let raft = &mut self.raw.raft;
        raft.election_elapsed = raft.election_elapsed.saturating_add(1);
    }
}
