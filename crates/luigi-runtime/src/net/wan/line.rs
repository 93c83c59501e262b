//! The per-process delay thread: a min-heap of frames waiting for their deadline.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc::OwnedPermit;

use super::link::{DelayLink, LinkInner, LinkState};
use super::now_us;
use luigi_wan::DelayDist;

/// Default bound on frames held by one [`DelayLine`].
pub const DELAY_LINE_CAPACITY_DEFAULT: usize = 1_000_000;

/// Why a [`DelayLink`] refused a frame. The frame was not accepted (and its
/// queue reservation was released); nothing is dropped silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DelayError {
    /// The delay line already holds `capacity` frames.
    #[error("WAN delay line is full ({capacity} frames in flight)")]
    Full {
        /// The line's capacity in frames.
        capacity: usize,
    },
    /// The [`DelayLine`] this link belongs to has been dropped.
    #[error("WAN delay line has shut down")]
    ShutDown,
}

/// A frame waiting in the delay line, with the queue slot it will land in.
pub(super) struct Pending {
    pub(super) deliver_at_us: u64,
    pub(super) seq: u64,
    pub(super) frame: Bytes,
    pub(super) permit: OwnedPermit<Bytes>,
}

impl Pending {
    fn key(&self) -> (u64, u64) {
        (self.deliver_at_us, self.seq)
    }

    fn deliver(self) {
        // If the connection is gone the frame is dropped with it.
        self.permit.send(self.frame);
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest deadline.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.key().cmp(&self.key())
    }
}

/// State shared between the delay thread and all links.
pub(super) struct Shared {
    pub(super) capacity: usize,
    /// Frames accepted by `submit` and not yet delivered.
    pub(super) pending: AtomicUsize,
    pub(super) shutdown: AtomicBool,
    /// Deadline the thread is sleeping until: 0 while it is awake (senders
    /// need not wake it), `u64::MAX` when idle.
    pub(super) next_wake_us: AtomicU64,
}

/// The per-process delay thread. See the [module docs](super).
pub struct DelayLine {
    shared: Arc<Shared>,
    tx: std_mpsc::Sender<Pending>,
    thread: Thread,
    join: Option<JoinHandle<()>>,
}

impl DelayLine {
    /// Starts a delay thread holding at most [`DELAY_LINE_CAPACITY_DEFAULT`]
    /// frames.
    pub fn new() -> std::io::Result<Self> {
        Self::with_capacity(DELAY_LINE_CAPACITY_DEFAULT)
    }

    /// Starts a delay thread holding at most `capacity` frames (at least 1).
    pub fn with_capacity(capacity: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            capacity: capacity.max(1),
            pending: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            next_wake_us: AtomicU64::new(0),
        });
        let (tx, rx) = std_mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let join = thread::Builder::new()
            .name("luigi-wan-delay".into())
            .spawn(move || run_delay_thread(&thread_shared, &rx))?;
        Ok(DelayLine { shared, tx, thread: join.thread().clone(), join: Some(join) })
    }

    /// Creates a link with delay distribution `dist` whose draws are
    /// reproducible from `seed`. A 0±0 distribution yields a bypass link that
    /// delivers immediately without involving the thread.
    pub fn link(&self, dist: DelayDist, seed: u64) -> DelayLink {
        if dist.is_zero() {
            return DelayLink::bypass();
        }
        DelayLink {
            dist,
            inner: Some(Arc::new(LinkInner {
                shared: Arc::clone(&self.shared),
                tx: self.tx.clone(),
                thread: self.thread.clone(),
                state: Mutex::new(LinkState {
                    rng: ChaCha8Rng::seed_from_u64(seed),
                    last_deliver_at_us: 0,
                    next_seq: 0,
                }),
            })),
        }
    }

    /// Frames currently accepted and not yet delivered.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Relaxed)
    }

    /// Maximum number of frames the line holds.
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }
}

impl fmt::Debug for DelayLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayLine").field("capacity", &self.shared.capacity).field("pending", &self.pending()).finish()
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.thread.unpark();
        if let Some(join) = self.join.take() {
            if join.join().is_err() {
                tracing::error!("WAN delay thread panicked");
            }
        }
    }
}

fn run_delay_thread(shared: &Shared, rx: &std_mpsc::Receiver<Pending>) {
    let mut heap: BinaryHeap<Pending> = BinaryHeap::with_capacity(1024);
    loop {
        // Awake: senders need not unpark us, we look at the queue below.
        shared.next_wake_us.store(0, Ordering::SeqCst);
        while let Ok(p) = rx.try_recv() {
            heap.push(p);
        }
        let shutting_down = shared.shutdown.load(Ordering::SeqCst);
        let now = now_us();
        let mut delivered = 0usize;
        while let Some(top) = heap.peek() {
            if top.deliver_at_us > now && !shutting_down {
                break;
            }
            if let Some(p) = heap.pop() {
                p.deliver();
                delivered += 1;
            }
        }
        if delivered > 0 {
            shared.pending.fetch_sub(delivered, Ordering::SeqCst);
        }
        if shutting_down {
            // A sender that incremented `pending` before seeing the flag may
            // still be about to enqueue; wait for it rather than lose it.
            if heap.is_empty() && shared.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            thread::park_timeout(Duration::from_micros(100));
            continue;
        }

        let target_us = heap.peek().map_or(u64::MAX, |p| p.deliver_at_us);
        shared.next_wake_us.store(target_us, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Pairs with the fence in `submit`: either the sender sees our new
        // target (and unparks us if it needs an earlier wake-up), or we see
        // its frame here.
        match rx.try_recv() {
            Ok(p) => {
                heap.push(p);
                continue;
            }
            Err(std_mpsc::TryRecvError::Empty) => {}
            // Impossible while the DelayLine (which owns a sender) lives.
            Err(std_mpsc::TryRecvError::Disconnected) => return,
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            continue;
        }
        if target_us == u64::MAX {
            thread::park();
        } else {
            let now = now_us();
            if target_us > now {
                thread::park_timeout(Duration::from_micros(target_us - now));
            }
        }
    }
}
