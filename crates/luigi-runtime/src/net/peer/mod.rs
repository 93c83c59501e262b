//! TCP connections carrying framed messages: a batching [`PeerWriter`] and a
//! [`PeerReader`].
//!
//! A connection is set up with [`connect`] (client side) or [`split_stream`]
//! (an accepted stream). Both return a `PeerWriter<Out>` for the messages we
//! send and a `PeerReader<In>` for the messages we receive; `Out` and `In`
//! may differ (e.g. requests and responses).
//!
//! Write path: [`PeerWriter::send`] encodes on the caller's thread, optionally
//! delays the frame through a [`DelayLink`], and hands it to a writer task
//! through a bounded queue. The writer task drains everything queued into
//! one buffer and issues one `write_all` per batch.
//!
//! Read path: a [`PeerReader`] decodes frames with [`FrameCodec`] and passes
//! messages to a callback ([`PeerReader::spawn`]) or a channel
//! ([`PeerReader::spawn_channel`]). A malformed or oversized frame produces a
//! single `warn!` naming the peer and closes the connection in both
//! directions; it never panics.
//!
//! Connection lifetime:
//! * dropping every clone of a `PeerWriter` flushes the frames already queued
//!   (including delayed ones) and then shuts down the write direction (FIN);
//! * a read error or a bad frame closes the whole connection;
//! * the peer closing its side (EOF) ends the reader but leaves our write
//!   direction usable (half-close); writes fail later if the peer is gone.

//!
//! Split by direction: `writer` (the batching write task), `reader` (frame decoding and
//! delivery); connection setup is here.

mod reader;
mod writer;

use std::io;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};

#[cfg(doc)]
use super::codec::FrameCodec;
use super::codec::MAX_FRAME_BYTES_DEFAULT;
use super::wan::DelayLink;
pub use reader::{PeerReader, ReadEnd, StartedReader, PARTIAL_FRAME_TIMEOUT};
use writer::write_loop;
pub use writer::{PeerWriter, SendError};

/// Default capacity of a writer's queue, in frames.
pub const SEND_QUEUE_FRAMES_DEFAULT: usize = 1 << 16;

/// Per-connection settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// Largest accepted payload, in bytes, in both directions.
    pub max_frame_bytes: usize,
    /// Capacity of the writer queue in frames; frames waiting in a
    /// [`DelayLink`] count against it too.
    pub send_queue_frames: usize,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig { max_frame_bytes: MAX_FRAME_BYTES_DEFAULT, send_queue_frames: SEND_QUEUE_FRAMES_DEFAULT }
    }
}

/// Connects to `addr` and sets up both halves (see [`split_stream`]).
///
/// `link` delays our outgoing direction; the peer delays its own.
pub async fn connect<Out, In>(
    addr: impl ToSocketAddrs,
    cfg: &NetConfig,
    link: Option<DelayLink>,
) -> io::Result<(PeerWriter<Out>, PeerReader<In>)>
where
    Out: Serialize,
    In: DeserializeOwned + Send + 'static,
{
    let stream = TcpStream::connect(addr).await?;
    split_stream(stream, cfg, link)
}

/// Sets up a connected (e.g. accepted) stream: enables `TCP_NODELAY`,
/// spawns the writer task on the current Tokio runtime and returns the
/// writer plus an unstarted reader.
///
/// Must be called from within a Tokio runtime. `link` delays our outgoing
/// direction; a bypass link or `None` means no delay.
pub fn split_stream<Out, In>(
    stream: TcpStream,
    cfg: &NetConfig,
    link: Option<DelayLink>,
) -> io::Result<(PeerWriter<Out>, PeerReader<In>)>
where
    Out: Serialize,
    In: DeserializeOwned + Send + 'static,
{
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr()?;
    let (read, write) = stream.into_split();
    let (tx, rx) = mpsc::channel(cfg.send_queue_frames.max(1));
    let (close_tx, close_rx) = oneshot::channel();
    tokio::spawn(write_loop(write, rx, close_rx, peer));
    let writer = PeerWriter {
        tx,
        link: link.filter(|l| !l.is_bypass()),
        peer,
        max_frame_bytes: cfg.max_frame_bytes,
        _msg: PhantomData,
    };
    let reader = PeerReader {
        read,
        peer,
        max_frame_bytes: cfg.max_frame_bytes,
        shared_limit: None,
        close_tx,
        _msg: PhantomData,
    };
    Ok((writer, reader))
}

#[cfg(test)]
mod tests;
