//! Check 3: real-time order of non-concurrent transactions.

use std::collections::BTreeMap;

use luigi_txn::types::{ShardId, Timestamp};

use super::{CheckOptions, History, Moment, TxnRecord};
use crate::violation::{Violation, ViolationKind};

/// Check 3.
pub(super) fn real_time(history: &History, ordered: &[usize], options: CheckOptions) -> Result<(), Violation> {
    let mut by_shard: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
    for &i in ordered {
        for piece in &history.txns[i].pieces {
            by_shard.entry(piece.shard).or_default().push(i);
        }
    }
    for (shard, txns) in &by_shard {
        if let Some((a, b)) = realtime_inversion(history, txns, true) {
            return Err(realtime_violation(history, a, b, Some(*shard)));
        }
    }
    if options.realtime_across_shards {
        // A snapshot read precedes the later writers of what it read (per shard, above), not
        // every later transaction anywhere: the serializability check covers the rest.
        if let Some((a, b)) = realtime_inversion(history, ordered, false) {
            return Err(realtime_violation(history, a, b, None));
        }
    }
    Ok(())
}

pub(super) fn answered_at(rec: &TxnRecord) -> Moment {
    rec.answers[0].at
}

/// A pair (A, B) among `txns` with A answered before B was dispatched and B not after A in
/// timestamp order; snapshot reads count as A only if `reads_first`.
fn realtime_inversion(history: &History, txns: &[usize], reads_first: bool) -> Option<(usize, usize)> {
    let mut by_dispatch = txns.to_vec();
    by_dispatch.sort_by_key(|&i| history.txns[i].dispatched);
    let mut by_answer = txns.to_vec();
    by_answer.sort_by_key(|&i| answered_at(&history.txns[i]));
    let mut next = 0;
    let mut max: Option<(Timestamp, usize)> = None;
    for &b in &by_dispatch {
        let rec_b = &history.txns[b];
        while next < by_answer.len() && answered_at(&history.txns[by_answer[next]]) < rec_b.dispatched {
            let a = by_answer[next];
            next += 1;
            if !reads_first && history.txns[a].read_only() {
                continue;
            }
            let ts = history.txns[a].ts().expect("ordered");
            if !matches!(max, Some((m, _)) if m >= ts) {
                max = Some((ts, a));
            }
        }
        if let Some((ts_a, a)) = max {
            // B must come after A: above it, or at its timestamp when B reads at a snapshot
            // (rule 23 orders it after everything at or below its timestamp).
            let (ts_b, b_reads) = rec_b.order_key().expect("ordered");
            if (ts_a, false) >= (ts_b, b_reads) {
                return Some((a, b));
            }
        }
    }
    None
}

fn realtime_violation(history: &History, a: usize, b: usize, shard: Option<ShardId>) -> Violation {
    let (a, b) = (&history.txns[a], &history.txns[b]);
    let scope = match shard {
        Some(s) => format!("both on shard {s}"),
        None => "on different shards".to_string(),
    };
    Violation::new(
        ViolationKind::RealTime,
        format!(
            "txn {:?} was answered at {} us (step {}) before txn {:?} was dispatched at {} us \
             (step {}), {scope}, but ts {:?} is not below ts {:?}",
            a.id,
            answered_at(a).us,
            answered_at(a).step,
            b.id,
            b.dispatched.us,
            b.dispatched.step,
            a.ts(),
            b.ts()
        ),
    )
}
