//! What every replica checks of a transaction before it lets it near a log, an accept log, a
//! floor or a recovery (DESIGN.md rules 3 and 22): one function, [`check`], called by the
//! leader's admission, a follower's fast-path accept and a new leader's recovery of accepts,
//! so that a transaction one replica refuses is refused by all of them.
//!
//! Two kinds of refusal:
//! - **malformed** (its shape, this shard not a participant, an unknown procedure): every
//!   replica decides it from the transaction alone, so a leader answers `Rejected` without
//!   logging anything;
//! - **ahead of the clock** (rule 22): its timestamp lies beyond this replica's clock plus
//!   the horizon a correct coordinator can justify. That depends on this replica's clock, so
//!   a leader logs the refusal (rule 3.4) and tells the other participants.

use super::LeaderConfig;
use luigi_txn::procedure::Registry;
use luigi_txn::types::{ShardId, TimeUs, Txn};

/// Why a replica will not let a transaction in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inadmissible {
    /// Wrong whatever the replica: refused alike everywhere, nothing logged.
    Malformed(String),
    /// Its timestamp lies beyond this replica's clock horizon (rule 22).
    AheadOfClock(String),
}

impl Inadmissible {
    /// The reason, as the client is told it.
    pub fn reason(&self) -> &str {
        match self {
            Inadmissible::Malformed(why) | Inadmissible::AheadOfClock(why) => why,
        }
    }
}

/// What a replica of `shard` checks a transaction against.
#[derive(Clone, Copy)]
pub struct Admission<'a> {
    /// This shard.
    pub shard: ShardId,
    /// Shards in the cluster.
    pub shards: u32,
    /// The procedures every replica runs.
    pub registry: &'a Registry,
    /// How far ahead of this replica's clock a timestamp may lie (rule 22; see
    /// `LeaderConfig::max_ahead_us`).
    pub max_ahead_us: u64,
}

impl<'a> Admission<'a> {
    /// What a replica configured with `config`, running `registry`, checks.
    pub fn new(config: &LeaderConfig, registry: &'a Registry) -> Self {
        Admission { shard: config.shard, shards: config.shards, registry, max_ahead_us: config.max_ahead_us }
    }

    /// Checks `txn` arriving at `now` on this replica's clock: its shape, that this shard is a
    /// participant, that its procedure is known, then its timestamp against the horizon.
    ///
    /// # Errors
    /// What is wrong, and whether it is [`Inadmissible::Malformed`] or
    /// [`Inadmissible::AheadOfClock`].
    pub fn check(&self, txn: &Txn, now: TimeUs) -> Result<(), Inadmissible> {
        self.check_malformed(txn).map_err(Inadmissible::Malformed)?;
        check_horizon(txn.ts, now, self.max_ahead_us).map_err(Inadmissible::AheadOfClock)
    }

    /// The part of [`Admission::check`] that does not depend on the clock.
    ///
    /// # Errors
    /// What is wrong with `txn`.
    pub fn check_malformed(&self, txn: &Txn) -> Result<(), String> {
        txn.check_shape(self.shards)?;
        let shard = self.shard;
        if txn.piece(shard).is_none() {
            return Err(format!("shard {shard} is not a participant"));
        }
        if !self.registry.contains(&txn.procedure) {
            return Err(format!("unknown procedure '{}'", txn.procedure));
        }
        Ok(())
    }
}

/// Rule 22: a timestamp `ts` is admissible at `now` when it is at most `max_ahead_us` ahead.
/// Saturating: `ts` comes from the wire and may be anything up to `u64::MAX`.
///
/// # Errors
/// How far ahead it is, and the bound, in words an operator can act on.
pub fn check_horizon(ts: u64, now: TimeUs, max_ahead_us: u64) -> Result<(), String> {
    if ts <= now.saturating_add(max_ahead_us) {
        return Ok(());
    }
    Err(format!(
        "timestamp {} s ahead of this server's clock; bound {} s: is the client's clock right?",
        seconds(ts - now),
        seconds(max_ahead_us)
    ))
}

/// Microseconds as seconds with one decimal and thousands separators ("3,600.2").
fn seconds(us: u64) -> String {
    let tenths = us / 100_000;
    let (whole, tenth) = (tenths / 10, tenths % 10);
    let digits = whole.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{grouped}.{tenth}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use luigi_txn::types::{KeySet, ShardPiece, TxnId};
    use luigi_workloads::procedures::Micro;

    fn txn(ts: u64, pieces: Vec<ShardPiece>, procedure: &str) -> Txn {
        Txn { id: TxnId { client: 1, seq: 1 }, procedure: procedure.into(), args: vec![], pieces, ts }
    }

    fn piece(shard: ShardId) -> ShardPiece {
        ShardPiece { shard, keys: KeySet::new(vec![], vec![b"k".to_vec()]) }
    }

    #[test]
    fn the_horizon_says_how_far_ahead_and_saturates_over_the_whole_range() {
        assert_eq!(check_horizon(1_500, 1_000, 500), Ok(()));
        let why = check_horizon(3_600_200_000 + 1_000, 1_000, 500_000).unwrap_err();
        assert_eq!(why, "timestamp 3,600.2 s ahead of this server's clock; bound 0.5 s: is the client's clock right?");
        assert!(check_horizon(u64::MAX, 0, 500_000).unwrap_err().contains("18,446,744,073,709.5 s ahead"));
        assert_eq!(check_horizon(u64::MAX, u64::MAX - 1, u64::MAX), Ok(()));
        assert_eq!(check_horizon(u64::MAX, u64::MAX, 0), Ok(()));
        assert_eq!(check_horizon(0, u64::MAX, 0), Ok(()), "a late timestamp is the bump's business");
    }

    #[test]
    fn malformed_comes_before_the_clock_and_names_the_problem() {
        let registry = luigi_workloads::procedures::builtins();
        let a = Admission { shard: 0, shards: 2, registry: &registry, max_ahead_us: 1_000 };
        let name = Micro::NAME;
        assert_eq!(a.check(&txn(500, vec![piece(0)], name), 0), Ok(()));
        let foreign = a.check(&txn(500, vec![piece(1)], name), 0).unwrap_err();
        assert_eq!(foreign, Inadmissible::Malformed("shard 0 is not a participant".into()));
        let unknown = a.check(&txn(500, vec![piece(0)], "nope"), 0).unwrap_err();
        assert_eq!(unknown.reason(), "unknown procedure 'nope'");
        let both = a.check(&txn(u64::MAX, vec![piece(0), piece(5)], name), 0).unwrap_err();
        assert!(matches!(both, Inadmissible::Malformed(ref why) if why.contains("shard 5 does not exist")));
        let ahead = a.check(&txn(u64::MAX, vec![piece(0)], name), 0).unwrap_err();
        assert!(matches!(ahead, Inadmissible::AheadOfClock(_)), "{ahead:?}");
    }
}
