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

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, OnceLock, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::OwnedPermit;

/// Microseconds elapsed since a process-wide anchor (the first call).
///
/// All deadlines in this module use this clock, so timestamps taken with it
/// are comparable across threads of the same process.
pub fn now_us() -> u64 {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    ANCHOR.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// One-way delay distribution: uniform in `[mean_us - jitter_us, mean_us +
/// jitter_us]`, negative draws saturating to 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DelayDist {
    /// Mean one-way delay in microseconds.
    pub mean_us: u64,
    /// Half-width of the uniform jitter window in microseconds.
    pub jitter_us: u64,
}

impl DelayDist {
    /// No delay at all.
    pub const ZERO: DelayDist = DelayDist { mean_us: 0, jitter_us: 0 };

    /// `mean_us ± jitter_us`.
    pub const fn new(mean_us: u64, jitter_us: u64) -> Self {
        DelayDist { mean_us, jitter_us }
    }

    /// A constant delay of `delay_us`.
    pub const fn fixed(delay_us: u64) -> Self {
        DelayDist::new(delay_us, 0)
    }

    /// True if every draw is 0 (links with this distribution bypass the
    /// delay thread entirely).
    pub const fn is_zero(&self) -> bool {
        self.mean_us == 0 && self.jitter_us == 0
    }

    /// Smallest possible draw in microseconds.
    pub const fn min_us(&self) -> u64 {
        self.mean_us.saturating_sub(self.jitter_us)
    }

    /// Largest possible draw in microseconds.
    pub const fn max_us(&self) -> u64 {
        self.mean_us.saturating_add(self.jitter_us)
    }

    /// Draws one delay in microseconds.
    #[inline]
    pub fn sample_us<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if self.jitter_us == 0 {
            return self.mean_us;
        }
        let offset_us = rng.gen_range(0..=self.jitter_us.saturating_mul(2));
        self.mean_us.saturating_add(offset_us).saturating_sub(self.jitter_us)
    }
}

impl fmt::Display for DelayDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}±{}µs", self.mean_us, self.jitter_us)
    }
}

/// Named WAN deployments (uniform one-way delay between every pair of nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// No added delay (`none`).
    #[default]
    None,
    /// Same region, 2000±500 µs (`same-region`).
    SameRegion,
    /// Same continent, 30000±5000 µs (`same-continent`).
    SameContinent,
    /// Cross continent, 80000±10000 µs (`cross-continent`).
    CrossContinent,
    /// Globally distributed, 150000±20000 µs (`geo`).
    Geo,
}

impl Scenario {
    /// Every scenario, in increasing order of delay.
    pub const ALL: [Scenario; 5] =
        [Scenario::None, Scenario::SameRegion, Scenario::SameContinent, Scenario::CrossContinent, Scenario::Geo];

    /// Every scenario that adds a delay.
    pub fn all_wan() -> [Scenario; 4] {
        [Scenario::SameRegion, Scenario::SameContinent, Scenario::CrossContinent, Scenario::Geo]
    }

    /// The command-line / config name, e.g. `"same-region"`.
    pub const fn name(&self) -> &'static str {
        match self {
            Scenario::None => "none",
            Scenario::SameRegion => "same-region",
            Scenario::SameContinent => "same-continent",
            Scenario::CrossContinent => "cross-continent",
            Scenario::Geo => "geo",
        }
    }

    /// The one-way delay distribution of this scenario.
    pub const fn delay(&self) -> DelayDist {
        match self {
            Scenario::None => DelayDist::new(0, 0),
            Scenario::SameRegion => DelayDist::new(2_000, 500),
            Scenario::SameContinent => DelayDist::new(30_000, 5_000),
            Scenario::CrossContinent => DelayDist::new(80_000, 10_000),
            Scenario::Geo => DelayDist::new(150_000, 20_000),
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error returned when parsing an unknown [`Scenario`] name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown WAN scenario {0:?}; valid names are: none, same-region, same-continent, cross-continent, geo")]
pub struct ParseScenarioError(pub String);

impl FromStr for Scenario {
    type Err = ParseScenarioError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL.into_iter().find(|sc| sc.name() == s).ok_or_else(|| ParseScenarioError(s.to_owned()))
    }
}

/// Delay for every directed link between named nodes (e.g. `"s0r0"`,
/// `"client"`): a default distribution plus per-link overrides.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DelayModel {
    /// Distribution used for links without an override.
    pub default: DelayDist,
    /// Overrides keyed by `(from_node, to_node)`; directional.
    pub overrides: HashMap<(String, String), DelayDist>,
}

impl DelayModel {
    /// Same distribution on every link.
    pub fn uniform(dist: DelayDist) -> Self {
        DelayModel { default: dist, overrides: HashMap::new() }
    }

    /// Uniform model of a named scenario.
    pub fn from_scenario(scenario: Scenario) -> Self {
        Self::uniform(scenario.delay())
    }

    /// Overrides the directed link `from -> to`.
    pub fn set_link(&mut self, from: impl Into<String>, to: impl Into<String>, dist: DelayDist) {
        self.overrides.insert((from.into(), to.into()), dist);
    }

    /// Overrides both directions between `a` and `b`.
    pub fn set_link_symmetric(&mut self, a: &str, b: &str, dist: DelayDist) {
        self.set_link(a, b, dist);
        self.set_link(b, a, dist);
    }

    /// Builder form of [`set_link`](Self::set_link).
    pub fn with_link(mut self, from: impl Into<String>, to: impl Into<String>, dist: DelayDist) -> Self {
        self.set_link(from, to, dist);
        self
    }

    /// Distribution of the directed link `from -> to`.
    pub fn dist(&self, from: &str, to: &str) -> DelayDist {
        if self.overrides.is_empty() {
            return self.default;
        }
        self.overrides.get(&(from.to_owned(), to.to_owned())).copied().unwrap_or(self.default)
    }

    /// True if no link has any delay.
    pub fn is_zero(&self) -> bool {
        self.default.is_zero() && self.overrides.values().all(DelayDist::is_zero)
    }
}

impl From<Scenario> for DelayModel {
    fn from(scenario: Scenario) -> Self {
        Self::from_scenario(scenario)
    }
}

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
struct Pending {
    deliver_at_us: u64,
    seq: u64,
    frame: Bytes,
    permit: OwnedPermit<Bytes>,
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
struct Shared {
    capacity: usize,
    /// Frames accepted by `submit` and not yet delivered.
    pending: AtomicUsize,
    shutdown: AtomicBool,
    /// Deadline the thread is sleeping until: 0 while it is awake (senders
    /// need not wake it), `u64::MAX` when idle.
    next_wake_us: AtomicU64,
}

/// The per-process delay thread. See the [module docs](self).
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

struct LinkState {
    rng: ChaCha8Rng,
    last_deliver_at_us: u64,
    next_seq: u64,
}

struct LinkInner {
    shared: Arc<Shared>,
    tx: std_mpsc::Sender<Pending>,
    thread: Thread,
    state: Mutex<LinkState>,
}

/// One direction of one connection through a [`DelayLine`].
///
/// Cloning yields a handle to the *same* link (shared RNG and FIFO state).
#[derive(Clone)]
pub struct DelayLink {
    dist: DelayDist,
    /// `None` for bypass links.
    inner: Option<Arc<LinkInner>>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[test]
    fn scenario_names_round_trip() {
        for sc in Scenario::ALL {
            assert_eq!(sc.to_string().parse::<Scenario>(), Ok(sc));
        }
        assert_eq!("same-region".parse(), Ok(Scenario::SameRegion));
        assert_eq!("geo".parse(), Ok(Scenario::Geo));
        let err = "Geo".parse::<Scenario>().unwrap_err().to_string();
        for name in ["none", "same-region", "same-continent", "cross-continent", "geo"] {
            assert!(err.contains(name), "{err}");
        }
        assert!(err.contains("\"Geo\""), "{err}");
        assert_eq!(Scenario::None.delay(), DelayDist::ZERO);
        assert_eq!(Scenario::SameRegion.delay(), DelayDist::new(2000, 500));
        assert_eq!(Scenario::SameContinent.delay(), DelayDist::new(30000, 5000));
        assert_eq!(Scenario::CrossContinent.delay(), DelayDist::new(80000, 10000));
        assert_eq!(Scenario::Geo.delay(), DelayDist::new(150000, 20000));
        assert!(Scenario::all_wan().iter().all(|s| !s.delay().is_zero()));
        // serde uses the same names
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Cfg {
            wan: Scenario,
        }
        let text = toml::to_string(&Cfg { wan: Scenario::CrossContinent }).unwrap();
        assert_eq!(text.trim(), "wan = \"cross-continent\"");
        let back: Cfg = toml::from_str("wan = \"same-region\"").unwrap();
        assert_eq!(back.wan, Scenario::SameRegion);
    }

    #[test]
    fn dist_sampling_bounds() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let d = DelayDist::new(2000, 500);
        let mut min = u64::MAX;
        let mut max = 0;
        for _ in 0..10_000 {
            let x = d.sample_us(&mut rng);
            assert!((1500..=2500).contains(&x));
            min = min.min(x);
            max = max.max(x);
        }
        assert!(min < 1550 && max > 2450, "{min} {max}");
        // Saturating at zero.
        let d = DelayDist::new(100, 500);
        assert_eq!(d.min_us(), 0);
        let zeros = (0..10_000).filter(|_| d.sample_us(&mut rng) == 0).count();
        // Draws below 0 (400 of the 1001 values in [-400, 600]) become 0.
        assert!((3500..4500).contains(&zeros), "{zeros}");
        assert!((0..1000).all(|_| d.sample_us(&mut rng) <= 600));
        assert_eq!(DelayDist::fixed(42).sample_us(&mut rng), 42);
        // Same seed, same draws.
        let mut a = ChaCha8Rng::seed_from_u64(1);
        let mut b = ChaCha8Rng::seed_from_u64(1);
        let d = Scenario::Geo.delay();
        assert!((0..100).all(|_| d.sample_us(&mut a) == d.sample_us(&mut b)));
    }

    #[test]
    fn delay_model_overrides() {
        let mut m = DelayModel::from_scenario(Scenario::SameRegion);
        assert!(!m.is_zero());
        assert_eq!(m.dist("s0r0", "s1r0"), DelayDist::new(2000, 500));
        m.set_link("client", "s0r0", DelayDist::fixed(10));
        assert_eq!(m.dist("client", "s0r0"), DelayDist::fixed(10));
        assert_eq!(m.dist("s0r0", "client"), DelayDist::new(2000, 500));
        m.set_link_symmetric("a", "b", DelayDist::ZERO);
        assert_eq!(m.dist("b", "a"), DelayDist::ZERO);

        let z = DelayModel::default();
        assert!(z.is_zero());
        assert!(!z.clone().with_link("a", "b", DelayDist::new(0, 1)).is_zero());
        assert!(DelayModel::from(Scenario::None).with_link("a", "b", DelayDist::ZERO).is_zero());
    }

    /// Receives `n` frames (blocking), returning `(payload, receive_time_us)`.
    fn recv_n(rx: &mut mpsc::Receiver<Bytes>, n: usize) -> Vec<(Bytes, u64)> {
        (0..n)
            .map(|_| {
                let f = rx.blocking_recv().expect("frame");
                (f, now_us())
            })
            .collect()
    }

    #[test]
    fn link_delays_are_bounded_and_fifo() {
        let line = DelayLine::new().unwrap();
        let link = line.link(DelayDist::new(2000, 500), 42);
        assert!(!link.is_bypass());
        let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
        let n = 300u64;
        let receiver = std::thread::spawn(move || recv_n(&mut rx, n as usize));
        let mut sent_us = Vec::new();
        for i in 0..n {
            let permit = tx.clone().try_reserve_owned().unwrap();
            sent_us.push(now_us());
            link.submit(Bytes::copy_from_slice(&i.to_be_bytes()), permit).unwrap();
            if i % 3 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let got = receiver.join().unwrap();
        let mut total = 0;
        for (i, (frame, at)) in got.iter().enumerate() {
            assert_eq!(&frame[..], &(i as u64).to_be_bytes(), "FIFO");
            let delay = at - sent_us[i];
            assert!(delay >= 1500, "frame {i} early: {delay} µs");
            assert!(delay < 2500 + 50_000, "frame {i} very late: {delay} µs");
            total += delay;
        }
        let mean = total / n;
        eprintln!("delay line: mean delay {mean} µs");
        assert!((1200..4000).contains(&mean), "mean {mean}");
        // The thread decrements `pending` right after handing over a batch.
        let deadline = Instant::now() + Duration::from_secs(5);
        while line.pending() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(line.pending(), 0);
    }

    #[test]
    fn many_links_interleave_and_stay_fifo() {
        let line = DelayLine::new().unwrap();
        let (tx, mut rx) = mpsc::channel::<Bytes>(100_000);
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let link = line.link(DelayDist::new(1000, 900), t as u64);
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        let permit = tx.clone().try_reserve_owned().unwrap();
                        let mut b = vec![t];
                        b.extend_from_slice(&i.to_be_bytes());
                        link.submit(Bytes::from(b), permit).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let got = recv_n(&mut rx, 8000);
        let mut next = [0u32; 4];
        for (f, _) in got {
            let t = f[0] as usize;
            let i = u32::from_be_bytes(f[1..5].try_into().unwrap());
            assert_eq!(i, next[t], "link {t} out of order");
            next[t] += 1;
        }
        assert_eq!(next, [2000; 4]);
    }

    #[test]
    fn zero_dist_bypasses_thread() {
        let line = DelayLine::new().unwrap();
        let link = line.link(DelayDist::ZERO, 1);
        assert!(link.is_bypass());
        let (tx, mut rx) = mpsc::channel::<Bytes>(4);
        link.submit(Bytes::from_static(b"x"), tx.clone().try_reserve_owned().unwrap()).unwrap();
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"x"));
        assert_eq!(line.pending(), 0);
        // Bypass links work without any line at all.
        drop(line);
        DelayLink::bypass().submit(Bytes::from_static(b"y"), tx.try_reserve_owned().unwrap()).unwrap();
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"y"));
    }

    #[test]
    fn full_line_errors_and_drop_flushes() {
        let line = DelayLine::with_capacity(3).unwrap();
        let link = line.link(DelayDist::fixed(10_000_000), 1); // 10 s
        let (tx, mut rx) = mpsc::channel::<Bytes>(16);
        for i in 0..3u8 {
            link.submit(Bytes::from(vec![i]), tx.clone().try_reserve_owned().unwrap()).unwrap();
        }
        let err = link.submit(Bytes::from_static(b"no"), tx.clone().try_reserve_owned().unwrap()).unwrap_err();
        assert_eq!(err, DelayError::Full { capacity: 3 });
        // The refused frame released its queue slot: 16 - 3 reserved.
        assert_eq!(tx.capacity(), 13);
        assert_eq!(line.pending(), 3);
        assert!(rx.try_recv().is_err());

        let start = Instant::now();
        drop(line);
        assert!(start.elapsed() < Duration::from_secs(2), "drop must not wait for delays");
        for i in 0..3u8 {
            assert_eq!(rx.try_recv().unwrap(), Bytes::from(vec![i]));
        }
        let err = link.submit(Bytes::from_static(b"late"), tx.clone().try_reserve_owned().unwrap()).unwrap_err();
        assert_eq!(err, DelayError::ShutDown);
        assert_eq!(tx.capacity(), 16);
    }

    #[test]
    fn earlier_deadline_wakes_sleeping_thread() {
        let line = DelayLine::new().unwrap();
        let slow = line.link(DelayDist::fixed(5_000_000), 1); // 5 s
        let fast = line.link(DelayDist::fixed(1_000), 2); // 1 ms
        let (tx, mut rx) = mpsc::channel::<Bytes>(16);
        slow.submit(Bytes::from_static(b"slow"), tx.clone().try_reserve_owned().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(5)); // let the thread go to sleep
        let t0 = now_us();
        fast.submit(Bytes::from_static(b"fast"), tx.clone().try_reserve_owned().unwrap()).unwrap();
        assert_eq!(rx.blocking_recv().unwrap(), Bytes::from_static(b"fast"));
        let waited = now_us() - t0;
        assert!((1_000..1_000_000).contains(&waited), "{waited}");
    }
}
