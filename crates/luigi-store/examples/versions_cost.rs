//! What the store's version history (DESIGN.md rule 23, `luigi_store::versions`) costs a write
//! and a snapshot read, under the write pattern of the micro workload: figures, no asserts.
//!
//! ```sh
//! cargo run --release -p luigi-store --example versions_cost [-- OPTIONS]
//! ```
//!
//! Options (defaults in brackets): `--keys N` key space [100000], `--ops N` operations per
//! transaction [10], `--read-ratio R` share of them reads, not executed here [0.5],
//! `--gap-us-max N` a transaction's timestamp is 1..=N us above the last one [50, about 40K
//! transactions a second], `--puts N` timed puts per row [2000000], `--rounds N` [3],
//! `--windows W,W,..` retention windows in us, `plain` for `put_slice` without a timestamp
//! [plain,0,1000000,5000000], `--no-populate` start empty instead of with every key holding
//! a value.
//!
//! Each row runs in a child process of its own (so that its memory figure is its own), rows
//! alternate window by window, round after round. A row: populate, warm up for the window plus
//! 1 s of timestamps (at least 500K puts) so that the history is in its steady state, then time
//! `--puts` puts of fresh 8-byte values (micro's `v.to_le_bytes().to_vec()`), each transaction's
//! distinct keys drawn uniformly at one timestamp; then count allocations over 100K more puts;
//! then time 1M `get_at` at snapshots drawn uniformly from what may be read, and 1M `get`.
//! Columns: `ns/put` (wall time) and `cpu_ns/put` (the time the thread ran, which a shared
//! machine inflates less); `allocs/put` (heap allocations, frees not counted); `versions` and
//! `hist_MiB` (the history's own counters, `luigi_versions_held` and `luigi_versions_bytes`);
//! `rss_MiB` the resident memory the writes added after population (the history's real cost
//! with the allocator's overhead, plus the warm-up's own churn); `ns/get_at`, `ns/get`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use luigi_store::{table_key, Store, Timestamp};

/// The system allocator, counting allocations while [`COUNTING`] is on.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The micro table (`luigi_workloads::procedures::MICRO_TABLE`; this crate cannot depend on it).
const MICRO_TABLE: u16 = 1;
/// Puts whose allocations are counted.
const COUNTED_PUTS: u64 = 100_000;
/// Reads timed per row.
const READS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Options {
    keys: u64,
    ops: u32,
    read_ratio: f64,
    gap_us_max: u64,
    puts: u64,
    rounds: u32,
    windows: Vec<Option<Timestamp>>,
    populate: bool,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> (Options, Option<Option<Timestamp>>) {
        let mut o = Options {
            keys: 100_000,
            ops: 10,
            read_ratio: 0.5,
            gap_us_max: 50,
            puts: 2_000_000,
            rounds: 3,
            windows: vec![None, Some(0), Some(1_000_000), Some(5_000_000)],
            populate: true,
        };
        let mut child = None;
        while let Some(flag) = args.next() {
            if flag == "--no-populate" {
                o.populate = false;
                continue;
            }
            let value = args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            let bad = |e: &dyn std::fmt::Display| -> ! { panic!("bad {flag} {value}: {e}") };
            match flag.as_str() {
                "--keys" => o.keys = value.parse().unwrap_or_else(|e| bad(&e)),
                "--ops" => o.ops = value.parse().unwrap_or_else(|e| bad(&e)),
                "--read-ratio" => o.read_ratio = value.parse().unwrap_or_else(|e| bad(&e)),
                "--gap-us-max" => o.gap_us_max = value.parse().unwrap_or_else(|e| bad(&e)),
                "--puts" => o.puts = value.parse().unwrap_or_else(|e| bad(&e)),
                "--rounds" => o.rounds = value.parse().unwrap_or_else(|e| bad(&e)),
                "--windows" => {
                    o.windows = value.split(',').map(|w| parse_window(w).unwrap_or_else(|e| bad(&e))).collect()
                }
                "--child" => child = Some(parse_window(&value).unwrap_or_else(|e| bad(&e))),
                _ => panic!("unknown option {flag}"),
            }
        }
        assert!(o.keys >= 2 * u64::from(o.ops) && o.ops >= 1 && o.gap_us_max >= 1, "bad options {o:?}");
        (o, child)
    }

    fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--keys".into(),
            self.keys.to_string(),
            "--ops".into(),
            self.ops.to_string(),
            "--read-ratio".into(),
            self.read_ratio.to_string(),
            "--gap-us-max".into(),
            self.gap_us_max.to_string(),
            "--puts".into(),
            self.puts.to_string(),
        ];
        if !self.populate {
            args.push("--no-populate".into());
        }
        args
    }
}

fn parse_window(w: &str) -> Result<Option<Timestamp>, std::num::ParseIntError> {
    if w == "plain" {
        Ok(None)
    } else {
        w.parse().map(Some)
    }
}

fn window_name(w: Option<Timestamp>) -> String {
    w.map_or_else(|| "plain".to_string(), |w| w.to_string())
}

/// splitmix64: fast, and the same stream in every row.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// One row: a store under `window` (`None`: puts without a timestamp), written by micro
/// transactions.
struct Row {
    o: Options,
    window: Option<Timestamp>,
    store: Store,
    rng: Rng,
    ts: Timestamp,
    txn_keys: Vec<u64>,
}

impl Row {
    fn new(o: Options, window: Option<Timestamp>) -> Row {
        let mut store = Store::new();
        store.set_retention(window.unwrap_or(0));
        if o.populate {
            for k in 0..o.keys {
                store.put(table_key(MICRO_TABLE, &[k]), k.to_le_bytes().to_vec());
            }
        }
        Row { o, window, store, rng: Rng(0x5eed), ts: 1_000_000, txn_keys: Vec::new() }
    }

    /// One transaction's writes at the next timestamp; returns how many puts it made.
    fn txn(&mut self) -> u64 {
        self.ts += 1 + self.rng.below(self.o.gap_us_max);
        self.txn_keys.clear();
        let mut puts = 0;
        while self.txn_keys.len() < self.o.ops as usize {
            let k = self.rng.below(self.o.keys);
            if self.txn_keys.contains(&k) {
                continue;
            }
            self.txn_keys.push(k);
            let is_read = (self.rng.next() >> 11) as f64 / (1u64 << 53) as f64 <= self.o.read_ratio;
            if self.o.read_ratio > 0.0 && is_read {
                continue; // reads are timed apart
            }
            let key = table_key(MICRO_TABLE, &[k]);
            let value = self.ts.to_le_bytes().to_vec();
            match self.window {
                None => drop(black_box(self.store.put_slice(&key, value))),
                Some(_) => drop(black_box(self.store.put_at(&key, value, self.ts))),
            }
            puts += 1;
        }
        puts
    }

    /// Runs transactions until `puts` puts were made; returns how many were.
    fn write(&mut self, puts: u64) -> u64 {
        let mut done = 0;
        while done < puts {
            done += self.txn();
        }
        done
    }

    fn warm_up(&mut self) {
        let until = self.ts + self.window.unwrap_or(0) + 1_000_000;
        let mut puts = 0;
        while self.ts < until || puts < 500_000 {
            puts += self.txn();
        }
    }

    /// ns per `get_at` at a snapshot drawn from what may be read, and per `get`.
    fn reads(&mut self) -> (f64, f64) {
        let (oldest, newest) = (self.store.oldest_snapshot(), self.ts);
        let keys: Vec<_> = (0..1024).map(|_| table_key(MICRO_TABLE, &[self.rng.below(self.o.keys)])).collect();
        let start = Instant::now();
        for i in 0..READS {
            let at = oldest + self.rng.below(newest - oldest + 1);
            black_box(self.store.get_at(&keys[(i % 1024) as usize], at).expect("within the window"));
        }
        let get_at = start.elapsed().as_nanos() as f64 / READS as f64;
        let start = Instant::now();
        for i in 0..READS {
            black_box(self.rng.below(newest - oldest + 1));
            black_box(self.store.get(&keys[(i % 1024) as usize]));
        }
        (get_at, start.elapsed().as_nanos() as f64 / READS as f64)
    }
}

/// The CPU time this thread has run, in ns (`/proc/self/schedstat`; 0 elsewhere): on a
/// shared machine, the time a row waited for a core is not its cost.
fn cpu_ns() -> u64 {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    schedstat.split_whitespace().next().and_then(|t| t.parse().ok()).unwrap_or(0)
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn run_child(o: Options, window: Option<Timestamp>) {
    let mut row = Row::new(o.clone(), window);
    let rss_populated = rss_bytes();
    row.warm_up();
    let (start, cpu_start) = (Instant::now(), cpu_ns());
    let puts = row.write(o.puts);
    let ns_put = start.elapsed().as_nanos() as f64 / puts as f64;
    let cpu_ns_put = (cpu_ns() - cpu_start) as f64 / puts as f64;
    COUNTING.store(true, Ordering::Relaxed);
    let counted = row.write(COUNTED_PUTS);
    COUNTING.store(false, Ordering::Relaxed);
    let allocs = ALLOCS.load(Ordering::Relaxed) as f64 / counted as f64;
    let stats = row.store.history_stats();
    let rss = rss_bytes().saturating_sub(rss_populated);
    let (get_at, get) = row.reads();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!(
        "{:>8} {:>9.0} {:>10.0} {:>10.2} {:>9} {:>9.1} {:>8.1} {:>10.0} {:>7.0}",
        window_name(window),
        ns_put,
        cpu_ns_put,
        allocs,
        stats.versions,
        mib(stats.bytes as u64),
        mib(rss),
        get_at,
        get
    );
}

fn main() {
    let (o, child) = Options::parse(std::env::args().skip(1));
    if let Some(window) = child {
        run_child(o, window);
        return;
    }
    println!(
        "luigi-store versions_cost: {} keys{}, {} ops per transaction ({} reads, not run), timestamps 1..={} us apart, {} timed puts per row",
        o.keys,
        if o.populate { " (populated)" } else { " (empty at start)" },
        o.ops,
        o.read_ratio,
        o.gap_us_max,
        o.puts
    );
    println!(
        "{:>8} {:>9} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10} {:>7}",
        "window", "ns/put", "cpu_ns/put", "allocs/put", "versions", "hist_MiB", "rss_MiB", "ns/get_at", "ns/get"
    );
    let exe = std::env::current_exe().expect("this program's path");
    for _ in 0..o.rounds {
        for &window in &o.windows {
            let status = Command::new(&exe)
                .args(o.to_args())
                .args(["--child", &window_name(window)])
                .status()
                .expect("run a row");
            assert!(status.success(), "row {} failed", window_name(window));
        }
    }
}
