//! A small bank, a [`Workload`] written for the simulator's tests: accounts spread over the
//! shards (account `a` on shard `a % shards`), each starting with [`OPENING`] cents.
//!
//! - `bank.transfer (from, to, amount)`: each participant debits or credits the accounts it
//!   owns and returns their new balances; an amount of 0 writes first and then aborts on
//!   every participant (an ordered transaction rolled back by its procedure).
//! - `bank.audit (accounts, rebalance)`: read-only, returns the balances it owns. With
//!   `rebalance` it is the first step of a business transaction whose second step moves half
//!   the difference from the richer of two accounts to the poorer ([`TxnGenerator::next_step`]).
//! - Check: every account on its shard and nowhere else, and no money made or lost.
//!
//! [`Broken`] variants break it on purpose, for the tests that prove the checks bite.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use luigi_store::{table_key, Key, Store, Value};
use luigi_txn::partition::{split, Partitioner};
use luigi_txn::procedure::{ProcCtx, ProcError, Procedure, Registry};
use luigi_txn::types::ShardId;
use luigi_workloads::{GenError, TxnGenerator, TxnSpec, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The accounts' table.
pub const TABLE: u16 = 0xba;
/// Every account's opening balance.
pub const OPENING: i64 = 1_000;

/// How the bank is broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// Correct.
    No,
    /// A transfer's output carries how many times the procedure ran in this process: not a
    /// function of the state and the arguments, so a replay disagrees with the answers.
    HiddenState,
    /// A credit adds one cent more than the debit took: deterministic (the replay agrees),
    /// but money is made, which the workload's own check sees.
    MintsMoney,
}

/// The bank over `shards` shards with `accounts` accounts.
#[derive(Clone, Debug)]
pub struct Bank {
    pub shards: u32,
    pub accounts: u64,
    /// Share of business transactions that are two-step rebalances.
    pub rebalance_ratio: f64,
    pub broken: Broken,
    runs: Arc<AtomicU64>,
}

impl Bank {
    pub fn new(shards: u32, accounts: u64) -> Self {
        assert!(accounts >= 2 * u64::from(shards), "a few accounts per shard");
        Bank { shards, accounts, rebalance_ratio: 0.3, broken: Broken::No, runs: Arc::new(AtomicU64::new(0)) }
    }

    pub fn broken(mut self, broken: Broken) -> Self {
        self.broken = broken;
        self
    }
}

fn key(account: u64) -> Key {
    table_key(TABLE, &[account])
}

fn account_of(key: &[u8]) -> Option<u64> {
    let (table, rest) = key.split_first_chunk::<2>()?;
    let number: [u8; 8] = rest.try_into().ok()?;
    (u16::from_be_bytes(*table) == TABLE).then(|| u64::from_be_bytes(number))
}

#[derive(Clone, Copy, Debug)]
struct BankPartitioner {
    shards: u32,
}

impl Partitioner for BankPartitioner {
    fn shards(&self) -> u32 {
        self.shards
    }

    fn shard_of(&self, key: &[u8]) -> ShardId {
        (account_of(key).unwrap_or(0) % u64::from(self.shards)) as ShardId
    }
}

fn bad(e: postcard::Error) -> ProcError {
    ProcError::BadArgs(e.to_string())
}

struct Transfer {
    broken: Broken,
    runs: Arc<AtomicU64>,
}

impl Procedure for Transfer {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let (from, to, amount): (u64, u64, i64) = postcard::from_bytes(args).map_err(bad)?;
        let mut balances = Vec::new();
        for (account, delta) in [(from, -amount), (to, amount)] {
            let k = key(account);
            if ctx.access(&k).is_some() {
                let delta = match (amount, self.broken) {
                    (0, _) => 7, // undone by the abort below
                    (_, Broken::MintsMoney) if delta > 0 => delta + 1,
                    _ => delta,
                };
                balances.push((account, ctx.add_i64(&k, delta)?));
            }
        }
        if amount == 0 {
            return Err(ProcError::UserAbort("a transfer of nothing".into()));
        }
        if self.broken == Broken::HiddenState {
            let run = self.runs.fetch_add(1, Ordering::Relaxed);
            balances.push((u64::MAX, run as i64));
        }
        postcard::to_stdvec(&balances).map_err(bad)
    }
}

struct Audit;

impl Procedure for Audit {
    fn execute(&self, ctx: &mut dyn ProcCtx, args: &[u8]) -> Result<Vec<u8>, ProcError> {
        let (accounts, _rebalance): (Vec<u64>, bool) = postcard::from_bytes(args).map_err(bad)?;
        let mut balances = Vec::new();
        for account in accounts {
            let k = key(account);
            if ctx.access(&k).is_some() {
                balances.push((account, ctx.get_i64(&k)?));
            }
        }
        postcard::to_stdvec(&balances).map_err(bad)
    }
}

const TRANSFER: &str = "bank.transfer";
const AUDIT: &str = "bank.audit";

struct BankGenerator {
    bank: Bank,
    rng: ChaCha8Rng,
}

impl BankGenerator {
    fn spec(&self, procedure: &str, args: Vec<u8>, reads: Vec<Key>, writes: Vec<Key>) -> TxnSpec {
        let pieces = split(&BankPartitioner { shards: self.bank.shards }, reads, writes);
        TxnSpec { procedure: procedure.into(), args, pieces }
    }

    fn transfer(&self, from: u64, to: u64, amount: i64) -> TxnSpec {
        let args = postcard::to_stdvec(&(from, to, amount)).expect("encodes");
        self.spec(TRANSFER, args, Vec::new(), vec![key(from), key(to)])
    }

    fn two_accounts(&mut self) -> (u64, u64) {
        let a = self.rng.gen_range(0..self.bank.accounts);
        let b = (a + self.rng.gen_range(1..self.bank.accounts)) % self.bank.accounts;
        (a, b)
    }
}

impl TxnGenerator for BankGenerator {
    fn next_txn(&mut self) -> Result<TxnSpec, GenError> {
        let (a, b) = self.two_accounts();
        if self.rng.gen_bool(self.bank.rebalance_ratio) {
            let args = postcard::to_stdvec(&(vec![a, b], true)).expect("encodes");
            return Ok(self.spec(AUDIT, args, vec![key(a), key(b)], Vec::new()));
        }
        if self.rng.gen_bool(0.1) {
            let accounts: Vec<u64> = (0..4).map(|_| self.rng.gen_range(0..self.bank.accounts)).collect();
            let reads = accounts.iter().map(|&a| key(a)).collect();
            let args = postcard::to_stdvec(&(accounts, false)).expect("encodes");
            return Ok(self.spec(AUDIT, args, reads, Vec::new()));
        }
        let amount = self.rng.gen_range(0..=20);
        Ok(self.transfer(a, b, amount))
    }

    fn next_step(&mut self, done: &TxnSpec, outputs: &[(ShardId, Vec<u8>)]) -> Result<Option<TxnSpec>, GenError> {
        if done.procedure != AUDIT {
            return Ok(None);
        }
        let (accounts, rebalance): (Vec<u64>, bool) =
            postcard::from_bytes(&done.args).map_err(|e| GenError(e.to_string()))?;
        if !rebalance {
            return Ok(None);
        }
        let mut balances = Vec::new();
        for (_, out) in outputs {
            let part: Vec<(u64, i64)> = postcard::from_bytes(out).map_err(|e| GenError(e.to_string()))?;
            balances.extend(part);
        }
        let balance = |a: u64| balances.iter().find(|(b, _)| *b == a).map(|(_, v)| *v);
        let (Some(x), Some(y)) = (balance(accounts[0]), balance(accounts[1])) else {
            return Err(GenError(format!("the audit of {accounts:?} returned {balances:?}")));
        };
        let (rich, poor) = if x >= y { (accounts[0], accounts[1]) } else { (accounts[1], accounts[0]) };
        Ok(Some(self.transfer(rich, poor, (x - y).abs() / 2)))
    }
}

impl Workload for Bank {
    fn name(&self) -> &'static str {
        "bank"
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(TRANSFER, Arc::new(Transfer { broken: self.broken, runs: self.runs.clone() }));
        registry.register(AUDIT, Arc::new(Audit));
    }

    fn partitioner(&self) -> Arc<dyn Partitioner> {
        Arc::new(BankPartitioner { shards: self.shards })
    }

    fn generator(&self, seed: u64) -> Box<dyn TxnGenerator> {
        Box::new(BankGenerator { bank: self.clone(), rng: ChaCha8Rng::seed_from_u64(seed) })
    }

    fn population(&self, _seed: u64, shard: ShardId) -> Vec<(Key, Value)> {
        (0..self.accounts)
            .filter(|a| a % u64::from(self.shards) == u64::from(shard))
            .map(|a| (key(a), OPENING.to_le_bytes().to_vec()))
            .collect()
    }

    fn check(&self, _seed: u64, stores: &[&Store]) -> Result<(), String> {
        let mut total = 0i64;
        let mut seen = 0u64;
        for (shard, store) in stores.iter().enumerate() {
            for (k, v) in store.iter() {
                let a = account_of(k).ok_or_else(|| format!("shard {shard} holds a foreign key {k:?}"))?;
                if a >= self.accounts || a % u64::from(self.shards) != shard as u64 {
                    return Err(format!("shard {shard} holds account {a}"));
                }
                let v: [u8; 8] = v.as_slice().try_into().map_err(|_| format!("account {a}: {v:?}"))?;
                total += i64::from_le_bytes(v);
                seen += 1;
            }
        }
        if seen != self.accounts {
            return Err(format!("{seen} accounts of {}", self.accounts));
        }
        let expected = OPENING * self.accounts as i64;
        if total != expected {
            return Err(format!("the accounts hold {total} cents in all, {expected} were deposited"));
        }
        Ok(())
    }
}
