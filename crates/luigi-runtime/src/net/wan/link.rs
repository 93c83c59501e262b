//! One direction of one connection through a [`DelayLine`].

use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, PoisonError};
use std::thread::Thread;

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc::OwnedPermit;

use super::line::{DelayError, Pending, Shared};
use super::now_us;
#[cfg(doc)]
use super::DelayLine;
use luigi_wan::DelayDist;

pub(super) struct LinkState {
    pub(super) rng: ChaCha8Rng,
    pub(super) last_deliver_at_us: u64,
    pub(super) next_seq: u64,
}

pub(super) struct LinkInner {
    pub(super) shared: Arc<Shared>,
    pub(super) tx: std_mpsc::Sender<Pending>,
    pub(super) thread: Thread,
    pub(super) state: Mutex<LinkState>,
}

/// One direction of one connection through a [`DelayLine`].
///
/// Cloning yields a handle to the *same* link (shared RNG and FIFO state).
#[derive(Clone)]
pub struct DelayLink {
    pub(super) dist: DelayDist,
    /// `None` for bypass links.
    pub(super) inner: Option<Arc<LinkInner>>,
}

impl DelayLink {
    /// A link without delay that delivers immediately and needs no thread.
    pub fn bypass() -> Self {
        DelayLink { dist: DelayDist::ZERO, inner: None }
    }

    /// The link's delay distribution.
    pub fn dist(&self) -> DelayDist {
        self.dist
    }

    /// True if frames skip the delay thread.
    pub fn is_bypass(&self) -> bool {
        self.inner.is_none()
    }

    /// Hands `frame` to `permit` (a reserved slot of the destination queue)
    /// after a delay drawn from the link's distribution, keeping FIFO order
    /// on this link. Returns immediately; never blocks.
    ///
    /// On error the frame is not accepted and the permit is released.
    pub fn submit(&self, frame: Bytes, permit: OwnedPermit<Bytes>) -> Result<(), DelayError> {
        let Some(inner) = &self.inner else {
            permit.send(frame);
            return Ok(());
        };
        let shared = &*inner.shared;
        let prev = shared.pending.fetch_add(1, Ordering::SeqCst);
        if prev >= shared.capacity {
            shared.pending.fetch_sub(1, Ordering::SeqCst);
            return Err(DelayError::Full { capacity: shared.capacity });
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            shared.pending.fetch_sub(1, Ordering::SeqCst);
            return Err(DelayError::ShutDown);
        }
        let deliver_at_us = {
            let mut st = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
            let delay_us = self.dist.sample_us(&mut st.rng);
            let deliver_at_us = st.last_deliver_at_us.max(now_us().saturating_add(delay_us));
            st.last_deliver_at_us = deliver_at_us;
            let seq = st.next_seq;
            st.next_seq += 1;
            // Enqueue under the lock so the channel order matches `seq`: the
            // thread then never sees a later frame of this link first.
            let pending = Pending { deliver_at_us, seq, frame, permit };
            if inner.tx.send(pending).is_err() {
                drop(st);
                shared.pending.fetch_sub(1, Ordering::SeqCst);
                return Err(DelayError::ShutDown);
            }
            deliver_at_us
        };
        fence(Ordering::SeqCst);
        if deliver_at_us < shared.next_wake_us.load(Ordering::SeqCst) {
            inner.thread.unpark();
        }
        Ok(())
    }
}

impl fmt::Debug for DelayLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayLink").field("dist", &self.dist).field("bypass", &self.is_bypass()).finish()
    }
}
