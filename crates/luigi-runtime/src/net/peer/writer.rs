//! The write direction: [`PeerWriter`] and the writer task that batches its frames.

use std::marker::PhantomData;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::super::codec::{encode_to_bytes, FrameError};
use super::super::wan::{DelayError, DelayLink};

/// The writer stops gathering more frames into a batch beyond this size.
const MAX_BATCH_BYTES: usize = 256 << 10;

/// Batch buffers that grew beyond this (one huge frame) are released.
const KEEP_BATCH_BUFFER_BYTES: usize = 4 << 20;

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
    pub(super) tx: mpsc::Sender<Bytes>,
    pub(super) link: Option<DelayLink>,
    pub(super) peer: SocketAddr,
    pub(super) max_frame_bytes: usize,
    pub(super) _msg: PhantomData<fn(&T)>,
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

pub(super) async fn write_loop(
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
