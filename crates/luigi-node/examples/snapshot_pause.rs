//! How long a snapshot of a large store holds a replica's event loop, before and after
//! snapshots became jobs and transfers (issue 11, part 4). Prints figures; asserts nothing
//! about time.
//!
//! ```sh
//! cargo run --release -p luigi-node --example snapshot_pause            # 1M rows of 300 bytes
//! ROWS=100000 RECORDS=2000 cargo run -p luigi-node --example snapshot_pause
//! ```
//!
//! A replica (a group of one: it makes its own snapshot the way a follower does, by a replay
//! job) starts from a store of `ROWS` rows of 300 bytes, applies `RECORDS` writes, and takes a
//! snapshot. "Before" times what the event loop did in the previous design with the same
//! state: serialize the follower state inline, copy the image into the log and into the
//! offer, check the offer on the leader and decode an installed snapshot inline. "After" times
//! what is left on the loop now: starting the job (a copy of the log entries' headers),
//! compacting behind its image (shared bytes), beginning the transfer, each transfer message
//! on both sides, and swapping in a snapshot decoded off the loop. Last, a follower's own
//! snapshot as it is made now, by a fork of its state (rule 11): taking the fork, the writes
//! after it that copy the chunks they touch (against the same writes without a fork), and the
//! job that serializes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use luigi_node::snapshot_transfer::{TransferConfig, TransferEvent, Transfers};
use luigi_node::Tuning;
use luigi_protocol::leader::follower::Follower;
use luigi_protocol::leader::{LeaderConfig, LeaderOutput};
use luigi_protocol::msg::{ReplicationMsg, SnapshotKind};
use luigi_protocol::replica::{self, Replica};
use luigi_raft::{RaftConfig, RaftLog};
use luigi_replica::InitialStore;
use luigi_store::{table_key, Store};
use luigi_txn::msg::ClientMsg;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{KeySet, ShardPiece, Txn, TxnId};
use luigi_workloads::procedures::{micro_key, Micro, MicroOp};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:9.1} ms", d.as_secs_f64() * 1e3)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

fn dispatch(seq: u64) -> ClientMsg {
    let ops = vec![MicroOp { key: seq % 1000, write: Some(seq) }];
    let txn = Arc::new(Txn {
        id: TxnId { client: 4, seq },
        procedure: Micro::NAME.into(),
        args: postcard::to_stdvec(&ops).unwrap(),
        pieces: vec![ShardPiece { shard: 0, keys: KeySet::new(vec![], vec![micro_key(seq % 1000)]) }],
        ts: 1,
    });
    ClientMsg::Dispatch { txn, sent_us: 0, acked_below: seq, fast: true }
}

/// A replica and the log its node would own (and lend it).
struct Lone {
    r: Replica,
    log: RaftLog,
}

/// Drives `n`'s log (persisting at once) and turns its replica at `now`.
fn settle(n: &mut Lone, now: u64, out: &mut Vec<LeaderOutput>) {
    for _ in 0..8 {
        while let Some(rd) = n.log.ready().unwrap() {
            n.log.advance(rd.number);
        }
        n.r.turn(&mut n.log, now, out).unwrap();
    }
}

/// A replica serving alone from a store of `rows` rows of 300 bytes, after `records` writes.
fn loaded_replica(rows: u64, records: u64, registry: &Registry, initial: &InitialStore) -> Lone {
    let log = RaftLog::new(RaftConfig::new(1, vec![1], 7), None).unwrap();
    let (r, built) =
        timed(|| replica::start(LeaderConfig::new(0, 1), registry.clone(), initial.clone(), &log).unwrap());
    let mut n = Lone { r, log };
    n.log.campaign().unwrap();
    let mut out = Vec::new();
    settle(&mut n, 100, &mut out);
    assert!(n.r.is_serving());
    let started = Instant::now();
    for seq in 1..=records {
        n.r.on_client(&mut n.log, 1_000 + seq, 4, dispatch(seq), &mut out);
        if seq % 500 == 0 {
            settle(&mut n, 1_000 + seq, &mut out);
            out.clear();
        }
    }
    settle(&mut n, 60_000_000, &mut out);
    println!(
        "store: {rows} rows of 300 bytes (built in {:.1} s); {} log entries applied after it ({:.1} s)",
        built.as_secs_f64(),
        n.log.handed_out(),
        started.elapsed().as_secs_f64()
    );
    n
}

/// A whole transfer, message by message, timed on each side.
struct TransferTimes {
    /// The longest a sender's or receiver's handling of one message took.
    worst_send: Duration,
    worst_receive: Duration,
    messages: u64,
    total: Duration,
    /// What the receiver got.
    received: Bytes,
}

/// Runs a transfer begun with `events` between `sender` and `receiver` to its end.
fn run_transfer(sender: &mut Transfers, receiver: &mut Transfers, mut events: Vec<TransferEvent>) -> TransferTimes {
    let (mut worst_send, mut worst_receive, mut messages) = (Duration::ZERO, Duration::ZERO, 0u64);
    let mut received = None;
    let started = Instant::now();
    while !events.is_empty() {
        let mut back = Vec::new();
        for e in events.drain(..) {
            match e {
                TransferEvent::Send { msg, .. } => {
                    let from = sender_of(&msg);
                    let (_, t) = timed(|| receiver.on_message(2, from, msg, |_| true, &mut back).unwrap());
                    worst_receive = worst_receive.max(t);
                    messages += 1;
                }
                TransferEvent::Sent { .. } => {}
                TransferEvent::Received { data, .. } => received = Some(data),
            }
        }
        let mut forth = Vec::new();
        for e in back.drain(..) {
            match e {
                TransferEvent::Send { msg, .. } => {
                    let from = sender_of(&msg);
                    let (_, t) = timed(|| sender.on_message(3, from, msg, |_| true, &mut forth).unwrap());
                    worst_send = worst_send.max(t);
                    messages += 1;
                }
                TransferEvent::Sent { .. } => {}
                TransferEvent::Received { data, .. } => received = Some(data),
            }
        }
        events = forth;
    }
    let total = started.elapsed();
    TransferTimes { worst_send, worst_receive, messages, total, received: received.expect("the transfer completed") }
}

/// What the event loop did in the previous design with the same state.
#[derive(Clone, Copy)]
struct Before {
    serialize: Duration,
    copies: Duration,
    check: Duration,
    decode: Duration,
}

/// Times the previous design's inline work on a snapshot of `bytes` bytes at `index`.
fn time_before(registry: &Registry, data: &[u8], index: u64, bytes: usize) -> Before {
    let follower = Follower::from_snapshot(0, registry.clone(), data).unwrap();
    let (old_image, serialize) = timed(|| follower.snapshot());
    assert_eq!(old_image.len(), bytes);
    let (_, copies) = timed(|| {
        let in_log = std::hint::black_box(old_image.to_vec()); // SnapshotData::from_raft's copy
        let offer = std::hint::black_box(in_log.clone()); // the offer's copy
        (in_log.len(), offer.len())
    });
    let (_, check) = timed(|| Follower::check_snapshot(0, index, &old_image).unwrap());
    let (old_decoded, decode) = timed(|| Follower::from_snapshot(0, registry.clone(), &old_image).unwrap());
    drop(old_decoded);
    Before { serialize, copies, check, decode }
}

/// What is left on the event loop now, and what runs off it.
struct After {
    due: Duration,
    compact: Duration,
    begin: Duration,
    install: Duration,
    discard: Duration,
    job: Duration,
    decode: Duration,
    transfer: TransferTimes,
}

fn main() {
    let rows = env("ROWS", 1_000_000);
    let records = env("RECORDS", 10_000);
    let initial: InitialStore = Arc::new(move || {
        let mut store = Store::new();
        for row in 0..rows {
            let mut value = vec![0u8; 300];
            value[..8].copy_from_slice(&row.to_le_bytes());
            store.put(table_key(0xF0F0, &[row]), value);
        }
        store
    });
    let registry = luigi_workloads::procedures::builtins();
    let mut n = loaded_replica(rows, records, &registry, &initial);

    // ---- after: what is left on the event loop ----
    let (job, due) = timed(|| n.r.own_snapshot_due(&n.log, 1).unwrap().expect("due"));
    let (image, job_time) = timed(|| job.run().unwrap());
    let bytes = image.data.len();
    println!("snapshot image: {:.1} MB at index {}", bytes as f64 / 1e6, image.index);
    let (snap, compact) = timed(|| n.log.compact(image.index, image.data.clone()).unwrap());
    let saved = snap.clone(); // the SaveSnapshot effect's copy: shared bytes
    let tuning = Tuning::for_delay(1_000, 100);
    let mut sender = Transfers::new(0, 2, TransferConfig::new(&tuning));
    let mut receiver = Transfers::new(0, 1, TransferConfig::new(&tuning));
    let mut events = Vec::new();
    let (_, begin) = timed(|| {
        sender.send(1, 1, SnapshotKind::Offer, snap.index, snap.data.clone(), image.crc32, &mut events).unwrap()
    });
    drop(saved);
    let transfer = run_transfer(&mut sender, &mut receiver, events);
    assert_eq!(transfer.received, snap.data);
    let (decoded, decode) = timed(|| Follower::from_snapshot(0, registry.clone(), &transfer.received).unwrap());
    // A lagging follower (of a group of two that never elects: it stays a follower) with the
    // same store installs it: a swap; the state it replaces is freed off the loop
    // (`Effect::Discard`).
    let log = RaftLog::new(RaftConfig::new(1, vec![1, 2], 7), None).unwrap();
    let mut lagging = replica::start(LeaderConfig::new(0, 1), registry.clone(), initial.clone(), &log).unwrap();
    let (replaced, install) = timed(|| lagging.install_follower(decoded));
    assert!(replaced.is_some(), "a follower's state was replaced");
    let (_, discard) = timed(|| drop(replaced));

    // ---- before: the same work, inline ----
    let before = time_before(&registry, &snap.data, snap.index, bytes);
    let after = After { due, compact, begin, install, discard, job: job_time, decode, transfer };
    print_figures(&before, &after);
    print_fork(&initial, &registry, rows);
}

/// A follower's own snapshot (DESIGN.md rule 11): a fork of its live state, taken on the loop,
/// serialized off it; then writes that touch every chunk of the store, each copying its chunk
/// first while the fork lives.
fn print_fork(initial: &InitialStore, registry: &Registry, rows: u64) {
    let follower = Follower::new(0, initial(), registry.clone());
    let (fork, taken) = timed(|| follower.fork());
    let (image, job) = timed(|| fork.image());
    let write_all = |store: &mut Store| {
        let (mut worst, mut total) = (Duration::ZERO, Duration::ZERO);
        for row in 0..rows.min(1 << 20) {
            let (_, took) = timed(|| store.put(table_key(0xF0F0, &[row]), vec![1; 300]));
            worst = worst.max(took);
            total += took;
        }
        (worst, total)
    };
    let mut unforked = initial();
    let (plain_worst, plain) = write_all(&mut unforked);
    drop(unforked);
    let mut store = initial();
    let store_fork = store.fork();
    let (worst, total) = write_all(&mut store);
    let copied = store.shared_chunks() == 0;
    drop(store_fork);
    drop(follower);
    println!("a follower's own snapshot, by fork (image {:.1} MB):", image.len() as f64 / 1e6);
    println!("  on the loop: take the fork (Follower::fork)               {}", ms(taken));
    println!("  on the loop: the worst write after it (copies a chunk)    {}", ms(worst));
    println!(
        "  on the loop: every row written once after it, in all      {} (every chunk copied: {copied})",
        ms(total)
    );
    println!(
        "  ... the same writes without a fork: in all                {} (worst {})",
        ms(plain),
        ms(plain_worst).trim()
    );
    println!("  off the loop: the job (FollowerFork::image)               {}", ms(job));
}

fn print_figures(before: &Before, after: &After) {
    let Before { serialize, copies, check, decode: old_decode } = *before;
    let After { due, compact, begin, install, discard, job, decode, ref transfer } = *after;
    println!();
    println!("on the event loop, before (snapshot made, checked and installed inline, sent as one message):");
    println!("  a follower serializes its state (Follower::snapshot)      {}", ms(serialize));
    println!("  it copies the image into its log and into the offer       {}", ms(copies));
    println!("  the leader checks the offer (Follower::check_snapshot)   {}", ms(check));
    println!("  a lagging follower decodes the leader's snapshot         {}", ms(old_decode));
    println!("  ... and frees the state it replaces                      {}", ms(discard));
    let worst_before = (serialize + copies).max(check).max(old_decode + discard);
    println!("  worst single pause                                      {}", ms(worst_before));
    println!("  (and no snapshot over 16 MiB could be sent at all: one frame)");
    println!("on the event loop, after:");
    println!("  start the snapshot job (own_snapshot_due: the replay)     {}", ms(due));
    println!("  compact behind the image (shared bytes)                  {}", ms(compact));
    println!("  begin the offer's transfer                               {}", ms(begin));
    println!(
        "  one transfer message, worst of {}: sender {} / receiver {}",
        transfer.messages,
        ms(transfer.worst_send).trim(),
        ms(transfer.worst_receive).trim()
    );
    println!("  install a snapshot decoded off the loop (a swap)          {}", ms(install));
    let worst_after =
        [due, compact, begin, transfer.worst_send, transfer.worst_receive, install].into_iter().max().unwrap();
    println!("  worst single pause                                      {}", ms(worst_after));
    println!("off the event loop, after:");
    println!("  the snapshot job (replay, serialize, CRC)                {}", ms(job));
    println!("  decode a received snapshot (SnapshotCheck)               {}", ms(decode));
    println!("  free the replaced state (Effect::Discard)                {}", ms(discard));
    println!("  the whole transfer in memory, both sides                  {}", ms(transfer.total));
}

fn sender_of(msg: &ReplicationMsg) -> u64 {
    match msg {
        ReplicationMsg::SnapshotBegin { from, .. }
        | ReplicationMsg::SnapshotChunk { from, .. }
        | ReplicationMsg::SnapshotAck { from, .. }
        | ReplicationMsg::SnapshotCancel { from, .. }
        | ReplicationMsg::SnapshotRefuse { from, .. }
        | ReplicationMsg::Raft { from, .. }
        | ReplicationMsg::AcceptsQuery { from, .. }
        | ReplicationMsg::Accepts { from, .. }
        | ReplicationMsg::LeaderLost { from, .. }
        | ReplicationMsg::ClockProbe { from, .. }
        | ReplicationMsg::ClockEcho { from, .. } => *from,
        ReplicationMsg::LeaderIs { replica, .. } => u64::from(*replica) + 1,
    }
}
