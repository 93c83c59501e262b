//! Driving the log and the role: the first election, Raft ticks, the log's readies (their
//! messages, their writes as [`Persist`] effects, the syncs they wait for), the leader's
//! snapshot a ready hands out, and the replica's turns and role switches.

use luigi_raft::{OutMessage, RaftError, SnapshotData};
use luigi_replica::Transition;
use luigi_txn::types::TimeUs;

use super::{NodeError, ReplicaNode, Restored, SnapshotCrc};
use crate::effect::{Discarded, Effect, Persist};
use crate::tuning::TICK_CATCH_UP_MAX;
use luigi_txn::types::NodeId;

/// Ready-and-turn rounds in one [`ReplicaNode::turn`] before the node counts as livelocked
/// (each round must make progress; a few are normal).
pub const DRIVE_ROUNDS_MAX: usize = 256;

/// A ready written and waiting for its sync.
pub(super) struct AwaitingSync {
    /// The ready's number.
    number: u64,
    /// Raft's messages that promise what it wrote: they leave once it is durable.
    messages: Vec<OutMessage>,
}

impl ReplicaNode {
    /// Drives the node at `now`: the first election, Raft ticks, the log's readies, applying
    /// and role switches, the leader's timers, snapshots, and queued agreement batches.
    ///
    /// # Errors
    /// The node cannot go on (see [`NodeError`]); effects already pushed (e.g. marking the
    /// data directory damaged) are still to be executed.
    pub fn turn(&mut self, now: TimeUs, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        self.drive_log(now, fx)?;
        // Before the log is driven again: a hand-over's messages leave in this turn.
        self.clock.turn(now, &self.linked, &mut self.log, fx);
        self.drive_role(now, fx)?;
        self.snapshot_if_due(fx)?;
        self.tend_transfers(now, fx);
        self.ask_for_accepts(now, fx);
        self.tell_leader_lost(fx);
        if !self.accepts_questions.is_empty() {
            self.answer_accepts_questions(fx);
        }
        self.drive(fx)?;
        self.release_held(fx);
        self.report_progress(now, fx);
        // A decoded snapshot serves only the readies of the turn after it was stepped (Raft
        // hands it out at once, unless it refused it).
        self.restored = None;
        Ok(())
    }

    /// Readies and the replica's turns, in rounds until the log has no ready left.
    fn drive_role(&mut self, now: TimeUs, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        let mut rounds = 0;
        loop {
            self.drive(fx)?;
            let transition = self
                .replica
                .turn(&mut self.log, now, &mut self.out)
                .map_err(|source| NodeError::Raft { node, what: "switching role", source })?;
            self.emit(fx);
            if let Some(t) = transition {
                self.on_transition(t, fx);
            }
            if !self.log.has_ready() {
                return Ok(());
            }
            rounds += 1;
            if rounds > DRIVE_ROUNDS_MAX {
                return Err(NodeError::Livelock { node, rounds });
            }
        }
    }

    /// The first part of [`ReplicaNode::turn`] alone: the first election, Raft ticks and the
    /// log's readies, without applying or executing anything. A shell that executes these
    /// effects before calling `turn` gets the log's messages (a leader's appends, a follower's
    /// acknowledgements) on their way before the state machine's work of the turn, which can
    /// be long under load; `turn` does it again (at no cost when nothing is left).
    ///
    /// # Errors
    /// As [`ReplicaNode::turn`].
    pub fn drive_log(&mut self, now: TimeUs, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        self.now_us = self.now_us.max(now);
        self.campaign_when_linked().map_err(|source| NodeError::Raft {
            node,
            what: "starting the first election",
            source,
        })?;
        self.tick(now);
        self.drive(fx)
    }

    fn campaign_when_linked(&mut self) -> Result<(), RaftError> {
        let all_linked = self.linked.len() + 1 >= self.config.group_size() as usize;
        if self.may_campaign && all_linked {
            self.may_campaign = false;
            if !self.log.is_leader() {
                self.log.campaign()?;
            }
        }
        Ok(())
    }

    /// Ticks the log for every tick period elapsed by `now` (a bounded catch-up after a
    /// stall).
    fn tick(&mut self, now: TimeUs) {
        let tick_us = self.config.tuning.raft_tick_us.max(1);
        let next = self.next_tick_us.get_or_insert(now.saturating_add(tick_us));
        let mut ticks = 0;
        while now >= *next && ticks < TICK_CATCH_UP_MAX {
            self.log.tick();
            *next = next.saturating_add(tick_us);
            ticks += 1;
        }
        if now >= *next {
            *next = now.saturating_add(tick_us);
        }
    }

    /// Takes every ready the log has: its messages leave, its writes go to the shell, and it
    /// is advanced at once unless something must be synced first.
    fn drive(&mut self, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        for _ in 0..DRIVE_ROUNDS_MAX {
            let mut rd = match self.log.ready() {
                Ok(Some(rd)) => rd,
                Ok(None) => return Ok(()),
                Err(e @ RaftError::LostEntries { .. }) => {
                    let reason = lost_entries(node, &e);
                    fx.push(Effect::MarkDamaged { reason });
                    return Err(NodeError::Raft { node, what: "reading its log", source: e });
                }
                Err(source) => return Err(NodeError::Raft { node, what: "reading its log", source }),
            };
            if let Some(change) = &rd.role_change {
                tracing::info!(node = %node, ?change, term = self.log.term(), "raft role change");
            }
            self.send_raft(std::mem::take(&mut rd.messages), fx);
            if let Some(snap) = &rd.snapshot {
                self.install_leader_snapshot(snap, fx)?;
            }
            if rd.rejoined {
                tracing::info!(node = %node, "rejoined: caught up with the leader; votes again from the next term on");
            }
            let number = rd.number;
            self.last_ready = number;
            let persisted_messages = std::mem::take(&mut rd.persisted_messages);
            let wait = rd.must_sync || !self.awaiting.is_empty();
            if rd.has_persist_work() || wait {
                let accepts = Vec::new();
                fx.push(Effect::Persist(Persist { number, sync: wait, ready: rd, accepts, accepts_rewrite: false }));
            }
            if wait {
                self.awaiting.push_back(AwaitingSync { number, messages: persisted_messages });
            } else {
                self.send_raft(persisted_messages, fx);
                self.log.advance(number);
                self.release_held(fx);
            }
        }
        Err(NodeError::Livelock { node, rounds: DRIVE_ROUNDS_MAX })
    }

    /// A ready hands out the leader's snapshot: the state machine is replaced before it
    /// applies anything after it (by the state decoded off the event loop, if this is it).
    fn install_leader_snapshot(&mut self, snap: &SnapshotData, fx: &mut Vec<Effect>) -> Result<(), NodeError> {
        let node = self.config.node;
        tracing::info!(node = %node, index = snap.index, "installing the leader's snapshot");
        let replaced = match self.restored.take() {
            // Decoded off the event loop ([`crate::snapshots::SnapshotCheck`]).
            Some(Restored { index, state, crc32 }) if index == snap.index => {
                self.snapshot_crc = Some(SnapshotCrc { index, crc32 });
                self.replica.install_decoded(state).map_err(|source| NodeError::Raft {
                    node,
                    what: "installing the leader's snapshot",
                    source,
                })?
            }
            _ => {
                self.snapshot_crc = None;
                self.replica.install_snapshot(&snap.data).map_err(|source| NodeError::Raft {
                    node,
                    what: "loading the leader's snapshot",
                    source,
                })?
            }
        };
        fx.extend(replaced.map(|old| Effect::Discard(Discarded::new(old))));
        self.snapshots.taken(snap.index);
        self.stats.snapshots_installed += 1;
        Ok(())
    }

    /// The shell made every [`Persist`] up to `number` durable (see the module docs).
    pub fn persisted(&mut self, number: u64, fx: &mut Vec<Effect>) {
        let mut advanced = None;
        while self.awaiting.front().is_some_and(|a| a.number <= number) {
            let synced = self.awaiting.pop_front().expect("checked");
            self.send_raft(synced.messages, fx);
            advanced = Some(synced.number);
        }
        if let Some(n) = advanced {
            self.log.advance(n);
        }
        while self.awaiting_accepts.front().is_some_and(|w| w.number <= number) {
            let written = self.awaiting_accepts.pop_front().expect("checked");
            self.held.extend(written.held);
        }
        self.release_held(fx);
    }

    fn on_transition(&mut self, t: Transition, fx: &mut Vec<Effect>) {
        match t {
            Transition::Promoted => {
                tracing::info!(node = %self.config.node, term = self.log.term(), "serving as the shard leader");
                self.serving_term = self.log.term();
                // Every replica of every other shard hears it (one not linked now hears it when
                // its link comes up, see `shard_link`).
                let msg = self.leader_is();
                for to in self.routes.reachable() {
                    fx.push(Effect::Replicate { to, msg: msg.clone() });
                }
            }
            Transition::Demoted => {
                tracing::warn!(node = %self.config.node, "lost leadership; following");
                self.serving_term = 0;
            }
        }
        fx.push(Effect::Transition(t));
    }
}

/// The one-line description of lost entries, in node names.
fn lost_entries(node: NodeId, e: &RaftError) -> String {
    match *e {
        RaftError::LostEntries { leader, term, commit, last_index } => format!(
            "this replica lost acknowledged log entries: its leader s{}r{} (term {term}) counts entries up to \
             index {commit} as held here, but its log ends at index {last_index}",
            node.shard,
            leader.saturating_sub(1)
        ),
        _ => e.to_string(),
    }
}
