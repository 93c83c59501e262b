//! Every timeout of a node and its clients, derived from one figure: the expected one-way
//! delay between nodes (and its jitter). The server reads them from its cluster file (where
//! each may be overridden) and the simulator from its network model, through this one
//! derivation.

pub use luigi_protocol::leader::MAX_CLOCK_OFFSET_US_DEFAULT;

use luigi_protocol::leader::LeaderConfig;

/// The floor of a Raft tick, µs. Below it, a loaded 2-core machine's scheduling noise is
/// of the order of the tick itself and elections fire spuriously.
pub const RAFT_TICK_MIN_US: u64 = 10_000;
/// The floor of Raft's election timeout base, µs (the timeout is drawn from it to twice
/// it). With 100 ms (10 ticks of 10 ms) on loopback, TPC-C on 1 shard x 3 replicas of this
/// 2-core machine lost its leader over and over: a replica's event loop or thread, sharing
/// the cores with the others, the clients and snapshot jobs, was now and then held longer
/// than that, and each spurious election stalled commits for seconds (2,761 tx/s, p99 5.7 s,
/// 7 leader changes in a minute). With 1 s: 4,107 tx/s, p99 229 ms, none. The price is a
/// slower failover after a real crash (about 1-2 s more).
pub const ELECTION_TIMEOUT_MIN_US: u64 = 1_000_000;
/// The floor of the leaders' stall recovery and the clients' resend timeout, µs.
pub const RECOVERY_MIN_US: u64 = 1_000_000;
/// How long replicas keep the versions their writes replaced while the read-only path is
/// on (DESIGN.md rule 23; `[protocol] snapshot_retention_us`), timestamp µs: the 5 s a
/// snapshot read may wait at a replica (`SnapshotReadConfig::wait_us_max`), so a read that
/// waited its longest, or whose client's clock lags, still finds its versions. Keeping them
/// costs every write a copy of the value it replaced and two ordered-map entries (DESIGN.md
/// rule 23: micro 1x1 `--net none` at 8 threads ran at 0.63x the throughput with 5 s), which
/// is why it is 0 while the path is off.
pub const READ_ONLY_RETENTION_US: u64 = 5_000_000;
/// How far an idle shard's watermark moves between two `Applied` markers while the
/// read-only path is on (`[protocol] idle_marker_us`), timestamp µs: 20 ms. The markers are
/// the replicas' safe time, so a read at an idle shard (or one that only serves reads) waits
/// for the next one; with the path off it is the leader's default (15 s), past a read's 5 s
/// wait bound. Each marker is a log record, appended, replicated and synced on every replica
/// of the shard. An idle shard already logs a floor renewal every eighth of the floor
/// lookahead (37.5 ms without added delay, 112.5 ms at `geo`): an idle 1x3 cluster (`--net
/// none`, fsync, 2-core machine, 20 s, two alternating pairs) committed 26.7 entries a
/// second with the path off and 75.3 with 20 ms markers, and its three servers used 1.3-2.0
/// s more CPU per 20 s (6.7-10 % of a core, 2-3 % per replica). A busy shard logs a marker
/// up to every `applied_marker_us` (1 ms) anyway, so only idle shards pay. A read waits its
/// snapshot's lead over the clock (the clock bound, 500 ms by default) and then at most 20 ms
/// more (4 %): shorter would cost an idle shard more records for little, longer would add to
/// every read where nothing is written.
pub const READ_ONLY_IDLE_MARKER_US: u64 = 20_000;

/// Raft ticks at most caught up at once after the event loop stalled: a few ticks are
/// enough for Raft, and a burst of them would start an election for no reason.
pub const TICK_CATCH_UP_MAX: u32 = 16;

/// The derived timeouts. Build with [`Tuning::for_delay`], then override fields if needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Raft tick, µs: half a one-way delay (at least [`RAFT_TICK_MIN_US`]), so heartbeats
    /// (every tick) and elections (`election_ticks` to twice that) stay well above the round
    /// trip.
    pub raft_tick_us: u64,
    /// Raft election timeout base, in ticks: 10, and at least [`ELECTION_TIMEOUT_MIN_US`].
    pub election_ticks: usize,
    /// Ticks between the election timeouts of a group's replicas (see
    /// `luigi_raft::RaftConfig::election_spacing_ticks`): 3 one-way delays (a pre-vote round
    /// trip and the vote requests' trip), so one follower's election is not raced by another.
    pub election_spacing_ticks: usize,
    /// A leader asks the other participants about a transaction stalled this long, µs: 16
    /// one-way delays, at least [`RECOVERY_MIN_US`].
    pub recover_after_us: u64,
    /// How far ahead of its clock a leader promises its floor, µs (rule 5's lookahead): 4
    /// one-way delays plus 300 ms. A promise is renewed once less than 7/8 of it is left,
    /// which must outlast a log commit (about 2 one-way delays with replicas, much more on a
    /// saturated CPU); a new leader admits only above the last promise, so what is left of it
    /// at a failover adds to the pause.
    pub floor_lookahead_us: u64,
    /// A client resends a dispatch unanswered this long, µs: 8 one-way delays plus
    /// [`RECOVERY_MIN_US`].
    pub retry_timeout_us: u64,
    /// The coordinator's timestamp headroom, µs: half the jitter plus 200 µs.
    pub headroom_us: u64,
    /// The coordinators' adaptive headroom's ceiling, µs (DESIGN.md rule 1): an eighth of
    /// `retry_timeout_us`.
    pub headroom_max_us: u64,
    /// Records a replica applies between two snapshots of its own.
    pub snapshot_entries: u64,
    /// A snapshot transfer's sender waits this long for the receiver to acknowledge a chunk,
    /// µs, before it asks where the receiver stands (and, after a few such silences, gives
    /// up): 8 one-way delays plus [`RECOVERY_MIN_US`], like a client's resend. Chunks are
    /// acknowledged one by one, so it must outlast a round trip plus one chunk's time on the
    /// link (a 1 MiB chunk takes 84 ms at 100 Mbit/s), not a whole window's.
    pub snapshot_ack_timeout_us: u64,
    /// The clock bound (DESIGN.md rule 22): the largest offset between two nodes' clocks the
    /// cluster tolerates, µs. Default [`MAX_CLOCK_OFFSET_US_DEFAULT`].
    pub max_clock_offset_us: u64,
    /// How long a client's answers outlive its newest transaction, µs (DESIGN.md rule 7;
    /// `[protocol] answer_expiry_s`). Default
    /// [`DEFAULT_ANSWER_EXPIRY_US`](luigi_protocol::leader::answers::DEFAULT_ANSWER_EXPIRY_US).
    pub answer_expiry_us: u64,
    /// Fast-path accept records a replica writes between two rewrites of its live ones
    /// (after a rewrite is durable, the accept log drops what came before it).
    pub accepts_rewrite_records: u64,
    /// How long replicas keep the versions their writes replaced, timestamp µs (DESIGN.md
    /// rule 23; the leader's `snapshot_retention_us`). The leader's default (0: none) unless
    /// the read-only path is on ([`Tuning::with_read_only_path`]).
    pub snapshot_retention_us: u64,
    /// How far an idle shard's watermark moves between two `Applied` markers, timestamp µs
    /// (the leader's `idle_marker_us`). The leader's default (15 s) unless the read-only path
    /// is on ([`Tuning::with_read_only_path`]).
    pub idle_marker_us: u64,
}

impl Tuning {
    /// The timeouts for links of `one_way_us` ± `jitter_us`.
    pub fn for_delay(one_way_us: u64, jitter_us: u64) -> Self {
        let raft_tick_us = (one_way_us / 2).max(RAFT_TICK_MIN_US);
        let leader = LeaderConfig::new(0, 1);
        Tuning {
            raft_tick_us,
            election_ticks: (ELECTION_TIMEOUT_MIN_US.div_ceil(raft_tick_us) as usize).max(10),
            election_spacing_ticks: (3 * one_way_us).div_ceil(raft_tick_us).max(1) as usize,
            recover_after_us: (one_way_us * 16).max(RECOVERY_MIN_US),
            floor_lookahead_us: 300_000 + 4 * one_way_us,
            retry_timeout_us: 8 * one_way_us + RECOVERY_MIN_US,
            headroom_us: jitter_us / 2 + 200,
            headroom_max_us: (8 * one_way_us + RECOVERY_MIN_US) / 8,
            snapshot_entries: 100_000,
            snapshot_ack_timeout_us: 8 * one_way_us + RECOVERY_MIN_US,
            accepts_rewrite_records: 4_096,
            max_clock_offset_us: MAX_CLOCK_OFFSET_US_DEFAULT,
            answer_expiry_us: luigi_protocol::leader::answers::DEFAULT_ANSWER_EXPIRY_US,
            snapshot_retention_us: leader.snapshot_retention_us,
            idle_marker_us: leader.idle_marker_us,
        }
    }

    /// The same with the read-only path's server side on or off (DESIGN.md rule 23): on,
    /// replicas keep [`READ_ONLY_RETENTION_US`] of versions and an idle shard logs a marker
    /// every [`READ_ONLY_IDLE_MARKER_US`]; off, the leader's defaults (no versions, a marker
    /// every 15 s). The cluster file's `[protocol]` overrides apply after it.
    pub fn with_read_only_path(mut self, on: bool) -> Self {
        let leader = LeaderConfig::new(0, 1);
        (self.snapshot_retention_us, self.idle_marker_us) = if on {
            (READ_ONLY_RETENTION_US, READ_ONLY_IDLE_MARKER_US)
        } else {
            (leader.snapshot_retention_us, leader.idle_marker_us)
        };
        self
    }

    /// How far ahead of a replica's clock a correct coordinator's timestamp can lie (rule
    /// 22): its delay estimate counts only samples answered within a resend timeout (so it
    /// is at most that), plus its headroom (at most the larger of the configured one and
    /// the adaptive one's ceiling), plus the clock bound. Saturating: every field may come
    /// from a cluster file.
    pub fn max_ahead_us(&self) -> u64 {
        let headroom = self.headroom_us.max(self.headroom_max_us);
        self.retry_timeout_us.saturating_add(headroom).saturating_add(self.max_clock_offset_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_follow_the_delay_above_the_floor() {
        let lan = Tuning::for_delay(100, 10);
        assert_eq!(lan.raft_tick_us, RAFT_TICK_MIN_US);
        assert_eq!(lan.recover_after_us, RECOVERY_MIN_US);
        let geo = Tuning::for_delay(150_000, 20_000);
        assert_eq!(geo.raft_tick_us, 75_000);
        assert_eq!(geo.recover_after_us, 2_400_000);
        assert_eq!(geo.headroom_us, 10_200);
        assert_eq!(geo.headroom_max_us, 275_000);
        assert_eq!(geo.max_ahead_us(), 2_200_000 + 275_000 + MAX_CLOCK_OFFSET_US_DEFAULT);
        assert_eq!(geo.retry_timeout_us, 2_200_000);
        assert_eq!(geo.snapshot_ack_timeout_us, 2_200_000);
        // An election always outlasts a round trip, and the floor.
        for d in [0, 1_000, 30_000, 150_000, 400_000] {
            let t = Tuning::for_delay(d, d / 10);
            assert!(t.raft_tick_us * t.election_ticks as u64 > 2 * d);
            assert!(t.raft_tick_us * t.election_ticks as u64 >= ELECTION_TIMEOUT_MIN_US);
            assert!(t.election_ticks >= 10);
        }
        assert_eq!(lan.election_ticks, 100);
        assert_eq!(geo.election_ticks, 14);
    }

    #[test]
    fn the_read_only_path_keeps_versions_and_marks_idle_shards_often_only_when_on() {
        let leader = LeaderConfig::new(0, 1);
        for d in [0, 2_000, 150_000] {
            let t = Tuning::for_delay(d, d / 10);
            assert_eq!(
                (t.snapshot_retention_us, t.idle_marker_us),
                (leader.snapshot_retention_us, leader.idle_marker_us)
            );
            let on = t.clone().with_read_only_path(true);
            assert_eq!(
                (on.snapshot_retention_us, on.idle_marker_us),
                (READ_ONLY_RETENTION_US, READ_ONLY_IDLE_MARKER_US)
            );
            assert_eq!(on.clone().with_read_only_path(false), t, "off again: the leader's defaults");
            assert_eq!(
                Tuning { snapshot_retention_us: 0, idle_marker_us: 0, ..on },
                Tuning { snapshot_retention_us: 0, idle_marker_us: 0, ..t.clone() },
                "nothing else changes"
            );
        }
        assert_eq!(leader.snapshot_retention_us, 0, "no versions kept unless the path is on");
        assert!(READ_ONLY_IDLE_MARKER_US < leader.idle_marker_us);
    }
}
