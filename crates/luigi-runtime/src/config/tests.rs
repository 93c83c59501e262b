//! The cluster file's checks, defaults and round trips.

use super::*;

fn parse(text: &str) -> Result<ClusterConfig, String> {
    ClusterConfig::parse(text, Path::new("c.toml")).map_err(|e| e.to_string())
}

const GOOD: &str = r#"
    net = "geo"
    [protocol]
    headroom_us = 900
    [[shards]]
    replicas = ["127.0.0.1:7100"]
    [[shards]]
    replicas = ["127.0.0.1:7101"]
    [[links]]
    from = "s0r0"
    to = "s1r0"
    mean_us = 1000
    jitter_us = 10
"#;

#[test]
fn good_file_parses_and_round_trips() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.shard_count(), 2);
    assert_eq!(c.headroom_us(), 900);
    assert_eq!(c.delay_model().dist("s0r0", "s1r0"), DelayDist::new(1000, 10));
    assert_eq!(c.delay_model().dist("client", "s1r0"), Scenario::Geo.delay());
    assert_eq!(parse(&c.to_toml()).unwrap(), c);
}

#[test]
fn the_answer_expiry_is_set_in_seconds_within_its_bounds() {
    let with = |s: &str| parse(&format!("[protocol]\n{s}\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]"));
    assert_eq!(with("").unwrap().tuning().answer_expiry_us, 120_000_000);
    assert_eq!(with("answer_expiry_s = 600").unwrap().tuning().answer_expiry_us, 600_000_000);
    for bad in ["answer_expiry_s = 29", "answer_expiry_s = 86401", "answer_expiry_s = 0"] {
        let e = with(bad).unwrap_err();
        assert!(e.contains("protocol.answer_expiry_s") && e.contains("must be from 30 s"), "{bad}: {e}");
    }
}

#[test]
fn errors_name_the_field() {
    let e = parse("net = \"moon\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
    assert!(e.contains("field `net`") && e.contains("moon"), "{e}");
    let e = parse("[[shards]]\nreplicas = [\"localhost\"]").unwrap_err();
    assert!(e.contains("shards[0].replicas[0]") && e.contains("not an ip:port"), "{e}");
    let e = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
    assert!(e.contains("shards[1].replicas[0]") && e.contains("used twice"), "{e}");
    let e = parse("shards = []").unwrap_err();
    assert!(e.contains("field `shards`"), "{e}");
    let e = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\nbogus = 1").unwrap_err();
    assert!(e.contains("bogus"), "{e}");
    let e = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[links]]\nfrom = \"s9r0\"\nto = \"client\"\nmean_us = 1")
        .unwrap_err();
    assert!(e.contains("links[0].from") && e.contains("s9r0"), "{e}");
    let e = parse("[[shards]]\nreplicas = 5").unwrap_err();
    assert!(e.contains("c.toml") && e.contains("replicas"), "{e}");
    let e =
        parse("[protocol]\nkind = \"occ\"\nfast_path = true\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
    assert!(e.contains("protocol.fast_path") && e.contains("occ"), "{e}");
    let c = parse("[protocol]\nfast_path = true\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap();
    assert!(c.fast_path());
    assert!(!c.fast_path_anywhere(), "no shard of 3 replicas: no client fans out");
    let default = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[shards]]\nreplicas = [\"127.0.0.1:2\", \"127.0.0.1:3\", \"127.0.0.1:4\"]").unwrap();
    assert!(default.fast_path(), "on by default");
    assert_eq!((default.fast_path_on(0), default.fast_path_on(1)), (false, true), "on shards of 3 replicas or more");
    assert!(default.fast_path_anywhere());
    let off = parse(
        "[protocol]\nfast_path = false\n[[shards]]\nreplicas = [\"127.0.0.1:2\", \"127.0.0.1:3\", \"127.0.0.1:4\"]",
    )
    .unwrap();
    assert!(!off.fast_path() && !off.fast_path_on(0));
    let occ = parse("[protocol]\nkind = \"occ\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap();
    assert!(!occ.fast_path(), "the baselines have none");
    let e = parse("[protocol]\nelection_timeout_us = 0\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap_err();
    assert!(e.contains("protocol.election_timeout_us") && e.contains("positive"), "{e}");
    let e = parse("[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[workload]\nkind = \"tpcc\"\nwarehouses = 0").unwrap_err();
    assert!(e.contains("field `workload`"), "{e}");
    let c = parse("[protocol]\nelection_timeout_us = 2500000\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]").unwrap();
    assert_eq!(c.tuning().election_ticks, 250, "2.5 s of 10 ms ticks");
}

#[test]
fn the_protocol_is_luigi_unless_the_file_names_another() {
    let one = "[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n";
    assert_eq!(parse(one).unwrap().protocol(), Protocol::Luigi);
    assert!(!parse(one).unwrap().to_toml().contains("kind"), "the default is not written out");
    for p in Protocol::ALL {
        let c = parse(&format!("[protocol]\nkind = \"{}\"\n{one}", p.name())).unwrap();
        assert_eq!(c.protocol(), p);
        assert_eq!(parse(&c.to_toml()).unwrap(), c, "round trip");
    }
    let mut c = parse(one).unwrap();
    c.set_protocol(Protocol::TwoPl);
    assert_eq!(parse(&c.to_toml()).unwrap().protocol(), Protocol::TwoPl);
    let e = parse(&format!("[protocol]\nkind = \"2pc\"\n{one}")).unwrap_err();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("field `protocol.kind`") && e.contains("'2pc'"), "{e}");
    assert!(e.contains("luigi, occ, 2pl, direct"), "the allowed values: {e}");
    let e = parse(&format!("[protocol]\nkind = 3\n{one}")).unwrap_err();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("kind"), "{e}");
}

#[test]
fn missing_file_is_a_clear_error() {
    let e = ClusterConfig::load(Path::new("/nonexistent/c.toml")).unwrap_err().to_string();
    assert!(e.contains("cannot read cluster file /nonexistent/c.toml"), "{e}");
}

#[test]
fn node_names() {
    assert_eq!("s3r1".parse::<NodeId>().unwrap(), NodeId { shard: 3, replica: 1 });
    assert!("x1".parse::<NodeId>().is_err());
    assert_eq!(NodeId { shard: 0, replica: 2 }.name(), "s0r2");
}

/// One single-replica shard, the `[protocol]` lines given.
fn with_protocol(lines: &str) -> Result<ClusterConfig, String> {
    parse(&format!("[protocol]\n{lines}\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]"))
}

/// What a server of `config` gives its shard leader (`luigi_node::NodeConfig::new` over the
/// file's tuning, as `server::serve` builds it).
fn leader_of(config: &ClusterConfig) -> luigi_protocol::leader::LeaderConfig {
    let node = NodeId { shard: 0, replica: 0 };
    let registry = luigi_txn::procedure::Registry::new();
    luigi_node::NodeConfig::new(node, vec![1], config.seed, config.tuning(), registry).leader
}

#[test]
fn the_read_only_path_is_luigis_off_by_default_and_sets_the_servers_window_and_idle_markers() {
    use luigi_node::tuning::{READ_ONLY_IDLE_MARKER_US, READ_ONLY_RETENTION_US};
    let off_defaults = luigi_protocol::leader::LeaderConfig::new(0, 1);
    assert!(!with_protocol("").unwrap().read_only_path(), "off by default (it does not pay yet)");
    assert_eq!(with_protocol("").unwrap().tuning().snapshot_retention_us, 0, "and no versions kept");
    let luigi = with_protocol("read_only_path = true").unwrap();
    assert!(luigi.read_only_path());
    let leader = leader_of(&luigi);
    assert_eq!(
        (leader.snapshot_retention_us, leader.idle_marker_us),
        (READ_ONLY_RETENTION_US, READ_ONLY_IDLE_MARKER_US)
    );
    assert_eq!((READ_ONLY_RETENTION_US, READ_ONLY_IDLE_MARKER_US), (5_000_000, 20_000));
    assert_eq!(parse(&luigi.to_toml()).unwrap(), luigi, "round trip");
    let off = with_protocol("read_only_path = false").unwrap();
    assert!(!off.read_only_path());
    let leader = leader_of(&off);
    assert_eq!(leader.snapshot_retention_us, 0, "no versions kept");
    assert_eq!(leader.idle_marker_us, off_defaults.idle_marker_us, "the leader's own default");
    assert_eq!(parse(&off.to_toml()).unwrap(), off, "round trip");
    for p in [Protocol::Occ, Protocol::TwoPl, Protocol::Direct] {
        let base = with_protocol(&format!("kind = \"{}\"", p.name())).unwrap();
        assert!(!base.read_only_path(), "{p}: the baselines serve no snapshot reads");
        assert_eq!(base.tuning().snapshot_retention_us, 0, "{p}");
        assert!(!with_protocol(&format!("kind = \"{}\"\nread_only_path = false", p.name())).unwrap().read_only_path());
        let e = with_protocol(&format!("kind = \"{}\"\nread_only_path = true", p.name())).unwrap_err();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("field `protocol.read_only_path`") && e.contains(p.name()), "{e}");
    }
    let set = with_protocol("snapshot_retention_us = 60000000\nidle_marker_us = 1000").unwrap();
    let leader = leader_of(&set);
    assert_eq!((leader.snapshot_retention_us, leader.idle_marker_us), (60_000_000, 1_000), "the file's own");
    let set_off =
        with_protocol("read_only_path = false\nsnapshot_retention_us = 0\nidle_marker_us = 60000000").unwrap();
    assert_eq!((set_off.tuning().snapshot_retention_us, set_off.tuning().idle_marker_us), (0, 60_000_000));
    assert_eq!(parse(&set.to_toml()).unwrap(), set, "round trip");
}

#[test]
fn windows_idle_markers_and_headrooms_out_of_range_are_refused_naming_the_field() {
    let refused = [
        ("snapshot_retention_us", SNAPSHOT_RETENTION_US_MAX + 1),
        ("snapshot_retention_us", i64::MAX as u64),
        ("idle_marker_us", 0),
        ("idle_marker_us", IDLE_MARKER_US_MIN - 1),
        ("idle_marker_us", IDLE_MARKER_US_MAX + 1),
        ("headroom_max_us", HEADROOM_US_MAX + 1),
        ("headroom_max_us", i64::MAX as u64),
        ("headroom_us", HEADROOM_US_MAX + 1),
    ];
    for (field, value) in refused {
        let e = with_protocol(&format!("{field} = {value}")).unwrap_err();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(&format!("field `protocol.{field}`: is {value} µs; must be from")), "{e}");
    }
    let edges = [
        ("snapshot_retention_us", 0),
        ("snapshot_retention_us", SNAPSHOT_RETENTION_US_MAX),
        ("idle_marker_us", IDLE_MARKER_US_MIN),
        ("idle_marker_us", IDLE_MARKER_US_MAX),
        ("headroom_max_us", 0),
        ("headroom_max_us", HEADROOM_US_MAX),
        ("headroom_us", HEADROOM_US_MAX),
    ];
    for (field, value) in edges {
        with_protocol(&format!("{field} = {value}")).unwrap_or_else(|e| panic!("{field} = {value}: {e}"));
    }
    // Rule 22's horizon counts the larger headroom: a bounded one keeps it bounded.
    let widest = with_protocol(&format!("headroom_us = 0\nheadroom_max_us = {HEADROOM_US_MAX}")).unwrap();
    let t = widest.tuning();
    assert_eq!(t.max_ahead_us(), t.retry_timeout_us + HEADROOM_US_MAX + t.max_clock_offset_us);
}
