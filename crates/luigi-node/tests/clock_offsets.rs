//! DESIGN.md rule 22 on a group of three [`ReplicaNode`]s over an in-memory network that
//! delivers at once, each replica with its own clock: they measure their offsets to each
//! other with probes, a leader whose clock jumps beyond the bound from the other two hands
//! leadership over and stands for no election while it stays beyond (even when it is the
//! only one left to elect), takes part again once back within, and one skewed follower does
//! not make a correct leader step down.

mod common;

use common::MiniCluster;
use luigi_node::{NodeConfig, ReplicaNode, Tuning};
use luigi_raft::{RecoveredState, Role};
use luigi_txn::types::NodeId;

const TICK_US: u64 = 10_000;
const STEP_US: u64 = 2_000;
const BOUND_US: u64 = 500_000;
/// Virtual time starts here, so that clocks set behind it stay positive.
const START_US: u64 = 10_000_000;

/// Three replicas with clocks `virtual time + offsets[r]`; `cut` ones hear and say nothing.
struct Group {
    cluster: MiniCluster,
    offsets: [u64; 3],
    now: u64,
    /// Every role each replica was seen in.
    roles: Vec<Vec<Role>>,
}

impl Group {
    fn new() -> Self {
        let config = |replica| {
            let mut tuning = Tuning::for_delay(1_000, 100);
            tuning.raft_tick_us = TICK_US;
            tuning.max_clock_offset_us = BOUND_US;
            NodeConfig::new(NodeId { shard: 0, replica }, vec![3], 7, tuning, luigi_workloads::procedures::builtins())
        };
        let nodes: Vec<ReplicaNode> =
            (0..3).map(|r| ReplicaNode::new(config(r), RecoveredState::default()).unwrap()).collect();
        Group { cluster: MiniCluster::new(nodes), offsets: [0; 3], now: START_US, roles: vec![vec![]; 3] }
    }

    fn node(&self, r: u32) -> &ReplicaNode {
        &self.cluster.nodes[r as usize]
    }

    fn clock(&self, r: u32) -> u64 {
        self.now + self.offsets[r as usize]
    }

    /// Notes replica `r`'s role after it settled.
    fn note_role(&mut self, r: u32) {
        let role = self.node(r).log().role();
        if self.roles[r as usize].last() != Some(&role) {
            self.roles[r as usize].push(role);
        }
    }

    /// Advances one step: every replica turns, and every message in flight is delivered.
    fn step(&mut self) {
        self.now += STEP_US;
        for r in 0..3 {
            self.cluster.turn(r, self.clock(r)).unwrap();
            self.note_role(r);
        }
        let (now, offsets) = (self.now, self.offsets);
        for _ in 0..10_000 {
            let Some(delivered) = self.cluster.deliver_one(|r| now + offsets[r as usize]).unwrap() else { return };
            self.note_role(delivered.to);
        }
        panic!("the messages never settle");
    }

    fn run(&mut self, us: u64) {
        for _ in 0..us / STEP_US {
            self.step();
        }
    }

    fn run_until(&mut self, us: u64, mut done: impl FnMut(&Group) -> bool) -> bool {
        for _ in 0..us / STEP_US {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }

    fn leader(&self) -> Option<u32> {
        self.cluster.serving()
    }

    fn beyond(&self, r: u32) -> bool {
        self.node(r).status(self.clock(r)).clock.beyond_bound
    }
}

#[test]
fn a_leader_whose_clock_jumps_beyond_the_bound_hands_over_and_stands_for_no_election() {
    let mut g = Group::new();
    assert!(g.run_until(5_000_000, |g| g.leader() == Some(0)), "replica 0 leads a fresh group");
    g.run(2_000_000);
    // Everyone measured everyone, within the bound: nothing happens.
    for r in 0..3u32 {
        let s = g.cluster.nodes[r as usize].status(g.clock(r)).clock;
        assert_eq!(s.bound_us, BOUND_US);
        assert!(!s.beyond_bound);
        assert_eq!(
            s.peers.iter().map(|p| p.replica).collect::<Vec<_>>(),
            (0..3).filter(|p| *p != r).collect::<Vec<_>>()
        );
        assert!(s.peers.iter().all(|p| p.offset_us.unsigned_abs() <= p.error_us + STEP_US), "{s:?}");
    }
    // The leader's clock jumps 2 s ahead: within a few probes it judges itself beyond the
    // bound and hands leadership over.
    g.offsets[0] = 2_000_000;
    assert!(g.run_until(5_000_000, |g| g.leader().is_some_and(|l| l != 0)), "replica 0 handed leadership over");
    assert!(g.beyond(0));
    assert!(g.cluster.nodes[0].clock().stats().handovers >= 1);
    assert!(g.cluster.nodes[0].log().is_abstaining());
    // The others see it too once their probes ran (a sample from before the jump may be
    // the estimate for a few seconds, as long as its round trip is the smallest: up to
    // `SAMPLE_MAX_AGE_US`).
    g.run(6_000_000);
    assert_ne!(g.leader(), Some(0));
    let s = g.cluster.nodes[1].status(g.clock(1)).clock;
    assert!(!s.beyond_bound, "the others are within each other's bound");
    let far = s.peers.iter().find(|p| p.replica == 0).unwrap();
    assert!((1_990_000..=2_010_000).contains(&far.offset_us), "{far:?}");
    // Its new leader is cut off along with the third replica: replica 0 is left alone and
    // never campaigns, however long it waits.
    let new_leader = g.leader().unwrap();
    let third = 3 - new_leader;
    g.roles[0].clear();
    g.cluster.cut[new_leader as usize] = true;
    g.cluster.cut[third as usize] = true;
    g.run(5_000_000);
    assert_eq!(g.roles[0], vec![Role::Follower], "an abstaining replica campaigned");
    // The third comes back: it is elected with replica 0's vote.
    g.cluster.cut[third as usize] = false;
    assert!(g.run_until(10_000_000, |g| g.leader() == Some(third)), "the third replica elected");
    assert!(g.roles[0].iter().all(|r| *r == Role::Follower), "{:?}", g.roles[0]);
    // The others' clocks jump too: all within the bound again, replica 0 takes part again.
    g.cluster.cut[new_leader as usize] = false;
    g.offsets[1] = 2_000_000;
    g.offsets[2] = 2_000_000;
    assert!(g.run_until(10_000_000, |g| !g.beyond(0)), "back within the bound");
    assert!(!g.cluster.nodes[0].log().is_abstaining());
}

#[test]
fn one_skewed_follower_does_not_move_a_correct_leader() {
    let mut g = Group::new();
    g.offsets[2] = 2_000_000;
    assert!(g.run_until(5_000_000, |g| g.leader() == Some(0)), "replica 0 leads a fresh group");
    g.roles[0].clear();
    g.run(10_000_000);
    assert_eq!(g.leader(), Some(0));
    assert_eq!(g.roles[0], vec![Role::Leader], "the correct leader stayed");
    assert_eq!(g.cluster.nodes[0].clock().stats().handovers, 0);
    // The leader sees one peer far, and is not beyond; the skewed one is.
    let s = g.cluster.nodes[0].status(g.clock(0)).clock;
    assert!(!s.beyond_bound);
    let far = s.peers.iter().find(|p| p.replica == 2).unwrap();
    assert!((1_990_000..=2_010_000).contains(&far.offset_us), "{far:?}");
    assert!(g.beyond(2));
    assert!(!g.beyond(1));
    // The skewed follower may never lead: with the leader cut off, replica 1 is elected.
    g.cluster.cut[0] = true;
    assert!(g.run_until(10_000_000, |g| g.leader() == Some(1)), "replica 1 elected");
    assert!(!g.roles[2].contains(&Role::Leader));
    assert!(!g.roles[2].contains(&Role::Candidate) && !g.roles[2].contains(&Role::PreCandidate));
}
