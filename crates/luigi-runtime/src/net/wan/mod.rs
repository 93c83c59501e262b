//! WAN delay emulation in user space (the test machines have no `netem`).
//!
//! * [`DelayDist`] — a one-way delay distribution, uniform in
//!   `[mean - jitter, mean + jitter]` (saturating at 0).
//! * [`Scenario`] — the named deployments used by the benchmarks.
//! * [`DelayModel`] — a default distribution plus per-link overrides keyed by
//!   `(from_node, to_node)` names.
//! * [`DelayLine`] — one dedicated OS thread per process holding a min-heap of
//!   frames waiting to be handed to connection writers. It sleeps until the
//!   earliest deadline with `thread::park_timeout`, which is accurate to
//!   roughly 50–100 µs (Tokio timers only have 1 ms resolution, hence a
//!   thread).
//! * [`DelayLink`] — one direction of one connection: a seeded RNG drawing a
//!   delay per frame, and per-link FIFO order
//!   (`deliver_at_us = max(last_deliver_at_us, now_us + delay_us)`).
//!
//! Frames travel through the line together with an
//! [`OwnedPermit`] of the destination
//! writer's bounded queue, reserved at send time. Delivery therefore never
//! blocks the delay thread and never drops a frame; a frame is only lost if
//! its connection has already closed.
//!
//! **Back-pressure:** the line holds at most `capacity` frames
//! ([`DELAY_LINE_CAPACITY_DEFAULT`] = 1,000,000) across all links. When it is
//! full, [`DelayLink::submit`] returns [`DelayError::Full`] immediately; it
//! never waits and never silently drops.
//!
//! **Shutdown:** dropping the [`DelayLine`] stops its thread. Frames still in
//! the heap are delivered immediately (their remaining delay is skipped) so
//! nothing accepted is lost; afterwards every link of that line refuses new
//! frames with [`DelayError::ShutDown`].
//!
//! Split by concern: `model` (distributions, scenarios, per-link overrides), `line` (the
//! delay thread), `link` (one direction of one connection).

mod line;
mod link;

use std::sync::OnceLock;
use std::time::Instant;

#[cfg(doc)]
use tokio::sync::mpsc::OwnedPermit;

pub use line::{DelayError, DelayLine, DELAY_LINE_CAPACITY_DEFAULT};
pub use link::DelayLink;

/// Microseconds elapsed since a process-wide anchor (the first call).
///
/// All deadlines in this module use this clock, so timestamps taken with it
/// are comparable across threads of the same process.
pub fn now_us() -> u64 {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    ANCHOR.get_or_init(Instant::now).elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests;
