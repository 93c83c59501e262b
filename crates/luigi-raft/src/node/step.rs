//! Messages in: [`RaftLog::step`], with the checks for lost entries and the rejoin protocol
//! (see [`RaftLog`], "Lost entries" and "Rejoining").

use bytes::Bytes;
use raft::eraftpb::{Message, MessageType};
use raft::StateRole;

use super::{LostEntries, RaftError, RaftLog};

/// Message context a rejoining replica puts on its append rejections (see [`RaftLog`],
/// "Rejoining").
pub const REJOIN_CONTEXT: &[u8] = b"luigi-rejoin";

/// What a rejoining replica heard from the leader of the newest term it knows.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Rejoin {
    term: u64,
    /// Highest commit index the leader of `term` announced in its appends (its own commit
    /// index when it sent them) or covered by its snapshot. Heartbeats do not count: they
    /// carry at most what the leader believes this replica holds.
    leader_commit: u64,
    /// An append of `term` arrived (a snapshot alone does not show the leader's commit index).
    heard_append: bool,
}

impl Rejoin {
    fn note(&mut self, term: u64, commit: u64, append: bool) {
        if term > self.term {
            *self = Rejoin { term, ..Rejoin::default() };
        }
        if term == self.term {
            self.leader_commit = self.leader_commit.max(commit);
            self.heard_append |= append;
        }
    }
}

impl RaftLog {
    /// Whether this replica is being rebuilt from its peers and has not caught up yet (see
    /// "Rejoining").
    pub fn is_rejoining(&self) -> bool {
        self.rejoin.is_some()
    }

    pub(super) fn lost_error(&self) -> Option<RaftError> {
        self.lost.map(|LostEntries { leader, term, commit, last_index }| RaftError::LostEntries {
            leader,
            term,
            commit,
            last_index,
        })
    }

    /// A rejoining replica that caught up with the leader of its term records its vote in
    /// that term as given to itself and leaves the rejoin (see "Rejoining").
    pub(super) fn check_rejoined(&mut self) {
        let Some(r) = self.rejoin else { return };
        let raft = &self.raw.raft;
        let log = &raft.raft_log;
        let caught_up = raft.state == StateRole::Follower
            && raft.leader_id != 0
            && raft.term == r.term
            && r.heard_append
            && r.leader_commit > 0
            && log.committed >= r.leader_commit
            && log.persisted >= r.leader_commit;
        if caught_up {
            self.raw.raft.vote = self.id;
            self.rejoin = None;
            self.rejoin_done = true;
        }
    }

    /// For a leader: a rejoining follower's rejection that shows it holds less than raft-rs
    /// believes (`matched`). Resets its progress and probes from its hint; true if handled.
    fn reset_rejoining_follower(&mut self, msg: &Message) -> bool {
        let raft = &mut self.raw.raft;
        if raft.state != StateRole::Leader || msg.term != raft.term {
            return false;
        }
        let Some(pr) = raft.mut_prs().get_mut(msg.from) else { return false };
        if msg.reject_hint >= pr.matched {
            return false; // plain probing finds the match
        }
        // Lowering `matched` only makes commits more conservative; the probe finds the real one.
        pr.matched = 0;
        pr.become_probe();
        pr.next_idx = msg.reject_hint + 1;
        pr.recent_active = true;
        raft.send_append(msg.from);
        true
    }

    /// Feeds a message received from a peer.
    ///
    /// # Errors
    /// [`RaftError::Misrouted`] if it is addressed to another replica,
    /// [`RaftError::UnknownPeer`] if it comes from outside the group (or claims to come from
    /// this replica), [`RaftError::Forbidden`] for a proposal or a local-only message type, raft-rs's error
    /// for a response from an unknown peer. The message is dropped in every error case.
    pub fn step(&mut self, msg: Message) -> Result<(), RaftError> {
        if msg.to != self.id {
            return Err(RaftError::Misrouted { to: msg.to, id: self.id });
        }
        if msg.from == self.id || !self.voters.contains(&msg.from) {
            return Err(RaftError::UnknownPeer(msg.from));
        }
        let t = msg.get_msg_type();
        if t == MessageType::MsgPropose || raft::raw_node::is_local_msg(t) {
            return Err(RaftError::Forbidden(t));
        }
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        let mut msg = msg;
        if t == MessageType::MsgAppendResponse
            && msg.reject
            && msg.context.as_ref() == REJOIN_CONTEXT
            && self.reset_rejoining_follower(&msg)
        {
            self.after_call();
            return Ok(());
        }
        if self.abstaining && t == MessageType::MsgTimeoutNow {
            return Ok(()); // a leader hands over to it: it must not lead (see `abstain`)
        }
        let current = msg.term >= self.raw.raft.term;
        if let Some(rejoin) = &mut self.rejoin {
            if matches!(t, MessageType::MsgRequestVote | MessageType::MsgRequestPreVote | MessageType::MsgTimeoutNow) {
                return Ok(()); // no vote, no campaign before caught up (see "Rejoining")
            }
            if current && t == MessageType::MsgAppend {
                rejoin.note(msg.term, msg.commit, true);
            }
            if current && t == MessageType::MsgSnapshot {
                rejoin.note(msg.term, msg.get_snapshot().get_metadata().index, false);
            }
        }
        let last_index = self.last_index();
        let mut claimed = None;
        if t == MessageType::MsgHeartbeat && current && msg.commit > last_index {
            if self.rejoin.is_none() {
                self.lost = Some(LostEntries { leader: msg.from, term: msg.term, commit: msg.commit, last_index });
                return Err(self.lost_error().expect("just set"));
            }
            // Commit nothing we do not hold; tell the leader where our log ends.
            claimed = Some(msg.commit);
            msg.commit = self.raw.raft.raft_log.committed;
        }
        let (from, term) = (msg.from, msg.term);
        let result = self.raw.step(msg);
        if let Some(claimed) = claimed {
            let raft = &mut self.raw.raft;
            if raft.term == term && raft.leader_id == from {
                let last = raft.raft_log.last_index();
                let mut m = Message::default();
                m.set_msg_type(MessageType::MsgAppendResponse);
                (m.to, m.from, m.term) = (from, self.id, term);
                (m.reject, m.index, m.reject_hint) = (true, claimed, last);
                m.log_term = raft.raft_log.term(last).unwrap_or(0);
                m.commit = raft.raft_log.committed;
                m.context = REJOIN_CONTEXT.to_vec().into();
                raft.msgs.push(m);
            }
        }
        self.after_call();
        self.check_rejoined();
        result.map_err(RaftError::from)
    }

    /// [`crate::decode_message`] then [`RaftLog::step`]. With
    /// [`crate::RaftConfig::external_snapshots`], a `MsgSnapshot` is refused here: snapshots
    /// come in through [`RaftLog::step_snapshot`] only, once transferred and checked.
    ///
    /// # Errors
    /// [`RaftError::Decode`] for bytes that are not a raft message, [`RaftError::Forbidden`]
    /// for a snapshot that should have come apart, else as [`RaftLog::step`].
    pub fn step_bytes(&mut self, bytes: &[u8]) -> Result<(), RaftError> {
        let msg = crate::codec::decode_message(bytes)?;
        if self.external_snapshots && msg.get_msg_type() == MessageType::MsgSnapshot {
            return Err(RaftError::Forbidden(MessageType::MsgSnapshot));
        }
        self.step(msg)
    }

    /// A `MsgSnapshot` whose data travelled apart (see [`crate::OutMessage::snapshot`]):
    /// `envelope` is the message as sent (its metadata), `data` the snapshot's data,
    /// reassembled and checked by the shell. Steps them as one message.
    ///
    /// # Errors
    /// [`RaftError::Decode`] if `envelope` is not a raft message; [`RaftError::Invalid`] if it
    /// is not a snapshot without its data, or snapshots are not external here; else as
    /// [`RaftLog::step`].
    pub fn step_snapshot(&mut self, envelope: &[u8], data: Bytes) -> Result<(), RaftError> {
        let mut msg = crate::codec::decode_message(envelope)?;
        if !self.external_snapshots {
            return Err(RaftError::Invalid("snapshots travel inside raft messages in this group".into()));
        }
        if msg.get_msg_type() != MessageType::MsgSnapshot || !msg.get_snapshot().data.is_empty() {
            return Err(RaftError::Invalid(format!(
                "a {:?} with {} bytes of snapshot data is not a snapshot envelope",
                msg.get_msg_type(),
                msg.get_snapshot().data.len()
            )));
        }
        msg.mut_snapshot().data = data;
        self.step(msg)
    }
}
