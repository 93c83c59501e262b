//! Property tests of the shard leader against arbitrary client input (what any client
//! connection may send after its hello): no panic, a malformed or refused transaction
//! changes nothing, the leader's invariants hold after every step, and the shard still
//! commits afterwards. The first two draw transactions with strategies of their own; the
//! structure-aware ones below draw every message with the derived strategies of the wire
//! vocabulary (`luigi_protocol::arbitrary`), add agreement batches, clock moves over the whole
//! `u64` range and failovers, and check the follower that applies the leader's log too.
//! `PROPTEST_CASES=n` runs more cases (default 256).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use luigi_protocol::arbitrary as arb;
use luigi_protocol::leader::admissible::Admission;
use luigi_protocol::leader::follower::Follower;
use luigi_protocol::leader::{LeaderConfig, LeaderOutput, LeaderWithLog};
use luigi_protocol::log::{LocalLog, LogEntry, LogError, LogIndex, LogRecord, ReplicatedLog};
use luigi_protocol::msg::{PeerBatch, PeerItem};
use luigi_store::Store;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError};
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};
use proptest::prelude::*;

fn arb_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u64..8).prop_map(micro_key),
        proptest::collection::vec(any::<u8>(), 0..12),
        Just(vec![0u8; 5000]), // over the key size limit
    ]
}

/// Key sets as they may arrive: unsorted, duplicated, overlapping, empty.
fn arb_keys() -> impl Strategy<Value = KeySet> {
    (proptest::collection::vec(arb_key(), 0..4), proptest::collection::vec(arb_key(), 0..4))
        .prop_map(|(reads, writes)| KeySet { reads, writes })
}

/// Timestamps and times over the whole `u64` range, and around `now` (where a correct
/// client's land, and where the clock horizon of rule 22 cuts).
fn arb_time(now: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0u64..10_000_000).prop_map(move |d| now.saturating_add(d)),
        (0u64..10_000_000).prop_map(move |d| now.saturating_sub(d)),
        Just(u64::MAX),
        Just(0),
    ]
}

fn arb_txn(client: u64, now: u64) -> impl Strategy<Value = Txn> {
    let procedure = prop_oneof![Just(Micro::NAME.to_string()), Just("no.such".to_string()), "[a-z.]{0,200}"];
    let ops = proptest::collection::vec((0u64..8, proptest::option::of(any::<u64>())), 0..4).prop_map(|ops| {
        let ops: Vec<MicroOp> = ops.into_iter().map(|(key, write)| MicroOp { key, write }).collect();
        postcard::to_stdvec(&ops).unwrap()
    });
    let args = prop_oneof![ops, proptest::collection::vec(any::<u8>(), 0..64)];
    let pieces = proptest::collection::vec((0u32..4, arb_keys()), 0..4)
        .prop_map(|p| p.into_iter().map(|(shard, keys)| ShardPiece { shard, keys }).collect());
    (1u64..50, procedure, args, pieces, arb_time(now)).prop_map(move |(seq, procedure, args, pieces, ts)| Txn {
        id: TxnId { client, seq },
        procedure,
        args,
        pieces,
        ts,
    })
}

fn arb_client_msg(client: u64, now: u64) -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        (arb_txn(client, now), arb_time(now), 0u64..60).prop_map(|(txn, sent_us, acked_below)| {
            ClientMsg::Dispatch { txn: Arc::new(txn), sent_us, acked_below, fast: true }
        }),
        arb_time(now).prop_map(|sent_us| ClientMsg::Ping { sent_us }),
        Just(ClientMsg::Hello { client, proof: None, protocol: luigi_txn::types::Protocol::Luigi }),
        Just(ClientMsg::Status),
    ]
}

fn leader(shards: u32) -> LeaderWithLog<LocalLog> {
    LeaderWithLog::new(
        LeaderConfig::new(0, shards),
        LocalLog::default(),
        Store::new(),
        luigi_workloads::procedures::builtins(),
    )
}

/// A valid single-shard write of key 99 at `ts`, dispatched by client 1.
fn probe(seq: u64, ts: u64) -> ClientMsg {
    let ops = vec![MicroOp { key: 99, write: Some(seq) }];
    let txn = Txn {
        id: TxnId { client: 1, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(99)]) }],
        ts,
    };
    ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: ts, acked_below: seq, fast: true }
}

fn committed(out: &[LeaderOutput], seq: u64) -> bool {
    out.iter().any(|o| {
        matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.id == TxnId { client: 1, seq } && r.outcome.is_ok())
    })
}

proptest! {
    /// Any sequence of client messages to a shard of a 1-shard cluster: no panic, nothing
    /// pending that could hold the watermark for good, and a valid transaction afterwards
    /// commits.
    #[test]
    fn arbitrary_client_messages_never_wedge_a_shard(
        (start, msgs) in (0u64..u64::MAX / 2)
            .prop_flat_map(|start| (Just(start), proptest::collection::vec(arb_client_msg(7, start), 1..24)))
    ) {
        let mut l = leader(1);
        let mut out = Vec::new();
        let mut now = start;
        for m in msgs {
            now += 100;
            l.on_client(now, 7, m, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
            l.tick(now, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
        }
        // Whatever was admitted is single-shard (anything else is malformed here), lies
        // within the clock horizon (rule 22), and runs.
        now += LeaderConfig::new(0, 1).max_ahead_us + 1_000_000;
        l.tick(now, &mut out);
        prop_assert_eq!(l.pending_len(), 0);
        out.clear();
        l.on_client(now, 1, probe(1, now + 10), &mut out);
        l.tick(now + 1_000, &mut out);
        prop_assert!(committed(&out, 1), "the shard stopped committing");
    }

    /// On a 2-shard cluster (cross-shard transactions wait for a peer that never answers
    /// here): still no panic, and malformed transactions are never admitted.
    #[test]
    fn malformed_transactions_are_never_admitted(txns in proptest::collection::vec(arb_txn(7, 1_000), 1..16)) {
        let mut l = leader(2);
        let mut out = Vec::new();
        for (i, t) in txns.into_iter().enumerate() {
            let malformed = t.check_shape(2).is_err() || t.piece(0).is_none() || t.procedure != Micro::NAME;
            let before = l.stats().admitted;
            l.on_client(1_000 + i as u64, 7, ClientMsg::Dispatch { txn: Arc::new(t), sent_us: 0, acked_below: 0, fast: true }, &mut out);
            prop_assert_eq!(l.check_invariants(), Ok(()));
            if malformed {
                prop_assert_eq!(l.stats().admitted, before);
            }
        }
    }
}

// Structure-aware runs: the derived strategies of the wire vocabulary (feature `arbitrary`)
// drive a leader whose committed log a follower applies in lock step, with valid traffic,
// clock moves over the whole range, and failovers to that follower interleaved.

/// The clock moves forward no further than this, so that the run's last steps (a horizon
/// and a probe later) stay within `u64`.
const CLOCK_MAX: u64 = u64::MAX - 10_000_000_000;
/// A run starts at most here (below [`CLOCK_MAX`], so that the clock can move on).
const START_MAX: u64 = CLOCK_MAX - 10_000_000_000;

/// A log that commits at once and keeps a copy of every committed entry (the replicas'
/// log), numbered on from `base` (a new leader's log continues the old one's indexes).
struct TapLog {
    inner: LocalLog,
    base: u64,
    tape: Vec<LogEntry>,
}

impl TapLog {
    fn new(base: u64) -> Self {
        TapLog { inner: LocalLog::default(), base, tape: Vec::new() }
    }
}

impl ReplicatedLog<LogRecord> for TapLog {
    fn propose(&mut self, record: LogRecord) -> Result<LogIndex, LogError> {
        self.inner.propose(record)
    }
    fn take_committed(&mut self, out: &mut Vec<LogEntry>) {
        let start = out.len();
        self.inner.take_committed(out);
        let base = self.base;
        self.tape.extend(out[start..].iter().map(|e| LogEntry { index: base + e.index, record: e.record.clone() }));
    }
}

/// One step of a structure-aware run.
#[derive(Clone, Debug)]
enum Step {
    /// Any client message, on the connection of client `conn`.
    Client { conn: u64, msg: ClientMsg },
    /// Any transaction, stamped `ahead` µs from the leader's clock (saturating), on the fast
    /// path or not.
    Near { txn: Txn, ahead: i64, fast: bool },
    /// Any agreement batch, as if from another shard's leader.
    Peer(PeerBatch),
    /// A valid single-shard write by the probe client.
    Valid,
    /// The clock moves forward.
    Advance(u64),
    /// The leader is gone: the follower that applied its committed log takes over.
    Failover,
}

/// Steps of a run; `agreement`: peer batches may carry agreement items about transactions
/// (proposals, confirmations, refusals, recoveries), else only progress reports, fast-path
/// accepts, acknowledgements and baseline items.
fn arb_step(peers: u32, agreement: bool) -> impl Strategy<Value = Step> {
    let batch = any::<PeerBatch>().prop_map(move |mut b| {
        if !agreement {
            b.items.retain(|i| {
                matches!(i, PeerItem::Progress(_) | PeerItem::FastAccept { .. } | PeerItem::Acknowledged { .. })
            });
        }
        b
    });
    let advance = prop_oneof![0u64..5_000, 0u64..10_000_000, 0u64..7_200_000_000, any::<u64>()];
    let ahead = prop_oneof![-10_000i64..10_000, -7_200_000_000i64..7_200_000_000, Just(i64::MAX)];
    prop_oneof![
        4 => (arb::client(), any::<ClientMsg>()).prop_map(|(conn, msg)| Step::Client { conn, msg }),
        4 => (any::<Txn>(), ahead, any::<bool>()).prop_map(|(txn, ahead, fast)| Step::Near { txn, ahead, fast }),
        peers => batch.prop_map(Step::Peer),
        3 => Just(Step::Valid),
        3 => advance.prop_map(Step::Advance),
        1 => Just(Step::Failover),
    ]
}

/// The run: a leader of shard 0, the follower that applies its log, the clock and what the
/// run has seen.
struct Run {
    config: LeaderConfig,
    leader: LeaderWithLog<TapLog>,
    follower: Follower,
    applied: usize,
    now: u64,
    probe_seq: u64,
    /// Ids some message named so far: a dispatch of any other id is new to the leader.
    named: HashSet<TxnId>,
    /// Per client, the highest acknowledgement bound any of its dispatches carried.
    acked: HashMap<u64, u64>,
}

/// Client id of the valid traffic (out of the drawn clients' range, see `arbitrary::client`).
const PROBE: u64 = 1 << 40;

impl Run {
    fn new(shards: u32, fast_path: bool, start: u64) -> Self {
        let mut config = LeaderConfig::new(0, shards);
        config.fast_path = fast_path;
        config.group_sizes = vec![3; shards as usize];
        let leader =
            LeaderWithLog::new(config.clone(), TapLog::new(0), Store::new(), luigi_workloads::procedures::builtins());
        let follower = Follower::new(0, Store::new(), luigi_workloads::procedures::builtins());
        Run {
            config,
            leader,
            follower,
            applied: 0,
            now: start,
            probe_seq: 0,
            named: HashSet::new(),
            acked: HashMap::new(),
        }
    }

    fn valid(&mut self) -> ClientMsg {
        self.probe_seq += 1;
        let seq = self.probe_seq;
        let ops = vec![MicroOp { key: 99, write: Some(seq) }];
        let txn = Txn {
            id: TxnId { client: PROBE, seq },
            procedure: Micro::NAME.into(),
            args: postcard::to_stdvec(&ops).unwrap(),
            pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(99)]) }],
            ts: self.now.saturating_add(10),
        };
        ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: self.now, acked_below: seq, fast: true }
    }

    /// Runs one step and checks what must hold after it.
    fn step(&mut self, step: Step) -> Result<(), TestCaseError> {
        let mut out = Vec::new();
        // A failover starts a new leader with a tape of its own.
        let tape_before = if matches!(step, Step::Failover) { 0 } else { self.leader.log().tape.len() };
        let mut fresh_malformed = None;
        match step {
            Step::Client { conn, msg } => {
                fresh_malformed = self.note_dispatch(&msg);
                self.leader.on_client(self.now, conn, msg, &mut out);
            }
            Step::Near { mut txn, ahead, fast } => {
                txn.ts = self.now.saturating_add_signed(ahead);
                let msg = ClientMsg::Dispatch { txn: Arc::new(txn), sent_us: self.now, acked_below: 0, fast };
                fresh_malformed = self.note_dispatch(&msg);
                self.leader.on_client(self.now, 3, msg, &mut out);
            }
            Step::Peer(batch) => {
                for item in &batch.items {
                    self.named.extend(item_id(item));
                }
                self.leader.on_peer(self.now, batch, &mut out);
            }
            Step::Valid => {
                let msg = self.valid();
                self.leader.on_client(self.now, PROBE, msg, &mut out);
            }
            Step::Advance(d) => {
                self.now = self.now.saturating_add(d).min(CLOCK_MAX).max(self.now);
                self.leader.tick(self.now, &mut out);
            }
            Step::Failover => self.failover(),
        }
        self.leader.tick(self.now, &mut out);
        prop_assert_eq!(self.leader.check_invariants(), Ok(()));
        check_refusals_are_clear(&out)?;
        if let Some((id, why)) = fresh_malformed {
            let refused = |o: &LeaderOutput| {
                matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. }
                    if r.id == id && r.outcome == Err(TxnError::Rejected(why.clone())))
            };
            prop_assert!(out.iter().any(refused), "malformed {:?} not refused with '{}': {:?}", id, why, out);
        }
        self.check_logged(tape_before)?;
        self.apply_to_follower()
    }

    /// Notes the ids a message names; for a dispatch of an id nothing named before that its
    /// shape alone condemns, the id and the reason the leader must answer with. (A dispatch
    /// whose client acknowledged its answer, in it or before, is told `Forgotten` instead.)
    fn note_dispatch(&mut self, msg: &ClientMsg) -> Option<(TxnId, String)> {
        let ClientMsg::Dispatch { txn, acked_below, .. } = msg else { return None };
        let acked = self.acked.entry(txn.id.client).or_default();
        *acked = (*acked).max(*acked_below);
        let fresh = self.named.insert(txn.id) && txn.id.seq >= *acked;
        let registry = luigi_workloads::procedures::builtins();
        let why = Admission::new(&self.config, &registry).check_malformed(txn).err()?;
        fresh.then_some((txn.id, why))
    }

    /// Everything this step logged passed the one admission check at this step's clock
    /// (nothing refused reaches a log, so nothing refused executes), and every logged
    /// refusal says why.
    fn check_logged(&self, from: usize) -> Result<(), TestCaseError> {
        let registry = luigi_workloads::procedures::builtins();
        let admission = Admission::new(&self.config, &registry);
        for e in &self.leader.log().tape[from..] {
            match &e.record {
                LogRecord::Prepare { txn, .. } => {
                    prop_assert_eq!(admission.check(txn, self.now), Ok(()), "logged {:?}", txn);
                }
                LogRecord::Refuse { reason, .. } => prop_assert!(!reason.is_empty()),
                LogRecord::Decide { .. }
                | LogRecord::Abort { .. }
                | LogRecord::Floor { .. }
                | LogRecord::Applied { .. }
                | LogRecord::PeerApplied { .. } => {}
            }
        }
        Ok(())
    }

    fn apply_to_follower(&mut self) -> Result<(), TestCaseError> {
        for e in &self.leader.log().tape[self.applied..] {
            self.follower.apply(e);
        }
        self.applied = self.leader.log().tape.len();
        prop_assert_eq!(self.follower.check_invariants(), Ok(()));
        Ok(())
    }

    /// The follower (restored from its own snapshot first, which must round-trip) takes
    /// over; a fresh follower restored from the same snapshot follows the new leader.
    fn failover(&mut self) {
        let image = self.follower.snapshot();
        let next = Follower::from_snapshot(0, luigi_workloads::procedures::builtins(), &image)
            .expect("a follower's own snapshot loads");
        let old = std::mem::replace(&mut self.follower, next);
        let base = self.leader.log().tape.last().map_or(self.leader.log().base, |e| e.index);
        let handover = old.into_handover(None);
        self.leader = LeaderWithLog::recover(self.config.clone(), TapLog::new(base), handover, self.now);
        self.applied = 0;
    }

    /// After the steps: the clock moves past every horizon, and a valid transaction commits.
    fn commits_on(&mut self) -> Result<(), TestCaseError> {
        let mut out = Vec::new();
        self.now += self.config.max_ahead_us + self.config.recover_after_us + 1_000_000;
        self.leader.tick(self.now, &mut out);
        self.apply_to_follower()?;
        prop_assert_eq!(self.leader.pending_len(), 0, "a transaction is still pending");
        out.clear();
        let msg = self.valid();
        let id = TxnId { client: PROBE, seq: self.probe_seq };
        self.leader.on_client(self.now, PROBE, msg, &mut out);
        self.now += 1_000;
        self.leader.tick(self.now, &mut out);
        let ok = out.iter().any(
            |o| matches!(o, LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.id == id && r.outcome.is_ok()),
        );
        prop_assert!(ok, "the shard stopped committing: {:?}", out);
        Ok(())
    }
}

/// The transaction a peer item names, if any.
fn item_id(item: &PeerItem) -> Option<TxnId> {
    match item {
        PeerItem::Propose { id, .. }
        | PeerItem::Confirm { id, .. }
        | PeerItem::Executed { id, .. }
        | PeerItem::Refuse { id, .. }
        | PeerItem::Acknowledged { id }
        | PeerItem::FastAccept { id, .. } => Some(*id),
        PeerItem::Recover { txn, .. } => Some(txn.id),
        PeerItem::Progress(_) | PeerItem::Applied { .. } => None,
    }
}

/// Every refusal says what is wrong.
fn check_refusals_are_clear(out: &[LeaderOutput]) -> Result<(), TestCaseError> {
    for o in out {
        let LeaderOutput::ToClient { msg: ServerMsg::Reply(r), .. } = o else { continue };
        match &r.outcome {
            Err(TxnError::Rejected(why) | TxnError::Busy(why) | TxnError::Expired(why) | TxnError::Aborted(why)) => {
                prop_assert!(!why.is_empty(), "a refusal without a reason: {:?}", r)
            }
            Ok(_) | Err(TxnError::Proc(_) | TxnError::Forgotten | TxnError::NotLeader { .. }) => {}
        }
    }
    Ok(())
}

proptest! {
    // Each case runs up to 40 steps; at PROPTEST_CASES=4096 a few seconds in a debug build.

    /// A shard of a 1-shard cluster under any client messages and agreement batches, valid
    /// traffic, clock moves over the whole range and failovers: no panic, the leader's and
    /// the follower's invariants after every step, every refusal says why, a malformed
    /// dispatch is refused with its reason and nothing logged, whatever is logged passed
    /// the admission check, and once the clock moves on a valid transaction commits.
    #[test]
    fn structured_traffic_at_a_single_shard_never_wedges_it(
        start in proptest::sample::select(arb::CLOCKS.to_vec()),
        fast_path in any::<bool>(),
        steps in proptest::collection::vec(arb_step(1, true), 1..40),
    ) {
        let mut run = Run::new(1, fast_path, start.min(START_MAX));
        for step in steps {
            run.step(step)?;
        }
        run.commits_on()?;
    }

    /// The same on a 3-shard cluster, where cross-shard transactions wait for peers that
    /// never answer: no panic, the invariants, clear refusals, and only admissible
    /// transactions logged. (No liveness claim: the peers are servers of the cluster,
    /// trusted to answer.) Peers' agreement items about transactions are not drawn here: a
    /// leader checks that a peer does not contradict itself (a proposal that changes, a
    /// refusal after a decision) with assertions, fail-stop on a server of the cluster that
    /// breaks the protocol, and drawn items do (`agreement.rs`, `peer.rs`). On a 1-shard
    /// cluster (above) no transaction has agreement state, and they are drawn.
    #[test]
    fn structured_traffic_and_peer_batches_at_a_cross_shard_leader(
        start in proptest::sample::select(arb::CLOCKS.to_vec()),
        fast_path in any::<bool>(),
        steps in proptest::collection::vec(arb_step(4, false), 1..40),
    ) {
        let mut run = Run::new(3, fast_path, start.min(START_MAX));
        for step in steps {
            run.step(step)?;
        }
    }
}
