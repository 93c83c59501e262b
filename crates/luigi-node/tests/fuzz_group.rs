//! Structure-aware property test of a shard's replica group (issue 26): three
//! [`ReplicaNode`]s of a 1-shard cluster with the fast path, joined by an in-test network
//! that delivers every message in order, get any client message (the derived strategies of
//! `luigi_protocol::arbitrary`), transactions of any shape stamped anywhere from far behind the
//! clock to `u64::MAX` dispatched on the fast path to the followers only (what the leader
//! would refuse), any replication message from a node outside the group and the
//! group-level ones (leader lost, accepts questions, snapshot transfer messages) from
//! inside it, valid transactions, clock moves and failovers (the serving leader cut off
//! until another replica serves, which recovers the followers' accepts first: DESIGN.md,
//! the fast path, R1-R3).
//!
//! It checks: no panic and no node error; a refused replication message says why; every
//! transaction any replica executed (a leader or a follower applying the log) arrived in
//! some dispatch that passed [`Admission::check`] where it arrived, so nothing a leader
//! refuses is ever recovered from accepts and executed (rule 22); every refusal to a client
//! says why; and after it all the group still commits a valid transaction.
//!
//! Raft's own messages from the group's members are raft-rs's input and recovery's
//! `Accepts` from them its evidence: both come from authenticated servers of the cluster and
//! are left out (from a node outside the group they are drawn, and refused).
//!
//! Each case elects a leader and runs up to 24 steps of virtual milliseconds, so it runs
//! `PROPTEST_CASES / 32` cases (at least 8; 128 at CI's 4096). With the followers' check
//! removed (`Mutations::skip_fast_accept_check`) it fails, as the last test shows.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{MiniCluster, Seen};
use luigi_node::{Effect, NodeConfig, ReplicaNode, Tuning};
use luigi_protocol::arbitrary as arb;
use luigi_protocol::leader::admissible::Admission;
use luigi_protocol::msg::ReplicationMsg;
use luigi_raft::RecoveredState;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError};
use luigi_txn::procedure::Registry;
use luigi_txn::types::NodeId;
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{kv_args, kv_key, Kv, KvOp};
use proptest::prelude::*;

const REPLICAS: u32 = 3;
/// Virtual time of one round of turns and deliveries.
const ROUND_US: u64 = 2_000;
/// Jumps of the clock stop here, so that a run's rounds after them stay within `u64`.
const CLOCK_MAX: u64 = u64::MAX - 10_000_000_000;
/// A run starts at most here (below [`CLOCK_MAX`], so that the clock can move on).
const START_MAX: u64 = CLOCK_MAX - 10_000_000_000;
/// Client id of the valid traffic (out of the drawn clients' range).
const PROBE: u64 = 1 << 40;

/// One step of a run.
#[derive(Clone, Debug)]
enum Step {
    /// Any client message to replica `to`.
    Client { to: u32, conn: u64, msg: ClientMsg },
    /// Any transaction, stamped `ahead` µs from the clock (saturating), dispatched on the
    /// fast path to the followers only.
    FollowersOnly { txn: Txn, ahead: i64 },
    /// Any replication message to replica `to` from `from` (outside the group, or a
    /// group-level message from inside it).
    Replication { to: u32, from: NodeId, msg: ReplicationMsg },
    /// A valid transaction on the fast path to every replica.
    Valid,
    /// The clock moves forward this many rounds, delivering.
    Rounds(u32),
    /// The clock jumps forward (over the whole range).
    Jump(u64),
    /// The serving leader is cut off until another replica serves.
    Failover,
}

fn arb_step() -> impl Strategy<Value = Step> {
    let from = (arb::shard(), arb::replica()).prop_map(|(shard, replica)| NodeId { shard, replica });
    let ahead =
        prop_oneof![-10_000i64..10_000, -7_200_000_000i64..7_200_000_000, Just(3_600_000_000i64), Just(i64::MAX)];
    prop_oneof![
        4 => (0..REPLICAS, arb::client(), any::<ClientMsg>()).prop_map(|(to, conn, msg)| Step::Client { to, conn, msg }),
        4 => (any::<Txn>(), ahead).prop_map(|(txn, ahead)| Step::FollowersOnly { txn, ahead }),
        3 => (0..REPLICAS, from, any::<ReplicationMsg>()).prop_map(|(to, from, msg)| Step::Replication { to, from, msg }),
        3 => Just(Step::Valid),
        3 => (1u32..20).prop_map(Step::Rounds),
        1 => prop_oneof![0u64..10_000_000, any::<u64>()].prop_map(Step::Jump),
        1 => Just(Step::Failover),
    ]
}

/// The group, its network and what the run saw.
struct Group {
    cluster: MiniCluster,
    now: u64,
    /// Ids that arrived in a dispatch that passed the admission check where it arrived.
    admissible: HashSet<TxnId>,
    /// Ids some replica executed.
    executed: HashSet<TxnId>,
    /// Replies to the probe client: (id, committed).
    probe_replies: Vec<(TxnId, bool)>,
    probe_seq: u64,
    registry: Registry,
}

fn node_id(replica: u32) -> NodeId {
    NodeId { shard: 0, replica }
}

impl Group {
    /// A group elected at `start`; `unchecked`: its followers accept on the fast path without
    /// the admission check (the mutation the test must catch).
    fn new(start: u64, unchecked: bool) -> Self {
        let nodes = (0..REPLICAS)
            .map(|i| {
                let mut tuning = Tuning::for_delay(1_000, 100);
                tuning.raft_tick_us = 10_000;
                let mut config =
                    NodeConfig::new(node_id(i), vec![REPLICAS], 42, tuning, luigi_workloads::procedures::builtins());
                config.leader.fast_path = true;
                config.leader.mutations.skip_fast_accept_check = unchecked;
                ReplicaNode::new(config, RecoveredState::default()).expect("a fresh node starts")
            })
            .collect();
        let mut g = Group {
            cluster: MiniCluster::new(nodes),
            now: start,
            admissible: HashSet::new(),
            executed: HashSet::new(),
            probe_replies: Vec::new(),
            probe_seq: 0,
            registry: luigi_workloads::procedures::builtins(),
        };
        g.until_serving(None).expect("a fresh group elects a leader");
        g
    }

    fn serving(&self) -> Option<u32> {
        self.cluster.serving()
    }

    fn node(&self, i: u32) -> &ReplicaNode {
        &self.cluster.nodes[i as usize]
    }

    /// Cuts replica `i` off from the others (`None`: nobody).
    fn cut(&mut self, i: Option<u32>) {
        for (r, cut) in self.cluster.cut.iter_mut().enumerate() {
            *cut = Some(r as u32) == i;
        }
    }

    /// Runs rounds until a replica other than `not` serves; errors after 20 s of virtual time.
    fn until_serving(&mut self, not: Option<u32>) -> Result<u32, TestCaseError> {
        for _ in 0..10_000 {
            if let Some(i) = self.serving().filter(|i| Some(*i) != not) {
                return Ok(i);
            }
            self.round()?;
        }
        Err(TestCaseError::fail("no replica serves after 20 s"))
    }

    /// One round: the clock moves, every replica turns, and every message is delivered.
    fn round(&mut self) -> Result<(), TestCaseError> {
        self.now += ROUND_US;
        for i in 0..REPLICAS {
            let turned = self.cluster.turn(i, self.now);
            prop_assert!(turned.is_ok(), "replica {} failed: {:?}", i, turned.as_ref().err());
            self.note(turned.unwrap_or_default())?;
        }
        self.deliver()
    }

    fn deliver(&mut self) -> Result<(), TestCaseError> {
        let now = self.now;
        let delivered = self.cluster.deliver(|_| now, 100_000);
        prop_assert!(delivered.is_ok(), "{:?}", delivered.as_ref().err());
        prop_assert_eq!(&self.cluster.refusals, &Vec::<String>::new(), "a message within the group refused");
        self.note(delivered.unwrap_or_default())
    }

    /// Carries out replica `i`'s effects (the mini cluster's executor), noting what they left.
    fn effects(&mut self, i: u32, fx: Vec<Effect>) -> Result<(), TestCaseError> {
        let seen = self.cluster.execute(i, self.now, fx);
        prop_assert!(seen.is_ok(), "replica {} failed: {:?}", i, seen.as_ref().err());
        self.note(seen.unwrap_or_default())
    }

    /// Notes replies and executions among what the replicas' effects left.
    fn note(&mut self, seen: Vec<Seen>) -> Result<(), TestCaseError> {
        for s in seen {
            match s {
                Seen::ToClient { client, msg, .. } => self.reply(client, msg)?,
                Seen::Executed { id, .. } => {
                    self.executed.insert(id);
                }
                Seen::Transition { .. } | Seen::HeldCheck { .. } => {}
            }
        }
        Ok(())
    }

    /// Every refusal says why; the probe client's answers are noted.
    fn reply(&mut self, client: u64, msg: ServerMsg) -> Result<(), TestCaseError> {
        let ServerMsg::Reply(r) = msg else { return Ok(()) };
        match &r.outcome {
            Err(TxnError::Rejected(why) | TxnError::Busy(why) | TxnError::Expired(why) | TxnError::Aborted(why)) => {
                prop_assert!(!why.is_empty(), "a refusal without a reason: {:?}", r)
            }
            Ok(_) | Err(TxnError::Proc(_) | TxnError::Forgotten | TxnError::NotLeader { .. }) => {}
        }
        if client == PROBE {
            self.probe_replies.push((r.id, r.outcome.is_ok()));
        }
        Ok(())
    }

    /// Client message `msg` to replica `to`, noting a dispatch that passes its check there.
    fn client(&mut self, to: u32, conn: u64, msg: ClientMsg) -> Result<(), TestCaseError> {
        if let ClientMsg::Dispatch { txn, .. } = &msg {
            let config = &self.node(to).config().leader;
            if Admission::new(config, &self.registry).check(txn, self.now).is_ok() {
                self.admissible.insert(txn.id);
            }
        }
        let mut fx = Vec::new();
        self.cluster.nodes[to as usize].on_client(self.now, conn, msg, &mut fx);
        self.effects(to, fx)
    }

    fn valid(&mut self) -> (TxnId, ClientMsg) {
        self.probe_seq += 1;
        let id = TxnId { client: PROBE, seq: self.probe_seq };
        let key = format!("probe{}", self.probe_seq % 3);
        let ops = [KvOp::Put { key: key.clone().into_bytes(), value: b"v".to_vec() }];
        let keys = KeySet::new(vec![], vec![kv_key(key.as_bytes())]);
        let txn = Txn {
            id,
            procedure: Kv::NAME.into(),
            args: kv_args(&ops),
            pieces: vec![ShardPiece { shard: 0, keys }],
            ts: self.now + 3_000,
        };
        (id, ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: self.now, acked_below: 0, fast: true })
    }

    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        match step {
            Step::Client { to, conn, msg } => self.client(to, conn, msg)?,
            Step::FollowersOnly { mut txn, ahead } => {
                txn.ts = self.now.saturating_add_signed(ahead);
                let msg = ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: self.now, acked_below: 0, fast: true };
                let leader = self.serving();
                for i in (0..REPLICAS).filter(|i| Some(*i) != leader) {
                    self.client(i, 9, msg.clone())?;
                }
            }
            Step::Replication { to, from, msg } => self.replication(to, from, msg)?,
            Step::Valid => {
                let (_, msg) = self.valid();
                for i in 0..REPLICAS {
                    self.client(i, PROBE, msg.clone())?;
                }
            }
            Step::Rounds(n) => {
                for _ in 0..n {
                    self.round()?;
                }
            }
            Step::Jump(d) => {
                self.now = self.now.saturating_add(d).min(CLOCK_MAX).max(self.now);
                self.round()?;
            }
            Step::Failover => {
                if let Some(old) = self.serving() {
                    self.cut(Some(old));
                    self.until_serving(Some(old))?;
                    self.cut(None);
                }
            }
        }
        self.deliver()
    }

    /// A drawn replication message. From another shard's node, a message of the group is
    /// refused with a reason; from the group's own nodes (any replica index: a connection
    /// that authenticated as one) only the group-level messages are drawn (see the module
    /// doc); a leader announcement may be taken from anyone it names.
    fn replication(&mut self, to: u32, from: NodeId, msg: ReplicationMsg) -> Result<(), TestCaseError> {
        let inside = from.shard == 0;
        if inside && matches!(msg, ReplicationMsg::Raft { .. } | ReplicationMsg::Accepts { .. }) {
            return Ok(());
        }
        let announcement = matches!(msg, ReplicationMsg::LeaderIs { .. });
        let mut fx = Vec::new();
        let result = self.cluster.nodes[to as usize].on_replication(from, msg, &mut fx);
        if let Err(why) = &result {
            prop_assert!(!why.is_empty(), "a refusal without a reason");
        }
        if !inside && !announcement {
            prop_assert!(result.is_err(), "replica {} took a message of its group from {}", to, from);
        }
        self.effects(to, fx)
    }

    /// After the steps: the group settles, and a valid transaction commits.
    fn commits_on(&mut self) -> Result<(), TestCaseError> {
        self.cut(None);
        let leader = self.until_serving(None)?;
        let (id, msg) = self.valid();
        for i in 0..REPLICAS {
            self.client(i, PROBE, msg.clone())?;
        }
        for _ in 0..2_000 {
            if self.probe_replies.iter().any(|&(r, ok)| r == id && ok) {
                return Ok(());
            }
            self.round()?;
        }
        Err(TestCaseError::fail(format!("replica {leader} serves and the group stopped committing")))
    }

    /// Whatever any replica executed arrived in a dispatch that passed its check.
    fn executed_only_admissible(&self) -> Result<(), TestCaseError> {
        for id in &self.executed {
            prop_assert!(self.admissible.contains(id), "{:?} executed, never admissible", id);
        }
        Ok(())
    }
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: (ProptestConfig::default().cases / 32).max(8), ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_group_under_structured_traffic_executes_only_admissible_transactions_and_commits_on(
        start in proptest::sample::select(arb::CLOCKS.to_vec()),
        steps in proptest::collection::vec(arb_step(), 1..24),
    ) {
        let mut g = Group::new(start.min(START_MAX), false);
        for step in steps {
            g.step(step)?;
        }
        g.commits_on()?;
        g.executed_only_admissible()?;
    }
}

/// The properties are not vacuous: followers that accept without the admission check accept a
/// well-formed transaction stamped at `u64::MAX` sent to them alone; the leader is cut off,
/// the new one recovers it from their accepts and prepares it, and its watermark can never
/// pass it: the group stops committing. With the check, the same steps pass.
#[test]
fn followers_that_accept_without_the_admission_check_wedge_the_group() {
    let steps = || {
        let ops = [KvOp::Put { key: b"k".to_vec(), value: b"bad".to_vec() }];
        let keys = KeySet::new(vec![], vec![kv_key(b"k")]);
        let txn = Txn {
            id: TxnId { client: 9, seq: 1 },
            procedure: Kv::NAME.into(),
            args: kv_args(&ops),
            pieces: vec![ShardPiece { shard: 0, keys }],
            ts: 0,
        };
        vec![Step::FollowersOnly { txn, ahead: i64::MAX }, Step::Rounds(5), Step::Failover]
    };
    let run = |unchecked: bool| -> Result<(), TestCaseError> {
        let mut g = Group::new(1_000_000, unchecked);
        for step in steps() {
            g.step(step)?;
        }
        g.commits_on()?;
        g.executed_only_admissible()
    };
    if let Err(e) = run(false) {
        panic!("with the check: {e}");
    }
    let caught = run(true).expect_err("the unchecked followers went unnoticed");
    assert!(caught.to_string().contains("stopped committing"), "{caught}");
}
