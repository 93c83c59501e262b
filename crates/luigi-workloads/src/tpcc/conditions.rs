//! The twelve consistency conditions (clause 3.3.2, with condition 11 generalised as in
//! `docs/TPCC.md`), evaluated from the [`ShardSummary`] of every shard. The same code serves
//! a committed `tpcc.check` transaction ([`evaluate`]) and local stores
//! ([`TpccWorkload::conditions`](super::TpccWorkload::conditions), which runs the check
//! procedure over each store through a read-only context).

use std::collections::BTreeMap;

use luigi_txn::types::ShardId;

use super::population::DISTRICTS;
use super::procedures::check::{ShardSummary, Tally, CONDITIONS};
use super::rows::Money;
use super::{ConditionResult, TpccConfig};

/// What each condition states, by number (index 0 is condition 1).
pub const STATEMENTS: [&str; CONDITIONS] = [
    "W_YTD = sum(D_YTD), per warehouse",
    "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID), per district",
    "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER), per district",
    "sum(O_OL_CNT) = count(ORDER-LINE), per district",
    "O_CARRIER_ID is null iff a NEW-ORDER row exists, per order",
    "O_OL_CNT = count(its ORDER-LINE rows), per order",
    "OL_DELIVERY_D is null iff O_CARRIER_ID is null, per order line",
    "W_YTD = sum(H_AMOUNT) of the history with H_W_ID = w, per warehouse",
    "D_YTD = sum(H_AMOUNT) of the history with (H_W_ID, H_D_ID) = (w, d), per district",
    "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT), per customer",
    "count(ORDER) - count(NEW-ORDER) = initial delivered + delivered since, per district",
    "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT), per customer",
];

/// Violations quoted per condition in [`ConditionResult::detail`].
pub const DETAIL_LIMIT: u32 = 5;

/// The twelve conditions from the outputs of a committed check transaction (one
/// [`ShardSummary`] per shard). Errors when an output does not decode or the summaries do
/// not cover every warehouse exactly once.
pub fn evaluate(config: &TpccConfig, outputs: &[(ShardId, Vec<u8>)]) -> Result<Vec<ConditionResult>, String> {
    let mut summaries = Vec::with_capacity(outputs.len());
    for (shard, bytes) in outputs {
        let summary: ShardSummary =
            postcard::from_bytes(bytes).map_err(|e| format!("shard {shard}: check output does not decode: {e}"))?;
        if summary.local.len() != CONDITIONS {
            return Err(format!("shard {shard}: {} conditions in its summary", summary.local.len()));
        }
        summaries.push(summary);
    }
    let mut tallies = vec![Tally::default(); CONDITIONS];
    for summary in &summaries {
        for (total, local) in tallies.iter_mut().zip(&summary.local) {
            total.checked += local.checked;
            total.violations += local.violations;
            let room = (DETAIL_LIMIT as usize).saturating_sub(total.detail.len());
            total.detail.extend(local.detail.iter().take(room).map(|d| format!("shard {}: {d}", summary.shard)));
        }
    }
    // Conditions 8 and 9: every shard's history against the owners' YTD values.
    let mut history: BTreeMap<(u32, u8), Money> = BTreeMap::new();
    for h in summaries.iter().flat_map(|s| &s.history) {
        let sum = history.entry((h.w, h.d)).or_default();
        *sum = sum.saturating_add(h.amount);
    }
    let mut ytd = BTreeMap::new();
    for y in summaries.iter().flat_map(|s| &s.warehouses) {
        if ytd.insert(y.w, y).is_some() {
            return Err(format!("warehouse {} summarized twice", y.w));
        }
        if y.d_ytd.len() != usize::from(DISTRICTS) {
            return Err(format!("warehouse {}: {} districts summarized", y.w, y.d_ytd.len()));
        }
    }
    if let Some(w) = (1..=config.warehouses).find(|w| !ytd.contains_key(w)) {
        return Err(format!("warehouse {w} is in no shard's summary"));
    }
    if let Some(w) = ytd.keys().find(|&&w| w == 0 || w > config.warehouses) {
        return Err(format!("warehouse {w} summarized but not configured"));
    }
    for (&w, y) in &ytd {
        let paid = (1..=DISTRICTS).fold(0, |s: Money, d| s.saturating_add(history.get(&(w, d)).copied().unwrap_or(0)));
        let c8 = y.w_ytd == paid;
        tallies[7].record(c8, DETAIL_LIMIT, || format!("w={w}: W_YTD {} != history {paid}", y.w_ytd));
        for (d, &d_ytd) in (1..=DISTRICTS).zip(&y.d_ytd) {
            let paid = history.get(&(w, d)).copied().unwrap_or(0);
            tallies[8]
                .record(d_ytd == paid, DETAIL_LIMIT, || format!("(w={w}, d={d}): D_YTD {d_ytd} != history {paid}"));
        }
    }
    if let Some((w, d)) = history.keys().find(|(w, d)| !ytd.contains_key(w) || !(1..=DISTRICTS).contains(d)) {
        let (w, d) = (*w, *d);
        tallies[8].record(false, DETAIL_LIMIT, || format!("history paid at (w={w}, d={d}), which does not exist"));
    }
    Ok(tallies
        .into_iter()
        .zip(STATEMENTS)
        .enumerate()
        .map(|(i, (t, statement))| ConditionResult {
            number: i as u8 + 1,
            statement,
            passed: t.violations == 0,
            checked: t.checked,
            detail: match t.violations {
                0 => String::new(),
                n => format!("{n} violation(s): {}", t.detail.join("; ")),
            },
        })
        .collect())
}
