//! The load driver: `threads` OS threads, each with its own client (any protocol's, through
//! [`TxnConnector`] and [`TxnClient`]) keeping `in_flight` transactions outstanding with no
//! think time. A fixed
//! warm-up is not counted; then completions inside the measured interval are counted and
//! their latency (dispatch to answer, as the client sees it) recorded.
//!
//! After the measured interval no transaction is sent and the outstanding ones are drained
//! (not counted, except those answered `Rejected` or `Unknown`: sent during the run, their
//! failure belongs to it), so the servers are not left with unanswered work at shutdown.
//! `Rejected` and `Unknown` answers during the warm-up are counted apart
//! ([`LoadReport::warmup`]), never dropped. The measured interval is also sampled per second
//! ([`crate::samples`]).
//!
//! With a target rate ([`LoadOptions::rate_tps`]) the load is open-loop instead
//! ([`crate::open_loop`]): transactions start on a fixed schedule, `in_flight` is the bound
//! on each thread's outstanding ones, latency counts from each one's intended start, and a
//! transaction counts in the measured interval when its intended start lies in it (so the
//! slow answers of a saturated cluster are measured, not left out).
//!
//! The load has a deadline: warm-up + measured interval + [`LoadOptions::grace`] after it
//! starts. A load thread still waiting for answers then (a stuck or unreachable cluster, a
//! client that no longer answers) stops, and the run fails with an error saying so instead
//! of hanging.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{FuturesUnordered, StreamExt};
use luigi_workloads::{TxnGenerator, TxnSpec};

use crate::client::{TxnClient, TxnConnector, TxnResult, TxnStatus};
use crate::open_loop::{Next, OpenLoop};
use crate::samples::SampleLog;
use crate::stats::{Counters, LatencyRecorder};

/// How to drive the load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Client threads.
    pub threads: u32,
    /// Transactions each thread keeps outstanding.
    pub in_flight: u32,
    /// Not counted.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
    /// Client ids are `client_id_base + thread index` (unique per cluster run).
    pub client_id_base: u64,
    /// How long after the measured interval the load may take to end (connect, drain the
    /// outstanding transactions) before it is abandoned with an error. It must exceed the
    /// time the client takes to answer a transaction `Unknown` (its attempts times its retry
    /// timeout), so that a slow answer is not taken for a stuck cluster.
    pub grace: Duration,
    /// Open loop at this many transactions per second over all threads (`None`: closed
    /// loop); `in_flight` then bounds each thread's outstanding transactions.
    pub rate_tps: Option<f64>,
}

/// What an open-loop load did besides its answers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpenLoopReport {
    /// The target rate, transactions per second.
    pub rate_tps: f64,
    /// Transactions seen due while their thread's bound was full (started late, or never if
    /// the measured interval ended first).
    pub delayed: u64,
    /// Transactions intended in the measured interval that had not started by its end.
    pub unstarted: u64,
}

/// What the load measured.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Latency of transactions answered in the measured interval.
    pub latency: LatencyRecorder,
    /// Outcome counts in the measured interval, plus the `Rejected` and `Unknown` answers
    /// drained after it.
    pub counters: Counters,
    /// Length of the measured interval actually observed.
    pub measured: Duration,
    /// The same, per kind of business transaction (its first step's procedure).
    pub by_kind: BTreeMap<String, KindReport>,
    /// Latency of the committed business transactions all of whose steps ran on one shard.
    pub single_shard_latency: LatencyRecorder,
    /// Latency of the committed ones with a step over several shards.
    pub cross_shard_latency: LatencyRecorder,
    /// An open-loop load's schedule figures (`None`: closed loop).
    pub open_loop: Option<OpenLoopReport>,
    /// The measured interval per second, over every thread (the answers counted in
    /// `counters`, by the second they are counted in; the drained ones in its last second).
    pub samples: SampleLog,
    /// Refusals and unknown outcomes answered during the warm-up (not in `counters`).
    pub warmup: WarmupAnswers,
}

/// The failed answers of the warm-up: reported apart from the measured interval's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarmupAnswers {
    /// Transactions refused by a participant.
    pub rejected: u64,
    /// Transactions answered with an unknown outcome.
    pub unknown: u64,
}

/// Outcome counts and latency of one kind of business transaction.
#[derive(Clone, Debug, Default)]
pub struct KindReport {
    /// Latency of the committed ones (first step's dispatch to last step's answer).
    pub latency: LatencyRecorder,
    /// Their outcomes.
    pub counters: Counters,
}

impl LoadReport {
    /// Counts one business transaction answered in the measured interval.
    fn count(&mut self, business: &Business, status: TxnStatus, latency: Duration) {
        if !self.by_kind.contains_key(&business.kind) {
            self.by_kind.insert(business.kind.clone(), KindReport::default());
        }
        let kind = self.by_kind.get_mut(&business.kind).expect("inserted above");
        if status == TxnStatus::Committed {
            let split = if business.cross { &mut self.cross_shard_latency } else { &mut self.single_shard_latency };
            split.record_duration(latency);
        }
        for (c, recorder) in [(&mut self.counters, &mut self.latency), (&mut kind.counters, &mut kind.latency)] {
            c.timeout_resends += u64::from(business.timeout_resends);
            c.resends += u64::from(business.resends);
            c.resubmissions += u64::from(business.resubmissions);
            c.protocol_aborts += u64::from(business.protocol_aborts);
            match status {
                TxnStatus::Committed => {
                    c.committed += 1;
                    c.cross_shard += u64::from(business.cross);
                    c.second_round += u64::from(business.rounds > 1);
                    c.fast_path += u64::from(business.fast);
                    c.fast_path_asked += u64::from(business.asked_fast);
                    c.read_only += u64::from(business.read_only);
                    recorder.record_duration(latency);
                }
                TxnStatus::RolledBack => c.rolled_back += 1,
                TxnStatus::Aborted => c.aborted += 1,
                TxnStatus::Rejected => c.rejected += 1,
                TxnStatus::Unknown => c.unknown += 1,
            }
        }
    }
}

/// A business transaction in progress: its steps so far.
#[derive(Clone, Debug)]
struct Business {
    /// Its kind: the first step's procedure.
    kind: String,
    /// When its first step was submitted.
    sent: Instant,
    /// Steps submitted so far.
    steps: u32,
    /// Resends after a retry timeout over its answered steps.
    timeout_resends: u32,
    /// Resends after "not the leader", "busy" or a lost link over its answered steps.
    resends: u32,
    /// Submissions again as new transactions after protocol aborts over its answered steps.
    resubmissions: u32,
    /// The most agreement rounds a step needed.
    rounds: u8,
    /// Some step spans several shards.
    cross: bool,
    /// Every answered step committed on the fast path.
    fast: bool,
    /// Every answered step asked for it.
    asked_fast: bool,
    /// Every answered step was read at a snapshot (DESIGN.md rule 23).
    read_only: bool,
    /// Protocol aborts over its answered steps (each retried as a new transaction, but the
    /// last of a step that never committed).
    protocol_aborts: u32,
}

impl Business {
    /// Adds an answered step's resends, resubmissions, rounds, path and aborts.
    fn absorb(&mut self, done: &TxnResult) {
        // Each submission's first send is no resend.
        let sends = done.attempts.saturating_sub(done.resubmissions.saturating_add(1));
        self.timeout_resends = self.timeout_resends.saturating_add(sends);
        self.resends = self.resends.saturating_add(done.resends);
        self.resubmissions = self.resubmissions.saturating_add(done.resubmissions);
        self.rounds = self.rounds.max(done.rounds);
        self.fast &= done.fast;
        self.asked_fast &= done.asked_fast;
        self.read_only &= done.read_only;
        self.protocol_aborts = self.protocol_aborts.saturating_add(done.protocol_aborts);
    }

    fn start(first: &TxnSpec, sent: Instant) -> Self {
        let cross = first.pieces.len() > 1;
        Self {
            kind: first.procedure.clone(),
            sent,
            steps: 1,
            timeout_resends: 0,
            resends: 0,
            resubmissions: 0,
            rounds: 0,
            cross,
            fast: true,
            asked_fast: true,
            read_only: true,
            protocol_aborts: 0,
        }
    }
}

/// Live counters for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Transactions answered as committed so far (warm-up included).
    pub committed: AtomicU64,
    /// Set when the measured interval has started.
    pub measuring: AtomicBool,
}

/// Runs the load through the clients `connector` makes, with one transaction generator per
/// thread from `make_workload`.
pub fn run_load(
    connector: &dyn TxnConnector,
    opts: &LoadOptions,
    make_workload: &(dyn Fn(u32) -> Box<dyn TxnGenerator> + Sync),
    progress: &Arc<Progress>,
) -> anyhow::Result<LoadReport> {
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let measure_until = measure_from + opts.duration;
    let deadline = measure_until + opts.grace;
    let window = Window { start, measure_from, measure_until, deadline };
    // One log for every thread: a record per second, not per second and thread.
    let samples = Mutex::new(SampleLog::new(opts.duration));
    let shared = &samples;
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.threads)
            .map(|t| {
                let workload = make_workload(t);
                let progress = progress.clone();
                let client_id = opts.client_id_base + u64::from(t);
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    let load = ThreadLoad { connector, client_id, window, progress: &progress, samples: shared };
                    let report = match opts.rate_tps {
                        None => rt.block_on(load.closed(opts.in_flight, workload)),
                        Some(rate) => {
                            let stop = measure_until - start;
                            let schedule = OpenLoop::new(rate, opts.threads, t, opts.in_flight, stop);
                            rt.block_on(load.open(schedule, workload))
                        }
                    };
                    report.with_context(|| format!("load thread {t}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked"))))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let samples = samples.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut total = LoadReport { measured: opts.duration, samples, ..LoadReport::default() };
    for r in reports {
        total.merge(r);
    }
    if let Some(open) = &mut total.open_loop {
        open.rate_tps = opts.rate_tps.unwrap_or_default();
    }
    Ok(total)
}

impl LoadReport {
    /// Adds a thread's report.
    fn merge(&mut self, r: LoadReport) {
        self.latency.merge(&r.latency);
        self.counters.merge(&r.counters);
        for (kind, k) in r.by_kind {
            let mine = self.by_kind.entry(kind).or_default();
            mine.latency.merge(&k.latency);
            mine.counters.merge(&k.counters);
        }
        self.single_shard_latency.merge(&r.single_shard_latency);
        self.cross_shard_latency.merge(&r.cross_shard_latency);
        self.warmup.rejected += r.warmup.rejected;
        self.warmup.unknown += r.warmup.unknown;
        if let Some(theirs) = r.open_loop {
            let mine = self.open_loop.get_or_insert_with(OpenLoopReport::default);
            mine.delayed += theirs.delayed;
            mine.unstarted += theirs.unstarted;
        }
    }
}

/// When a load thread counts answers, and when it must have finished.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    measure_from: Instant,
    measure_until: Instant,
    deadline: Instant,
}

impl Window {
    /// The error of a load still waiting for `outstanding` answers at its deadline.
    fn overdue(&self, outstanding: usize) -> anyhow::Error {
        anyhow::anyhow!(
            "the load did not finish {:.0?} after the measured interval ({outstanding} transaction(s) unanswered): \
             the cluster is stuck or unreachable",
            self.deadline - self.measure_until
        )
    }
}

/// An answered transaction: its spec, its business transaction, when it was answered, the
/// answer.
type Answered = (TxnSpec, Business, Instant, anyhow::Result<TxnResult>);

/// One load thread's fixed parts.
struct ThreadLoad<'a> {
    connector: &'a dyn TxnConnector,
    client_id: u64,
    window: Window,
    progress: &'a Progress,
    /// The per-second samples every thread records into.
    samples: &'a Mutex<SampleLog>,
}

impl ThreadLoad<'_> {
    async fn connect(&self) -> anyhow::Result<Arc<dyn TxnClient>> {
        match tokio::time::timeout_at(self.window.deadline.into(), self.connector.connect(self.client_id)).await {
            Ok(client) => client.context("load client"),
            Err(_) => Err(self.window.overdue(0)),
        }
    }

    /// Takes an answer: the business transaction's next step to launch, if it has one,
    /// else counts it (`by_intended`: in the measured interval if it was intended there, as
    /// the open loop counts; else if it was answered there).
    fn answered(
        &self,
        workload: &mut dyn TxnGenerator,
        report: &mut LoadReport,
        answer: Answered,
        by_intended: bool,
    ) -> anyhow::Result<Option<(TxnSpec, Business)>> {
        let (spec, mut business, answered, done) = answer;
        let done = done?;
        business.absorb(&done);
        // A committed step may have a next one: the business transaction goes on.
        if done.status == TxnStatus::Committed {
            if let Some(step) = workload.next_step(&spec, &done.outputs)? {
                business.steps += 1;
                business.cross |= step.pieces.len() > 1;
                return Ok(Some((step, business)));
            }
        }
        let at = if by_intended { business.sent } else { answered };
        let mut samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let counted = Counted { report, samples: &mut samples };
        tally(counted, self.progress, self.window, &business, done.status, at, answered);
        Ok(None)
    }

    /// The closed loop: keeps `in_flight` business transactions going until the measured
    /// interval ends, counting the answers within it.
    async fn closed(&self, in_flight: u32, mut workload: Box<dyn TxnGenerator>) -> anyhow::Result<LoadReport> {
        let client = self.connect().await?;
        let mut report = LoadReport::default();
        let mut running = FuturesUnordered::new();
        let go = |spec: TxnSpec, business: Business| launch(&client, spec, business);
        for _ in 0..in_flight {
            let spec = workload.next_txn()?;
            let business = Business::start(&spec, Instant::now());
            running.push(go(spec, business));
        }
        loop {
            let next = match tokio::time::timeout_at(self.window.deadline.into(), running.next()).await {
                Ok(next) => next,
                Err(_) => return Err(self.window.overdue(running.len())),
            };
            let Some(answer) = next else { break }; // drained
            let answered = answer.2;
            if let Some((step, business)) = self.answered(workload.as_mut(), &mut report, answer, false)? {
                running.push(go(step, business));
            } else if answered < self.window.measure_until {
                let spec = workload.next_txn()?;
                let business = Business::start(&spec, Instant::now());
                running.push(go(spec, business));
            }
        }
        Ok(report)
    }

    /// The open loop: starts transactions on `schedule` (at most its bound in flight) until
    /// the measured interval ends, then drains them.
    async fn open(&self, mut schedule: OpenLoop, mut workload: Box<dyn TxnGenerator>) -> anyhow::Result<LoadReport> {
        let client = self.connect().await?;
        let Window { start, deadline, .. } = self.window;
        let mut report = LoadReport::default();
        let mut running = FuturesUnordered::new();
        loop {
            let wake = loop {
                match schedule.poll(Instant::now() - start, running.len()) {
                    Next::Start(offset) => {
                        let spec = workload.next_txn()?;
                        let business = Business::start(&spec, start + offset);
                        running.push(launch(&client, spec, business));
                    }
                    Next::WaitUntil(offset) => break Some(start + offset),
                    Next::Full | Next::Done => break None,
                }
            };
            if running.is_empty() {
                match wake {
                    Some(at) if at < deadline => tokio::time::sleep_until(at.into()).await,
                    Some(_) => return Err(self.window.overdue(0)),
                    None => break, // done and drained
                }
                continue;
            }
            let until = wake.map_or(deadline, |at| at.min(deadline));
            match tokio::time::timeout_at(until.into(), running.next()).await {
                Ok(Some(answer)) => {
                    if let Some((step, business)) = self.answered(workload.as_mut(), &mut report, answer, true)? {
                        running.push(launch(&client, step, business));
                    }
                }
                Ok(None) => {}
                Err(_) if Instant::now() >= deadline => return Err(self.window.overdue(running.len())),
                Err(_) => {}
            }
        }
        let measured = (self.window.measure_from - start, self.window.measure_until - start);
        let unstarted = schedule.unstarted(measured.0, measured.1);
        report.open_loop = Some(OpenLoopReport { rate_tps: 0.0, delayed: schedule.delayed(), unstarted });
        Ok(report)
    }
}

/// Submits `spec` through `client`: a future of its answer.
fn launch(
    client: &Arc<dyn TxnClient>,
    spec: TxnSpec,
    business: Business,
) -> impl std::future::Future<Output = Answered> + use<> {
    let answer = client.submit(spec.clone());
    async move {
        let done = answer.await;
        (spec, business, Instant::now(), done)
    }
}

/// Where an answer is counted: the thread's report and the shared per-second samples.
struct Counted<'a> {
    report: &'a mut LoadReport,
    samples: &'a mut SampleLog,
}

/// Counts a business transaction that ended with `status`, placed in time at `at` (its
/// answer, or its intended start in an open loop) and answered at `answered`: in the report
/// if `at` is within the measured interval (a refusal or an unknown outcome answered after
/// it too: a stalled cluster shows there), in the progress shown either way.
fn tally(
    counted: Counted<'_>,
    progress: &Progress,
    window: Window,
    business: &Business,
    status: TxnStatus,
    at: Instant,
    answered: Instant,
) {
    let Counted { report, samples } = counted;
    let counted = at >= window.measure_from && at < window.measure_until;
    if answered >= window.measure_from {
        progress.measuring.store(true, Ordering::Relaxed);
    }
    if status == TxnStatus::Committed {
        progress.committed.fetch_add(1, Ordering::Relaxed);
    }
    if counted {
        report.count(business, status, answered - business.sent);
        samples.record(at - window.measure_from, status, answered - business.sent);
    } else if answered >= window.measure_until {
        // Drained: a stalled cluster shows here (its transactions come back unknown).
        let failed = match status {
            TxnStatus::Rejected => Some(&mut report.counters.rejected),
            TxnStatus::Unknown => Some(&mut report.counters.unknown),
            TxnStatus::Committed | TxnStatus::RolledBack | TxnStatus::Aborted => None,
        };
        if let Some(count) = failed {
            *count += 1;
            samples.record(answered - window.measure_from, status, Duration::ZERO);
        }
    } else if at < window.measure_from {
        // Warm-up: not measured, but a refusal or an unknown outcome is reported.
        match status {
            TxnStatus::Rejected => report.warmup.rejected += 1,
            TxnStatus::Unknown => report.warmup.unknown += 1,
            TxnStatus::Committed | TxnStatus::RolledBack | TxnStatus::Aborted => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClusterConnector;
    use luigi_runtime::config::ClusterConfig;
    use luigi_wan::Scenario;
    use luigi_workloads::micro::{MicroConfig, MicroGenerator};

    /// A synthetic run: answers spread over warm-up, the measured interval and the drain.
    /// The samples sum to the run's counts, warm-up failures are counted apart, and the
    /// resends and resubmissions of a business transaction are counted apart.
    #[test]
    fn samples_sum_to_the_run_and_warm_up_failures_are_counted_apart() {
        let start = Instant::now();
        let window = Window {
            start,
            measure_from: start + Duration::from_secs(1),
            measure_until: start + Duration::from_secs(4),
            deadline: start + Duration::from_secs(9),
        };
        let spec = TxnSpec { procedure: "p".into(), args: vec![], pieces: vec![] };
        let mut report = LoadReport::default();
        let mut log = SampleLog::new(window.measure_until - window.measure_from);
        let progress = Progress::default();
        let statuses = [TxnStatus::Committed, TxnStatus::Aborted, TxnStatus::Rejected, TxnStatus::Unknown];
        for i in 0..500u64 {
            let sent = start + Duration::from_millis(i * 10);
            let answered = sent + Duration::from_millis(3 + i % 7);
            let mut business = Business::start(&spec, sent);
            business.absorb(&TxnResult {
                status: statuses[(i % 4) as usize],
                attempts: 3,
                resends: 2,
                resubmissions: 1,
                rounds: 0,
                fast: false,
                asked_fast: false,
                read_only: i % 8 == 0,
                outputs: vec![],
                protocol_aborts: 1,
            });
            let counted = Counted { report: &mut report, samples: &mut log };
            tally(counted, &progress, window, &business, statuses[(i % 4) as usize], answered, answered);
        }
        let c = report.counters;
        let samples = log.samples();
        assert_eq!(samples.len(), 3);
        let sum = |f: fn(&crate::samples::SecondSample) -> u64| samples.iter().map(f).sum::<u64>();
        assert_eq!(sum(|s| s.committed), c.committed);
        assert_eq!(sum(|s| s.aborted), c.aborted);
        assert_eq!(sum(|s| s.rejected), c.rejected);
        assert_eq!(sum(|s| s.unknown), c.unknown);
        assert!(c.committed > 50 && samples.iter().all(|s| s.committed > 0 && s.p50_us >= 3000));
        // The first 100 answers (up to 1 s) are warm-up: 25 of each kind.
        assert_eq!(report.warmup, WarmupAnswers { rejected: 25, unknown: 25 });
        // 300 answers in the measured interval, 75 of each kind; of the 100 drained after
        // it only the 25 refusals and 25 unknowns count.
        assert_eq!((c.committed, c.aborted, c.rejected, c.unknown), (75, 75, 100, 100));
        // Three attempts over two submissions: one timeout resend; two resends; one
        // resubmission, for each of the 300.
        assert_eq!((c.timeout_resends, c.resends, c.resubmissions), (300, 600, 300));
        assert_eq!(c.read_only, 37, "committed and read at a snapshot: the measured multiples of 8, 104..=392");
    }

    #[test]
    fn a_cluster_that_never_answers_fails_the_load_at_its_deadline() {
        // Connections succeed (the kernel accepts them) but nothing is ever answered, not
        // even the challenge a server sends first: the client never gets to dispatch.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = ClusterConfig::local(1, Scenario::None, &[silent.local_addr().unwrap().port()]);
        let opts = LoadOptions {
            threads: 2,
            in_flight: 4,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(200),
            client_id_base: 1 << 8,
            grace: Duration::from_millis(500),
            rate_tps: None,
        };
        let make = |t: u32| -> Box<dyn TxnGenerator> {
            Box::new(MicroGenerator::new(MicroConfig::default(), 1, u64::from(t)))
        };
        let started = Instant::now();
        let err = run_load(&ClusterConnector { cluster: &config }, &opts, &make, &Arc::new(Progress::default()))
            .expect_err("cannot finish");
        let msg = format!("{err:#}");
        assert!(msg.contains("did not finish"), "{msg}");
        assert!(started.elapsed() < Duration::from_secs(5), "stopped at its deadline: {:?}", started.elapsed());
    }
}
