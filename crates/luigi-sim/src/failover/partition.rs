//! Partitions of the Raft cluster model (issue 26): which links a cut replica loses, in which
//! direction ([`CutKind`]), and what becomes of their messages ([`CutMode`]): lost, or held
//! as TCP holds them and delivered when the cut heals. One virtual second after a held
//! partition heals, the model reads every client's one-way delay estimates
//! ([`FailoverReport::owd_after_heal_max_us`](super::FailoverReport)): late answers must not
//! count as delay samples (DESIGN.md rule 1).

use std::collections::VecDeque;

use luigi_txn::types::ShardId;

use super::config::{CutKind, CutMode};
use super::{FaultAction, RaftGroups};
use crate::engine::{local_clock, Core, Step};
use crate::net::{EventKind, Node, SimMsg, VirtualUs};

/// Messages held on cut links at most, over the run (a TCP buffer is bounded too): past it,
/// a message is lost and counted ([`FailoverReport::held_lost`](super::FailoverReport)).
pub(super) const HELD_MAX: usize = 1 << 16;

/// When the clients' delay estimates are read after a held partition heals, virtual µs.
pub(super) const OBSERVE_AFTER_US: VirtualUs = 1_000_000;

/// The partition a replica is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ActiveCut {
    pub(super) kind: CutKind,
    pub(super) mode: CutMode,
}

impl ActiveCut {
    /// Whether the cut takes the replica's links down (both ends hear of it).
    fn drops_links(self) -> bool {
        match (self.kind, self.mode) {
            (CutKind::BothWays | CutKind::FromGroup, CutMode::Lost) => true,
            (CutKind::Outgoing | CutKind::Incoming, CutMode::Lost) | (_, CutMode::Held) => false,
        }
    }

    /// Whether the cut takes the clients' links to the replica down too (a cut from its own
    /// group keeps them).
    fn drops_client_links(self) -> bool {
        self.drops_links() && self.kind != CutKind::FromGroup
    }
}

/// What a link does with a message now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Link {
    Open,
    /// An end is down, or a lossy cut applies.
    Lost,
    /// Only cuts that hold apply.
    Held,
}

/// A message waiting on a cut link, with the incarnations of its ends when it was sent (a
/// restarted replica has new connections: what waited for the old one is lost).
pub(super) struct HeldMsg {
    src: Node,
    dst: Node,
    msg: SimMsg,
    gens: (u64, u64),
}

/// The messages held on cut links, in the order they were sent.
#[derive(Default)]
pub(super) struct Held {
    msgs: VecDeque<HeldMsg>,
}

impl RaftGroups<'_> {
    /// What the link from `src` to `dst` does with a message now.
    pub(super) fn link_state(&self, core: &Core<'_>, src: Node, dst: Node) -> Link {
        let down = |node: Node| match (node, self.place(node)) {
            (_, Some((s, i))) => self.replicas[s as usize][i as usize].node.is_none(),
            (Node::Client(_), None) => core.dead(node),
            (Node::Replica(..) | Node::Leader(_), None) => true,
        };
        if down(src) || down(dst) {
            return Link::Lost;
        }
        let mut held = false;
        for (end, other, sending) in [(src, dst, true), (dst, src, false)] {
            let Some((s, i)) = self.place(end) else { continue };
            let Some(cut) = self.replicas[s as usize][i as usize].cut else { continue };
            let applies = match cut.kind {
                CutKind::BothWays => true,
                CutKind::Outgoing => sending,
                CutKind::Incoming => !sending,
                CutKind::FromGroup => matches!(other, Node::Replica(t, _) if t == s),
            };
            match (applies, cut.mode) {
                (false, _) => {}
                (true, CutMode::Lost) => return Link::Lost,
                (true, CutMode::Held) => held = true,
            }
        }
        if held {
            Link::Held
        } else {
            Link::Open
        }
    }

    /// The incarnation of `node` (clients have one).
    fn gen(&self, node: Node) -> u64 {
        self.place(node).map_or(0, |(s, i)| self.replicas[s as usize][i as usize].gen)
    }

    /// Keeps `msg` on its held link until the cut heals (or loses it past [`HELD_MAX`]).
    pub(super) fn keep(&mut self, src: Node, dst: Node, msg: SimMsg) {
        if self.held.msgs.len() >= HELD_MAX {
            self.report.held_lost += 1;
            return;
        }
        let gens = (self.gen(src), self.gen(dst));
        self.held.msgs.push_back(HeldMsg { src, dst, msg, gens });
    }

    /// Sends every held message whose link is open again, in order; loses those whose link
    /// lost an end (or whose end restarted); keeps the rest.
    fn release(&mut self, core: &mut Core<'_>) {
        let mut kept = VecDeque::new();
        for m in std::mem::take(&mut self.held.msgs) {
            let same = (self.gen(m.src), self.gen(m.dst)) == m.gens;
            match self.link_state(core, m.src, m.dst) {
                Link::Open if same => {
                    self.report.held_delivered += 1;
                    core.send(m.src, m.dst, m.msg);
                }
                Link::Held if same => kept.push_back(m),
                Link::Open | Link::Held | Link::Lost => self.report.held_lost += 1,
            }
        }
        self.held.msgs = kept;
    }

    /// Cuts replica `i` of `s` off (`kind`, `mode`) for `down_us`, then heals it.
    pub(super) fn cut_replica(
        &mut self,
        core: &mut Core<'_>,
        s: ShardId,
        i: u32,
        cut: ActiveCut,
        down_us: u64,
    ) -> Step {
        core.trace(|| format!("R{s}.{i}: {:?} cut ({:?}) for {down_us} us", cut.kind, cut.mode));
        self.replicas[s as usize][i as usize].cut = Some(cut);
        self.report.cuts += 1;
        match cut.kind {
            CutKind::Outgoing | CutKind::Incoming => self.report.one_way_cuts += 1,
            CutKind::BothWays | CutKind::FromGroup => {}
        }
        match cut.mode {
            CutMode::Held => self.report.held_cuts += 1,
            CutMode::Lost => {}
        }
        if cut.drops_links() {
            self.links_down(core, s, i, cut.kind == CutKind::FromGroup)?;
        }
        if cut.drops_client_links() {
            core.queue.push(core.now, EventKind::ClientLinks { shard: s, replica: i, up: false });
        }
        let at = core.now + down_us;
        self.schedule_fault(core, at, FaultAction::Heal(s, i));
        Ok(())
    }

    /// Heals replica `i` of `s`: its links come back up if its cut took them down, and what
    /// its held links kept is delivered (the clients' estimates are read a second later).
    pub(super) fn heal_replica(&mut self, core: &mut Core<'_>, s: ShardId, i: u32) -> Step {
        let cut = self.replicas[s as usize][i as usize].cut.take();
        if cut.is_some_and(ActiveCut::drops_client_links) {
            core.queue.push(core.now, EventKind::ClientLinks { shard: s, replica: i, up: true });
        }
        match cut {
            Some(c) if c.mode == CutMode::Held => {
                self.release(core);
                let at = core.now + OBSERVE_AFTER_US;
                self.schedule_fault(core, at, FaultAction::ObserveOwd);
                self.call_replica(core, s, i, false, |_, _, _| Ok(()))
            }
            Some(c) if !c.drops_links() => self.call_replica(core, s, i, false, |_, _, _| Ok(())),
            Some(_) | None => self.links_up(core, s, i),
        }
    }

    /// Reads every live Luigi client's one-way delay estimate towards every shard into the
    /// report (the largest).
    pub(super) fn observe_owd(&mut self, core: &Core<'_>) {
        let mut max = i64::MIN;
        for node in core.cs.nodes.iter().filter(|n| !n.dead && n.started) {
            let local = local_clock(core.now, node.offset_us);
            for shard in 0..core.config.shards {
                // A baseline's client keeps no estimate.
                let Some(owd) = node.coord.owd_estimate_us(local, shard) else { continue };
                max = max.max(owd);
            }
        }
        if max > i64::MIN {
            self.report.owd_observations += 1;
            self.report.owd_after_heal_max_us = self.report.owd_after_heal_max_us.max(max);
        }
        core.trace(|| format!("clients' largest one-way delay estimate a second after a heal: {max} us"));
    }
}
