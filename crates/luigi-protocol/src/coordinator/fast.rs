//! The coordinator's fast-commit rule (DESIGN.md, "The fast path"): a
//! participant's answer counts without a proven position when its leader marked it fast
//! (an order hash, the coordinator's timestamp unmoved) and every other replica of the shard
//! accepted the transaction at that timestamp with the same order hash. Followers' accepts
//! arrive as [`ServerMsg::FastAccept`](luigi_txn::msg::ServerMsg::FastAccept).

use luigi_txn::msg::TxnReply;
use luigi_txn::types::Timestamp;

/// Which transactions a coordinator asks the fast path for (DESIGN.md rule 20): those go to
/// every replica of every participant, the others to the leaders alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FanOut {
    /// None: the fast path is off.
    #[default]
    Never,
    /// Every transaction, whatever share commits fast (the simulator's sweeps: the most
    /// fast-path traffic to break).
    Always,
    /// Every transaction while at least [`FAN_OUT_LEAVE_PCT`] of them commit fast; below it,
    /// one in [`FAN_OUT_SAMPLE_EVERY`], until [`FAN_OUT_RETURN_PCT`] of those commit fast.
    Adaptive,
}

/// Transactions asking for the fast path whose completions are judged at a time, fanning
/// everything out.
pub const FAN_OUT_WINDOW: u32 = 256;
/// Below this share (percent) of fast commits over a window, a coordinator stops fanning
/// out every transaction: each fanned-out dispatch costs every follower a decode, an accept
/// and a durable write, which under saturation costs more throughput than the few fast
/// commits gain in latency.
pub const FAN_OUT_LEAVE_PCT: u32 = 25;
/// While sampling, this share (percent) of the samples committing fast brings back the fan
/// out of every transaction. Above [`FAN_OUT_LEAVE_PCT`], so that a load at the edge does not
/// flip every window.
pub const FAN_OUT_RETURN_PCT: u32 = 50;
/// While sampling, one transaction in this many asks for the fast path.
pub const FAN_OUT_SAMPLE_EVERY: u64 = 16;
/// Samples judged at a time, at first.
pub const FAN_OUT_SAMPLES: u32 = 32;
/// Each return to fanning out everything that falls back after its first window doubles
/// the samples judged next, up to `FAN_OUT_SAMPLES << FAN_OUT_BACKOFF_MAX` (a load where the
/// samples commit fast but everything fanned out does not would otherwise flip back every
/// few hundred transactions, paying a whole window of fan-out each time).
pub const FAN_OUT_BACKOFF_MAX: u32 = 5;

/// A coordinator's choice of which transactions ask for the fast path ([`FanOut`]). Plain
/// state: the coordinator tells it each new transaction and each completion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FanOutPolicy {
    mode: FanOut,
    /// Adaptive, below the leave share: one in [`FAN_OUT_SAMPLE_EVERY`] asks.
    sampling: bool,
    /// Transactions started (to pick the samples).
    started: u64,
    /// Completions of transactions that asked, judged so far in this window, and how many
    /// of them committed fast.
    judged: u32,
    fast: u32,
    /// Windows judged since the last switch.
    windows: u32,
    /// The samples judged at a time are `FAN_OUT_SAMPLES << backoff`.
    backoff: u32,
    /// Switches between fanning out everything and sampling so far.
    pub switches: u64,
}

impl FanOutPolicy {
    /// A policy in `mode`, fanning out everything (when it fans out at all) at first.
    pub fn new(mode: FanOut) -> Self {
        FanOutPolicy { mode, ..FanOutPolicy::default() }
    }

    /// Whether the next transaction asks for the fast path.
    pub fn ask(&mut self) -> bool {
        match self.mode {
            FanOut::Never => false,
            FanOut::Always => true,
            FanOut::Adaptive => {
                self.started += 1;
                !self.sampling || self.started.is_multiple_of(FAN_OUT_SAMPLE_EVERY)
            }
        }
    }

    /// A transaction that asked for the fast path completed, on it (`fast`) or not.
    pub fn completed(&mut self, fast: bool) {
        if self.mode != FanOut::Adaptive {
            return;
        }
        self.judged += 1;
        self.fast += u32::from(fast);
        let (window, pct) = if self.sampling {
            (FAN_OUT_SAMPLES << self.backoff, FAN_OUT_RETURN_PCT)
        } else {
            (FAN_OUT_WINDOW, FAN_OUT_LEAVE_PCT)
        };
        if self.judged < window {
            return;
        }
        self.windows += 1;
        let enough = self.fast * 100 >= self.judged * pct;
        if self.sampling == enough {
            if !self.sampling {
                // Back to sampling: at once after a return (longer next time), or after a
                // spell of fast commits (start over).
                let returned_in_vain = self.windows == 1 && self.switches > 0;
                self.backoff = if returned_in_vain { (self.backoff + 1).min(FAN_OUT_BACKOFF_MAX) } else { 0 };
            }
            self.sampling = !enough;
            self.switches += 1;
            self.windows = 0;
        }
        (self.judged, self.fast) = (0, 0);
    }

    /// Whether it fans out only samples now.
    pub fn sampling(&self) -> bool {
        self.sampling
    }

    /// The samples judged at a time now.
    pub fn samples_judged(&self) -> u32 {
        FAN_OUT_SAMPLES << self.backoff
    }
}

/// One replica's accept of a transaction on one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// The accepting replica (index from 0).
    pub replica: u32,
    /// Its Raft term when it accepted.
    pub term: u64,
    /// The timestamp it accepted at.
    pub ts: Timestamp,
    /// Its order hash.
    pub order: u64,
}

/// The accepts heard for one participant of one transaction: one per replica (a replica's
/// first accept stands), at most the group's size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepts(Vec<Accept>);

impl Accepts {
    /// Notes `accept` from a group of `group_size`; a second one from the same replica, or
    /// one past the group's size, changes nothing.
    pub fn note(&mut self, accept: Accept, group_size: u32) {
        if accept.replica >= group_size || self.0.iter().any(|a| a.replica == accept.replica) {
            return;
        }
        self.0.push(accept);
    }

    /// Whether `reply`, the leader's answer, commits on the fast path with these accepts:
    /// the leader marked it fast at the coordinator's `ts`, and `group_size - 1` other
    /// replicas of the leader's term accepted it at `ts` with the leader's order hash. Only
    /// in replicated groups (3 replicas or more): a lone replica's answers are proven as
    /// they leave it. An answer without a position rests on committed records: it needs no
    /// fast path.
    /// `ignore_order` is the mutation `CoordMutations::fast_ignores_order`.
    pub fn fast_commits(&self, reply: &TxnReply, ts: Timestamp, group_size: u32, ignore_order: bool) -> bool {
        let (Some(order), Some(pos)) = (reply.order, reply.position) else { return false };
        if reply.ts != ts || reply.outcome.is_err() || group_size < super::headroom::FAST_PATH_GROUP_MIN {
            return false;
        }
        let agreeing =
            self.0.iter().filter(|a| a.term == pos.term && a.ts == ts && (a.order == order || ignore_order)).count();
        agreeing + 1 >= group_size as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(p: &mut FanOutPolicy, n: u64) -> u64 {
        (0..n).filter(|_| p.ask()).count() as u64
    }

    #[test]
    fn adaptive_fan_out_samples_below_the_leave_share_and_returns_at_the_return_share() {
        let mut p = FanOutPolicy::new(FanOut::Adaptive);
        assert_eq!(asked(&mut p, 100), 100, "everything at first");
        // A window at exactly the leave share stays.
        for i in 0..FAN_OUT_WINDOW {
            p.completed(i % 4 == 0);
        }
        assert!(!p.sampling());
        // One below it samples.
        for i in 0..FAN_OUT_WINDOW {
            p.completed(i % 4 == 0 && i > 0);
        }
        assert!(p.sampling());
        assert_eq!(asked(&mut p, 16 * FAN_OUT_SAMPLE_EVERY), 16, "one in FAN_OUT_SAMPLE_EVERY");
        // Samples between the two shares keep it sampling; at the return share it is back.
        for i in 0..FAN_OUT_SAMPLES {
            p.completed(i % 3 == 0);
        }
        assert!(p.sampling());
        for i in 0..FAN_OUT_SAMPLES {
            p.completed(i % 2 == 0);
        }
        assert!(!p.sampling());
        assert_eq!(asked(&mut p, 10), 10);
        assert_eq!(p.switches, 2);
    }

    #[test]
    fn a_return_that_falls_back_at_once_doubles_the_samples_judged_next_up_to_the_bound() {
        let mut p = FanOutPolicy::new(FanOut::Adaptive);
        let window = |p: &mut FanOutPolicy, n: u32, fast: bool| (0..n).for_each(|_| p.completed(fast));
        window(&mut p, FAN_OUT_WINDOW, false);
        assert_eq!((p.sampling(), p.samples_judged()), (true, FAN_OUT_SAMPLES), "the first leave: no backoff");
        for round in 1..=FAN_OUT_BACKOFF_MAX + 2 {
            let samples = p.samples_judged();
            window(&mut p, samples, true);
            assert!(!p.sampling());
            window(&mut p, FAN_OUT_WINDOW, false);
            assert!(p.sampling());
            assert_eq!(p.samples_judged(), FAN_OUT_SAMPLES << round.min(FAN_OUT_BACKOFF_MAX));
        }
        // A return that holds for a window and more starts over.
        let samples = p.samples_judged();
        window(&mut p, samples, true);
        window(&mut p, FAN_OUT_WINDOW, true);
        window(&mut p, FAN_OUT_WINDOW, false);
        assert_eq!((p.sampling(), p.samples_judged()), (true, FAN_OUT_SAMPLES));
    }

    #[test]
    fn never_and_always_ignore_completions() {
        let (mut never, mut always) = (FanOutPolicy::new(FanOut::Never), FanOutPolicy::new(FanOut::Always));
        for _ in 0..4 * FAN_OUT_WINDOW {
            never.completed(false);
            always.completed(false);
        }
        assert_eq!((asked(&mut never, 10), asked(&mut always, 10)), (0, 10));
    }
    use luigi_txn::msg::TxnError;
    use luigi_txn::types::TxnId;

    fn reply(ts: Timestamp, order: Option<u64>) -> TxnReply {
        TxnReply {
            id: TxnId { client: 1, seq: 1 },
            shard: 0,
            ts,
            outcome: Ok(vec![]),
            watermark: ts,
            arrival_delta_us: 0,
            rounds: 0,
            position: Some(luigi_txn::progress::LogPos { term: 1, index: 9 }),
            order,
            early: false,
        }
    }

    #[test]
    fn fast_only_with_every_other_replica_agreeing_on_timestamp_and_order() {
        let mut a = Accepts::default();
        let leader = reply(100, Some(7));
        a.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "one follower of two");
        a.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "the same follower twice counts once");
        a.note(Accept { replica: 2, term: 1, ts: 100, order: 8 }, 3);
        assert!(!a.fast_commits(&leader, 100, 3, false), "another order before it");
        let mut b = Accepts::default();
        b.note(Accept { replica: 1, term: 1, ts: 100, order: 7 }, 3);
        b.note(Accept { replica: 2, term: 1, ts: 100, order: 7 }, 3);
        assert!(b.fast_commits(&leader, 100, 3, false));
        assert!(!b.fast_commits(&reply(100, None), 100, 3, false), "the leader did not mark it fast");
        assert!(!b.fast_commits(&reply(120, Some(7)), 100, 3, false), "the leader moved it");
        let mut failed = reply(100, Some(7));
        failed.outcome = Err(TxnError::Busy("x".into()));
        assert!(!b.fast_commits(&failed, 100, 3, false));
        let mut newer = reply(100, Some(7));
        newer.position = Some(luigi_txn::progress::LogPos { term: 2, index: 9 });
        assert!(!b.fast_commits(&newer, 100, 3, false), "accepts of term 1 and a leader of term 2");
        let mut committed = reply(100, Some(7));
        committed.position = None;
        assert!(!b.fast_commits(&committed, 100, 3, false), "committed already: no fast path needed");
        b.note(Accept { replica: 9, term: 1, ts: 100, order: 7 }, 3);
        assert_eq!(b.0.len(), 2, "no replica 9 in a group of 3");
        // A group of one has no fast path (its answers are proven as they leave it).
        assert!(!Accepts::default().fast_commits(&leader, 100, 1, false));
    }
}
