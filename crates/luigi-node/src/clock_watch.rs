//! [`ClockWatch`]: a replica's part in measuring its group's clocks (DESIGN.md rule 22), the
//! glue between the node's inputs and turns, the estimator ([`crate::clock_offsets`]) and the
//! rule ([`crate::clock_guard`]).
//!
//! Probes and echoes that arrive are answered and recorded at the node's next turn, with the
//! clock the shell gives it there: `on_replication` comes without a time, and the node's last
//! known one may be a loop iteration old, which would add an error no round trip accounts
//! for. At most one probe per peer waits to be echoed (the newest), and at most
//! [`crate::clock_offsets::OUTSTANDING_MAX`] echoes per peer wait to be recorded.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use luigi_protocol::msg::ReplicationMsg;
use luigi_raft::RaftLog;
use luigi_txn::msg::ClockStatus;
use luigi_txn::types::TimeUs;

use crate::clock_guard::ClockGuard;
use crate::clock_offsets::{ClockOffsets, EchoOutcome, ProbeConfig, OUTSTANDING_MAX, PROBE_INTERVAL_US};
use crate::effect::Effect;
use crate::tuning::Tuning;
use luigi_txn::types::NodeId;

/// An echo received, waiting for the next turn.
#[derive(Clone, Copy, Debug)]
struct EchoIn {
    peer: u32,
    probe_sent_us: TimeUs,
    echo_us: TimeUs,
}

/// Counters of the clock measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockStats {
    /// Echoes that became samples.
    pub samples: u64,
    /// Echoes dropped for a round trip over the limit.
    pub too_slow: u64,
    /// Echoes that answered no probe awaited, or found no room.
    pub ignored: u64,
    /// Leadership hand-overs started because this replica's clock was beyond the bound.
    pub handovers: u64,
}

/// A replica's clock measurements and what it does about them (see the module docs).
#[derive(Clone, Debug)]
pub struct ClockWatch {
    me: NodeId,
    offsets: ClockOffsets,
    guard: ClockGuard,
    /// Probes to echo at the next turn: peer to its `sent_us`.
    probes_in: BTreeMap<u32, TimeUs>,
    echoes_in: VecDeque<EchoIn>,
    echoes_max: usize,
    stats: ClockStats,
}

impl ClockWatch {
    /// The watch of `me`, in a group of `group_size`, tuned by `tuning` (the clock bound, and
    /// the clients' resend timeout as the longest round trip a sample may take).
    pub fn new(me: NodeId, group_size: u32, tuning: &Tuning) -> Self {
        let config = ProbeConfig { interval_us: PROBE_INTERVAL_US, max_rtt_us: tuning.retry_timeout_us };
        let peers = (0..group_size).filter(|r| *r != me.replica);
        ClockWatch {
            me,
            offsets: ClockOffsets::new(config, peers),
            guard: ClockGuard::new(me.shard, me.replica, group_size, tuning.max_clock_offset_us),
            probes_in: BTreeMap::new(),
            echoes_in: VecDeque::new(),
            echoes_max: group_size as usize * OUTSTANDING_MAX,
            stats: ClockStats::default(),
        }
    }

    /// Replica `peer` of the group sent a probe stamped `sent_us` (echoed at the next turn).
    pub fn on_probe(&mut self, peer: u32, sent_us: TimeUs) {
        if peer != self.me.replica && self.offsets.peers().any(|p| p == peer) {
            self.probes_in.insert(peer, sent_us);
        }
    }

    /// Replica `peer` of the group echoed a probe (recorded at the next turn).
    pub fn on_echo(&mut self, peer: u32, probe_sent_us: TimeUs, echo_us: TimeUs) {
        if self.echoes_in.len() >= self.echoes_max {
            self.stats.ignored += 1;
            return;
        }
        self.echoes_in.push_back(EchoIn { peer, probe_sent_us, echo_us });
    }

    /// At `now` (this replica's clock): echoes the probes received, records the echoes
    /// received, probes the `linked` peers when due, judges the offsets, and makes `log`
    /// abstain from elections while this replica's clock is beyond the bound, handing
    /// leadership over if it leads.
    pub fn turn(&mut self, now: TimeUs, linked: &BTreeSet<u32>, log: &mut RaftLog, fx: &mut Vec<Effect>) {
        let (shard, from) = (self.me.shard, self.me.raft_id());
        for (peer, probe_sent_us) in std::mem::take(&mut self.probes_in) {
            let msg = ReplicationMsg::ClockEcho { shard, from, probe_sent_us, echo_us: now };
            fx.push(Effect::Replicate { to: NodeId { shard, replica: peer }, msg });
        }
        for e in self.echoes_in.drain(..) {
            match self.offsets.echo(e.peer, e.probe_sent_us, e.echo_us, now) {
                EchoOutcome::Counted(_) => self.stats.samples += 1,
                EchoOutcome::TooSlow => self.stats.too_slow += 1,
                EchoOutcome::Unknown => self.stats.ignored += 1,
            }
        }
        if self.offsets.probes_due(now) {
            let peers: Vec<u32> = self.offsets.peers().filter(|p| linked.contains(p)).collect();
            for peer in peers {
                self.offsets.probe_sent(peer, now);
                let msg = ReplicationMsg::ClockProbe { shard, from, sent_us: now };
                fx.push(Effect::Replicate { to: NodeId { shard, replica: peer }, msg });
            }
        }
        let estimates = self.offsets.estimates(now);
        let action = self.guard.update(now, &estimates);
        log.set_abstaining(action.abstain);
        if action.abstain && log.is_leader() && log.transferring_leader().is_none() {
            self.hand_over(linked, log);
        }
    }

    /// Hands leadership to the most up-to-date linked peer (see
    /// [`ClockGuard::handover_target`]).
    fn hand_over(&mut self, linked: &BTreeSet<u32>, log: &mut RaftLog) {
        let me = self.me;
        let candidates: Vec<(u64, u64)> = linked
            .iter()
            .map(|r| NodeId { shard: me.shard, replica: *r }.raft_id())
            .filter_map(|id| log.matched(id).map(|m| (id, m)))
            .collect();
        let Some(to) = self.guard.handover_target(&candidates) else { return };
        self.stats.handovers += 1;
        tracing::error!(
            node = %me,
            to = %NodeId { shard: me.shard, replica: (to - 1) as u32 },
            term = log.term(),
            "this leader's clock is beyond the clock bound from its group's majority: handing leadership over"
        );
        log.transfer_leader(to);
    }

    /// When probes are next due (`None`: the interval starts at the next turn).
    pub fn next_deadline(&self) -> Option<TimeUs> {
        self.offsets.next_deadline()
    }

    /// Whether this replica's clock was beyond the bound at the last turn.
    pub fn beyond_bound(&self) -> bool {
        self.guard.judgement().beyond_bound
    }

    /// What `luigi status` shows: the bound, the verdict, the fresh estimates at `now`.
    pub fn status(&self, now: TimeUs) -> ClockStatus {
        self.guard.status(&self.offsets.estimates(now))
    }

    /// Counters.
    pub fn stats(&self) -> ClockStats {
        self.stats
    }
}
