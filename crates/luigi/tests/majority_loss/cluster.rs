//! The servers of the majority-loss test and the bank workload it runs on them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use luigi_runtime::client::Client;
use luigi_runtime::config::ClusterConfig;
use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::{HashPartitioner, Partitioner};
use luigi_workloads::procedures::{account_key, TransferArgs};

use crate::common::{start_durable, transfer, ServerProc};
use crate::ledger::{Effect, Ledger};
use crate::{ACCOUNTS_PER_SHARD, READ_BOUND, SHARDS};

/// The servers, by (shard, replica), and what restarting one needs.
pub(crate) struct Cluster {
    pub(crate) config: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) ports: Vec<[u16; 3]>,
    pub(crate) servers: BTreeMap<(u32, u32), ServerProc>,
}

impl Cluster {
    pub(crate) fn start(&mut self, shard: u32, replica: u32) {
        let port = self.ports[shard as usize][replica as usize];
        let server = start_durable(&self.config, &self.data, &format!("s{shard}r{replica}"), port, &self.log);
        assert!(self.servers.insert((shard, replica), server).is_none(), "s{shard}r{replica} already runs");
    }

    pub(crate) fn kill9(&mut self, shard: u32, replica: u32) {
        self.servers.remove(&(shard, replica)).expect("running").kill9();
    }

    /// Stops every server in turn through its stdin, so that each logs its statistics, and
    /// returns those lines.
    pub(crate) fn shut_down_all(&mut self) -> Vec<String> {
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
pub(crate) fn accounts_by_shard(shard_of: &HashPartitioner) -> Vec<Vec<u64>> {
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
pub(crate) fn pick(w: u64, n: u64, accounts: &[Vec<u64>], amount: i64) -> TransferArgs {
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

pub(crate) fn shards_of(shard_of: &HashPartitioner, args: &TransferArgs) -> [u32; 2] {
    [shard_of.shard_of(&account_key(args.from)), shard_of.shard_of(&account_key(args.to))]
}

/// Waits until transfers sent after `since` and touching each shard are committed (stragglers
/// from before do not count); returns how long after `since` the last shard got its first, or
/// the shards without one after `bound`.
pub(crate) fn wait_for_commits(
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
pub(crate) fn read_balances(
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
