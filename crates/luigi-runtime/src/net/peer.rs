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

use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use super::codec::{encode_to_bytes, FrameCodec, FrameError, MAX_FRAME_BYTES_DEFAULT};
use super::wan::{DelayError, DelayLink};

/// Default capacity of a writer's queue, in frames.
pub const SEND_QUEUE_FRAMES_DEFAULT: usize = 1 << 16;

/// Initial capacity of a reader's receive buffer (it grows for larger frames; an idle
/// connection holds only this).
const READ_BUFFER_BYTES: usize = 16 << 10;

/// The writer stops gathering more frames into a batch beyond this size.
const MAX_BATCH_BYTES: usize = 256 << 10;

/// Batch buffers that grew beyond this (one huge frame) are released.
const KEEP_BATCH_BUFFER_BYTES: usize = 4 << 20;

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

/// Why [`PeerWriter::send`] did not accept a message. A refused message is
/// not queued anywhere; the caller decides whether to retry or give up.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The writer queue is full: the peer (or the network) is not keeping up.
    #[error("send queue is full (peer is not keeping up)")]
    Backlogged,
    /// The connection is closed.
    #[error("connection is closed")]
    Closed,
    /// The WAN delay line refused the frame.
    #[error(transparent)]
    Delay(#[from] DelayError),
    /// The message could not be encoded (or exceeds the frame limit).
    #[error(transparent)]
    Encode(#[from] FrameError),
}

impl<T> From<mpsc::error::TrySendError<T>> for SendError {
    fn from(e: mpsc::error::TrySendError<T>) -> Self {
        match e {
            mpsc::error::TrySendError::Full(_) => SendError::Backlogged,
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
        }
    }
}

/// Sending half of a connection, carrying messages of type `T`.
///
/// Cheap to clone; clones feed the same writer task. `send` never blocks and
/// can be called from any thread, inside or outside a Tokio runtime.
pub struct PeerWriter<T> {
    tx: mpsc::Sender<Bytes>,
    link: Option<DelayLink>,
    peer: SocketAddr,
    max_frame_bytes: usize,
    _msg: PhantomData<fn(&T)>,
}

impl<T> Clone for PeerWriter<T> {
    fn clone(&self) -> Self {
        PeerWriter {
            tx: self.tx.clone(),
            link: self.link.clone(),
            peer: self.peer,
            max_frame_bytes: self.max_frame_bytes,
            _msg: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for PeerWriter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerWriter")
            .field("peer", &self.peer)
            .field("link", &self.link)
            .field("queued_frames", &self.queued_frames())
            .finish()
    }
}

impl<T: Serialize> PeerWriter<T> {
    /// Encodes `msg` and queues it for sending (after the link's WAN delay,
    /// if any). Returns immediately.
    pub fn send(&self, msg: &T) -> Result<(), SendError> {
        let frame = encode_to_bytes(msg, self.max_frame_bytes)?;
        self.send_frame(frame)
    }

    /// Encodes `msg` once into a frame that can be passed to
    /// [`send_frame`](Self::send_frame) of any number of writers of `T`
    /// (broadcast without re-encoding).
    pub fn encode(&self, msg: &T) -> Result<Bytes, FrameError> {
        encode_to_bytes(msg, self.max_frame_bytes)
    }
}

impl<T> PeerWriter<T> {
    /// Queues an already encoded frame (length prefix included), e.g. from
    /// [`encode`](Self::encode) or [`encode_to_bytes`]. The frame must
    /// encode a `T`, or the peer will drop the connection.
    pub fn send_frame(&self, frame: Bytes) -> Result<(), SendError> {
        match &self.link {
            None => Ok(self.tx.try_send(frame)?),
            Some(link) => {
                // Reserve the queue slot now so delivery from the delay
                // thread can neither block nor fail.
                let permit = self.tx.clone().try_reserve_owned()?;
                Ok(link.submit(frame, permit)?)
            }
        }
    }

    /// Address of the remote end.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// True once the writer task has stopped (connection closed or failed).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Frames queued or in the delay line and not yet taken by the writer task.
    pub fn queued_frames(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// The WAN delay link of this direction, if any.
    pub fn link(&self) -> Option<&DelayLink> {
        self.link.as_ref()
    }
}

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
    read: OwnedReadHalf,
    peer: SocketAddr,
    max_frame_bytes: usize,
    shared_limit: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// Sending `()` tells the writer task to close the connection; dropping
    /// it means "reader done, keep writing".
    close_tx: oneshot::Sender<()>,
    _msg: PhantomData<fn() -> T>,
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

/// What the reader told the writer task.
enum ReaderSignal {
    /// Close the connection now.
    Close,
    /// Reader finished gracefully; stop listening for signals.
    Detached,
}

async fn next_signal(close_rx: &mut oneshot::Receiver<()>) -> ReaderSignal {
    match close_rx.await {
        Ok(()) => ReaderSignal::Close,
        Err(_) => ReaderSignal::Detached,
    }
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Bytes>,
    mut close_rx: oneshot::Receiver<()>,
    peer: SocketAddr,
) {
    let mut watch_reader = true;
    let mut batch = BytesMut::new();
    loop {
        let first = tokio::select! {
            biased;
            sig = next_signal(&mut close_rx), if watch_reader => match sig {
                ReaderSignal::Close => return,
                ReaderSignal::Detached => {
                    watch_reader = false;
                    continue;
                }
            },
            frame = rx.recv() => match frame {
                Some(frame) => frame,
                None => break, // every PeerWriter dropped, queue drained
            },
        };

        let buf: &[u8] = match rx.try_recv() {
            Err(_) => &first,
            Ok(second) => {
                batch.clear();
                if batch.capacity() > KEEP_BATCH_BUFFER_BYTES {
                    batch = BytesMut::new();
                }
                batch.extend_from_slice(&first);
                batch.extend_from_slice(&second);
                while batch.len() < MAX_BATCH_BYTES {
                    match rx.try_recv() {
                        Ok(frame) => batch.extend_from_slice(&frame),
                        Err(_) => break,
                    }
                }
                &batch
            }
        };

        let write = wr.write_all(buf);
        tokio::pin!(write);
        let result = loop {
            tokio::select! {
                biased;
                res = &mut write => break res,
                sig = next_signal(&mut close_rx), if watch_reader => match sig {
                    ReaderSignal::Close => return,
                    ReaderSignal::Detached => watch_reader = false,
                },
            }
        };
        if let Err(e) = result {
            debug!(peer = %peer, error = %e, "write failed; closing connection");
            return;
        }
    }
    if let Err(e) = wr.shutdown().await {
        debug!(peer = %peer, error = %e, "shutdown of write direction failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::codec::encode_frame;
    use crate::net::wan::{now_us, DelayDist, DelayLine};
    use serde::Deserialize;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;
    use tokio::time::timeout;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Data { seq: u64, sent_us: u64, body: Vec<u8> },
        Echo(u64),
    }

    const T: Duration = Duration::from_secs(20);

    fn data(seq: u64) -> Msg {
        Msg::Data { seq, sent_us: now_us(), body: vec![(seq % 251) as u8; (seq % 97) as usize * 13] }
    }

    /// Echo server: answers every `Data{seq}` with `Echo(seq)`; reports how
    /// each connection's reader ended.
    async fn echo_server(link_for_replies: Option<DelayLink>) -> (SocketAddr, mpsc::UnboundedReceiver<ReadEnd>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ends_tx, ends_rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let cfg = NetConfig::default();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (writer, reader) = split_stream::<Msg, Msg>(stream, &cfg, link_for_replies.clone()).unwrap();
                let ends_tx = ends_tx.clone();
                tokio::spawn(async move {
                    let end = reader
                        .run(move |m| {
                            if let Msg::Data { seq, .. } = m {
                                writer.send(&Msg::Echo(seq)).unwrap();
                            }
                        })
                        .await;
                    let _ = ends_tx.send(end);
                });
            }
        });
        (addr, ends_rx)
    }

    async fn round_trip(n: u64, client_link: Option<DelayLink>, server_link: Option<DelayLink>) {
        let (addr, _ends) = echo_server(server_link).await;
        let (writer, reader) = connect::<Msg, Msg>(addr, &NetConfig::default(), client_link).await.unwrap();
        let (mut rx, _h) = reader.spawn_channel(1024);
        let sender = {
            let writer = writer.clone();
            tokio::spawn(async move {
                for seq in 0..n {
                    loop {
                        match writer.send(&data(seq)) {
                            Ok(()) => break,
                            Err(SendError::Backlogged) => tokio::task::yield_now().await,
                            Err(e) => panic!("send failed: {e}"),
                        }
                    }
                }
            })
        };
        for seq in 0..n {
            let got = timeout(T, rx.recv()).await.unwrap().unwrap();
            assert_eq!(got, Msg::Echo(seq));
        }
        sender.await.unwrap();
        assert_eq!(writer.queued_frames(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_arrive_in_order_without_delay() {
        round_trip(20_000, None, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_arrive_in_order_with_delay() {
        let line = DelayLine::new().unwrap();
        let c = line.link(DelayDist::new(2000, 500), 1);
        let s = line.link(DelayDist::new(2000, 500), 2);
        round_trip(20_000, Some(c), Some(s)).await;
    }

    /// Throughput smoke test (run with `--ignored --nocapture`): one
    /// connection, small messages, echo round trip, with and without delay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore]
    async fn throughput_smoke() {
        let n = 400_000u64;
        for delayed in [false, true] {
            let line = DelayLine::new().unwrap();
            let link = |seed| delayed.then(|| line.link(DelayDist::new(2000, 500), seed));
            let start = std::time::Instant::now();
            round_trip(n, link(1), link(2)).await;
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "delayed={delayed}: {n} request+echo pairs in {secs:.2} s = {:.0} msgs/s each way",
                n as f64 / secs
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn payloads_arrive_intact() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let line = DelayLine::new().unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (_w, r) = split_stream::<Msg, Msg>(stream, &NetConfig::default(), None).unwrap();
            let (mut rx, _) = r.spawn_channel(16);
            let mut got = Vec::new();
            while let Some(m) = rx.recv().await {
                got.push(m);
            }
            got
        });
        let link = line.link(DelayDist::new(300, 300), 9);
        let (w, _r) = connect::<Msg, Msg>(addr, &NetConfig::default(), Some(link)).await.unwrap();
        let sent: Vec<Msg> = (0..3000).map(data).collect();
        for m in &sent {
            w.send(m).unwrap();
        }
        // Broadcast path: encode once, send the same frame.
        let frame = w.encode(&Msg::Echo(7)).unwrap();
        w.send_frame(frame.clone()).unwrap();
        w.send_frame(frame).unwrap();
        drop(w); // flushes delayed frames, then FIN
        let got = timeout(T, server).await.unwrap().unwrap();
        assert_eq!(got.len(), sent.len() + 2);
        assert_eq!(&got[..sent.len()], &sent[..]);
        assert_eq!(&got[sent.len()..], &[Msg::Echo(7), Msg::Echo(7)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measured_one_way_delay_matches_link() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let line = DelayLine::new().unwrap();
        let n = 200u64;
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (_w, r) = split_stream::<Msg, Msg>(stream, &NetConfig::default(), None).unwrap();
            let mut delays = Vec::new();
            r.run(|m| {
                if let Msg::Data { seq, sent_us, .. } = m {
                    delays.push((seq, now_us() - sent_us));
                }
            })
            .await;
            delays
        });
        let link = line.link(DelayDist::new(2000, 500), 3);
        let (w, _r) = connect::<Msg, Msg>(addr, &NetConfig::default(), Some(link)).await.unwrap();
        // Send from a plain OS thread with gaps, like a closed-loop client.
        std::thread::spawn(move || {
            for seq in 0..n {
                w.send(&data(seq)).unwrap();
                std::thread::sleep(Duration::from_micros(300));
            }
        })
        .join()
        .unwrap();
        let delays = timeout(T, server).await.unwrap().unwrap();
        assert_eq!(delays.len(), n as usize);
        for (i, &(seq, d)) in delays.iter().enumerate() {
            assert_eq!(seq, i as u64, "FIFO");
            assert!(d >= 1500, "message {seq} arrived after only {d} µs");
            assert!(d < 2500 + 100_000, "message {seq} took {d} µs");
        }
        let mean = delays.iter().map(|&(_, d)| d).sum::<u64>() / n;
        let min = delays.iter().map(|&(_, d)| d).min().unwrap_or(0);
        let max = delays.iter().map(|&(_, d)| d).max().unwrap_or(0);
        eprintln!("one-way delay over TCP: min {min} µs, mean {mean} µs, max {max} µs");
        assert!((1200..4000).contains(&mean), "mean one-way delay {mean} µs");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn garbage_frame_disconnects_only_that_peer() {
        let (addr, mut ends) = echo_server(None).await;
        let (good_w, good_r) = connect::<Msg, Msg>(addr, &NetConfig::default(), None).await.unwrap();
        let (mut good_rx, _) = good_r.spawn_channel(16);
        good_w.send(&data(1)).unwrap();
        assert_eq!(timeout(T, good_rx.recv()).await.unwrap(), Some(Msg::Echo(1)));

        // Oversized length prefix.
        let mut bad = TcpStream::connect(addr).await.unwrap();
        bad.write_all(&[0xFF; 16]).await.unwrap();
        let mut buf = [0u8; 64];
        let res = timeout(T, bad.read(&mut buf)).await.unwrap();
        assert!(matches!(res, Ok(0) | Err(_)), "bad peer not disconnected: {res:?}");
        let end = timeout(T, ends.recv()).await.unwrap().unwrap();
        assert!(matches!(end, ReadEnd::BadFrame(FrameError::TooLarge { .. })), "{end:?}");

        // Well-sized frame with a payload that is not a Msg.
        let mut bad2 = TcpStream::connect(addr).await.unwrap();
        let mut frame = BytesMut::new();
        encode_frame(&"not a message, but a long string", &mut frame).unwrap();
        bad2.write_all(&frame).await.unwrap();
        let res = timeout(T, bad2.read(&mut buf)).await.unwrap();
        assert!(matches!(res, Ok(0) | Err(_)), "bad peer not disconnected: {res:?}");
        let end = timeout(T, ends.recv()).await.unwrap().unwrap();
        assert!(matches!(end, ReadEnd::BadFrame(_)), "{end:?}");

        // The well-behaved connection is unaffected.
        for seq in 2..100 {
            good_w.send(&data(seq)).unwrap();
        }
        for seq in 2..100 {
            assert_eq!(timeout(T, good_rx.recv()).await.unwrap(), Some(Msg::Echo(seq)));
        }
        assert!(!good_w.is_closed());
    }

    /// Minimal subscriber recording `(level, fields)` of every event.
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

    struct FieldsToString<'a>(&'a mut String);

    impl tracing::field::Visit for FieldsToString<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            use std::fmt::Write;
            let _ = write!(self.0, "{}={:?} ", field.name(), value);
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut fields = String::new();
            event.record(&mut FieldsToString(&mut fields));
            if let Ok(mut events) = self.0.lock() {
                events.push((*event.metadata().level(), fields));
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Current-thread runtime so the thread-local subscriber sees the
    /// reader task's events.
    #[tokio::test]
    async fn bad_frame_logs_one_warning_naming_the_peer() {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let _guard = tracing::subscriber::set_default(Capture(events.clone()));
        let (addr, mut ends) = echo_server(None).await;
        let mut bad = TcpStream::connect(addr).await.unwrap();
        let bad_addr = bad.local_addr().unwrap();
        bad.write_all(&[0, 0, 0, 2, 0xFF, 0xFF]).await.unwrap();
        let end = timeout(T, ends.recv()).await.unwrap().unwrap();
        assert!(matches!(end, ReadEnd::BadFrame(FrameError::Malformed { len: 2, .. })), "{end:?}");
        let mut buf = [0u8; 8];
        let res = timeout(T, bad.read(&mut buf)).await.unwrap();
        assert!(matches!(res, Ok(0) | Err(_)), "{res:?}");

        let events = events.lock().unwrap().clone();
        let warnings: Vec<_> = events.iter().filter(|(level, _)| *level <= tracing::Level::WARN).collect();
        assert_eq!(warnings.len(), 1, "{events:?}");
        let line = &warnings[0].1;
        assert!(line.contains(&bad_addr.to_string()), "{line}");
        assert!(line.contains("malformed frame of 2 bytes"), "{line}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn full_queue_reports_backlogged() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let line = DelayLine::new().unwrap();
        let link = line.link(DelayDist::fixed(1_000_000), 1); // 1 s: frames stay queued
        let cfg = NetConfig { send_queue_frames: 4, ..NetConfig::default() };
        let (w, _r) = connect::<Msg, Msg>(addr, &cfg, Some(link)).await.unwrap();
        let _accepted = listener.accept().await.unwrap();
        for seq in 0..4 {
            w.send(&data(seq)).unwrap();
        }
        assert_eq!(w.queued_frames(), 4);
        assert!(matches!(w.send(&data(4)), Err(SendError::Backlogged)));
        let big = Msg::Data { seq: 0, sent_us: 0, body: vec![0; MAX_FRAME_BYTES_DEFAULT + 1] };
        assert!(matches!(w.send(&big), Err(SendError::Encode(FrameError::TooLarge { .. }))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn send_after_peer_vanishes_reports_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (w, r) = connect::<Msg, Msg>(addr, &NetConfig::default(), None).await.unwrap();
        let reader = r.spawn(|_| {});
        let (accepted, _) = listener.accept().await.unwrap();
        drop(accepted);
        drop(listener);
        let end = timeout(T, reader).await.unwrap().unwrap();
        assert!(matches!(end, ReadEnd::Eof | ReadEnd::Io(_)), "{end:?}");
        let closed = timeout(T, async {
            loop {
                match w.send(&data(0)) {
                    Ok(()) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(SendError::Closed) => break,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "writer never noticed the closed connection");
        assert!(w.is_closed());
    }
}
