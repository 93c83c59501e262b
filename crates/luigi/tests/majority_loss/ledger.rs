//! What the majority-loss test's clients sent and were told, the bank invariant over it, and
//! the timeline it prints.

use std::collections::BTreeMap;
use std::time::Instant;

use luigi_txn::client_core::TxnOutcome;
use luigi_txn::partition::HashPartitioner;
use luigi_workloads::procedures::TransferArgs;

use crate::cluster::shards_of;
use crate::common::subset::{find_subset, Subset};
use crate::{SHARDS, SUBSET_SEARCH_NODES};

/// What a transfer's outcome says about its effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
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
pub(crate) fn effect(outcome: &TxnOutcome) -> Effect {
    match outcome {
        o if o.is_committed() => Effect::Committed,
        TxnOutcome::Ordered { .. } => Effect::Aborted,
        TxnOutcome::Rejected(_) => Effect::Rejected,
        TxnOutcome::Unknown(_) => Effect::Unknown,
    }
}

/// One transfer sent by a worker.
#[derive(Clone, Copy)]
pub(crate) struct Record {
    pub(crate) args: TransferArgs,
    pub(crate) sent: Instant,
    /// When it was answered and what the answer says; `None`: abandoned at the end.
    pub(crate) answered: Option<(Instant, Effect)>,
}

#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) records: Vec<Record>,
    /// Why transfers were not committed, with counts.
    pub(crate) reasons: BTreeMap<String, usize>,
}

/// Checks that `observed` balances are those of the committed transfers plus a subset of the
/// unknown ones; returns what explains them, or the violation.
pub(crate) fn check_invariant(records: &[Record], observed: &BTreeMap<u64, i64>) -> Result<String, String> {
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
pub(crate) fn print_timeline(
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

pub(crate) fn outcome_counts(ledger: &Ledger) -> String {
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
