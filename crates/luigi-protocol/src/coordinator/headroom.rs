//! Adaptive headroom (DESIGN.md rule 1): the margin a coordinator adds to its delay estimate
//! follows how late its dispatches actually reach each shard's leader.
//!
//! Every answer echoes `arrival_delta_us` (the leader's clock at arrival minus the client's
//! clock at send), and the coordinator knows what it stamped (`ts - sent`). Their difference
//! is the dispatch's *lateness*: positive, it arrived after its timestamp and the leader
//! moved it (rule 3's bump; cross-shard, the proposals then differ and a second round runs,
//! and no fast commit is possible); negative, it waited that long in the hold queue.
//! Late arrivals under load come in bursts (closed-loop waves of dispatches queue behind each
//! other), which a higher percentile of the delay samples does not see in time; so each
//! shard's headroom is raised at once, to what the late dispatch would have needed plus a
//! quarter and [`RAISE_MARGIN_US`], and decays slowly (by 1/[`DECAY_DIV`] of its excess over
//! the floor every [`DECAY_STEP_US`]) once no dispatch to the shard has been late for
//! [`QUIET_US`]. It stays within `[floor, ceiling]`: the floor is the configured
//! `headroom_us` (an operator's setting is the minimum), the ceiling `headroom_max_us`.
//!
//! Per shard, not per set of shards: lateness is a property of the way to one leader (its
//! link and its queue), every transaction over a shard measures it, and a transaction takes
//! the largest headroom of its participants. The table holds one entry per shard a
//! transaction of this client named (bounded by the cluster's shards, like the delay
//! estimates).

use luigi_txn::types::{ShardId, TimeUs, Timestamp};
use luigi_txn::Map;

/// Added on top of what a late dispatch would have needed, µs.
pub const RAISE_MARGIN_US: u64 = 1_000;
/// A shard's headroom decays only once no dispatch to it has been late for this long, µs.
pub const QUIET_US: u64 = 1_000_000;
/// At most one decay step per this long, µs.
pub const DECAY_STEP_US: u64 = 100_000;
/// Each decay step removes this fraction (rounded up) of the excess over the floor: the
/// excess halves in about 2.2 s of on-time answers.
pub const DECAY_DIV: u64 = 32;

/// The bounds of the headroom, µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The configured headroom: never less.
    pub floor_us: u64,
    /// Never more (taken as the floor when below it).
    pub ceiling_us: u64,
}

impl Bounds {
    fn clamp(self, us: u64) -> u64 {
        us.min(self.ceiling_us.max(self.floor_us)).max(self.floor_us)
    }
}

/// The smallest group with a fast path (a fast commit needs every follower's accept;
/// `fast::Accepts::fast_commits`).
pub const FAST_PATH_GROUP_MIN: u32 = 3;

/// Whether a transaction over `participants` shards, the smallest of `smallest_group`
/// replicas, asking for the fast path or not, gains nothing from reaching its leader before
/// its timestamp: a single-shard transaction is decided by its admission (no proposals to
/// agree on, rule 4), so arriving late costs it nothing, while arriving early costs it the
/// wait in the hold queue until the leader's clock passes its timestamp (rule 5). Only the
/// fast path needs it early: a follower accepts only what arrives before its timestamp and
/// a leader marks fast only what kept it (F0, F1), and that needs a group of
/// [`FAST_PATH_GROUP_MIN`] and the dispatch to ask (rule 20).
pub fn holds_nothing(participants: usize, asks_fast: bool, smallest_group: Option<u32>) -> bool {
    participants == 1 && (!asks_fast || smallest_group.unwrap_or(0) < FAST_PATH_GROUP_MIN)
}

/// How late a dispatch reached its leader, µs: `arrival_delta_us - (ts - sent_us)`, positive
/// when it arrived after its timestamp. Saturating over every input (all come from clocks,
/// the delta from the wire).
pub fn lateness_us(arrival_delta_us: i64, ts: Timestamp, sent_us: TimeUs) -> i64 {
    let late = i128::from(arrival_delta_us) - (i128::from(ts) - i128::from(sent_us));
    late.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// One shard's headroom controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardHeadroom {
    current_us: u64,
    /// When a dispatch to this shard last arrived late.
    last_late_us: Option<TimeUs>,
    /// When it last decayed.
    last_decay_us: TimeUs,
}

impl ShardHeadroom {
    /// A controller at the floor.
    pub fn new(bounds: Bounds) -> Self {
        ShardHeadroom { current_us: bounds.floor_us, last_late_us: None, last_decay_us: 0 }
    }

    /// The headroom now, µs.
    pub fn current_us(&self) -> u64 {
        self.current_us
    }

    /// A dispatch stamped with `stamped_us` of headroom reached the leader `lateness_us`
    /// after its timestamp (negative: before), heard at `now`.
    pub fn on_arrival(&mut self, now: TimeUs, bounds: Bounds, stamped_us: u64, lateness_us: i64) {
        if lateness_us > 0 {
            // It needed `stamped + lateness`; a burst of answers to dispatches stamped
            // before the raise asks for the same again, so they do not compound.
            let needed = stamped_us.saturating_add(lateness_us.unsigned_abs());
            let target = needed.saturating_add(needed / 4).saturating_add(RAISE_MARGIN_US);
            self.current_us = bounds.clamp(self.current_us.max(target));
            self.last_late_us = Some(now);
            return;
        }
        let quiet = self.last_late_us.is_none_or(|late| now.saturating_sub(late) >= QUIET_US);
        if quiet && now.saturating_sub(self.last_decay_us) >= DECAY_STEP_US {
            let excess = self.current_us.saturating_sub(bounds.floor_us);
            self.current_us = bounds.clamp(self.current_us - excess.div_ceil(DECAY_DIV));
            self.last_decay_us = now;
        }
    }
}

/// The headroom of a coordinator: fixed at the configured one, or adaptive per shard.
#[derive(Clone, Debug)]
pub struct Headroom {
    adaptive: bool,
    bounds: Bounds,
    shards: Map<ShardId, ShardHeadroom>,
}

impl Headroom {
    /// A fixed headroom of `floor_us` when `adaptive` is off; else adaptive within
    /// `floor_us..=ceiling_us`.
    pub fn new(adaptive: bool, floor_us: u64, ceiling_us: u64) -> Self {
        Headroom { adaptive, bounds: Bounds { floor_us, ceiling_us }, shards: Map::default() }
    }

    /// Whether it adapts.
    pub fn adaptive(&self) -> bool {
        self.adaptive
    }

    /// The headroom of a transaction over `shards`: the largest of its participants'.
    pub fn for_shards(&self, shards: impl Iterator<Item = ShardId>) -> u64 {
        if !self.adaptive {
            return self.bounds.floor_us;
        }
        shards.map(|s| self.of(s)).max().unwrap_or(self.bounds.floor_us)
    }

    /// `shard`'s headroom now.
    pub fn of(&self, shard: ShardId) -> u64 {
        self.shards.get(&shard).map_or(self.bounds.floor_us, ShardHeadroom::current_us)
    }

    /// A dispatch to `shard` stamped with `stamped_us` of headroom arrived `lateness_us` late
    /// (see [`ShardHeadroom::on_arrival`]); nothing changes when adaptation is off.
    pub fn on_arrival(&mut self, now: TimeUs, shard: ShardId, stamped_us: u64, lateness_us: i64) {
        if !self.adaptive {
            return;
        }
        let bounds = self.bounds;
        self.shards.entry(shard).or_insert_with(|| ShardHeadroom::new(bounds)).on_arrival(
            now,
            bounds,
            stamped_us,
            lateness_us,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: Bounds = Bounds { floor_us: 10_000, ceiling_us: 250_000 };

    #[test]
    fn a_late_arrival_raises_to_what_it_needed_plus_a_quarter_and_the_margin() {
        let mut h = ShardHeadroom::new(B);
        assert_eq!(h.current_us(), 10_000, "starts at the floor");
        h.on_arrival(1_000, B, 10_000, 30_000);
        assert_eq!(h.current_us(), 40_000 + 10_000 + RAISE_MARGIN_US);
        // A burst of answers to dispatches stamped before the raise does not compound.
        for t in 0..100 {
            h.on_arrival(1_001 + t, B, 10_000, 30_000);
        }
        assert_eq!(h.current_us(), 51_000);
        // A smaller lateness lowers nothing.
        h.on_arrival(2_000, B, 51_000, 1);
        assert_eq!(h.current_us(), 51_001 + 12_750 + RAISE_MARGIN_US);
    }

    #[test]
    fn early_arrivals_decay_it_slowly_and_only_after_a_quiet_spell() {
        let mut h = ShardHeadroom::new(B);
        h.on_arrival(0, B, 10_000, 100_000);
        let raised = h.current_us();
        assert_eq!(raised, 138_500);
        h.on_arrival(QUIET_US - 1, B, raised, -5_000);
        assert_eq!(h.current_us(), raised, "not within the quiet spell after a late one");
        h.on_arrival(QUIET_US, B, raised, -5_000);
        let step = (raised - B.floor_us).div_ceil(DECAY_DIV);
        assert_eq!(h.current_us(), raised - step);
        h.on_arrival(QUIET_US + DECAY_STEP_US - 1, B, raised, -5_000);
        assert_eq!(h.current_us(), raised - step, "one step per DECAY_STEP_US");
        // About 2.2 s of on-time answers halve the excess; enough of them reach the floor.
        let mut now = QUIET_US;
        while now < QUIET_US + 2_200_000 {
            now += DECAY_STEP_US;
            h.on_arrival(now, B, raised, -5_000);
        }
        let excess = h.current_us() - B.floor_us;
        assert!(excess * 2 <= raised - B.floor_us && excess * 3 > raised - B.floor_us, "{excess}");
        for _ in 0..10_000 {
            now += DECAY_STEP_US;
            h.on_arrival(now, B, raised, -5_000);
        }
        assert_eq!(h.current_us(), B.floor_us);
    }

    #[test]
    fn it_stays_within_its_bounds_and_a_ceiling_below_the_floor_is_the_floor() {
        let mut h = ShardHeadroom::new(B);
        h.on_arrival(0, B, u64::MAX, i64::MAX);
        assert_eq!(h.current_us(), B.ceiling_us);
        let inverted = Bounds { floor_us: 5_000, ceiling_us: 1_000 };
        let mut h = ShardHeadroom::new(inverted);
        h.on_arrival(0, inverted, 0, 1_000_000);
        assert_eq!(h.current_us(), 5_000);
    }

    #[test]
    fn off_it_is_the_configured_headroom_and_on_the_largest_of_the_participants() {
        let mut off = Headroom::new(false, 7_000, 100_000);
        off.on_arrival(0, 1, 7_000, 50_000);
        assert_eq!(off.for_shards([0, 1].into_iter()), 7_000);
        let mut on = Headroom::new(true, 7_000, 100_000);
        on.on_arrival(0, 1, 7_000, 50_000);
        assert_eq!(on.of(0), 7_000, "another shard keeps its own");
        assert_eq!(on.for_shards([0, 1].into_iter()), 57_000 + 14_250 + RAISE_MARGIN_US);
        assert_eq!(on.for_shards([0].into_iter()), 7_000);
        assert_eq!(on.for_shards(std::iter::empty()), 7_000);
    }

    #[test]
    fn only_a_single_shard_transaction_without_a_fast_path_holds_nothing() {
        assert!(holds_nothing(1, false, Some(3)), "it does not ask");
        assert!(holds_nothing(1, true, Some(1)), "no followers to accept");
        assert!(holds_nothing(1, true, None), "group unknown: no fast commit counts");
        assert!(!holds_nothing(1, true, Some(3)), "its followers accept only before ts (F0)");
        assert!(!holds_nothing(2, false, Some(1)), "cross-shard: proposals must agree");
    }

    #[test]
    fn lateness_is_saturating() {
        assert_eq!(lateness_us(150, 1_100, 1_000), 50);
        assert_eq!(lateness_us(-20, 1_100, 1_000), -120);
        assert_eq!(lateness_us(i64::MAX, 0, u64::MAX), i64::MAX);
        assert_eq!(lateness_us(i64::MIN, u64::MAX, 0), i64::MIN);
    }

    proptest! {
        /// Over the whole domain (times, stamped headrooms, lateness, bounds): never panics,
        /// always within its bounds; a late arrival never lowers it and raises it at least
        /// to what that arrival needed (up to the ceiling); an early one never raises it;
        /// more lateness never gives less.
        #[test]
        fn within_bounds_and_monotone(
            floor in any::<u64>(), ceiling in any::<u64>(),
            steps in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<i64>()), 1..48),
            extra in 0..i64::MAX,
        ) {
            let bounds = Bounds { floor_us: floor, ceiling_us: ceiling };
            let top = ceiling.max(floor);
            let mut h = ShardHeadroom::new(bounds);
            for (now, stamped, late) in steps {
                let before = h.current_us();
                let mut more = h.clone();
                h.on_arrival(now, bounds, stamped, late);
                let after = h.current_us();
                prop_assert!(floor <= after && after <= top);
                if late > 0 {
                    prop_assert!(after >= before);
                    prop_assert!(after >= stamped.saturating_add(late.unsigned_abs()).min(top));
                    more.on_arrival(now, bounds, stamped, late.saturating_add(extra));
                    prop_assert!(more.current_us() >= after);
                } else {
                    prop_assert!(after <= before);
                }
            }
            let _ = lateness_us(extra, floor, ceiling);
        }
    }
}
