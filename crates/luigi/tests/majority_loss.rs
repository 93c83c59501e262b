//! Real-process liveness test: a shard loses its majority for longer than clients wait.
//!
//! 2 shards x 3 replicas on loopback (`same-region` delays, fsync, data directories) under 12
//! clients running bank transfers, 3 in 4 of them across both shards. `kill -9` the leader and
//! one follower of shard 0 for 12 s (longer than a client retries: its transfers end with an
//! unknown outcome), restart both from their data directories and require new transfers
//! touching each shard to commit within 20 s, and still 3 s later; then the same to shard 1.
//! Finally read every account with a fresh client and check the bank invariant: the balances
//! are those of the committed transfers plus some subset of the transfers whose outcome is
//! unknown (each whole: a transfer applied on one shard only changes the total).
//!
//! Reproduces a reported bug: after the second outage nothing committed again on any shard.
//! The run prints a per-second timeline of commits (total and per shard) with the kills and
//! restarts marked, and every server's statistics at the end:
//! `cargo test -p luigi --test majority_loss -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use luigi_proto::coordinator::TxnOutcome;
use luigi_proto::partition::{HashPartitioner, Partitioner};
use luigi_proto::procedures::{account_key, TransferArgs};
use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;

use common::{latest_leader, scratch, start_durable, three_replica_cluster, transfer, ServerProc};

const SHARDS: u32 = 2;
const WORKERS: u64 = 12;
const ACCOUNTS_PER_SHARD: usize = 8;
/// Load before the first kill.
const WARMUP: Duration = Duration::from_secs(3);
/// How long a shard stays without a majority (a client gives up after ~10 s).
const OUTAGE: Duration = Duration::from_secs(12);
/// Both shards must commit again within this long after a restart.
const RECOVERY_BOUND: Duration = Duration::from_secs(20);
/// Load after each recovery; the shards must still commit new transfers at its end.
const SETTLE: Duration = Duration::from_secs(3);
/// How long new transfers may take to commit at the end of `SETTLE`.
const STILL_LIVE_BOUND: Duration = Duration::from_secs(5);
/// Workers finish their last transfer within this long after the stop (a client gives up on a
/// transfer after about 10 retries of about 1 s); later ones are abandoned as unknown. Short
/// once the test failed: those outcomes no longer matter.
const STOP_BOUND: Duration = Duration::from_secs(15);
const STOP_BOUND_FAILED: Duration = Duration::from_secs(1);
/// Each final read must be answered within this long.
const READ_BOUND: Duration = Duration::from_secs(20);
/// Nodes the exact search for the applied unknown transfers may visit.
const SUBSET_SEARCH_NODES: u64 = 20_000_000;

/// What a transfer's outcome says about its effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// Ordered and executed on every participant: applied.
    Committed,
    /// Refused at admission: not applied.
    Rejected,
    /// Ordered, but some participant's procedure failed (its writes undone there): counted
    /// as unknown by the invariant (never expected from a transfer).
    Aborted,
    /// The client gave up: the transfer may or may not have been applied.
    Unknown,
}

/// The one place that reads a client outcome (`TxnOutcome::Unknown` may have executed;
/// only its arm here changes).
fn effect(outcome: &TxnOutcome) -> Effect {
    match outcome {
        o if o.is_committed() => Effect::Committed,
        TxnOutcome::Ordered { .. } => Effect::Aborted,
        TxnOutcome::Rejected(_) => Effect::Rejected,
        TxnOutcome::Unknown(_) => Effect::Unknown,
    }
}

/// One transfer sent by a worker.
#[derive(Clone, Copy)]
struct Record {
    args: TransferArgs,
    sent: Instant,
    /// When it was answered and what the answer says; `None`: abandoned at the end.
    answered: Option<(Instant, Effect)>,
}

#[derive(Default)]
struct Ledger {
    records: Vec<Record>,
    /// Why transfers were not committed, with counts.
    reasons: BTreeMap<String, usize>,
}

/// The servers, by (shard, replica), and what restarting one needs.
struct Cluster {
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    ports: Vec<[u16; 3]>,
    servers: BTreeMap<(u32, u32), ServerProc>,
}

impl Cluster {
    fn start(&mut self, shard: u32, replica: u32) {
        let port = self.ports[shard as usize][replica as usize];
        let server = start_durable(&self.config, &self.data, &format!("s{shard}r{replica}"), port, &self.log);
        assert!(self.servers.insert((shard, replica), server).is_none(), "s{shard}r{replica} already runs");
    }

    fn kill9(&mut self, shard: u32, replica: u32) {
        self.servers.remove(&(shard, replica)).expect("running").kill9();
    }

    /// Stops every server in turn through its stdin, so that each logs its statistics, and
    /// returns those lines.
    fn shut_down_all(&mut self) -> Vec<String> {
        let mut stats = Vec::new();
        for ((shard, replica), server) in std::mem::take(&mut self.servers) {
            let before = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
            let exited = server.shut_down(Duration::from_secs(5));
            let log = std::fs::read(&self.log).unwrap();
            let tail = String::from_utf8_lossy(&log[before.min(log.len())..]).into_owned();
            let line = tail.lines().find_map(|l| l.split_once("server stopping").map(|(_, s)| s.trim().to_string()));
            let line = line.unwrap_or_else(|| format!("(no statistics logged; exited: {exited})"));
            stats.push(format!("s{shard}r{replica}: {line}"));
        }
        stats
    }
}

/// `ACCOUNTS_PER_SHARD` accounts owned by each shard.
fn accounts_by_shard(shard_of: &HashPartitioner) -> Vec<Vec<u64>> {
    let mut by_shard = vec![Vec::new(); SHARDS as usize];
    for a in 0..10_000u64 {
        let owned = &mut by_shard[shard_of.shard_of(&account_key(a)) as usize];
        if owned.len() < ACCOUNTS_PER_SHARD {
            owned.push(a);
        }
        if by_shard.iter().all(|o| o.len() == ACCOUNTS_PER_SHARD) {
            return by_shard;
        }
    }
    panic!("the partitioner leaves a shard without accounts");
}

/// Worker `w`'s `n`-th transfer: 3 in 4 between the two shards, the others within one.
/// Amounts are unique (`amount` comes from a counter), which makes the subset check sharp.
fn pick(w: u64, n: u64, accounts: &[Vec<u64>], amount: i64) -> TransferArgs {
    let k = ACCOUNTS_PER_SHARD as u64;
    let s = ((w + n) % 2) as usize;
    let from_i = (w * 5 + n * 3) % k;
    let to = if (w + 3 * n).is_multiple_of(4) {
        accounts[s][((from_i + 1 + (w + n) % (k - 1)) % k) as usize]
    } else {
        accounts[1 - s][((w * 3 + n * 7) % k) as usize]
    };
    TransferArgs { from: accounts[s][from_i as usize], to, amount }
}

fn shards_of(shard_of: &HashPartitioner, args: &TransferArgs) -> [u32; 2] {
    [shard_of.shard_of(&account_key(args.from)), shard_of.shard_of(&account_key(args.to))]
}

/// Waits until transfers sent after `since` and touching each shard are committed (stragglers
/// from before do not count); returns how long after `since` the last shard got its first, or
/// the shards without one after `bound`.
fn wait_for_commits(
    ledger: &Mutex<Ledger>,
    shard_of: &HashPartitioner,
    since: Instant,
    bound: Duration,
) -> Result<Duration, Vec<u32>> {
    loop {
        let mut first: Vec<Option<Instant>> = vec![None; SHARDS as usize];
        for r in &ledger.lock().unwrap().records {
            if let Some((at, Effect::Committed)) = r.answered {
                if r.sent >= since {
                    for s in shards_of(shard_of, &r.args) {
                        let f = &mut first[s as usize];
                        *f = Some(f.map_or(at, |f| f.min(at)));
                    }
                }
            }
        }
        if first.iter().all(Option::is_some) {
            return Ok(first.iter().map(|f| f.unwrap() - since).max().unwrap());
        }
        if since.elapsed() >= bound {
            return Err((0..SHARDS).filter(|s| first[*s as usize].is_none()).collect());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads every account with zero transfers between the shards, all at once, through a fresh
/// client; each read must be answered within `READ_BOUND`.
fn read_balances(
    rt: &tokio::runtime::Runtime,
    config: &ClusterConfig,
    accounts: &[Vec<u64>],
) -> Result<BTreeMap<u64, i64>, String> {
    rt.block_on(async {
        let client = tokio::time::timeout(READ_BOUND, Client::connect(config, 9_000))
            .await
            .map_err(|_| "the reading client did not connect".to_string())?
            .map_err(|e| format!("the reading client did not connect: {e:#}"))?;
        let reads: Vec<_> = (0..ACCOUNTS_PER_SHARD)
            .map(|i| {
                let (client, args) =
                    (client.clone(), TransferArgs { from: accounts[0][i], to: accounts[1][i], amount: 0 });
                tokio::spawn(async move { (args, tokio::time::timeout(READ_BOUND, transfer(&client, args)).await) })
            })
            .collect();
        let mut balances = BTreeMap::new();
        let mut errors = Vec::new();
        for read in reads {
            let (args, outcome) = read.await.unwrap();
            match outcome {
                Ok(TxnOutcome::Ordered { results, .. }) if results.iter().all(|(_, r)| r.is_ok()) => {
                    for (_, r) in results {
                        let read: Vec<(u64, i64)> = postcard::from_bytes(&r.unwrap()).unwrap();
                        balances.extend(read);
                    }
                }
                Ok(outcome) => errors.push(format!("read of {} and {}: {outcome:?}", args.from, args.to)),
                Err(_) => {
                    errors.push(format!("read of {} and {}: no answer within {READ_BOUND:?}", args.from, args.to))
                }
            }
        }
        if errors.is_empty() {
            Ok(balances)
        } else {
            Err(errors.join("; "))
        }
    })
}

/// Outcome of the search for a subset of unknown transfers explaining the balances.
enum Subset {
    Found(Vec<usize>),
    Impossible,
    GaveUp,
}

/// Looks for a subset of `transfers` (as (from, to, amount) over account indexes) whose net
/// effect is exactly `diff`, visiting at most `budget` search nodes. Account by account, the
/// most constrained first: the undecided transfers touching it must make up exactly what is
/// left of its difference (few subsets do: amounts are distinct), then the next account.
fn find_subset(transfers: &[(usize, usize, i64)], diff: &[i64], budget: u64) -> Subset {
    struct Search<'a> {
        transfers: &'a [(usize, usize, i64)],
        /// Transfers touching each account, largest amounts first.
        touching: Vec<Vec<usize>>,
        decided: Vec<Option<bool>>,
        /// What the undecided transfers must still add to each account.
        left: Vec<i64>,
        nodes: u64,
        budget: u64,
    }
    impl Search<'_> {
        /// The signed effect of transfer `t` on account `a`.
        fn effect(&self, t: usize, a: usize) -> i64 {
            let (from, _, amount) = self.transfers[t];
            if from == a {
                -amount
            } else {
                amount
            }
        }

        fn set(&mut self, t: usize, applied: bool) {
            self.decided[t] = Some(applied);
            if applied {
                let (from, to, amount) = self.transfers[t];
                self.left[from] += amount;
                self.left[to] -= amount;
            }
        }

        fn unset(&mut self, t: usize) {
            if self.decided[t].take() == Some(true) {
                let (from, to, amount) = self.transfers[t];
                self.left[from] -= amount;
                self.left[to] += amount;
            }
        }

        /// Some(true): found (in `decided`); Some(false): no solution here; None: out of budget.
        fn go(&mut self) -> Option<bool> {
            self.nodes += 1;
            if self.nodes > self.budget {
                return None;
            }
            let mut best: Option<(usize, Vec<usize>)> = None;
            for a in 0..self.left.len() {
                let free: Vec<usize> =
                    self.touching[a].iter().copied().filter(|t| self.decided[*t].is_none()).collect();
                let lo: i64 = free.iter().map(|t| self.effect(*t, a).min(0)).sum();
                let hi: i64 = free.iter().map(|t| self.effect(*t, a).max(0)).sum();
                if self.left[a] < lo || self.left[a] > hi {
                    return Some(false);
                }
                if !free.is_empty() && best.as_ref().is_none_or(|(_, b)| free.len() < b.len()) {
                    best = Some((a, free));
                }
            }
            match best {
                None => Some(true), // every transfer decided, every account's difference met
                Some((a, free)) => self.complete(a, &free),
            }
        }

        /// Decides `free` (the undecided transfers touching `a`) so that `a`'s difference is met
        /// exactly, trying each way in turn with the other accounts.
        fn complete(&mut self, a: usize, free: &[usize]) -> Option<bool> {
            self.nodes += 1;
            if self.nodes > self.budget {
                return None;
            }
            let Some((&t, rest)) = free.split_first() else {
                return if self.left[a] == 0 { self.go() } else { Some(false) };
            };
            let lo: i64 = rest.iter().map(|t| self.effect(*t, a).min(0)).sum();
            let hi: i64 = rest.iter().map(|t| self.effect(*t, a).max(0)).sum();
            for applied in [true, false] {
                let need = self.left[a] - if applied { self.effect(t, a) } else { 0 };
                if need < lo || need > hi {
                    continue;
                }
                self.set(t, applied);
                let found = self.complete(a, rest);
                if found != Some(false) {
                    return found; // found (kept decided) or out of budget
                }
                self.unset(t);
            }
            Some(false)
        }
    }
    let mut touching = vec![Vec::new(); diff.len()];
    for (t, (from, to, _)) in transfers.iter().enumerate() {
        touching[*from].push(t);
        touching[*to].push(t);
    }
    for list in &mut touching {
        list.sort_by_key(|t| -transfers[*t].2);
    }
    let mut search =
        Search { transfers, touching, decided: vec![None; transfers.len()], left: diff.to_vec(), nodes: 0, budget };
    match search.go() {
        Some(true) => Subset::Found((0..transfers.len()).filter(|t| search.decided[*t] == Some(true)).collect()),
        Some(false) => Subset::Impossible,
        None => Subset::GaveUp,
    }
}

/// Checks that `observed` balances are those of the committed transfers plus a subset of the
/// unknown ones; returns what explains them, or the violation.
fn check_invariant(records: &[Record], observed: &BTreeMap<u64, i64>) -> Result<String, String> {
    let index: BTreeMap<u64, usize> = observed.keys().enumerate().map(|(i, a)| (*a, i)).collect();
    let mut diff: Vec<i64> = observed.values().copied().collect();
    let mut unknown = Vec::new();
    for r in records {
        let (from, to) = (index[&r.args.from], index[&r.args.to]);
        match r.answered.map(|(_, e)| e) {
            Some(Effect::Committed) => {
                diff[from] += r.args.amount; // observed - committed
                diff[to] -= r.args.amount;
            }
            Some(Effect::Rejected) => {}
            Some(Effect::Unknown | Effect::Aborted) | None => unknown.push((from, to, r.args.amount)),
        }
    }
    let accounts: Vec<u64> = observed.keys().copied().collect();
    let show = |d: &[i64]| -> String {
        let nonzero: Vec<String> =
            d.iter().zip(&accounts).filter(|(d, _)| **d != 0).map(|(d, a)| format!("account {a}: {d:+}")).collect();
        nonzero.join(", ")
    };
    if diff.iter().all(|d| *d == 0) {
        return Ok(format!("balances equal the committed transfers ({} unknown ones took no effect)", unknown.len()));
    }
    let total: i64 = diff.iter().sum();
    if total != 0 {
        return Err(format!(
            "money was created or destroyed ({total:+}): some transfer took effect on one shard only; \
             observed minus committed: {}",
            show(&diff)
        ));
    }
    match find_subset(&unknown, &diff, SUBSET_SEARCH_NODES) {
        Subset::Found(chosen) => Ok(format!(
            "balances equal the committed transfers plus {} of the {} unknown ones (observed minus committed: {})",
            chosen.len(),
            unknown.len(),
            show(&diff)
        )),
        Subset::Impossible => Err(format!(
            "no subset of the {} unknown transfers explains the balances: something committed was lost or \
             something applied twice; observed minus committed: {}",
            unknown.len(),
            show(&diff)
        )),
        Subset::GaveUp => {
            // Too many unknowns for the exact search: the necessary conditions must hold.
            let mut reach = vec![(0i64, 0i64); diff.len()];
            for (from, to, amount) in &unknown {
                reach[*from].0 -= amount;
                reach[*to].1 += amount;
            }
            if diff.iter().zip(&reach).any(|(d, (lo, hi))| d < lo || d > hi) {
                return Err(format!(
                    "the {} unknown transfers cannot explain the balances; observed minus committed: {}",
                    unknown.len(),
                    show(&diff)
                ));
            }
            Ok(format!(
                "INCONCLUSIVE: {} unknown transfers are too many for the exact subset search ({} nodes); the \
                 total is conserved and every account's difference is within what they could make \
                 (observed minus committed: {})",
                unknown.len(),
                SUBSET_SEARCH_NODES,
                show(&diff)
            ))
        }
    }
}

/// Prints commits (and other answers) per second of the run, with the events marked.
fn print_timeline(
    t0: Instant,
    end: Instant,
    ledger: &Ledger,
    events: &[(Instant, String)],
    shard_of: &HashPartitioner,
) {
    let secs = (end - t0).as_secs() as usize + 1;
    let second = |t: Instant| ((t.max(t0) - t0).as_secs() as usize).min(secs - 1);
    // Per second: sent, committed, committed touching each shard, committed cross-shard,
    // rejected, unknown (aborted included).
    let mut rows = vec![[0usize; 5 + SHARDS as usize]; secs];
    for r in &ledger.records {
        rows[second(r.sent)][0] += 1;
        let Some((at, effect)) = r.answered else { continue };
        let row = &mut rows[second(at)];
        match effect {
            Effect::Committed => {
                row[1] += 1;
                let shards = shards_of(shard_of, &r.args);
                for s in 0..SHARDS {
                    if shards.contains(&s) {
                        row[2 + s as usize] += 1;
                    }
                }
                if shards[0] != shards[1] {
                    row[2 + SHARDS as usize] += 1;
                }
            }
            Effect::Rejected => row[3 + SHARDS as usize] += 1,
            Effect::Unknown | Effect::Aborted => row[4 + SHARDS as usize] += 1,
        }
    }
    println!();
    println!("majority_loss timeline: transfers per second of the run; 'commit' = committed answers, 'sN' = committed");
    println!(
        "transfers touching shard N, 'cross' = committed ones touching both, 'unk' = answered with an unknown outcome"
    );
    let shard_cols: String = (0..SHARDS).map(|s| format!("{:>6}", format!("s{s}"))).collect();
    println!(
        "{:>5} {:>6} {:>7}{shard_cols} {:>6} {:>5} {:>5}  events",
        "t(s)", "sent", "commit", "cross", "rej", "unk"
    );
    for (i, row) in rows.iter().enumerate() {
        let shard_cols: String = row[2..2 + SHARDS as usize].iter().map(|c| format!("{c:>6}")).collect();
        let marks: Vec<String> = events
            .iter()
            .filter(|(t, _)| second(*t) == i)
            .map(|(t, what)| format!("@{:.1}s {what}", (*t - t0).as_secs_f64()))
            .collect();
        let flag = if row[1] == 0 { "  ." } else { "" };
        println!(
            "{i:>5} {:>6} {:>7}{shard_cols} {:>6} {:>5} {:>5}  {}{flag}",
            row[0],
            row[1],
            row[2 + SHARDS as usize],
            row[3 + SHARDS as usize],
            row[4 + SHARDS as usize],
            marks.join("; ")
        );
    }
}

fn outcome_counts(ledger: &Ledger) -> String {
    let count = |e: Option<Effect>| ledger.records.iter().filter(|r| r.answered.map(|(_, x)| x) == e).count();
    format!(
        "{} transfers sent: {} committed, {} rejected, {} unknown, {} aborted, {} unanswered (abandoned at the end)",
        ledger.records.len(),
        count(Some(Effect::Committed)),
        count(Some(Effect::Rejected)),
        count(Some(Effect::Unknown)),
        count(Some(Effect::Aborted)),
        count(None)
    )
}

#[test]
fn losing_a_shard_majority_twice_under_cross_shard_load_recovers() {
    let dir = scratch("majority-loss");
    let (config_path, ports) = three_replica_cluster(&dir, SHARDS, "same-region", "");
    let log = dir.join("servers.log");
    let mut cluster =
        Cluster { config: config_path.clone(), data: dir.join("data"), log, ports, servers: BTreeMap::new() };
    for shard in 0..SHARDS {
        for replica in 0..3 {
            cluster.start(shard, replica);
        }
    }
    let config = ClusterConfig::load(&config_path).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let shard_of = HashPartitioner::new(SHARDS);
    let accounts = Arc::new(accounts_by_shard(&shard_of));
    // A dozen clients, as in the report.
    let clients: Vec<Client> =
        (0..WORKERS).map(|w| rt.block_on(Client::connect(&config, 1_000 + w)).expect("client connects")).collect();
    // Warm up: the first cross-shard transfer waits for both groups to elect their leaders.
    let first = TransferArgs { from: accounts[0][0], to: accounts[1][0], amount: 0 };
    let first =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), transfer(&clients[0], first)).await });
    assert!(matches!(&first, Ok(o) if o.is_committed()), "warm-up transfer: {first:?}");

    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let amounts = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut events = vec![(t0, "load starts".to_string())];
    let mut workers = Vec::new();
    for (w, client) in clients.into_iter().enumerate() {
        let (ledger, stop, amounts, accounts) = (ledger.clone(), stop.clone(), amounts.clone(), accounts.clone());
        workers.push(rt.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let args = pick(w as u64, n, &accounts, 1 + amounts.fetch_add(1, Ordering::Relaxed) as i64);
                let i = {
                    let mut l = ledger.lock().unwrap();
                    l.records.push(Record { args, sent: Instant::now(), answered: None });
                    l.records.len() - 1
                };
                let outcome = transfer(&client, args).await;
                let mut l = ledger.lock().unwrap();
                l.records[i].answered = Some((Instant::now(), effect(&outcome)));
                match outcome {
                    TxnOutcome::Rejected(why) | TxnOutcome::Unknown(why) => *l.reasons.entry(why).or_default() += 1,
                    TxnOutcome::Ordered { results, .. } => {
                        for (shard, r) in results {
                            if let Err(e) = r {
                                *l.reasons.entry(format!("shard {shard}: {e}")).or_default() += 1;
                            }
                        }
                    }
                }
            }
        }));
    }

    // Each shard in turn loses its leader and one follower for OUTAGE, then gets them back:
    // new transfers must commit on both shards soon after, and still at the end of SETTLE.
    let mut failures = Vec::new();
    std::thread::sleep(WARMUP);
    for shard in 0..SHARDS {
        let leader = latest_leader(&cluster.log, shard).expect("the shard has a leader");
        let follower = (leader + 1) % 3;
        cluster.kill9(shard, leader);
        cluster.kill9(shard, follower);
        events.push((Instant::now(), format!("kill -9 s{shard}r{leader} (leader) + s{shard}r{follower}")));
        std::thread::sleep(OUTAGE);
        cluster.start(shard, leader);
        cluster.start(shard, follower);
        let restarted = Instant::now();
        events.push((restarted, format!("restarted s{shard}r{leader} + s{shard}r{follower}")));
        let (missing, when) = match wait_for_commits(&ledger, &shard_of, restarted, RECOVERY_BOUND) {
            Ok(after) => {
                events.push((
                    restarted + after,
                    format!("live: new transfers commit on both shards (+{} ms)", after.as_millis()),
                ));
                std::thread::sleep(SETTLE);
                let settled = Instant::now();
                match wait_for_commits(&ledger, &shard_of, settled, STILL_LIVE_BOUND) {
                    Ok(after) => {
                        events.push((settled + after, "still live".to_string()));
                        continue;
                    }
                    Err(missing) => (
                        missing,
                        format!("within {STILL_LIVE_BOUND:?}, {SETTLE:?} after the first commits on both shards"),
                    ),
                }
            }
            Err(missing) => (missing, format!("within {RECOVERY_BOUND:?} after the restart")),
        };
        let shards: Vec<String> = missing.iter().map(|s| format!("shard {s}")).collect();
        failures.push(format!(
            "outage {} (shard {shard}): no new transfer touching {} committed {when}",
            shard + 1,
            shards.join(" or ")
        ));
        events.push((Instant::now(), format!("still no new commit on {}: gave up waiting", shards.join(", "))));
        break;
    }
    stop.store(true, Ordering::Relaxed);
    events.push((Instant::now(), "load stops".to_string()));
    let bound = if failures.is_empty() { STOP_BOUND } else { STOP_BOUND_FAILED };
    let deadline = tokio::time::Instant::now() + bound;
    let mut abandoned = 0;
    for w in workers {
        let abort = w.abort_handle();
        if rt.block_on(async { tokio::time::timeout_at(deadline, w).await }).is_err() {
            abort.abort();
            abandoned += 1;
        }
    }
    let end = Instant::now();
    if abandoned > 0 {
        events.push((end, format!("{abandoned} workers still waiting for an answer: abandoned")));
    }

    let balances = read_balances(&rt, &config, &accounts);
    let stats = cluster.shut_down_all();
    let ledger = ledger.lock().unwrap();
    print_timeline(t0, end, &ledger, &events, &shard_of);
    println!("outcomes: {}", outcome_counts(&ledger));
    for (why, n) in &ledger.reasons {
        println!("  not committed, {n} x: {why}");
    }
    println!("servers' statistics at the end:");
    for s in &stats {
        println!("  {s}");
    }
    match &balances {
        Ok(balances) => match check_invariant(&ledger.records, balances) {
            Ok(explained) => println!("bank invariant: {explained}"),
            Err(violation) => failures.push(format!("bank invariant violated: {violation}")),
        },
        Err(e) => failures.push(format!("final read failed: {e}")),
    }
    println!("servers' log: {}", cluster.log.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn subset_search_finds_the_applied_unknown_transfers() {
    // Accounts 0..3; transfers (from, to, amount).
    let unknown = [(0, 1, 5), (1, 2, 7), (2, 3, 11), (3, 0, 13)];
    // The second and the fourth took effect.
    let diff = [13, -7, 7, -13];
    let Subset::Found(mut chosen) = find_subset(&unknown, &diff, 1_000) else { panic!("not found") };
    chosen.sort();
    assert_eq!(chosen, [1, 3]);
    assert!(matches!(find_subset(&unknown, &[1, -1, 0, 0], 1_000), Subset::Impossible));
    assert!(matches!(find_subset(&unknown, &diff, 1), Subset::GaveUp));
}
