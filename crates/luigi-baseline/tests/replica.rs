//! A baseline replica over a real Raft log (a group of one): election, serving, snapshots,
//! and a restart from the snapshot.

mod common;

use luigi_baseline::msg::BaseOutput;
use luigi_baseline::{BaseConfig, BaseProtocol, BaseReplica, Mode};
use luigi_raft::{RaftConfig, RaftLog};
use luigi_replica::empty_store;
use luigi_txn::msg::{ClientMsg, ServerMsg, TxnError};
use luigi_workloads::procedures::micro_key;

/// A replica and the log its node would own (and lend it).
struct Lone {
    r: BaseReplica,
    log: RaftLog,
}

fn lone(recovered: Option<luigi_raft::RecoveredState>) -> Lone {
    let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), recovered).unwrap();
    let protocol = BaseProtocol::new(BaseConfig::new(0, 1, Mode::Occ), common::registry(), empty_store());
    Lone { r: BaseReplica::start(protocol, &log).unwrap(), log }
}

fn settle(n: &mut Lone, now: u64) -> Vec<BaseOutput> {
    let mut out = Vec::new();
    for _ in 0..8 {
        while let Some(rd) = n.log.ready().unwrap() {
            n.log.advance(rd.number);
        }
        n.r.turn(&mut n.log, now, &mut out).unwrap();
    }
    out
}

fn dispatch(seq: u64, value: u64) -> ClientMsg {
    ClientMsg::Dispatch { txn: common::micro(seq, 1, &[(1, Some(value))]), sent_us: 0, acked_below: seq, fast: true }
}

#[test]
fn a_lone_replica_serves_snapshots_and_restarts_from_its_snapshot() {
    let mut n = lone(None);
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 1, common::CLIENT, dispatch(1, 5), &mut out);
    assert!(
        matches!(&out[..], [BaseOutput::ToClient { msg: ServerMsg::Reply(rep), .. }] if matches!(rep.outcome, Err(TxnError::NotLeader { .. }))),
        "{out:?}"
    );
    n.log.campaign().unwrap();
    settle(&mut n, 10);
    assert!(n.r.is_serving());
    for seq in 1..=4 {
        n.r.on_client(&mut n.log, 20, common::CLIENT, dispatch(seq, seq * 10), &mut Vec::new());
    }
    let out = settle(&mut n, 30);
    let replies =
        out.iter().filter(|o| matches!(o, BaseOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.outcome.is_ok()));
    assert_eq!(replies.count(), 4);
    let index = n.log.handed_out();
    let job = n.r.own_snapshot_due(&n.log, index).unwrap().expect("due");
    let image = job.run().unwrap();
    assert_eq!(image.index, index);
    let snap = n.log.compact(image.index, image.data).unwrap();
    let recovered = luigi_raft::RecoveredState {
        hard_state: luigi_raft::HardState { term: n.log.term(), vote: 1, commit: index },
        snapshot: Some(snap),
        entries: Vec::new(),
        applied: 0,
        rejoining: false,
    };
    let mut again = lone(Some(recovered));
    assert_eq!(again.r.store().get(&micro_key(1)), n.r.store().get(&micro_key(1)));
    again.log.campaign().unwrap();
    settle(&mut again, 40);
    assert!(again.r.is_serving());
    // A retry of an acknowledged-not transaction is answered from the snapshot's outcomes.
    let mut out = Vec::new();
    again.r.on_client(&mut again.log, 50, common::CLIENT, dispatch(4, 999), &mut out);
    out.extend(settle(&mut again, 60));
    assert!(out
        .iter()
        .any(|o| matches!(o, BaseOutput::ToClient { msg: ServerMsg::Reply(r), .. } if r.outcome.is_ok())));
    assert_eq!(again.r.store().get(&micro_key(1)), Some(&40u64.to_le_bytes().to_vec()), "not executed twice");
}

/// DESIGN.md rule 23: a baseline serves no snapshot reads; its replicas, follower or leader,
/// say so at once instead of leaving the client waiting.
#[test]
fn a_baseline_replica_refuses_snapshot_reads_as_not_supported_whatever_its_role() {
    use luigi_txn::read_only::{ReadRefusal, SnapshotRead};
    use luigi_txn::types::{KeySet, TxnId};
    let read = |seq| {
        ClientMsg::SnapshotRead(SnapshotRead {
            id: TxnId { client: common::CLIENT, seq },
            shard: 0,
            procedure: "micro".into(),
            args: vec![],
            keys: KeySet::new(vec![micro_key(1)], vec![]),
            ts: 5,
            sent_us: 0,
        })
    };
    let mut n = lone(None);
    let mut out = Vec::new();
    n.r.on_client(&mut n.log, 1, common::CLIENT, read(1), &mut out);
    n.log.campaign().unwrap();
    settle(&mut n, 10);
    assert!(n.r.is_serving());
    n.r.on_client(&mut n.log, 20, common::CLIENT, read(2), &mut out);
    let refusals: Vec<_> = out
        .iter()
        .map(|o| match o {
            BaseOutput::ToClient { msg: ServerMsg::SnapshotRead(r), .. } => (r.id.seq, r.outcome.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    for (_, outcome) in refusals {
        assert!(matches!(outcome, Err(ReadRefusal::NotSupported(_))), "{outcome:?}");
    }
}
