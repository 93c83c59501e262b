//! Tests of `run`: the cluster file a run writes for its local cluster.

use std::path::Path;

use luigi_wan::DelayDist;

use super::*;

fn spec(protocol: Protocol, net: Scenario) -> RunSpec {
    RunSpec {
        shards: 2,
        replicas: 3,
        threads: 1,
        in_flight: 1,
        net,
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        headroom_us: None,
        adaptive_headroom: None,
        read_only_path: None,
        max_clock_offset_us: None,
        client_near: None,
        cluster_file: None,
        protocol,
        durability: "none",
        fast_path: true,
        exe: PathBuf::from("luigi"),
        progress: false,
        rate_tps: None,
        metrics: false,
    }
}

/// The local cluster's file as its servers read it: distinct ports given, checked, parsed.
fn written(run: &RunSpec) -> ClusterConfig {
    let mut config = cluster_config(run, None).unwrap();
    let mut port = 7000;
    for shard in &mut config.shards {
        for addr in &mut shard.replicas {
            port += 1;
            *addr = format!("127.0.0.1:{port}");
        }
    }
    ClusterConfig::parse(&config.to_toml(), Path::new("local.toml")).unwrap()
}

#[test]
fn the_local_clusters_file_says_whether_the_read_only_path_runs() {
    let luigi = spec(Protocol::Luigi, Scenario::None);
    assert_eq!(written(&luigi).protocol.read_only_path, Some(false), "written out, off by default");
    let on = written(&RunSpec { read_only_path: Some(true), ..luigi.clone() });
    assert_eq!(on.protocol.read_only_path, Some(true));
    assert!(on.read_only_path() && on.tuning().snapshot_retention_us > 0);
    let off = written(&RunSpec { read_only_path: Some(false), ..luigi.clone() });
    assert_eq!(off.protocol.read_only_path, Some(false));
    assert_eq!(off.tuning().snapshot_retention_us, 0, "the servers keep no versions");
    for p in [Protocol::Occ, Protocol::TwoPl, Protocol::Direct] {
        let base = written(&spec(p, Scenario::None));
        assert_eq!(base.protocol.read_only_path, Some(false), "{p}: the baselines serve no snapshot reads");
    }
}

#[test]
fn client_near_puts_the_client_next_to_one_replica_of_every_shard_and_nothing_else() {
    let geo = spec(Protocol::Luigi, Scenario::Geo);
    assert!(written(&geo).links.is_empty(), "no overrides unless asked");
    let near = written(&RunSpec { client_near: Some(1), ..geo });
    let model = near.delay_model();
    for shard in 0..2 {
        for replica in 0..3 {
            let node = luigi_txn::types::NodeId { shard, replica }.name();
            let expected = if replica == 1 { DelayDist::ZERO } else { Scenario::Geo.delay() };
            assert_eq!(model.dist(CLIENT_NODE, &node), expected, "client -> {node}");
            assert_eq!(model.dist(&node, CLIENT_NODE), expected, "{node} -> client");
            for other in ["s0r0", "s0r1", "s1r1", "s1r2"] {
                assert_eq!(model.dist(&node, other), Scenario::Geo.delay(), "{node} -> {other}: the scenario's");
            }
        }
    }
    assert_eq!(near.links.len(), 4, "two shards, both ways");
}

#[test]
fn the_clock_bound_given_is_written_into_the_local_clusters_file() {
    let luigi = spec(Protocol::Luigi, Scenario::Geo);
    assert_eq!(written(&luigi).tuning().max_clock_offset_us, luigi_protocol::leader::MAX_CLOCK_OFFSET_US_DEFAULT);
    let tight = written(&RunSpec { max_clock_offset_us: Some(10_000), ..luigi });
    assert_eq!(tight.tuning().max_clock_offset_us, 10_000);
}
