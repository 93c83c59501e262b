//! Generic, protocol-agnostic network layer.
//!
//! Nothing here knows Luigi's message types: every message type is just
//! `T: serde::Serialize` (outgoing) or `T: serde::de::DeserializeOwned +
//! Send + 'static` (incoming).
//!
//! * [`codec`] — length-prefixed postcard frames (`u32` big-endian length,
//!   then the payload) and the [`FrameCodec`] for `tokio_util`.
//! * [`wan`] — WAN delay emulation: [`Scenario`]s, [`DelayModel`], and the
//!   per-process [`DelayLine`] thread with per-connection [`DelayLink`]s.
//! * [`peer`] — TCP connections: a batching, non-blocking [`PeerWriter`] and
//!   a [`PeerReader`] that drops misbehaving peers.
//!
//! WAN delay is applied by the *sender*: each direction of a connection gets
//! its own [`DelayLink`], typically `line.link(model.dist(me, them), seed)`.
//!
//! # Server (accept loop)
//!
//! ```no_run
//! use luigi_runtime::net::{split_stream, DelayLine, NetConfig};
//! use luigi_wan::{DelayModel, Scenario};
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Request(u64);
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Response(u64);
//! # async fn serve() -> std::io::Result<()> {
//! let line = DelayLine::new()?; // one per process; keep it alive
//! let model = DelayModel::from_scenario(Scenario::SameRegion);
//! let cfg = NetConfig::default();
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:7000").await?;
//! let mut seed = 0u64;
//! loop {
//!     let (stream, addr) = listener.accept().await?;
//!     seed += 1;
//!     let link = line.link(model.dist("s0r0", "client"), seed);
//!     let (writer, reader) = split_stream::<Response, Request>(stream, &cfg, Some(link))?;
//!     // Callback style (or `reader.spawn_channel(cap)` for a Receiver<Request>).
//!     reader.spawn(move |Request(id)| {
//!         if let Err(e) = writer.send(&Response(id)) {
//!             tracing::warn!(%addr, error = %e, "dropping response");
//!         }
//!     });
//! }
//! # }
//! ```
//!
//! # Client (connect)
//!
//! ```no_run
//! use luigi_runtime::net::{connect, DelayLine, NetConfig};
//! use luigi_wan::{DelayModel, Scenario};
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Request(u64);
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Response(u64);
//! # async fn client() -> anyhow::Result<()> {
//! let line = DelayLine::new()?;
//! let model = DelayModel::from_scenario(Scenario::SameRegion);
//! let link = line.link(model.dist("client", "s0r0"), 1);
//! let (writer, reader) =
//!     connect::<Request, Response>("127.0.0.1:7000", &NetConfig::default(), Some(link)).await?;
//! let (mut responses, _reader_task) = reader.spawn_channel(1024);
//! writer.send(&Request(1))?; // non-blocking; errors if backlogged or closed
//! let _first: Option<Response> = responses.recv().await;
//! # Ok(())
//! # }
//! ```

pub mod codec;
pub mod peer;
pub mod wan;

pub use codec::{
    decode_payload, encode_frame, encode_frame_limited, encode_to_bytes, FrameCodec, FrameError, LEN_PREFIX_BYTES,
    MAX_FRAME_BYTES_DEFAULT,
};
pub use peer::{
    connect, split_stream, NetConfig, PeerReader, PeerWriter, ReadEnd, SendError, SEND_QUEUE_FRAMES_DEFAULT,
};
pub use wan::{now_us, DelayError, DelayLine, DelayLink, DELAY_LINE_CAPACITY_DEFAULT};
