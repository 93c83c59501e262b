//! The read direction: [`PeerReader`] decodes frames and delivers messages.

use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;

use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use super::super::codec::{FrameCodec, FrameError};

/// Initial capacity of a reader's receive buffer (it grows for larger frames; an idle
/// connection holds only this).
const READ_BUFFER_BYTES: usize = 16 << 10;

/// How a reader finished.
#[derive(Debug)]
pub enum ReadEnd {
    /// The peer closed its write direction cleanly.
    Eof,
    /// The channel consumer (see [`PeerReader::spawn_channel`]) went away.
    ConsumerGone,
    /// The peer sent a malformed or oversized frame; the connection was closed.
    BadFrame(FrameError),
    /// Reading failed (reset, truncated frame, ...); the connection was closed.
    Io(io::Error),
}

/// Receiving half of a connection, decoding messages of type `T`.
///
/// Not started until [`run`](Self::run), [`spawn`](Self::spawn) or
/// [`spawn_channel`](Self::spawn_channel) is called. Dropping it unstarted
/// just stops reading; it does not close our write direction.
pub struct PeerReader<T> {
    pub(super) read: OwnedReadHalf,
    pub(super) peer: SocketAddr,
    pub(super) max_frame_bytes: usize,
    pub(super) shared_limit: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// Sending `()` tells the writer task to close the connection; dropping
    /// it means "reader done, keep writing".
    pub(super) close_tx: oneshot::Sender<()>,
    pub(super) _msg: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for PeerReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerReader").field("peer", &self.peer).field("max_frame_bytes", &self.max_frame_bytes).finish()
    }
}

impl<T: DeserializeOwned + Send + 'static> PeerReader<T> {
    /// Address of the remote end.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    fn into_parts(self) -> (FramedRead<OwnedReadHalf, FrameCodec<T>>, SocketAddr, oneshot::Sender<()>) {
        let mut codec = FrameCodec::with_max_frame_bytes(self.max_frame_bytes);
        if let Some(limit) = self.shared_limit {
            codec = codec.with_shared_limit(limit);
        }
        let frames = FramedRead::with_capacity(self.read, codec, READ_BUFFER_BYTES);
        (frames, self.peer, self.close_tx)
    }

    /// Reads until the connection ends, calling `on_msg` for every message
    /// in order. Runs on the current task.
    pub async fn run(self, on_msg: impl FnMut(T)) -> ReadEnd {
        self.start().run(on_msg).await
    }

    /// Spawns [`run`](Self::run) on the current Tokio runtime.
    pub fn spawn(self, on_msg: impl FnMut(T) + Send + 'static) -> JoinHandle<ReadEnd> {
        tokio::spawn(self.run(on_msg))
    }

    /// Reads messages and sends `map(msg)` into a shared bounded channel, waiting when it is
    /// full (so a slow consumer slows the peer down through TCP instead of growing a queue).
    /// Many connections can fan in to one consumer this way.
    pub async fn forward<U>(self, tx: &mpsc::Sender<U>, map: impl FnMut(T) -> U) -> ReadEnd {
        self.start().forward(tx, map).await
    }

    /// Limits the frames this reader takes to `limit` as it is when each frame starts (a
    /// server lowers it for connections that have not authenticated yet).
    pub fn with_frame_limit(mut self, limit: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Self {
        self.shared_limit = Some(limit);
        self
    }

    /// Starts reading: the returned reader hands out messages one at a time (for a
    /// handshake) and can then forward the rest.
    pub fn start(self) -> StartedReader<T> {
        let (frames, peer, close_tx) = self.into_parts();
        StartedReader { frames, peer, close_tx }
    }

    /// Spawns a reader that forwards messages into a bounded channel of
    /// `capacity` messages. When the channel is full the reader stops
    /// reading, which back-pressures the peer through TCP. If the receiver
    /// is dropped the reader stops ([`ReadEnd::ConsumerGone`]) without
    /// closing our write direction.
    pub fn spawn_channel(self, capacity: usize) -> (mpsc::Receiver<T>, JoinHandle<ReadEnd>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let handle = tokio::spawn(async move { self.forward(&tx, |msg| msg).await });
        (rx, handle)
    }
}

/// A reader that has started: see [`PeerReader::start`].
pub struct StartedReader<T> {
    frames: FramedRead<OwnedReadHalf, FrameCodec<T>>,
    peer: SocketAddr,
    close_tx: oneshot::Sender<()>,
}

impl<T: DeserializeOwned + Send + 'static> StartedReader<T> {
    /// The next message, waiting at most `timeout`; `Err` when the connection ended, failed
    /// (then it is closed) or stayed silent that long.
    pub async fn next_within(&mut self, timeout: std::time::Duration) -> Result<T, String> {
        match tokio::time::timeout(timeout, self.frames.next()).await {
            Err(_) => Err(format!("nothing received within {timeout:?}")),
            Ok(Some(Ok(msg))) => Ok(msg),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(None) => Err("connection closed".into()),
        }
    }

    /// The next message. Unlike [`forward`](Self::forward) and [`run`](Self::run), a bad
    /// frame does not close the connection here (the caller closes it, after telling the
    /// peer why if it likes), and a frame left half-sent is not watched for: the caller
    /// bounds how long it waits.
    pub async fn next_msg(&mut self) -> Result<T, ReadEnd> {
        match self.frames.next().await {
            Some(Ok(msg)) => Ok(msg),
            Some(Err(FrameError::Io(e))) => Err(ReadEnd::Io(e)),
            Some(Err(e)) => Err(ReadEnd::BadFrame(e)),
            None => Err(ReadEnd::Eof),
        }
    }

    /// Like [`PeerReader::forward`], for the rest of the connection.
    pub async fn forward<U>(self, tx: &mpsc::Sender<U>, mut map: impl FnMut(T) -> U) -> ReadEnd {
        let StartedReader { mut frames, peer, close_tx } = self;
        let mut watch = PartialFrameWatch::new();
        loop {
            match watch.next(&mut frames).await {
                Some(Ok(msg)) => {
                    if tx.send(map(msg)).await.is_err() {
                        debug!(peer = %peer, "reader stopped: consumer dropped");
                        return ReadEnd::ConsumerGone;
                    }
                }
                Some(Err(e)) => return fail(peer, close_tx, e),
                None => return eof(peer),
            }
        }
    }

    /// Like [`PeerReader::run`], for the rest of the connection.
    pub async fn run(self, mut on_msg: impl FnMut(T)) -> ReadEnd {
        let StartedReader { mut frames, peer, close_tx } = self;
        let mut watch = PartialFrameWatch::new();
        loop {
            match watch.next(&mut frames).await {
                Some(Ok(msg)) => on_msg(msg),
                Some(Err(e)) => return fail(peer, close_tx, e),
                None => return eof(peer),
            }
        }
    }
}

/// A frame begun and not completed within about this long closes the connection (a peer that
/// sends half a frame and stalls holds a buffer otherwise).
pub const PARTIAL_FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
const PARTIAL_FRAME_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads frames, and every few seconds checks whether a frame has been left half-read.
/// Idle connections (nothing buffered) may stay open as long as they like.
struct PartialFrameWatch {
    check: tokio::time::Interval,
    /// When a check first found a partial frame buffered (and no frame completed since).
    partial_since: Option<std::time::Instant>,
}

impl PartialFrameWatch {
    fn new() -> Self {
        let start = tokio::time::Instant::now() + PARTIAL_FRAME_CHECK;
        let mut check = tokio::time::interval_at(start, PARTIAL_FRAME_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self { check, partial_since: None }
    }

    async fn next<T: DeserializeOwned>(
        &mut self,
        frames: &mut FramedRead<OwnedReadHalf, FrameCodec<T>>,
    ) -> Option<Result<T, FrameError>> {
        loop {
            tokio::select! {
                next = frames.next() => {
                    self.partial_since = None;
                    return next;
                }
                _ = self.check.tick() => {
                    if frames.read_buffer().is_empty() {
                        self.partial_since = None;
                        continue;
                    }
                    let since = *self.partial_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() + PARTIAL_FRAME_CHECK >= PARTIAL_FRAME_TIMEOUT {
                        let why = format!("a frame was left incomplete for {PARTIAL_FRAME_TIMEOUT:?}");
                        return Some(Err(FrameError::Io(io::Error::new(io::ErrorKind::TimedOut, why))));
                    }
                }
            }
        }
    }
}

fn eof(peer: SocketAddr) -> ReadEnd {
    debug!(peer = %peer, "peer closed the connection");
    ReadEnd::Eof
}

/// Logs a read failure and closes the connection.
fn fail(peer: SocketAddr, close_tx: oneshot::Sender<()>, e: FrameError) -> ReadEnd {
    // The writer may already be gone; then the connection is closing anyway.
    let _ = close_tx.send(());
    match e {
        FrameError::Io(e) => {
            debug!(peer = %peer, error = %e, "read failed; closing connection");
            ReadEnd::Io(e)
        }
        e => {
            warn!(peer = %peer, error = %e, "bad frame from peer; closing connection");
            ReadEnd::BadFrame(e)
        }
    }
}
