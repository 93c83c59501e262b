//! YCSB's request distributions, as its generators draw them (`ZipfianGenerator`,
//! `ScrambledZipfianGenerator`, `SkewedLatestGenerator`, `UniformLongGenerator`), over a
//! seeded generator.
//!
//! One difference: when the item count grows (the `latest` distribution after inserts),
//! YCSB recomputes `eta` with the item count it was built with; this one uses the current
//! count, as Gray et al.'s formula has it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::keys::fnvhash64;

/// YCSB's Zipfian constant (`ZipfianGenerator.ZIPFIAN_CONSTANT`).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// The item space a scrambled Zipfian draws from before hashing
/// (`ScrambledZipfianGenerator.ITEM_COUNT`).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// zeta(10^10, 0.99), precomputed as YCSB does (`ScrambledZipfianGenerator.ZETAN`).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// sum over i in `from..to` of 1 / (i + 1)^theta, added to `sum`.
fn zeta(from: u64, to: u64, theta: f64, sum: f64) -> f64 {
    (from..to).fold(sum, |acc, i| acc + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Gray et al.'s Zipfian generator over `0..items` (item 0 the most popular), YCSB's
/// `ZipfianGenerator` with base 0.
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Over `0..items` with exponent `theta` (zeta computed: `items` steps).
    pub fn new(items: u64, theta: f64) -> Self {
        Self::with_zetan(items, theta, zeta(0, items, theta, 0.0))
    }

    /// Over `0..items` with zeta(items, theta) given (`zetan`).
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> Self {
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let mut z = Self { theta, alpha: 1.0 / (1.0 - theta), zeta2theta, zetan, eta: 0.0, count_for_zeta: items };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// A draw from `0..items`; zeta is extended when `items` grew since the last draw.
    pub fn next(&mut self, items: u64, rng: &mut ChaCha8Rng) -> u64 {
        if items > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, items, self.theta, self.zetan);
            self.count_for_zeta = items;
            self.eta = self.eta_for(items);
        }
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let ret = (items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        ret.min(items - 1)
    }
}

/// The request distribution of a workload (YCSB's `requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Every loaded record alike.
    Uniform,
    /// Scrambled Zipfian, constant 0.99: popular records spread over the key space.
    Zipfian,
    /// The most recently inserted records the most popular (Zipfian by recency).
    Latest,
}

impl Distribution {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
        }
    }
}

impl std::str::FromStr for Distribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "zipfian" => Ok(Distribution::Zipfian),
            "latest" => Ok(Distribution::Latest),
            other => Err(format!("unknown distribution '{other}' (uniform, zipfian or latest)")),
        }
    }
}

/// The record numbers inserted so far, shared by every generator of a workload (YCSB's
/// `transactioninsertkeysequence`): the next insert takes [`InsertCounter::next`].
#[derive(Clone, Debug)]
pub struct InsertCounter(Arc<AtomicU64>);

impl InsertCounter {
    /// A counter after `records` loaded records (numbers `0..records`).
    pub fn new(records: u64) -> Self {
        Self(Arc::new(AtomicU64::new(records)))
    }

    /// Takes the next record number to insert.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }

    /// How many record numbers were handed out (loaded ones included).
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Draws record numbers by a [`Distribution`] (YCSB's key chooser).
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Uniform over the `records` loaded ones (YCSB's `UniformLongGenerator`).
    Uniform {
        /// Loaded records.
        records: u64,
    },
    /// `fnvhash64(zipfian over 10^10) % records` (YCSB's `ScrambledZipfianGenerator`).
    Scrambled {
        /// Loaded records.
        records: u64,
        /// The Zipfian over [`SCRAMBLED_ITEM_COUNT`].
        zipf: Zipfian,
    },
    /// `last - zipfian(last)`, `last` the newest record number (YCSB's
    /// `SkewedLatestGenerator`).
    Latest {
        /// The inserts so far.
        inserted: InsertCounter,
        /// The Zipfian over the records so far.
        zipf: Zipfian,
    },
}

impl KeyChooser {
    /// The chooser of `dist` over `records` loaded records (at least 1) and the inserts
    /// counted by `inserted`.
    pub fn new(dist: Distribution, records: u64, inserted: InsertCounter) -> Self {
        match dist {
            Distribution::Uniform => KeyChooser::Uniform { records },
            Distribution::Zipfian => KeyChooser::Scrambled {
                records,
                zipf: Zipfian::with_zetan(SCRAMBLED_ITEM_COUNT + 1, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
            },
            Distribution::Latest => {
                KeyChooser::Latest { zipf: Zipfian::new(inserted.count(), ZIPFIAN_CONSTANT), inserted }
            }
        }
    }

    /// The next record number.
    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            KeyChooser::Uniform { records } => rng.gen_range(0..*records),
            KeyChooser::Scrambled { records, zipf } => {
                let drawn = zipf.next(SCRAMBLED_ITEM_COUNT + 1, rng);
                fnvhash64(drawn as i64).unsigned_abs() % *records
            }
            KeyChooser::Latest { inserted, zipf } => {
                let count = inserted.count();
                let last = count - 1;
                last - zipf.next(count, rng).min(last)
            }
        }
    }
}
