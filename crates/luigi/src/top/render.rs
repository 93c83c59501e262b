//! One frame of `luigi top` as lines of text: a pure function of the figures (no terminal, no
//! clock), so that what an operator sees is tested as it is.

use super::figures::{Frame, Quantiles, ReplicaFigures, ReplicaState, ShardFigures};

/// What the frame's first line says.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The cluster file, as given.
    pub cluster: String,
    /// Seconds between frames.
    pub interval_s: f64,
    /// The wall time of the frame (`15:04:05 UTC`).
    pub time: String,
}

/// Shown for a figure that cannot be had this interval.
const NONE: &str = "-";

/// The frame's lines.
pub fn render(header: &Header, frame: &Frame) -> Vec<String> {
    let answered: usize = frame.shards.iter().map(|s| s.answered).sum();
    let mut lines = vec![
        format!(
            "luigi top  {}  every {:.1} s  {}  {} shard(s), {} of {} replicas answered",
            header.cluster,
            header.interval_s,
            header.time,
            frame.shards.len(),
            answered,
            frame.replicas.len()
        ),
        String::new(),
        format!(
            "{:<6} {:<10} {:>5} {:>9}  {:<17}  {:<17} {:>6} {:>10} {:>6}  {}",
            "SHARD",
            "LEADER",
            "TERM",
            "COMMIT/S",
            "COMMIT p50/p99 ms",
            "FSYNC p50/p99 ms",
            "QUEUE",
            "WM LAG ms",
            "ACC/C",
            "UP"
        ),
    ];
    lines.extend(frame.shards.iter().map(shard_line));
    lines.push(String::new());
    lines.push(format!(
        "{:<7} {:<21} {:<6} {:<13} {:>5} {:>9} {:>7}  {}",
        "REPLICA", "METRICS", "STATE", "ROLE", "TERM", "APPLIED/S", "LDR CHG", "CLOCK OFFSET TO PEERS (ms)"
    ));
    lines.extend(frame.replicas.iter().map(replica_line));
    lines.push(String::new());
    lines.push(format!(
        "{NONE}: no figure this interval (no leader, no earlier scrape, no observation, or not served by the servers)"
    ));
    lines
}

fn shard_line(s: &ShardFigures) -> String {
    let leader = match (s.leader, s.serving) {
        (Some(r), true) => format!("r{r}"),
        (Some(r), false) => format!("r{r} elect"),
        (None, _) => "none".to_string(),
    };
    format!(
        "{:<6} {:<10} {:>5} {:>9}  {:<17}  {:<17} {:>6} {:>10} {:>6}  {}/{}",
        s.shard,
        leader,
        s.term.map_or(NONE.into(), |t| t.to_string()),
        s.commits_per_s.map_or(NONE.into(), per_second),
        s.commit_latency.map_or(NONE.into(), quantiles_ms),
        s.fsync.map_or(NONE.into(), quantiles_ms),
        s.queue.map_or(NONE.into(), |q| format!("{q:.0}")),
        s.watermark_lag_s.map_or(NONE.into(), |l| format!("{:.1}", l * 1e3)),
        s.accepts_per_commit.map_or(NONE.into(), |a| format!("{a:.2}")),
        s.answered,
        s.replicas
    )
}

fn replica_line(r: &ReplicaFigures) -> String {
    let name = format!("s{}r{}", r.shard, r.replica);
    match &r.state {
        ReplicaState::Down(reason) => format!("{name:<7} {:<21} {:<6} {reason}", r.addr.to_string(), "DOWN"),
        ReplicaState::Up(up) => {
            let mut clock: Vec<String> =
                up.clock.iter().map(|p| format!("r{} {:+.3}", p.peer, p.offset_s * 1e3)).collect();
            if up.beyond_bound {
                clock.push("BEYOND BOUND".into());
            }
            format!(
                "{name:<7} {:<21} {:<6} {:<13} {:>5} {:>9} {:>7}  {}",
                r.addr.to_string(),
                "up",
                up.role.as_deref().unwrap_or(NONE),
                up.term.map_or(NONE.into(), |t| t.to_string()),
                up.applied_per_s.map_or(NONE.into(), per_second),
                up.leader_changes.map_or(NONE.into(), |c| format!("{c:.0}")),
                if clock.is_empty() { NONE.to_string() } else { clock.join("  ") }
            )
        }
    }
}

/// A rate: whole numbers from 100 on, one decimal below.
fn per_second(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// `p50/p99` in milliseconds.
fn quantiles_ms(q: Quantiles) -> String {
    format!("{:.2}/{:.2}", q.p50 * 1e3, q.p99 * 1e3)
}

#[cfg(test)]
mod tests {
    use super::super::figures::{PeerClock, ReplicaUp};
    use super::*;

    fn header() -> Header {
        Header { cluster: "c.toml".into(), interval_s: 1.0, time: "15:04:05 UTC".into() }
    }

    fn shard(shard: u32) -> ShardFigures {
        ShardFigures {
            shard,
            replicas: 3,
            answered: 3,
            leader: Some(1),
            serving: true,
            term: Some(4),
            commits_per_s: Some(1234.4),
            commit_latency: None,
            fsync: Some(Quantiles { p50: 0.000_04, p99: 0.000_31 }),
            queue: Some(12.0),
            watermark_lag_s: Some(0.0012),
            accepts_per_commit: Some(1.875),
        }
    }

    fn up(role: &str) -> ReplicaState {
        ReplicaState::Up(ReplicaUp {
            role: Some(role.into()),
            term: Some(4),
            applied_per_s: Some(50.0),
            leader_changes: Some(2.0),
            clock: vec![
                PeerClock { peer: "0".into(), offset_s: -0.000_25 },
                PeerClock { peer: "2".into(), offset_s: 0.0001 },
            ],
            beyond_bound: false,
        })
    }

    fn replica(shard: u32, replica: u32, state: ReplicaState) -> ReplicaFigures {
        ReplicaFigures { shard, replica, addr: format!("127.0.0.1:{}", 9100 + replica).parse().unwrap(), state }
    }

    #[test]
    fn a_shard_line_shows_every_figure_and_a_dash_for_what_cannot_be_had() {
        let frame = Frame { shards: vec![shard(0)], replicas: vec![replica(0, 1, up("leader"))] };
        let lines = render(&header(), &frame);
        assert_eq!(lines[0], "luigi top  c.toml  every 1.0 s  15:04:05 UTC  1 shard(s), 3 of 1 replicas answered");
        let line = &lines[3];
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells, ["0", "r1", "4", "1234", "-", "0.04/0.31", "12", "1.2", "1.88", "3/3"], "{line}");
        let header_line = &lines[2];
        // Columns line up under their heads: left-aligned ones start, right-aligned ones end, with them.
        let start = |text: &str, s: &str| text.find(s).unwrap();
        let end = |text: &str, s: &str| text.find(s).unwrap() + s.len();
        assert_eq!(start(header_line, "LEADER"), start(line, "r1"));
        assert_eq!(end(header_line, "COMMIT/S"), end(line, "1234"));
        assert_eq!(start(header_line, "FSYNC"), start(line, "0.04/0.31"));
        assert_eq!(end(header_line, "ACC/C"), end(line, "1.88"));
    }

    #[test]
    fn a_shard_without_a_leader_and_a_leader_not_serving_yet_say_so() {
        let none = ShardFigures { leader: None, serving: false, queue: None, watermark_lag_s: None, ..shard(0) };
        let elect = ShardFigures { serving: false, ..shard(1) };
        let lines = render(&header(), &Frame { shards: vec![none, elect], replicas: vec![] });
        assert!(lines[3].starts_with("0      none "), "{}", lines[3]);
        assert!(lines[4].starts_with("1      r1 elect "), "{}", lines[4]);
        let empty = ShardFigures {
            term: None,
            commits_per_s: None,
            fsync: None,
            accepts_per_commit: None,
            answered: 0,
            ..ShardFigures { leader: None, ..shard(2) }
        };
        let lines = render(&header(), &Frame { shards: vec![empty], replicas: vec![] });
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["2", "none", "-", "-", "-", "-", "12", "1.2", "-", "0/3"]
        );
    }

    #[test]
    fn a_replica_that_did_not_answer_is_shown_with_its_reason() {
        let frame = Frame {
            shards: vec![shard(0)],
            replicas: vec![
                replica(0, 0, ReplicaState::Down("connection refused".into())),
                replica(0, 1, up("follower")),
            ],
        };
        let lines = render(&header(), &frame);
        let down = lines.iter().find(|l| l.starts_with("s0r0")).unwrap();
        assert_eq!(down, "s0r0    127.0.0.1:9100        DOWN   connection refused");
        let follower = lines.iter().find(|l| l.starts_with("s0r1")).unwrap();
        assert_eq!(
            follower.split_whitespace().collect::<Vec<_>>(),
            ["s0r1", "127.0.0.1:9101", "up", "follower", "4", "50.0", "2", "r0", "-0.250", "r2", "+0.100"]
        );
    }

    #[test]
    fn a_clock_beyond_its_bound_is_flagged_and_rates_are_rounded_by_size() {
        let ReplicaState::Up(mut u) = up("follower") else { unreachable!() };
        u.beyond_bound = true;
        u.clock.clear();
        u.applied_per_s = Some(99.94);
        let lines = render(&header(), &Frame { shards: vec![], replicas: vec![replica(0, 0, ReplicaState::Up(u))] });
        let line = lines.iter().find(|l| l.starts_with("s0r0")).unwrap();
        assert!(line.ends_with("  BEYOND BOUND") && line.contains(" 99.9 "), "{line}");
        assert_eq!(per_second(100.4), "100");
        assert_eq!(per_second(0.04), "0.0");
    }

    #[test]
    fn the_frame_fits_a_120_column_terminal() {
        let frame = Frame {
            shards: vec![shard(0), shard(63)],
            replicas: vec![
                replica(63, 6, up("pre_candidate")),
                replica(63, 5, ReplicaState::Down("timed out after 800 ms".into())),
            ],
        };
        for line in render(&header(), &frame) {
            assert!(line.chars().count() <= 120, "{} columns: {line}", line.chars().count());
        }
    }
}
