//! The tokio shell around the sans-I/O Luigi cores: TCP transport with WAN emulation, the
//! server event loop, the client library (and its status queries), the cluster file and the clock.

pub mod auth;
pub mod client;
pub mod clock;
pub mod config;
pub mod datadir;
pub mod gate;
pub mod metrics;
pub mod net;
pub mod server;
pub mod status;
pub mod storage;
pub mod timer;
pub mod wire;
