//! Length-prefixed postcard frames.
//!
//! Wire format of one frame:
//!
//! ```text
//! +----------------------+-------------------------------+
//! | len: u32 big-endian  | postcard payload (len bytes)  |
//! +----------------------+-------------------------------+
//! ```
//!
//! The length counts only the payload, not the 4-byte prefix. A decoder
//! refuses frames whose length exceeds its configured maximum *before*
//! buffering them, so a hostile or confused peer cannot make us allocate
//! gigabytes. A payload must be exactly one postcard value: trailing bytes
//! after the value are an error, as is an empty payload for any type whose
//! encoding is not empty.

use std::cell::RefCell;
use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

/// Default upper bound on the payload size of one frame (16 MiB).
pub const MAX_FRAME_BYTES_DEFAULT: usize = 16 << 20;

/// Size of the big-endian length prefix in front of every payload.
pub const LEN_PREFIX_BYTES: usize = 4;

/// Size of the per-thread chunks that [`encode_to_bytes`] carves frames from.
const ENCODE_CHUNK_BYTES: usize = 64 << 10;

/// What can go wrong while encoding or decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix (or the encoded payload) is larger than allowed.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Payload length in bytes.
        len: usize,
        /// Configured limit in bytes.
        max: usize,
    },
    /// The payload is not a valid postcard encoding of the expected type.
    #[error("malformed frame of {len} bytes: {source}")]
    Malformed {
        /// Payload length in bytes.
        len: usize,
        /// What postcard complained about.
        source: postcard::Error,
    },
    /// The payload decoded to a value but was followed by unused bytes.
    #[error("malformed frame of {len} bytes: {trailing_bytes} trailing bytes after the message")]
    TrailingBytes {
        /// Payload length in bytes.
        len: usize,
        /// Number of bytes left over after the decoded value.
        trailing_bytes: usize,
    },
    /// The message could not be serialized (e.g. a sequence of unknown length).
    #[error("cannot serialize message: {0}")]
    Serialize(postcard::Error),
    /// The underlying transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// True for errors caused by the bytes a peer sent (as opposed to the
    /// transport failing or us being unable to serialize).
    pub fn is_protocol_violation(&self) -> bool {
        matches!(self, FrameError::TooLarge { .. } | FrameError::Malformed { .. } | FrameError::TrailingBytes { .. })
    }
}

/// postcard output flavor appending directly to a `BytesMut`.
struct BytesMutFlavor<'a>(&'a mut BytesMut);

impl postcard::ser_flavors::Flavor for BytesMutFlavor<'_> {
    type Output = ();

    #[inline]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.put_u8(data);
        Ok(())
    }

    #[inline]
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Appends one frame (length prefix + postcard payload) for `msg` to `dst`.
///
/// Useful for writers that batch several frames into one buffer. No size
/// limit other than `u32::MAX` is enforced here; [`FrameCodec`] and
/// [`PeerWriter`](super::PeerWriter) check their configured maximum. On error
/// `dst` is left exactly as it was.
pub fn encode_frame<T: Serialize + ?Sized>(msg: &T, dst: &mut BytesMut) -> Result<(), FrameError> {
    encode_frame_limited(msg, dst, u32::MAX as usize)
}

/// Like [`encode_frame`], but fails with [`FrameError::TooLarge`] if the
/// payload exceeds `max_frame_bytes` (which is clamped to `u32::MAX`).
pub fn encode_frame_limited<T: Serialize + ?Sized>(
    msg: &T,
    dst: &mut BytesMut,
    max_frame_bytes: usize,
) -> Result<(), FrameError> {
    let start = dst.len();
    dst.reserve(LEN_PREFIX_BYTES + 64);
    dst.put_u32(0); // placeholder, patched below
    if let Err(e) = postcard::serialize_with_flavor(msg, BytesMutFlavor(dst)) {
        dst.truncate(start);
        return Err(FrameError::Serialize(e));
    }
    let len = dst.len() - start - LEN_PREFIX_BYTES;
    let max = max_frame_bytes.min(u32::MAX as usize);
    if len > max {
        dst.truncate(start);
        return Err(FrameError::TooLarge { len, max });
    }
    // `len <= u32::MAX` was checked just above.
    dst[start..start + LEN_PREFIX_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

thread_local! {
    static ENCODE_SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Encodes `msg` as one complete frame and returns it as `Bytes`.
///
/// Frames are carved out of a per-thread 64 KiB chunk, so encoding many small
/// messages costs one allocation per chunk rather than one per message (each
/// returned `Bytes` shares the chunk; the chunk is freed when the last frame
/// cut from it is dropped). The result can be sent to any number of peers
/// with [`PeerWriter::send_frame`](super::PeerWriter::send_frame).
pub fn encode_to_bytes<T: Serialize + ?Sized>(msg: &T, max_frame_bytes: usize) -> Result<Bytes, FrameError> {
    ENCODE_SCRATCH.with(|scratch| {
        // A re-entrant call (a Serialize impl that itself encodes frames) would
        // find the scratch borrowed; fall back to a fresh buffer then.
        match scratch.try_borrow_mut() {
            Ok(mut buf) => {
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(ENCODE_CHUNK_BYTES);
                }
                encode_frame_limited(msg, &mut buf, max_frame_bytes)?;
                Ok(buf.split().freeze())
            }
            Err(_) => {
                let mut buf = BytesMut::new();
                encode_frame_limited(msg, &mut buf, max_frame_bytes)?;
                Ok(buf.freeze())
            }
        }
    })
}

/// Decodes one postcard payload (without length prefix).
///
/// The payload must contain exactly one value of type `T`.
pub fn decode_payload<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FrameError> {
    let len = bytes.len();
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(FrameError::TrailingBytes { len, trailing_bytes: rest.len() }),
        Err(source) => Err(FrameError::Malformed { len, source }),
    }
}

/// `tokio_util` codec for length-prefixed postcard frames carrying `T`.
///
/// Decodes to `T`; encodes `&T` (or `T`). Frames whose payload exceeds
/// [`max_frame_bytes`](FrameCodec::max_frame_bytes) are rejected in both
/// directions.
pub struct FrameCodec<T> {
    max_frame_bytes: usize,
    /// When set, the decoding limit is read from here at every frame (raised by the server
    /// once a connection has authenticated).
    shared_limit: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    _msg: PhantomData<fn() -> T>,
}

impl<T> FrameCodec<T> {
    /// Codec with the default limit [`MAX_FRAME_BYTES_DEFAULT`].
    pub fn new() -> Self {
        Self::with_max_frame_bytes(MAX_FRAME_BYTES_DEFAULT)
    }

    /// Codec with a custom payload limit in bytes (clamped to `u32::MAX`).
    pub fn with_max_frame_bytes(max_frame_bytes: usize) -> Self {
        FrameCodec { max_frame_bytes: max_frame_bytes.min(u32::MAX as usize), shared_limit: None, _msg: PhantomData }
    }

    /// Decodes frames up to the smaller of the codec's limit and `limit` as it is now.
    pub fn with_shared_limit(mut self, limit: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        self.shared_limit = Some(limit);
        self
    }

    fn decode_limit(&self) -> usize {
        let shared = self.shared_limit.as_ref().map_or(usize::MAX, |l| l.load(std::sync::atomic::Ordering::Relaxed));
        self.max_frame_bytes.min(shared)
    }

    /// The payload limit in bytes.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }
}

impl<T> Default for FrameCodec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for FrameCodec<T> {
    fn clone(&self) -> Self {
        FrameCodec { shared_limit: self.shared_limit.clone(), ..Self::with_max_frame_bytes(self.max_frame_bytes) }
    }
}

impl<T> std::fmt::Debug for FrameCodec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCodec").field("max_frame_bytes", &self.max_frame_bytes).finish()
    }
}

impl<T: DeserializeOwned> Decoder for FrameCodec<T> {
    type Item = T;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<T>, FrameError> {
        let Some(prefix) = src.get(..LEN_PREFIX_BYTES) else {
            return Ok(None);
        };
        let mut len_be = [0u8; LEN_PREFIX_BYTES];
        len_be.copy_from_slice(prefix);
        let len = u32::from_be_bytes(len_be) as usize;
        let max = self.decode_limit();
        if len > max {
            return Err(FrameError::TooLarge { len, max });
        }
        let frame_bytes = LEN_PREFIX_BYTES + len;
        if src.len() < frame_bytes {
            // Make room for the rest of this frame in one go.
            src.reserve(frame_bytes - src.len());
            return Ok(None);
        }
        let result = decode_payload(&src[LEN_PREFIX_BYTES..frame_bytes]);
        src.advance(frame_bytes);
        result.map(Some)
    }
}

impl<T: Serialize> Encoder<&T> for FrameCodec<T> {
    type Error = FrameError;

    fn encode(&mut self, item: &T, dst: &mut BytesMut) -> Result<(), FrameError> {
        encode_frame_limited(item, dst, self.max_frame_bytes)
    }
}

impl<T: Serialize> Encoder<T> for FrameCodec<T> {
    type Error = FrameError;

    fn encode(&mut self, item: T, dst: &mut BytesMut) -> Result<(), FrameError> {
        encode_frame_limited(&item, dst, self.max_frame_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Sample {
        Ping(u64),
        Put { key: Vec<u8>, value: String, ts: (u64, u32) },
        Batch(Vec<Inner>),
        Empty,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Inner {
        id: u32,
        flag: bool,
        note: Option<String>,
    }

    fn samples() -> Vec<Sample> {
        vec![
            Sample::Ping(0),
            Sample::Ping(u64::MAX),
            Sample::Put { key: b"user/42".to_vec(), value: "héllo".into(), ts: (1_700_000_000_000_000, 7) },
            Sample::Batch(
                (0..50)
                    .map(|i| Inner { id: i, flag: i % 3 == 0, note: (i % 2 == 0).then(|| format!("n{i}")) })
                    .collect(),
            ),
            Sample::Empty,
            Sample::Put { key: vec![0xAB; 1000], value: String::new(), ts: (0, 0) },
        ]
    }

    fn decode_all(codec: &mut FrameCodec<Sample>, buf: &mut BytesMut) -> Vec<Sample> {
        let mut out = Vec::new();
        while let Some(m) = codec.decode(buf).expect("valid frames") {
            out.push(m);
        }
        out
    }

    #[test]
    fn round_trip() {
        let mut codec = FrameCodec::<Sample>::new();
        for s in samples() {
            let mut buf = BytesMut::new();
            codec.encode(&s, &mut buf).unwrap();
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            assert_eq!(len + 4, buf.len());
            assert_eq!(codec.decode(&mut buf).unwrap(), Some(s));
            assert!(buf.is_empty());
            assert_eq!(codec.decode(&mut buf).unwrap(), None);
        }
        // Owned-item encoder and the free functions agree.
        let s = samples().remove(2);
        let mut a = BytesMut::new();
        let mut b = BytesMut::new();
        codec.encode(s.clone(), &mut a).unwrap();
        encode_frame(&s, &mut b).unwrap();
        assert_eq!(a, b);
        let c = encode_to_bytes(&s, MAX_FRAME_BYTES_DEFAULT).unwrap();
        assert_eq!(&a[..], &c[..]);
        assert_eq!(decode_payload::<Sample>(&c[4..]).unwrap(), s);
    }

    #[test]
    fn encode_to_bytes_frames_are_independent() {
        let frames: Vec<Bytes> =
            (0..5000u64).map(|i| encode_to_bytes(&Sample::Ping(i), MAX_FRAME_BYTES_DEFAULT).unwrap()).collect();
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(decode_payload::<Sample>(&f[4..]).unwrap(), Sample::Ping(i as u64));
        }
    }

    #[test]
    fn concatenated_frames_split_at_every_boundary() {
        let msgs = samples();
        let mut all = BytesMut::new();
        for m in &msgs {
            encode_frame(m, &mut all).unwrap();
        }
        let all = all.freeze();
        let mut codec = FrameCodec::<Sample>::new();
        assert_eq!(decode_all(&mut codec, &mut BytesMut::from(&all[..])), msgs);

        for split in 0..=all.len() {
            let mut buf = BytesMut::new();
            buf.extend_from_slice(&all[..split]);
            let mut got = decode_all(&mut codec, &mut buf);
            buf.extend_from_slice(&all[split..]);
            got.extend(decode_all(&mut codec, &mut buf));
            assert_eq!(got, msgs, "split at {split}");
            assert!(buf.is_empty());
        }

        // Byte-by-byte feeding.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in all.iter() {
            buf.put_u8(b);
            got.extend(decode_all(&mut codec, &mut buf));
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn oversized_length_prefix_is_rejected_without_allocating() {
        let mut codec = FrameCodec::<Sample>::with_max_frame_bytes(1024);
        let mut buf = BytesMut::with_capacity(16);
        buf.put_u32(u32::MAX);
        buf.put_slice(&[1, 2, 3]);
        let cap_before = buf.capacity();
        match codec.decode(&mut buf) {
            Err(e @ FrameError::TooLarge { len, max }) => {
                assert_eq!(len, u32::MAX as usize);
                assert_eq!(max, 1024);
                assert!(e.is_protocol_violation());
                assert_eq!(e.to_string(), format!("frame of {} bytes exceeds the 1024-byte limit", u32::MAX));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(buf.capacity(), cap_before);

        // Just at the limit is fine (and merely waits for more bytes).
        let mut buf = BytesMut::new();
        buf.put_u32(1024);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        let mut buf = BytesMut::new();
        buf.put_u32(1025);
        assert!(matches!(codec.decode(&mut buf), Err(FrameError::TooLarge { len: 1025, .. })));
    }

    #[test]
    fn encoder_enforces_limit() {
        let mut codec = FrameCodec::<Sample>::with_max_frame_bytes(100);
        let big = Sample::Put { key: vec![1; 200], value: String::new(), ts: (0, 0) };
        let mut buf = BytesMut::new();
        buf.put_slice(b"keep");
        assert!(matches!(codec.encode(&big, &mut buf), Err(FrameError::TooLarge { max: 100, .. })));
        assert_eq!(&buf[..], b"keep");
        assert!(matches!(encode_to_bytes(&big, 100), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn garbage_payload_is_malformed() {
        let mut codec = FrameCodec::<Sample>::new();
        let mut buf = BytesMut::new();
        buf.put_u32(3);
        buf.put_slice(&[0xFF, 0xFF, 0xFF]); // enum discriminant varint never terminates
        match codec.decode(&mut buf) {
            Err(e @ FrameError::Malformed { len: 3, .. }) => {
                assert!(e.to_string().starts_with("malformed frame of 3 bytes: "), "{e}");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        // Unknown variant index.
        let mut buf = BytesMut::new();
        buf.put_u32(1);
        buf.put_u8(42);
        assert!(matches!(codec.decode(&mut buf), Err(FrameError::Malformed { len: 1, .. })));
        // Valid value followed by junk.
        let mut buf = BytesMut::new();
        buf.put_u32(3);
        buf.put_slice(&[3, 9, 9]); // Sample::Empty + 2 junk bytes
        match codec.decode(&mut buf) {
            Err(e @ FrameError::TrailingBytes { len: 3, trailing_bytes: 2 }) => {
                assert!(e.is_protocol_violation());
                assert!(e.to_string().starts_with("malformed frame of 3 bytes"));
            }
            other => panic!("expected TrailingBytes, got {other:?}"),
        }
    }

    #[test]
    fn zero_length_frame_is_malformed() {
        let mut codec = FrameCodec::<Sample>::new();
        let mut buf = BytesMut::new();
        buf.put_u32(0);
        encode_frame(&Sample::Ping(5), &mut buf).unwrap();
        assert!(matches!(codec.decode(&mut buf), Err(FrameError::Malformed { len: 0, .. })));
        // The bad frame was consumed; the next one is still intact.
        assert_eq!(codec.decode(&mut buf).unwrap(), Some(Sample::Ping(5)));
        // A zero-sized type legitimately encodes to an empty payload.
        let mut unit = FrameCodec::<()>::new();
        let mut buf = BytesMut::new();
        encode_frame(&(), &mut buf).unwrap();
        assert_eq!(&buf[..], &[0, 0, 0, 0]);
        assert_eq!(unit.decode(&mut buf).unwrap(), Some(()));
    }
}
