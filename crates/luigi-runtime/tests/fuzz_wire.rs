//! Property tests of what a server does with bytes from an unauthenticated connection: the
//! frame decoder never panics on arbitrary input, the connection gate never lets a
//! server-to-server message through from a connection that did not prove the cluster secret,
//! and a connection on the seats kept for peers never becomes a client. Messages are drawn
//! with strategies of their own and, structure-aware, with the derived `Arbitrary` of the
//! wire vocabulary (`luigi-protocol`'s feature `arbitrary`).
//! `PROPTEST_CASES=n` runs more cases (default 256).

use bytes::BytesMut;
use luigi_protocol::msg::{PeerBatch, PeerItem, ReplicationMsg, SnapshotKind, SnapshotRefusal};
use luigi_runtime::auth;
use luigi_runtime::config::NodeId;
use luigi_runtime::gate::{self, ConnAuth, GateConfig, Verdict};
use luigi_runtime::net::codec::{decode_payload, FrameCodec};
use luigi_runtime::wire::WireMsg;
use luigi_txn::msg::ClientMsg;
use luigi_txn::peer::{PeerBody, PeerMsg, PeerVocabulary};
use luigi_txn::progress::{LogPos, ProgressReport};
use luigi_txn::types::TxnId;
use proptest::prelude::*;
use tokio_util::codec::Decoder;

fn gate_config() -> GateConfig {
    GateConfig {
        me: NodeId { shard: 0, replica: 0 },
        replicas: vec![3, 3],
        secret: "the cluster secret 0123".into(),
        client_token: None,
        protocol: luigi_txn::types::Protocol::Luigi,
    }
}

/// Frames as they may arrive: the server-to-server shapes with every field over its whole
/// range (below), and any message of the wire vocabulary (the derived strategies of
/// `luigi_protocol::arbitrary`).
fn arb_wire() -> impl Strategy<Value = WireMsg> {
    prop_oneof![3 => arb_server_to_server(), 2 => any::<WireMsg>()]
}

/// An agreement item with every field over its whole range.
fn arb_peer_item() -> impl Strategy<Value = PeerItem> {
    let id = (any::<u64>(), any::<u64>()).prop_map(|(client, seq)| TxnId { client, seq });
    prop_oneof![
        (id.clone(), any::<u64>(), any::<Option<(u64, u64)>>(), any::<bool>()).prop_map(|(id, ts, at, fast)| {
            PeerItem::Propose { id, ts, at: at.map(|(term, index)| LogPos { term, index }), fast }
        }),
        (id.clone(), any::<u32>(), any::<u64>(), any::<u64>())
            .prop_map(|(id, replica, term, ts)| PeerItem::FastAccept { replica, term, id, ts }),
        (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(shard, replica, term, index, committed)| PeerItem::Progress(ProgressReport {
                shard,
                replica,
                term,
                pos: LogPos { term, index },
                committed
            })
        ),
        (id.clone(), any::<u64>()).prop_map(|(id, ts)| PeerItem::Confirm { id, ts }),
        id.clone().prop_map(|id| PeerItem::Acknowledged { id }),
        any::<u64>().prop_map(|ts| PeerItem::Applied { ts }),
    ]
}

/// The server-to-server shapes, every field over its whole range (the snapshot transfer's
/// five messages weigh one each, as the others do).
fn arb_server_to_server() -> impl Strategy<Value = WireMsg> {
    prop_oneof![
        1 => (any::<u32>(), any::<u64>(), proptest::collection::vec(arb_peer_item(), 0..4))
            .prop_map(|(from, watermark, items)| WireMsg::Peer(PeerBatch { from, watermark, items }.encode().msg)),
        1 => (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(from, bytes)| WireMsg::Peer(PeerMsg { from, body: PeerBody::Protocol(bytes) })),
        1 => (any::<u32>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(shard, from, bytes)| WireMsg::Replication(ReplicationMsg::Raft { shard, from, bytes })),
        5 => arb_snapshot_transfer(),
        1 => (any::<u32>(), any::<u32>(), any::<u64>())
            .prop_map(|(shard, replica, term)| WireMsg::Replication(ReplicationMsg::LeaderIs { shard, replica, term })),
        1 => (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(shard, from, sent_us)| WireMsg::Replication(
            ReplicationMsg::ClockProbe { shard, from, sent_us }
        )),
        1 => (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(shard, from, probe_sent_us, echo_us)| {
            WireMsg::Replication(ReplicationMsg::ClockEcho { shard, from, probe_sent_us, echo_us })
        }),
        1 => (any::<u32>(), any::<u32>(), any::<[u8; 32]>()).prop_map(|(shard, replica, proof)| WireMsg::PeerHello {
            shard,
            replica,
            proof
        }),
        1 => (any::<u64>(), proptest::option::of(any::<[u8; 32]>())).prop_map(|(client, proof)| WireMsg::Client(
            ClientMsg::Hello { client, proof, protocol: luigi_txn::types::Protocol::Occ }
        )),
        1 => any::<[u8; 16]>().prop_map(|nonce| WireMsg::Challenge { nonce }),
    ]
}

/// A snapshot transfer's messages (begin, chunk, acknowledgement, cancel, refusal).
fn arb_snapshot_transfer() -> impl Strategy<Value = WireMsg> {
    prop_oneof![
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(shard, from, transfer, total_bytes, envelope)| WireMsg::Replication(
                ReplicationMsg::SnapshotBegin {
                    shard,
                    from,
                    transfer,
                    kind: SnapshotKind::Install { envelope },
                    index: total_bytes / 3,
                    total_bytes,
                    chunk_bytes: (total_bytes % 4096) as u32,
                    crc32: transfer as u32,
                }
            )),
        (any::<u32>(), any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(
            |(shard, from, seq, data)| WireMsg::Replication(ReplicationMsg::SnapshotChunk {
                shard,
                from,
                transfer: 1,
                seq,
                crc32: 0,
                data
            })
        ),
        (any::<u32>(), any::<u64>(), any::<u32>(), any::<bool>()).prop_map(|(shard, from, next, resend)| {
            WireMsg::Replication(ReplicationMsg::SnapshotAck { shard, from, transfer: 1, next, resend })
        }),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(shard, from, transfer)| WireMsg::Replication(
            ReplicationMsg::SnapshotCancel { shard, from, transfer }
        )),
        (any::<u32>(), any::<u64>()).prop_map(|(shard, from)| WireMsg::Replication(ReplicationMsg::SnapshotRefuse {
            shard,
            from,
            transfer: 1,
            reason: SnapshotRefusal::Unknown
        })),
    ]
}

proptest! {
    /// Any message of the wire vocabulary goes through a frame and comes back the same; cut
    /// short it is an error that says what is wrong, and with a byte changed it decodes to a
    /// message or such an error.
    #[test]
    fn any_wire_message_round_trips_through_a_frame(msg in any::<WireMsg>(), cut in 0.0f64..1.0, xor in 1u8..) {
        use luigi_runtime::net::codec::{encode_frame_limited, LEN_PREFIX_BYTES, MAX_FRAME_BYTES_DEFAULT};
        let mut frame = BytesMut::new();
        encode_frame_limited(&msg, &mut frame, MAX_FRAME_BYTES_DEFAULT).expect("a drawn message fits in a frame");
        let payload = &frame[LEN_PREFIX_BYTES..];
        prop_assert_eq!(decode_payload::<WireMsg>(payload).unwrap(), msg);
        let at = ((payload.len() as f64) * cut) as usize;
        match decode_payload::<WireMsg>(&payload[..at]) {
            Ok(m) => prop_assert!(false, "a cut frame decoded to {:?}", m),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let mut damaged = payload.to_vec();
        damaged[at] ^= xor;
        if let Err(e) = decode_payload::<WireMsg>(&damaged) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn the_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_payload::<WireMsg>(&bytes);
        let mut codec = FrameCodec::<WireMsg>::with_max_frame_bytes(1 << 16);
        let mut buf = BytesMut::from(&bytes[..]);
        for _ in 0..8 {
            match codec.decode(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Arbitrary messages (and arbitrary bytes that decode) from a connection that is
    /// unauthenticated or a client never reach the replica as a peer's.
    #[test]
    fn unauthenticated_connections_never_speak_as_peers(
        msgs in proptest::collection::vec(arb_wire(), 1..16),
        raw in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
    ) {
        let cfg = gate_config();
        let decoded = raw.iter().filter_map(|b| decode_payload::<WireMsg>(b).ok());
        for start in [ConnAuth::Pending { nonce: auth::nonce(3, 9) }, ConnAuth::Client { client: 4 }] {
            let mut state = start;
            for m in msgs.iter().cloned().chain(decoded.clone()) {
                let verdict = gate::check(&cfg, &mut state, &m, |_| false);
                prop_assert!(!matches!(verdict, Verdict::Peer(_) | Verdict::PeerAuthenticated(_)), "{:?} let {:?} through", start, m);
                prop_assert!(!matches!(state, ConnAuth::Peer(_)));
            }
        }
    }

    /// A connection accepted on the seats kept for peers (the strangers' seats all taken)
    /// never becomes a client, whatever it sends: while it has not authenticated, the server
    /// asks `on_reserve` first, as `server/conns.rs` does.
    #[test]
    fn a_connection_on_the_peer_reserve_never_becomes_a_client(
        msgs in proptest::collection::vec(arb_wire(), 1..16),
        clients in proptest::collection::vec(any::<u64>(), 1..4),
    ) {
        let cfg = gate_config();
        let hellos: Vec<WireMsg> = clients
            .iter()
            .map(|&client| WireMsg::Client(ClientMsg::Hello { client, proof: None, protocol: cfg.protocol }))
            .collect();
        let mut state = ConnAuth::Pending { nonce: auth::nonce(3, 9) };
        for m in hellos.iter().chain(&msgs).chain(&hellos) {
            let reserved = matches!(state, ConnAuth::Pending { .. }).then(|| gate::on_reserve(m, 10)).flatten();
            let verdict = reserved.unwrap_or_else(|| gate::check(&cfg, &mut state, m, |_| false));
            prop_assert!(!matches!(verdict, Verdict::Client(_)), "{:?} let through", m);
            prop_assert!(!matches!(state, ConnAuth::Client { .. }), "became a client on {:?}", m);
        }
    }
}

/// The largest snapshot chunk a receiver takes, with its message around it, fits in one frame
/// of a peer connection (and decodes back), so no snapshot ever needs a larger frame.
#[test]
fn the_largest_snapshot_chunk_fits_in_a_peer_frame() {
    use luigi_node::snapshot_transfer::CHUNK_BYTES_MAX;
    use luigi_runtime::net::codec::{encode_frame_limited, LEN_PREFIX_BYTES, MAX_FRAME_BYTES_DEFAULT};
    let data = vec![7u8; CHUNK_BYTES_MAX as usize];
    let msg = WireMsg::Replication(ReplicationMsg::SnapshotChunk {
        shard: u32::MAX,
        from: u64::MAX,
        transfer: u64::MAX,
        seq: u32::MAX,
        crc32: u32::MAX,
        data,
    });
    let mut frame = BytesMut::new();
    encode_frame_limited(&msg, &mut frame, MAX_FRAME_BYTES_DEFAULT).expect("fits in a frame");
    assert!(frame.len() - LEN_PREFIX_BYTES < MAX_FRAME_BYTES_DEFAULT);
    let decoded: WireMsg = decode_payload(&frame[LEN_PREFIX_BYTES..]).unwrap();
    assert_eq!(decoded, msg);
}
