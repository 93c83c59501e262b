//! Byte formats: raft messages on the wire and raft entries in the write-ahead log.
//!
//! **Messages** are `MAGIC (2 bytes "LR") | VERSION (1 byte, = 1) | protobuf-encoded
//! eraftpb.Message` (rust-protobuf 2, raft's default `protobuf-codec`). The header lets [`decode_message`] reject bytes that are not ours
//! with a clear error instead of decoding garbage into a plausible message (protobuf is very
//! forgiving); the decoded message is also checked for a known type and non-zero peer ids.
//!
//! **Entries** are stored as [`PersistEntry`]: `index` and `term` as plain numbers (the WAL keeps
//! them in its record header) and `data` = the protobuf encoding of the eraftpb.Entry with its
//! index and term cleared (protobuf omits zero fields, so they cost nothing), i.e. entry type,
//! payload and context. For a normal entry the payload is the postcard encoding of the log's
//! record (`luigi_protocol::log::LogRecord` for a Luigi shard; see [`crate::Record`]).

use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState as PbHardState, Message, MessageType};

/// First bytes of every encoded message.
pub const MESSAGE_MAGIC: [u8; 2] = *b"LR";
/// Format version of encoded messages.
pub const MESSAGE_VERSION: u8 = 1;
const HEADER_BYTES: usize = 3;

/// Why bytes could not be decoded into a raft message or entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header.
    #[error("{len} bytes is too short for a raft message (header is {HEADER_BYTES} bytes)")]
    TooShort {
        /// Length received.
        len: usize,
    },
    /// The first two bytes are not [`MESSAGE_MAGIC`].
    #[error("not a Luigi raft message: bad magic {found:02x?} (expected {MESSAGE_MAGIC:02x?})")]
    BadMagic {
        /// The first two bytes.
        found: [u8; 2],
    },
    /// Unknown format version.
    #[error("unsupported raft message format version {0} (this build speaks {MESSAGE_VERSION})")]
    UnsupportedVersion(u8),
    /// The protobuf body does not parse (including an unknown message or entry type number).
    #[error("malformed protobuf body: {0}")]
    Protobuf(String),
    /// A message that must name its sender or receiver has a zero id.
    #[error("raft message {msg_type:?} has no {field} id")]
    MissingPeer {
        /// Message type.
        msg_type: MessageType,
        /// `"from"` or `"to"`.
        field: &'static str,
    },
}

/// Encodes a raft message for the wire (see the module docs).
pub fn encode_message(msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + msg.compute_size() as usize);
    out.extend_from_slice(&MESSAGE_MAGIC);
    out.push(MESSAGE_VERSION);
    // Writing into a Vec cannot fail: every field of a raft message is optional (proto3), so
    // there is no missing required field, and a Vec grows.
    msg.write_to_vec(&mut out).expect("encoding a raft message into a Vec cannot fail");
    out
}

/// Decodes bytes made by [`encode_message`], rejecting anything else with a [`DecodeError`].
pub fn decode_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::TooShort { len: bytes.len() });
    }
    if bytes[..2] != MESSAGE_MAGIC {
        return Err(DecodeError::BadMagic { found: [bytes[0], bytes[1]] });
    }
    if bytes[2] != MESSAGE_VERSION {
        return Err(DecodeError::UnsupportedVersion(bytes[2]));
    }
    let msg = Message::parse_from_bytes(&bytes[HEADER_BYTES..]).map_err(|e| DecodeError::Protobuf(e.to_string()))?;
    // rust-protobuf refuses unknown enum numbers (message or entry type) while parsing.
    let msg_type = msg.get_msg_type();
    if msg.from == 0 {
        return Err(DecodeError::MissingPeer { msg_type, field: "from" });
    }
    if msg.to == 0 {
        return Err(DecodeError::MissingPeer { msg_type, field: "to" });
    }
    Ok(msg)
}

/// A raft log entry in the form the shell persists: the write-ahead log stores exactly
/// `(index, term, data)`. See the module docs for `data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistEntry {
    /// Log index.
    pub index: u64,
    /// Term the entry was created in.
    pub term: u64,
    /// Encoded entry (type, payload, context), opaque to the shell.
    pub data: Vec<u8>,
}

/// The persisted form of a raft-rs entry: its index, term and encoded data (as
/// [`DiskStorage`](crate::disk::DiskStorage) stores it).
pub fn encode_entry(e: &Entry) -> PersistEntry {
    let mut body = Entry::default();
    body.set_entry_type(e.get_entry_type());
    body.data = e.data.clone();
    body.context = e.context.clone();
    let data = body.write_to_bytes().expect("encoding a raft entry into a Vec cannot fail");
    PersistEntry { index: e.index, term: e.term, data }
}

pub(crate) fn decode_entry(p: &PersistEntry) -> Result<Entry, DecodeError> {
    let mut e = Entry::parse_from_bytes(&p.data).map_err(|e| DecodeError::Protobuf(e.to_string()))?;
    e.index = p.index;
    e.term = p.term;
    Ok(e)
}

/// The Raft state that must be durable before votes and acknowledgements leave the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HardState {
    /// Current term.
    pub term: u64,
    /// Candidate voted for in `term` (0: none).
    pub vote: u64,
    /// Highest index known committed. Not needed for safety (Raft re-learns it from the
    /// leader); it only lets a restarted replica hand back what it knows is committed sooner.
    pub commit: u64,
}

impl From<&PbHardState> for HardState {
    fn from(hs: &PbHardState) -> Self {
        HardState { term: hs.term, vote: hs.vote, commit: hs.commit }
    }
}

impl From<HardState> for PbHardState {
    fn from(hs: HardState) -> Self {
        PbHardState { term: hs.term, vote: hs.vote, commit: hs.commit, ..Default::default() }
    }
}

const HS_MAGIC: &[u8; 4] = b"LRHS";
const HS_VERSION: u32 = 1;
const HS_BYTES: usize = 36;

/// The hard-state file's contents (see [`crate::disk`]): `"LRHS" | version u32 LE (=1) | term
/// u64 LE | vote u64 LE | commit u64 LE | CRC-32 u32 LE` of the first 32 bytes.
pub(crate) fn encode_hard_state(hs: &HardState) -> [u8; HS_BYTES] {
    let mut b = [0u8; HS_BYTES];
    b[..4].copy_from_slice(HS_MAGIC);
    b[4..8].copy_from_slice(&HS_VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&hs.term.to_le_bytes());
    b[16..24].copy_from_slice(&hs.vote.to_le_bytes());
    b[24..32].copy_from_slice(&hs.commit.to_le_bytes());
    let crc = crc32fast::hash(&b[..32]);
    b[32..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Parses [`encode_hard_state`]'s bytes; `Err` says what is wrong with them.
pub(crate) fn decode_hard_state(b: &[u8]) -> Result<HardState, String> {
    if b.len() != HS_BYTES {
        return Err(format!("{} bytes, expected {HS_BYTES}", b.len()));
    }
    if &b[..4] != HS_MAGIC {
        return Err("bad magic (not a Luigi raft hard state)".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let u64_at = |at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    };
    let (stored, computed) = (u32_at(32), crc32fast::hash(&b[..32]));
    if stored != computed {
        return Err(format!("CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"));
    }
    let version = u32_at(4);
    if version != HS_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    Ok(HardState { term: u64_at(8), vote: u64_at(16), commit: u64_at(24) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_state_round_trip_and_damage() {
        let hs = HardState { term: 7, vote: 2, commit: 41 };
        let b = encode_hard_state(&hs);
        assert_eq!(decode_hard_state(&b).unwrap(), hs);
        let mut bad = b;
        bad[10] ^= 1;
        assert!(decode_hard_state(&bad).unwrap_err().contains("CRC mismatch"));
        assert!(decode_hard_state(&b[..20]).unwrap_err().contains("20 bytes"));
    }

    #[test]
    fn message_round_trip_and_garbage() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = 1;
        m.to = 2;
        m.term = 3;
        m.entries.push(Entry { index: 4, term: 3, data: vec![1, 2, 3].into(), ..Default::default() });
        let bytes = encode_message(&m);
        assert_eq!(decode_message(&bytes), Ok(m));

        assert_eq!(decode_message(&[]), Err(DecodeError::TooShort { len: 0 }));
        assert!(matches!(decode_message(b"hello world"), Err(DecodeError::BadMagic { .. })));
        assert_eq!(decode_message(b"LR\x07abc"), Err(DecodeError::UnsupportedVersion(7)));
        assert!(matches!(decode_message(b"LR\x01\xff\xff\xff"), Err(DecodeError::Protobuf(_))));
        // A well-formed body with an unknown type number.
        // A well-formed body with an unknown type number: field 1, varint 99, then from and to.
        let unknown_type = b"LR\x01\x08\x63\x20\x02\x28\x01";
        assert_eq!(decode_message(unknown_type), Err(DecodeError::Protobuf("invalid enum value".into())));
        let bad = Message { msg_type: MessageType::MsgHeartbeat, from: 0, to: 2, ..Default::default() };
        assert!(matches!(decode_message(&encode_message(&bad)), Err(DecodeError::MissingPeer { field: "from", .. })));
    }

    #[test]
    fn entry_round_trip() {
        let e = Entry {
            index: 9,
            term: 2,
            data: b"abc".to_vec().into(),
            context: b"x".to_vec().into(),
            ..Default::default()
        };
        let p = encode_entry(&e);
        assert_eq!((p.index, p.term), (9, 2));
        assert_eq!(decode_entry(&p), Ok(e));
        let noop = Entry { index: 10, term: 3, ..Default::default() };
        let p = encode_entry(&noop);
        assert!(p.data.is_empty(), "a no-op entry costs no data bytes");
        assert_eq!(decode_entry(&p), Ok(noop));
    }
}
