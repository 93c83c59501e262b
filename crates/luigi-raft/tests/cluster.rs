//! Cluster behaviour on the in-memory harness: election, replication, failover, determinism,
//! minority partitions.

mod common;

use std::collections::BTreeSet;

use common::{Cluster, Event, TestRecord, TICK};
use luigi_raft::Role;
use luigi_txn::log::{LogEntry, LogError, ReplicatedLog};

/// Proposes `count` records on the current leader, a few per time unit, and returns them.
fn propose_many(c: &mut Cluster, count: usize) -> Vec<(u64, TestRecord)> {
    let mut out = Vec::new();
    while out.len() < count {
        let leader = c.elect(100 * TICK);
        for _ in 0..3 {
            if out.len() == count {
                break;
            }
            match c.propose(leader) {
                Ok(p) => out.push(p),
                Err(LogError::NotLeader) => break,
                Err(e) => panic!("{e}"),
            }
        }
        c.step();
    }
    out
}

#[test]
fn a_leader_elected_and_proposals_commit_in_order_everywhere() {
    for n in [3, 5] {
        let mut c = Cluster::new(n, 11);
        let leader = c.elect(100 * TICK);
        assert!(c.log(leader).is_leader());
        let proposed = propose_many(&mut c, 60);
        c.wait_all_applied(60, 100 * TICK);
        // Every replica took the same records, in proposal order, at the indexes `propose` returned.
        assert_eq!(c.reference, proposed, "n = {n}");
        for id in 1..=n {
            assert_eq!(c.node(id).applied, proposed, "replica {id} of {n}");
            assert_eq!(c.log(id).commit_index(), c.log(leader).commit_index());
        }
        // The election no-op took an index: the first record is not at index 1.
        assert!(proposed[0].0 >= 2);
        assert!(c.log(leader).has_committed_in_term());
        c.check_log_matching();
    }
}

#[test]
fn b_followers_refuse_proposals_and_name_the_leader() {
    let mut c = Cluster::new(3, 5);
    let leader = c.elect(100 * TICK);
    // A heartbeat round tells every follower who leads.
    c.run(3 * TICK);
    for id in 1..=3 {
        if id == leader {
            continue;
        }
        let record = c.record();
        assert_eq!(c.node_mut(id).log.propose(record), Err(LogError::NotLeader));
        assert_eq!(c.log(id).leader_id(), Some(leader), "replica {id}");
        assert_eq!(c.log(id).role(), Role::Follower);
    }
    assert_eq!(c.log(leader).leader_id(), Some(leader));
    // Nothing the followers were asked to propose shows up.
    c.run(5 * TICK);
    assert!(c.reference.is_empty());
}

#[test]
fn c_leader_failover_and_rejoin() {
    for n in [3, 5] {
        let mut c = Cluster::new(n, 21 + n);
        let before = propose_many(&mut c, 20);
        c.wait_all_applied(20, 100 * TICK);
        let old = c.live_leader().expect("leader");
        let old_term = c.log(old).term();

        // Kill the leader: nothing reaches it or leaves it. It still accepts a proposal it
        // can never commit.
        c.isolated.insert(old);
        let doomed = c.propose(old).expect("still believes it leads").1;
        let t0 = c.now;
        let took = c
            .run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| l != old))
            .expect("a new leader within 40 ticks");
        let new = c.live_leader().expect("leader");
        let ticks = took.div_ceil(TICK);
        assert!(ticks <= 2 * 10 + 2, "n = {n}: failover took {ticks} ticks");
        assert!(c.log(new).term() > old_term);
        // Check-quorum: the isolated leader steps down on its own within two election
        // timeouts of the isolation.
        c.run_until(25 * TICK, |c| !c.log(old).is_leader()).expect("old leader steps down");
        assert!(c.now - t0 <= (2 * 10 + 1) * TICK, "n = {n}: step-down took {} units", c.now - t0);

        let after = propose_many(&mut c, 20);
        c.run_until(100 * TICK, |c| c.reference.len() >= 40).expect("new proposals commit");
        // Nothing committed was lost or reordered: the old records are a prefix.
        assert_eq!(&c.reference[..20], &before[..]);
        assert_eq!(&c.reference[20..40], &after[..]);

        // The old leader rejoins and catches up; its doomed proposal is overwritten.
        c.isolated.clear();
        c.wait_all_applied(40, 100 * TICK);
        assert_eq!(c.node(old).applied.len(), 40);
        assert!(c.reference.iter().all(|(_, r)| *r != doomed));
        assert_eq!(c.log(old).role(), Role::Follower);
        assert_eq!(c.log(old).leader_id(), Some(new));
        c.check_log_matching();
        c.check_committed_stable();
    }
}

/// A 3-replica group with spaced election timeouts (3 one-way delays apart, as on
/// wide-area links) shaped by `seed`, with a few entries committed: (the group, its leader,
/// the leader's term).
fn spaced_group(seed: u64) -> (Cluster, u64, u64) {
    let spaced = |c: &mut luigi_raft::RaftConfig| {
        c.election_ticks = 20;
        c.election_spacing_ticks = 6;
    };
    let mut c = Cluster::build(3, seed, None, spaced);
    propose_many(&mut c, 5);
    c.run(3 * TICK);
    let leader = c.live_leader().expect("leader");
    let term = c.log(leader).term();
    (c, leader, term)
}

/// With spaced election timeouts (3 one-way delays apart, as on wide-area links) and a
/// leader whose connections broke (a crash: both followers see it), the followers elect a new
/// leader without waiting out their timeouts, in one round; a follower that alone lost its
/// link gets no pre-vote from one that still hears the leader, so a live leader stays.
#[test]
fn a_leader_whose_links_broke_is_replaced_without_the_election_timeout() {
    for seed in 0..6 {
        let (mut c, old, old_term) = spaced_group(40 + seed);
        c.isolated.insert(old);
        for id in (1..=3).filter(|id| *id != old) {
            c.node_mut(id).log.leader_link_lost(old);
        }
        let took = c.run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| l != old)).expect("a new leader soon");
        let ticks = took.div_ceil(TICK);
        assert!(ticks <= 8, "seed {seed}: {ticks} ticks, not the 20-tick timeout");
        assert_eq!(c.log(c.live_leader().unwrap()).term(), old_term + 1, "seed {seed}: one round, no split vote");
        c.isolated.clear();
        c.check_log_matching();
    }
    // One follower alone lost its link: the leader keeps its term.
    let (mut c, leader, term) = spaced_group(77);
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    c.node_mut(follower).log.leader_link_lost(leader);
    c.run(30 * TICK);
    assert_eq!(c.live_leader(), Some(leader));
    assert_eq!(c.log(leader).term(), term, "no election deposed a live leader");
}

/// The survivors of `old` report its loss to each other (`ReplicationMsg::LeaderLost`);
/// returns their (role, term) right after.
fn report_lost(c: &mut Cluster, old: u64, term: u64) -> Vec<(u64, Role, u64)> {
    let survivors: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    let mut lasts = Vec::new();
    for &id in &survivors {
        let (t, last) = c.node_mut(id).log.leader_link_lost(old).expect("its leader's link");
        assert_eq!(t, term);
        lasts.push((id, last));
    }
    for &(from, last) in &lasts {
        for &to in survivors.iter().filter(|to| **to != from) {
            c.node_mut(to).log.peer_lost_leader(from, term, last);
        }
    }
    survivors.iter().map(|id| (*id, c.log(*id).role(), c.log(*id).term())).collect()
}

#[test]
fn followers_that_lost_their_leader_and_told_each_other_elect_without_the_pre_vote_round() {
    for seed in 0..6 {
        let (mut c, old, term) = spaced_group(40 + seed);
        c.isolated.insert(old);
        let roles = report_lost(&mut c, old, term);
        let running = roles.iter().filter(|(_, role, t)| (*role, *t) == (Role::Candidate, term + 1)).count();
        assert_eq!(running, 1, "seed {seed}: exactly one campaigns at once, no pre-vote: {roles:?}");
        assert!(roles.iter().any(|(_, role, t)| (*role, *t) == (Role::Follower, term)), "seed {seed}: {roles:?}");
        c.run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| l != old)).expect("a new leader");
        assert_eq!(c.log(c.live_leader().unwrap()).term(), term + 1, "seed {seed}: one round, no split vote");
        c.isolated.clear();
        c.check_log_matching();
    }
}

#[test]
fn of_the_followers_that_lost_their_leader_the_one_with_the_longer_log_campaigns_whatever_the_order() {
    // A follower that missed the last entries would get no vote from one that has them (a
    // `failover_geo` run paused 3.6 s on that before the reports carried the logs).
    for seed in 0..6 {
        let (mut c, old, term) = spaced_group(40 + seed);
        let behind = (1..=3).find(|id| *id != old).unwrap();
        c.isolated.insert(behind);
        propose_many(&mut c, 3);
        c.run(3 * TICK);
        c.isolated = BTreeSet::from([old]);
        let ahead = (1..=3).find(|id| *id != old && *id != behind).unwrap();
        assert!(c.log(ahead).last_index() > c.log(behind).last_index(), "seed {seed}");
        let roles = report_lost(&mut c, old, term);
        assert!(roles.contains(&(ahead, Role::Candidate, term + 1)), "seed {seed}: {roles:?}");
        c.run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| l != old)).expect("a new leader");
        assert_eq!((c.live_leader(), c.log(ahead).term()), (Some(ahead), term + 1), "seed {seed}: in one round");
        c.isolated.clear();
        c.check_log_matching();
    }
}

#[test]
fn reports_of_a_lost_leader_that_do_not_add_up_depose_nobody() {
    // A report while this follower still hears its leader, a follower's own lost link with
    // no report, and reports of an older term change nothing at once.
    let (mut c, leader, term) = spaced_group(77);
    let [a, b] = [1, 2, 3].into_iter().filter(|id| *id != leader).collect::<Vec<_>>()[..] else { unreachable!() };
    let last = (term, c.log(b).last_index());
    c.node_mut(a).log.peer_lost_leader(b, term, last);
    c.node_mut(b).log.peer_lost_leader(a, term - 1, last);
    assert_eq!((c.log(a).role(), c.log(b).role()), (Role::Follower, Role::Follower));
    c.node_mut(b).log.leader_link_lost(leader);
    assert_eq!((c.log(b).role(), c.log(b).term()), (Role::Follower, term), "its own loss alone: it pre-votes later");
    c.run(30 * TICK);
    assert_eq!(c.live_leader(), Some(leader));
    assert_eq!(c.log(leader).term(), term, "no election deposed a live leader");
}

/// A fixed scenario with drops, reordering, a leader isolation and a heal; returns what
/// happened.
fn scenario(seed: u64) -> (Vec<Event>, Vec<(u64, TestRecord)>) {
    let mut c = Cluster::new(5, seed);
    c.drop_per_mille = 50;
    c.delay = (1, 8);
    for round in 0..400u64 {
        if round % 3 == 0 {
            if let Some(l) = c.leader() {
                let _ = c.propose(l);
            }
        }
        if round == 150 {
            if let Some(l) = c.live_leader() {
                c.isolated.insert(l);
            }
        }
        if round == 300 {
            c.isolated.clear();
        }
        c.run(2);
    }
    (c.trace, c.reference)
}

#[test]
fn d_same_seed_same_run_different_seed_different_run() {
    let (trace_a, ref_a) = scenario(7);
    let (trace_b, ref_b) = scenario(7);
    assert!(!ref_a.is_empty());
    assert!(trace_a.iter().any(|e| matches!(e, Event::Role { role: Role::Leader, .. })));
    assert_eq!(trace_a, trace_b, "same seed, same leaders, terms and commits");
    assert_eq!(ref_a, ref_b);
    let leaders = |t: &[Event]| -> Vec<(u64, u64, u64)> {
        t.iter()
            .filter_map(|e| match e {
                Event::Role { now, id, term, role: Role::Leader } => Some((*now, *id, *term)),
                _ => None,
            })
            .collect()
    };
    let base = leaders(&trace_a);
    let differing = (8..12).filter(|&s| leaders(&scenario(s).0) != base).count();
    assert!(differing >= 3, "only {differing} of 4 other seeds changed the leader history");
}

#[test]
fn d_election_timeouts_come_from_the_seed_not_the_thread_rng() {
    // Two replicas with the same id, seed and inputs must time out at exactly the same tick,
    // every time (raft-rs's own draw uses the thread RNG and would differ).
    for seed in 0..20 {
        let first_timeout = || {
            let mut log = luigi_raft::RaftLog::new(luigi_raft::RaftConfig::new(1, vec![1, 2, 3], seed), None).unwrap();
            (1..100).find(|_| {
                log.tick();
                log.role() != Role::Follower
            })
        };
        let t = first_timeout().expect("times out");
        assert!((10..20).contains(&t), "seed {seed}: timeout {t} outside [10, 20)");
        for _ in 0..5 {
            assert_eq!(first_timeout(), Some(t));
        }
    }
}

#[test]
fn f_partitioned_minority_cannot_commit_and_its_leader_steps_down() {
    for n in [3u64, 5] {
        let mut c = Cluster::new(n, 40 + n);
        let before = propose_many(&mut c, 10);
        c.wait_all_applied(10, 100 * TICK);
        let old = c.live_leader().expect("leader");
        // Minority: the leader plus (n - 1) / 2 - 1 followers.
        let mut minority: BTreeSet<u64> = BTreeSet::from([old]);
        for id in 1..=n {
            if minority.len() < ((n - 1) / 2) as usize && id != old {
                minority.insert(id);
            }
        }
        c.partition = Some(minority.clone());
        let mut doomed = Vec::new();
        for _ in 0..5 {
            doomed.push(c.propose(old).expect("still leader").1);
            c.step();
        }
        let commit_before = c.log(old).commit_index();
        // Check-quorum: the leader checks at the end of every election timeout (10 ticks)
        // whether a quorum was active during it, so it steps down 10 to 20 ticks after the
        // partition started.
        let took = c.run_until(25 * TICK, |c| !c.log(old).is_leader()).expect("minority leader steps down") / TICK;
        assert!(took <= 2 * 10 + 1, "n = {n}: stepped down after {took} ticks");
        assert_eq!(c.log(old).commit_index(), commit_before, "minority committed nothing");
        for &id in &minority {
            assert_eq!(c.node(id).applied.len(), 10);
            assert_eq!(c.node_mut(id).log.propose(TestRecord::Floor { ts: 0 }), Err(LogError::NotLeader));
        }
        // The majority elects a leader and commits.
        c.run_until(40 * TICK, |c| c.live_leader().is_some_and(|l| !minority.contains(&l))).expect("majority elects");
        let after = propose_many(&mut c, 10);
        c.run_until(100 * TICK, |c| c.reference.len() >= 20).expect("majority commits");
        // While partitioned, minority replicas never win an election (pre-vote keeps their
        // terms from disrupting the majority either).
        c.run(30 * TICK);
        for &id in &minority {
            assert!(!c.log(id).is_leader());
        }
        // Heal: the minority's uncommitted entries are overwritten, everyone converges.
        c.partition = None;
        c.wait_all_applied(20, 100 * TICK);
        assert_eq!(&c.reference[..10], &before[..]);
        assert_eq!(&c.reference[10..20], &after[..]);
        assert!(c.reference.iter().all(|(_, r)| !doomed.contains(r)));
        c.check_log_matching();
        c.check_committed_stable();
    }
}

#[test]
fn transfer_leader_and_campaign() {
    let mut c = Cluster::new(3, 3);
    let leader = c.elect(100 * TICK);
    propose_many(&mut c, 5);
    c.wait_all_applied(5, 100 * TICK);
    let target = if leader == 1 { 2 } else { 1 };
    c.node_mut(leader).log.transfer_leader(target);
    c.process(leader);
    c.run_until(20 * TICK, |c| c.log(target).is_leader()).expect("leadership transferred");
    // With a healthy leader, pre-vote + check-quorum make a campaign harmless: the others
    // heard from their leader within the election timeout and refuse the pre-vote, so no term
    // is bumped and nobody is deposed.
    let term = c.log(target).term();
    let third = 6 - leader - target;
    c.node_mut(third).log.campaign().unwrap();
    c.process(third);
    c.run(5 * TICK);
    assert!(c.log(target).is_leader());
    assert_eq!(c.log(target).term(), term);
    assert_eq!(c.log(third).term(), term);
    // Without a leader, a campaign is an election started now instead of at the timeout.
    c.isolated.insert(target);
    c.run(10 * TICK + 1); // followers' leases (one election timeout) run out
    assert_eq!(c.live_leader(), None, "no follower timed out yet (timeouts are >= 10 ticks after the last heartbeat)");
    c.node_mut(third).log.campaign().unwrap();
    c.process(third);
    // Two round trips (pre-vote, vote) of at most 2 x 4 units each.
    c.run_until(2 * TICK, |c| c.log(third).is_leader()).expect("forced election won within two ticks");
    c.isolated.clear();
    c.elect(50 * TICK);
    propose_many(&mut c, 5);
    c.wait_all_applied(10, 100 * TICK);
}

/// DESIGN.md rule 22: an abstaining replica (its clock beyond the bound from its group's
/// majority) never campaigns, even when its leader is gone and its timeout passed many times
/// over, drops a leadership transfer to it, and still votes: the others elect a leader with
/// it. Cleared, it takes part again.
#[test]
fn an_abstaining_replica_never_campaigns_and_still_votes() {
    let mut c = Cluster::new(3, 3);
    let leader = c.elect(100 * TICK);
    propose_many(&mut c, 5);
    c.wait_all_applied(5, 100 * TICK);
    let abstainer = if leader == 1 { 2 } else { 1 };
    let third = 6 - leader - abstainer;
    c.node_mut(abstainer).log.set_abstaining(true);
    assert!(c.log(abstainer).is_abstaining());
    // A transfer to it is dropped; the leader's transfer lapses and it keeps leading.
    c.node_mut(leader).log.transfer_leader(abstainer);
    assert_eq!(c.log(leader).transferring_leader(), Some(abstainer));
    c.process(leader);
    c.run(30 * TICK);
    assert!(c.log(leader).is_leader(), "the transfer to an abstaining replica did not happen");
    assert_eq!(c.log(leader).transferring_leader(), None, "the transfer lapsed");
    // Its own campaign does nothing.
    c.node_mut(abstainer).log.campaign().unwrap();
    c.process(abstainer);
    c.run(2 * TICK);
    assert!(c.log(leader).is_leader());
    assert_eq!(c.log(abstainer).role(), Role::Follower);
    // The leader is cut off and the third replica too: the abstainer, alone, waits out ten
    // election timeouts without ever becoming a candidate.
    c.isolated.insert(leader);
    c.isolated.insert(third);
    for _ in 0..200 {
        c.run(TICK);
        assert_eq!(c.log(abstainer).role(), Role::Follower, "an abstaining replica campaigned");
    }
    // With the third back, the third is elected, the abstainer voting for it.
    c.isolated.remove(&third);
    c.run_until(100 * TICK, |c| c.log(third).is_leader()).expect("the third replica elected with the abstainer's vote");
    assert!(!c.log(abstainer).is_leader());
    c.isolated.clear();
    propose_many(&mut c, 5);
    c.wait_all_applied(10, 100 * TICK);
    // Cleared: a transfer to it is taken.
    c.node_mut(abstainer).log.set_abstaining(false);
    let now_leader = c.live_leader().expect("leader");
    c.node_mut(now_leader).log.transfer_leader(abstainer);
    c.process(now_leader);
    c.run_until(20 * TICK, |c| c.log(abstainer).is_leader()).expect("leads again once it may");
}

#[test]
fn single_replica_group_commits_alone_and_bounds_its_backlog() {
    let mut config = luigi_raft::RaftConfig::new(1, vec![1], 9);
    config.max_pending = 4;
    let mut log = luigi_raft::RaftLog::new(config, None).unwrap();
    let drain = |log: &mut luigi_raft::RaftLog| {
        while let Some(rd) = log.ready().unwrap() {
            assert!(rd.messages.is_empty() && rd.persisted_messages.is_empty());
            log.advance(rd.number);
        }
    };
    assert_eq!(log.propose(TestRecord::Floor { ts: 1 }), Err(LogError::NotLeader));
    log.campaign().unwrap();
    drain(&mut log);
    assert!(log.is_leader());
    assert!(log.has_committed_in_term(), "the election no-op committed");
    // Nothing commits before it is persisted (advance), so the backlog fills up.
    let mut indexes = Vec::new();
    for ts in 1..=4 {
        indexes.push(log.propose(TestRecord::Floor { ts }).unwrap());
    }
    assert_eq!(log.propose(TestRecord::Floor { ts: 5 }), Err(LogError::Backlogged(4)));
    drain(&mut log);
    assert_eq!(log.commit_index(), *indexes.last().unwrap());
    // Committed but not taken still counts.
    assert_eq!(log.propose(TestRecord::Floor { ts: 5 }), Err(LogError::Backlogged(4)));
    let mut out: Vec<LogEntry<TestRecord>> = Vec::new();
    log.take_committed(&mut out);
    assert_eq!(out.iter().map(|e| e.index).collect::<Vec<_>>(), indexes);
    assert!(log.propose(TestRecord::Floor { ts: 5 }).is_ok());
}

#[test]
fn foreign_and_forbidden_messages_are_refused() {
    use luigi_raft::eraftpb::{Message, MessageType};
    use luigi_raft::{encode_message, RaftError};
    let mut log = luigi_raft::RaftLog::new(luigi_raft::RaftConfig::new(1, vec![1, 2, 3], 0), None).unwrap();
    let msg = |t: MessageType, from: u64, to: u64| {
        let mut m = Message { from, to, term: 9, ..Default::default() };
        m.set_msg_type(t);
        encode_message(&m)
    };
    assert!(matches!(log.step_bytes(&msg(MessageType::MsgAppend, 7, 1)), Err(RaftError::UnknownPeer(7))));
    assert!(matches!(log.step_bytes(&msg(MessageType::MsgAppend, 2, 3)), Err(RaftError::Misrouted { to: 3, id: 1 })));
    assert!(matches!(log.step_bytes(&msg(MessageType::MsgPropose, 2, 1)), Err(RaftError::Forbidden(_))));
    assert!(matches!(log.step_bytes(&msg(MessageType::MsgHup, 2, 1)), Err(RaftError::Forbidden(_))));
    assert_eq!(log.term(), 0, "nothing was stepped");
    // A real one goes through and moves the term.
    log.step_bytes(&msg(MessageType::MsgHeartbeat, 2, 1)).unwrap();
    assert_eq!((log.term(), log.leader_id()), (9, Some(2)));
}

#[test]
fn raft_log_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<luigi_raft::RaftLog>();
    assert_send::<luigi_raft::disk::DiskStorage>();
}
