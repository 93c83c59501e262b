//! Transcripts of snapshot transfers ([`Transfers`]): for each input, the exact messages and
//! events that come out, between a sender (Raft id 1) and a receiver (Raft id 2) of shard 0.
//! Chunks are 4 bytes and the window 2 chunks, so a 10-byte snapshot is 3 chunks (4, 4, 2).

use bytes::Bytes;
use luigi_node::snapshot_transfer::{SendRefused, TransferConfig, TransferEvent, Transfers};
use luigi_protocol::msg::{ReplicationMsg, SnapshotKind};

const SENDER: u64 = 1;
const RECEIVER: u64 = 2;
const DATA: &[u8] = b"0123456789";
const TIMEOUT_US: u64 = 1_000;

fn config() -> TransferConfig {
    TransferConfig {
        chunk_bytes: 4,
        window_chunks: 2,
        ack_timeout_us: TIMEOUT_US,
        probes_max: 2,
        restarts_max: 1,
        outgoing_max: 2,
        incoming_max: 1,
        snapshot_bytes_max: 64,
    }
}

fn install() -> SnapshotKind {
    SnapshotKind::Install { envelope: b"raft".to_vec() }
}

fn crc() -> u32 {
    crc32fast::hash(DATA)
}

/// One line per event.
fn show(events: &[TransferEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            TransferEvent::Send { to, msg } => format!("to {to}: {}", show_msg(msg)),
            TransferEvent::Sent { to, transfer, index, outcome, .. } => match outcome {
                Ok(()) => format!("sent {transfer} to {to} at {index}"),
                Err(why) => format!("failed {transfer} to {to} at {index}: {why:?}"),
            },
            TransferEvent::Received { from, transfer, kind, index, data, crc32 } => {
                assert_eq!(*crc32, crc32fast::hash(data));
                let kind = match kind {
                    SnapshotKind::Install { .. } => "install",
                    SnapshotKind::Offer => "offer",
                };
                format!("received {transfer} from {from}: {kind} at {index}, {:?}", String::from_utf8_lossy(data))
            }
        })
        .collect()
}

fn show_msg(msg: &ReplicationMsg) -> String {
    match msg {
        ReplicationMsg::SnapshotBegin { transfer, index, total_bytes, chunk_bytes, .. } => {
            format!("begin {transfer} at {index}, {total_bytes} bytes in chunks of {chunk_bytes}")
        }
        ReplicationMsg::SnapshotChunk { transfer, seq, data, .. } => {
            format!("chunk {transfer}#{seq} {:?}", String::from_utf8_lossy(data))
        }
        ReplicationMsg::SnapshotAck { transfer, next, resend, .. } => {
            format!("ack {transfer} next {next}{}", if *resend { " resend" } else { "" })
        }
        ReplicationMsg::SnapshotCancel { transfer, .. } => format!("cancel {transfer}"),
        ReplicationMsg::SnapshotRefuse { transfer, reason, .. } => format!("refuse {transfer}: {reason:?}"),
        ReplicationMsg::Raft { .. }
        | ReplicationMsg::LeaderIs { .. }
        | ReplicationMsg::AcceptsQuery { .. }
        | ReplicationMsg::Accepts { .. }
        | ReplicationMsg::LeaderLost { .. }
        | ReplicationMsg::ClockProbe { .. }
        | ReplicationMsg::ClockEcho { .. } => format!("{msg:?}"),
    }
}

/// The messages in `events` (in order).
fn msgs(events: &[TransferEvent]) -> Vec<ReplicationMsg> {
    events
        .iter()
        .filter_map(|e| match e {
            TransferEvent::Send { msg, .. } => Some(msg.clone()),
            TransferEvent::Sent { .. } | TransferEvent::Received { .. } => None,
        })
        .collect()
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
        ReplicationMsg::LeaderIs { .. } => unreachable!("not a transfer message"),
    }
}

/// Delivers `msgs` to `t` at `now` (every kind wanted); returns what it answered.
fn deliver(t: &mut Transfers, now: u64, msgs: Vec<ReplicationMsg>) -> Vec<TransferEvent> {
    let mut out = Vec::new();
    for m in msgs {
        let from = sender_of(&m);
        t.on_message(now, from, m, |_| true, &mut out).unwrap();
    }
    out
}

/// A sender that started the 10-byte transfer at 100 (its number is 100), its begin.
fn started() -> (Transfers, Vec<TransferEvent>) {
    let mut a = Transfers::new(0, SENDER, config());
    let mut out = Vec::new();
    assert_eq!(a.send(100, RECEIVER, install(), 7, Bytes::from_static(DATA), crc(), &mut out), Ok(100));
    (a, out)
}

fn chunk(seq: u32) -> String {
    let start = seq as usize * 4;
    format!("to 2: chunk 100#{seq} {:?}", String::from_utf8_lossy(&DATA[start..(start + 4).min(DATA.len())]))
}

#[test]
fn a_snapshot_travels_in_acknowledged_chunks_within_its_window() {
    let (mut a, out) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    assert_eq!(show(&out), ["to 2: begin 100 at 7, 10 bytes in chunks of 4"]);
    let out = deliver(&mut b, 110, msgs(&out));
    assert_eq!(show(&out), ["to 1: ack 100 next 0 resend"]);
    // Accepted: a window of two chunks leaves.
    let sent = deliver(&mut a, 120, msgs(&out));
    assert_eq!(show(&sent), [chunk(0), chunk(1)]);
    let acks = deliver(&mut b, 130, msgs(&sent[..1]));
    assert_eq!(show(&acks), ["to 1: ack 100 next 1"]);
    // One acknowledged, one more may go.
    let more = deliver(&mut a, 140, msgs(&acks));
    assert_eq!(show(&more), [chunk(2)]);
    let acks = deliver(&mut b, 150, msgs(&sent[1..]));
    assert_eq!(show(&acks), ["to 1: ack 100 next 2"]);
    assert!(deliver(&mut a, 160, msgs(&acks)).is_empty(), "every chunk is out");
    let end = deliver(&mut b, 170, msgs(&more));
    assert_eq!(show(&end), ["to 1: ack 100 next 3", "received 100 from 1: install at 7, \"0123456789\""]);
    let done = deliver(&mut a, 180, msgs(&end));
    assert_eq!(show(&done), ["sent 100 to 2 at 7"]);
    assert_eq!((a.in_flight(), b.in_flight()), ((0, 0), (0, 0)));
    assert_eq!((a.stats().chunks_sent, a.stats().chunks_resent, a.stats().delivered), (3, 0, 1));
    assert_eq!(b.stats().received, 1);
}

/// Delivers one message from `from_events` (by position) to `t`.
fn one(t: &mut Transfers, now: u64, from_events: &[TransferEvent], i: usize) -> Vec<TransferEvent> {
    deliver(t, now, vec![msgs(from_events)[i].clone()])
}

#[test]
fn lost_duplicated_and_reordered_chunks_are_sent_again_from_the_first_missing_one() {
    let (mut a, begin) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    let answer = deliver(&mut b, 110, msgs(&begin));
    let window = deliver(&mut a, 120, msgs(&answer));
    assert_eq!(show(&window), [chunk(0), chunk(1)]);
    // Chunk 0 is lost; chunk 1 arrives: a gap, the receiver asks for 0 again.
    let gap = one(&mut b, 130, &window, 1);
    assert_eq!(show(&gap), ["to 1: ack 100 next 0 resend"]);
    let again = deliver(&mut a, 140, msgs(&gap));
    assert_eq!(show(&again), [chunk(0), chunk(1)]);
    // The same request again (a duplicate, or another chunk of the old window) changes nothing.
    assert!(deliver(&mut a, 141, msgs(&gap)).is_empty());
    // Reordered: chunk 1 first (a gap again, already being resent), then 0, then 1 twice.
    let out = one(&mut b, 150, &again, 1);
    assert_eq!(show(&out), ["to 1: ack 100 next 0 resend"]);
    assert!(deliver(&mut a, 151, msgs(&out)).is_empty(), "already resending from 0");
    let ack1 = one(&mut b, 152, &again, 0);
    assert_eq!(show(&ack1), ["to 1: ack 100 next 1"]);
    let ack2 = one(&mut b, 153, &again, 1);
    assert_eq!(show(&ack2), ["to 1: ack 100 next 2"]);
    let dup = one(&mut b, 154, &again, 1);
    assert_eq!(show(&dup), ["to 1: ack 100 next 2"], "a duplicate is answered, not taken twice");
    let last = deliver(&mut a, 160, [msgs(&ack1), msgs(&ack2), msgs(&dup)].concat());
    assert_eq!(show(&last), [chunk(2)]);
    let end = deliver(&mut b, 170, msgs(&last));
    assert_eq!(show(&end), ["to 1: ack 100 next 3", "received 100 from 1: install at 7, \"0123456789\""]);
    assert_eq!(show(&deliver(&mut a, 180, msgs(&end))), ["sent 100 to 2 at 7"]);
    assert_eq!((a.stats().chunks_sent, a.stats().chunks_resent), (5, 2));
}

/// Flips a bit of a chunk's data (its CRC now wrong).
fn damage(msg: &mut ReplicationMsg) {
    let ReplicationMsg::SnapshotChunk { data, .. } = msg else { panic!("not a chunk: {msg:?}") };
    data[0] ^= 1;
}

#[test]
fn a_damaged_chunk_is_refused_and_sent_again() {
    let (mut a, begin) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    let answer = deliver(&mut b, 110, msgs(&begin));
    let window = deliver(&mut a, 120, msgs(&answer));
    let mut bad = msgs(&window);
    damage(&mut bad[0]);
    let refused = deliver(&mut b, 130, bad);
    assert_eq!(show(&refused), ["to 1: ack 100 next 0 resend", "to 1: ack 100 next 0 resend"]);
    assert_eq!(b.stats().damaged_chunks, 1);
    let again = deliver(&mut a, 140, msgs(&refused));
    assert_eq!(show(&again), [chunk(0), chunk(1)], "once, for both answers");
    let acks = deliver(&mut b, 150, msgs(&again));
    assert_eq!(show(&acks), ["to 1: ack 100 next 1", "to 1: ack 100 next 2"]);
    let last = deliver(&mut a, 160, msgs(&acks));
    let end = deliver(&mut b, 170, msgs(&last));
    assert_eq!(show(&end), ["to 1: ack 100 next 3", "received 100 from 1: install at 7, \"0123456789\""]);
}

#[test]
fn a_whole_that_fails_its_checksum_is_refused_then_sent_again_from_the_start_a_bounded_number_of_times() {
    let mut a = Transfers::new(0, SENDER, config());
    let mut b = Transfers::new(0, RECEIVER, config());
    let mut out = Vec::new();
    // Every chunk is intact, but the whole does not match the CRC announced at the begin.
    a.send(100, RECEIVER, install(), 7, Bytes::from_static(DATA), crc() ^ 1, &mut out).unwrap();
    let mut events = out;
    let mut transcript = Vec::new();
    for now in 110..140 {
        let to_b = deliver(&mut b, now, msgs(&events));
        let to_a = deliver(&mut a, now, msgs(&to_b));
        transcript.extend(show(&to_b).into_iter().filter(|l| !l.contains("next 1") && !l.contains("next 2")));
        transcript.extend(show(&to_a).into_iter().filter(|l| !l.contains('#')));
        events = to_a;
        if events.is_empty() {
            break;
        }
    }
    assert_eq!(
        transcript,
        [
            "to 1: ack 100 next 0 resend",
            "to 1: refuse 100: Corrupt",
            "to 2: begin 100 at 7, 10 bytes in chunks of 4", // the one restart allowed
            "to 1: ack 100 next 0 resend",
            "to 1: refuse 100: Corrupt",
            "failed 100 to 2 at 7: Refused(Corrupt)",
        ]
    );
    assert_eq!((a.stats().restarts, a.stats().failed, b.stats().refused, b.stats().received), (1, 1, 2, 0));
    assert_eq!((a.in_flight(), b.in_flight()), ((0, 0), (0, 0)));
}

#[test]
fn a_receiver_that_restarts_mid_transfer_is_sent_everything_again() {
    let (mut a, begin) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    let answer = deliver(&mut b, 110, msgs(&begin));
    let window = deliver(&mut a, 120, msgs(&answer));
    let ack = one(&mut b, 130, &window, 0);
    // The receiver restarts: it knows nothing of the transfer.
    let mut b = Transfers::new(0, RECEIVER, config());
    let unknown = one(&mut b, 140, &window, 1);
    assert_eq!(show(&unknown), ["to 1: refuse 100: Unknown"]);
    let more = deliver(&mut a, 150, msgs(&ack));
    assert_eq!(show(&more), [chunk(2)]);
    assert_eq!(show(&deliver(&mut b, 151, msgs(&more))), ["to 1: refuse 100: Unknown"]);
    let restart = deliver(&mut a, 160, msgs(&unknown));
    assert_eq!(show(&restart), ["to 2: begin 100 at 7, 10 bytes in chunks of 4"]);
    let answer = deliver(&mut b, 170, msgs(&restart));
    assert_eq!(show(&answer), ["to 1: ack 100 next 0 resend"]);
    let window = deliver(&mut a, 180, msgs(&answer));
    assert_eq!(show(&window), [chunk(0), chunk(1)]);
    let acks = deliver(&mut b, 190, msgs(&window));
    let last = deliver(&mut a, 200, msgs(&acks));
    let end = deliver(&mut b, 210, msgs(&last));
    assert_eq!(show(&end), ["to 1: ack 100 next 3", "received 100 from 1: install at 7, \"0123456789\""]);
    assert_eq!(show(&deliver(&mut a, 220, msgs(&end))), ["sent 100 to 2 at 7"]);
    assert_eq!(a.stats().restarts, 1);
}

#[test]
fn a_silent_receiver_is_asked_where_it_stands_then_given_up() {
    let (mut a, _lost) = started();
    assert_eq!(a.next_deadline(), Some(100 + TIMEOUT_US));
    let mut out = Vec::new();
    a.tick(100 + TIMEOUT_US - 1, &mut out);
    assert!(out.is_empty());
    a.tick(100 + TIMEOUT_US, &mut out);
    assert_eq!(show(&out), ["to 2: begin 100 at 7, 10 bytes in chunks of 4"]);
    assert_eq!(a.next_deadline(), Some(100 + 2 * TIMEOUT_US));
    out.clear();
    a.tick(100 + 2 * TIMEOUT_US, &mut out);
    assert_eq!(show(&out), ["to 2: begin 100 at 7, 10 bytes in chunks of 4"]);
    out.clear();
    a.tick(100 + 3 * TIMEOUT_US, &mut out);
    assert_eq!(show(&out), ["to 2: cancel 100", "failed 100 to 2 at 7: NoProgress"]);
    assert_eq!((a.in_flight(), a.next_deadline()), ((0, 0), None));
}

#[test]
fn after_a_broken_link_the_transfer_resumes_where_the_receiver_stands() {
    let (mut a, begin) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    let answer = deliver(&mut b, 110, msgs(&begin));
    let window = deliver(&mut a, 120, msgs(&answer));
    let acks = deliver(&mut b, 130, msgs(&window));
    assert_eq!(show(&acks), ["to 1: ack 100 next 1", "to 1: ack 100 next 2"]);
    // The link breaks: the acknowledgements and what they released are lost.
    let lost = deliver(&mut a, 140, msgs(&acks));
    assert_eq!(show(&lost), [chunk(2)]);
    // The link is back: the sender asks at once, the receiver says it holds chunks 0 and 1.
    let mut probe = Vec::new();
    a.link_up(150, RECEIVER, &mut probe);
    assert_eq!(show(&probe), ["to 2: begin 100 at 7, 10 bytes in chunks of 4"]);
    let stands = deliver(&mut b, 160, msgs(&probe));
    assert_eq!(show(&stands), ["to 1: ack 100 next 2 resend"]);
    let resumed = deliver(&mut a, 170, msgs(&stands));
    assert_eq!(show(&resumed), [chunk(2)]);
    let end = deliver(&mut b, 180, msgs(&resumed));
    assert_eq!(show(&end), ["to 1: ack 100 next 3", "received 100 from 1: install at 7, \"0123456789\""]);
    assert_eq!((a.stats().chunks_sent, a.stats().chunks_resent), (4, 1));
}

#[test]
fn a_lost_final_acknowledgement_is_answered_from_memory() {
    let (mut a, begin) = started();
    let mut b = Transfers::new(0, RECEIVER, config());
    let mut to_b = msgs(&begin);
    for now in 110..120 {
        let to_a = deliver(&mut b, now, to_b);
        if show(&to_a).iter().any(|l| l.starts_with("received")) {
            break; // its final acknowledgement is lost
        }
        to_b = msgs(&deliver(&mut a, now, msgs(&to_a)));
    }
    let mut probe = Vec::new();
    a.tick(200 + TIMEOUT_US, &mut probe);
    let answer = deliver(&mut b, 1_300, msgs(&probe));
    assert_eq!(show(&answer), ["to 1: ack 100 next 3"]);
    assert_eq!(show(&deliver(&mut a, 1_310, msgs(&answer))), ["sent 100 to 2 at 7"]);
    assert_eq!(b.stats().received, 1, "received once");
}

fn begin_from(from: u64, transfer: u64, kind: SnapshotKind, total_bytes: u64, chunk_bytes: u32) -> ReplicationMsg {
    ReplicationMsg::SnapshotBegin { shard: 0, from, transfer, kind, index: 7, total_bytes, chunk_bytes, crc32: 0 }
}

#[test]
fn a_receiver_bounds_its_transfers_and_their_sizes() {
    let mut b = Transfers::new(0, RECEIVER, config());
    let mut out = Vec::new();
    let mut begin = |b: &mut Transfers, m: ReplicationMsg, wanted: bool| {
        out.clear();
        b.on_message(100, sender_of(&m), m, |_| wanted, &mut out).unwrap();
        show(&out)
    };
    assert_eq!(begin(&mut b, begin_from(1, 5, install(), 10, 4), false), ["to 1: refuse 5: Unwanted"]);
    assert_eq!(begin(&mut b, begin_from(1, 5, install(), 65, 4), true), ["to 1: refuse 5: TooLarge"]);
    assert_eq!(begin(&mut b, begin_from(1, 5, install(), 10, 0), true), ["to 1: refuse 5: Malformed"]);
    assert_eq!(begin(&mut b, begin_from(1, 5, install(), 10, 16 << 20), true), ["to 1: refuse 5: Malformed"]);
    let huge = SnapshotKind::Install { envelope: vec![0; 128 << 10] };
    assert_eq!(begin(&mut b, begin_from(1, 5, huge, 10, 4), true), ["to 1: refuse 5: Malformed"]);
    assert_eq!(begin(&mut b, begin_from(1, 5, install(), 10, 4), true), ["to 1: ack 5 next 0 resend"]);
    // One at a time (incoming_max 1): another sender waits.
    assert_eq!(begin(&mut b, begin_from(3, 6, SnapshotKind::Offer, 10, 4), true), ["to 3: refuse 6: Busy"]);
    // The same sender's new transfer replaces its old one.
    assert_eq!(begin(&mut b, begin_from(1, 8, install(), 10, 4), true), ["to 1: ack 8 next 0 resend"]);
    assert_eq!(b.in_flight(), (0, 1));
    // A sender silent for longer than it could still be probing: dropped.
    let idle = config().idle_timeout_us();
    assert_eq!(b.next_deadline(), Some(100 + idle));
    out.clear();
    b.tick(100 + idle, &mut out);
    assert!(out.is_empty());
    assert_eq!(b.in_flight(), (0, 0));
    assert_eq!((b.stats().refused, b.stats().dropped), (6, 2));
    // A chunk of a dropped transfer: unknown.
    let chunk = ReplicationMsg::SnapshotChunk { shard: 0, from: 1, transfer: 8, seq: 0, crc32: 0, data: vec![] };
    b.on_message(200 + idle, 1, chunk, |_| true, &mut out).unwrap();
    assert_eq!(show(&out), ["to 1: refuse 8: Unknown"]);
    // Not a transfer message.
    let raft = ReplicationMsg::Raft { shard: 0, from: 1, bytes: vec![] };
    assert!(b.on_message(300, 1, raft, |_| true, &mut out).is_err());
}

#[test]
fn a_sender_bounds_its_transfers_one_per_receiver() {
    let mut a = Transfers::new(0, SENDER, config());
    let mut out = Vec::new();
    let data = || Bytes::from_static(DATA);
    assert_eq!(a.send(100, SENDER, install(), 7, data(), crc(), &mut out), Err(SendRefused::ToSelf));
    assert_eq!(a.send(100, 2, install(), 7, data(), crc(), &mut out), Ok(100));
    assert_eq!(a.send(100, 3, install(), 7, data(), crc(), &mut out), Ok(101));
    assert_eq!(a.send(100, 4, install(), 7, data(), crc(), &mut out), Err(SendRefused::Busy));
    out.clear();
    // A newer snapshot for replica 2 replaces the one under way.
    assert_eq!(a.send(200, 2, SnapshotKind::Offer, 9, data(), crc(), &mut out), Ok(200));
    assert_eq!(
        show(&out),
        ["to 2: cancel 100", "failed 100 to 2 at 7: Superseded", "to 2: begin 200 at 9, 10 bytes in chunks of 4"]
    );
    // The node ends what lost its reason (here: every install, as after losing leadership).
    out.clear();
    a.cancel_outgoing(|_, kind| matches!(kind, SnapshotKind::Offer), &mut out);
    assert_eq!(show(&out), ["to 3: cancel 101", "failed 101 to 3 at 7: Cancelled"]);
    assert_eq!(a.in_flight(), (1, 0));
    assert_eq!((a.stats().started, a.stats().failed), (3, 2));
    // An acknowledgement past the last chunk makes no sense: the transfer ends.
    let bad = ReplicationMsg::SnapshotAck { shard: 0, from: 2, transfer: 200, next: 9, resend: false };
    assert_eq!(show(&deliver(&mut a, 300, vec![bad])), ["to 2: cancel 200", "failed 200 to 2 at 9: BadAck"]);
    // A receiver that lost its reason refuses what is under way.
    let mut b = Transfers::new(0, RECEIVER, config());
    b.on_message(300, 1, begin_from(1, 5, install(), 10, 4), |_| true, &mut out).unwrap();
    out.clear();
    b.refuse_incoming(|_, kind| matches!(kind, SnapshotKind::Offer), &mut out);
    assert_eq!(show(&out), ["to 1: refuse 5: Unwanted"]);
}
