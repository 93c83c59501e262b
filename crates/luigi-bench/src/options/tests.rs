//! Tests of `options`.

use super::*;

fn ok_options(dir: &Path) -> BenchOptions {
    BenchOptions {
        threads: vec![1],
        in_flight: 200,
        duration_s: 10.0,
        warmup_s: 2.0,
        json: dir.join("results").join("micro.json"),
        ..BenchOptions::default()
    }
}

/// The refusal of `options`: one line, naming `needle`.
fn refused(options: &BenchOptions, needle: &str) -> String {
    let msg = format!("{:#}", options.validate().expect_err("accepted"));
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    msg
}

#[test]
fn defaults_are_a_local_cluster_and_the_json_check_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let plan = ok_options(dir.path()).validate().unwrap();
    let Target::Local { shards, replicas, nets, durability, fast_path, client_near } = &plan.target else {
        panic!("local")
    };
    assert_eq!(
        (*shards, *replicas, nets.as_slice(), *durability, *fast_path, *client_near),
        (1, 1, &[Scenario::SameRegion][..], "fsync", true, None)
    );
    assert_eq!(plan.read_only_path, None, "the cluster file's default: off");
    assert_eq!(plan.shards(), 1);
    assert_eq!((plan.duration, plan.warmup), (Duration::from_secs(10), Duration::from_secs(2)));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no probe file or directory left");
}

#[test]
fn the_protocol_is_luigi_unless_asked_and_a_cluster_file_decides_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    assert_eq!(base.validate().unwrap().protocols, vec![Protocol::Luigi]);
    for p in Protocol::ALL {
        let plan = BenchOptions { protocol: Some(p.name().into()), ..base.clone() }.validate().unwrap();
        assert_eq!(plan.protocols, vec![p]);
    }
    let all = BenchOptions { protocol: Some("luigi,occ, 2pl,direct".into()), ..base.clone() };
    assert_eq!(all.validate().unwrap().protocols, Protocol::ALL.to_vec());
    let msg =
        refused(&BenchOptions { protocol: Some("occ,occ".into()), ..base.clone() }, "invalid --protocol occ,occ:");
    assert!(msg.contains("occ is listed twice"), "{msg}");
    let msg = refused(&BenchOptions { protocol: Some("2pc".into()), ..base.clone() }, "invalid --protocol 2pc:");
    assert!(msg.contains("luigi, occ, 2pl, direct"), "the allowed values: {msg}");
    refused(&BenchOptions { protocol: Some("".into()), ..base.clone() }, "invalid --protocol :");
    // A cluster file's protocol: taken, repeated, or contradicted.
    let file = dir.path().join("occ.toml");
    std::fs::write(&file, "[protocol]\nkind = \"occ\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let on_file = BenchOptions { cluster: Some(file.clone()), ..base.clone() };
    assert_eq!(on_file.validate().unwrap().protocols, vec![Protocol::Occ]);
    let same = BenchOptions { protocol: Some("occ".into()), ..on_file.clone() };
    assert_eq!(same.validate().unwrap().protocols, vec![Protocol::Occ]);
    let msg = refused(&BenchOptions { protocol: Some("2pl".into()), ..on_file.clone() }, "invalid --protocol 2pl:");
    assert!(msg.contains("run occ") && msg.contains("occ.toml"), "{msg}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[protocol]\nkind = \"paxos\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let msg = refused(&BenchOptions { cluster: Some(bad), ..base }, "protocol.kind");
    assert!(msg.contains("'paxos'"), "{msg}");
}

#[test]
fn edges_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let edges = BenchOptions {
        shards: Some(MAX_SHARDS),
        replicas: Some(MAX_REPLICAS),
        threads: vec![1, MAX_THREADS],
        in_flight: (MAX_OUTSTANDING / u64::from(MAX_THREADS)) as u32,
        duration_s: MAX_SECONDS,
        warmup_s: 0.0,
        headroom_us: Some(MAX_HEADROOM_US),
        ..ok_options(dir.path())
    };
    edges.validate().unwrap();
    let small = BenchOptions { threads: vec![1], in_flight: MAX_IN_FLIGHT, duration_s: MIN_DURATION_S, ..edges };
    small.validate().unwrap();
}

#[test]
fn shards_and_replicas_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    refused(&BenchOptions { shards: Some(0), ..base.clone() }, "invalid --shards 0:");
    refused(&BenchOptions { shards: Some(65), ..base.clone() }, "invalid --shards 65: a local cluster");
    refused(&BenchOptions { shards: Some(u32::MAX), ..base.clone() }, "at most 64 shards");
    refused(&BenchOptions { replicas: Some(0), ..base.clone() }, "invalid --replicas 0:");
    refused(&BenchOptions { replicas: Some(8), ..base.clone() }, "invalid --replicas 8: a local cluster");
    refused(&BenchOptions { net: Some(vec![]), ..base }, "invalid --net");
}

#[test]
fn every_thread_count_is_checked_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    refused(&BenchOptions { threads: vec![], ..base.clone() }, "invalid --threads");
    refused(&BenchOptions { threads: vec![1, 0], ..base.clone() }, "invalid --threads 0:");
    refused(&BenchOptions { threads: vec![1, 2, 1025], ..base.clone() }, "invalid --threads 1025: at most 1024");
    refused(&BenchOptions { threads: vec![u32::MAX], ..base }, "invalid --threads 4294967295");
}

#[test]
fn in_flight_is_bounded_per_thread_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    refused(&BenchOptions { in_flight: 0, ..base.clone() }, "invalid --in-flight 0:");
    refused(&BenchOptions { in_flight: u32::MAX, ..base.clone() }, "invalid --in-flight 4294967295: at most 100000");
    let msg = refused(&BenchOptions { threads: vec![1, 1024], in_flight: 1000, ..base }, "invalid --in-flight 1000");
    assert!(msg.contains("with --threads 1024") && msg.contains("1024000 transactions outstanding"), "{msg}");
}

#[test]
fn duration_and_warmup_are_finite_and_at_most_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    for bad in [f64::INFINITY, f64::NAN, 1e30, 0.0, -1.0, 0.05, MAX_SECONDS + 1.0] {
        refused(&BenchOptions { duration_s: bad, ..base.clone() }, &format!("invalid --duration {bad:?}:"));
    }
    for bad in [f64::INFINITY, f64::NAN, -1.0, 1e30, f64::NEG_INFINITY] {
        refused(&BenchOptions { warmup_s: bad, ..base.clone() }, &format!("invalid --warmup {bad:?}:"));
    }
    refused(&BenchOptions { warmup_s: -1.0, ..base }, "from 0 to 86400 seconds (a day)");
}

#[test]
fn headroom_is_at_most_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    refused(&BenchOptions { headroom_us: Some(MAX_HEADROOM_US + 1), ..base.clone() }, "invalid --headroom-us 60000001");
    refused(&BenchOptions { headroom_us: Some(u64::MAX), ..base.clone() }, "(60 s)");
    BenchOptions { headroom_us: Some(0), ..base }.validate().unwrap();
}

fn cluster_file(dir: &Path) -> PathBuf {
    let path = dir.join("cluster.toml");
    std::fs::write(
        &path,
        "net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n[[shards]]\nreplicas = [\"127.0.0.1:2\"]\n",
    )
    .unwrap();
    path
}

#[test]
fn the_fast_path_is_a_local_luigi_clusters_and_on_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    let local_fast = |plan: &BenchPlan| matches!(plan.target, Target::Local { fast_path, .. } if fast_path);
    assert!(local_fast(&base.validate().unwrap()), "on by default");
    let both = BenchOptions { protocol: Some("luigi,occ".into()), ..base.clone() };
    assert!(local_fast(&both.validate().unwrap()), "for Luigi's runs (the baselines have none)");
    let off = BenchOptions { fast_path: Some(false), ..base.clone() };
    assert!(!local_fast(&off.validate().unwrap()));
    let on = BenchOptions { fast_path: Some(true), ..base.clone() };
    let luigi = BenchOptions { protocol: Some("luigi".into()), ..on.clone() };
    assert_eq!(luigi.validate().unwrap().protocols, vec![Protocol::Luigi]);
    let msg = refused(&BenchOptions { protocol: Some("luigi,occ".into()), ..on }, "invalid --protocol luigi,occ:");
    assert!(msg.contains("--fast-path on is Luigi's"), "{msg}");
}

#[test]
fn a_cluster_file_excludes_the_local_cluster_options() {
    let dir = tempfile::tempdir().unwrap();
    let base = BenchOptions { cluster: Some(cluster_file(dir.path())), ..ok_options(dir.path()) };
    let plan = base.validate().unwrap();
    assert_eq!(plan.shards(), 2);
    assert!(matches!(&plan.target, Target::File { config, .. } if config.shard_count() == 2));
    let msg = refused(&BenchOptions { shards: Some(1), ..base.clone() }, "--shards cannot be used with --cluster");
    assert!(msg.contains("the cluster file and its running servers decide"), "{msg}");
    refused(&BenchOptions { replicas: Some(3), ..base.clone() }, "--replicas cannot be used with --cluster");
    refused(&BenchOptions { net: Some(vec![Scenario::Geo]), ..base.clone() }, "--net cannot be used with --cluster");
    refused(&BenchOptions { durability: Some("none"), ..base.clone() }, "--durability cannot be used with --cluster");
    refused(&BenchOptions { fast_path: Some(false), ..base.clone() }, "--fast-path cannot be used with --cluster");
    refused(&BenchOptions { client_near: Some(0), ..base.clone() }, "--client-near cannot be used with --cluster");
    refused(
        &BenchOptions { shards: Some(2), net: Some(vec![Scenario::None]), ..base.clone() },
        "--shards, --net cannot be used",
    );
    // The headroom is the client's: it applies to a cluster file too.
    let plan = BenchOptions { headroom_us: Some(900), ..base.clone() }.validate().unwrap();
    assert_eq!(plan.headroom_us, Some(900));
    // A missing or broken cluster file is refused up front.
    let missing = BenchOptions { cluster: Some(dir.path().join("nope.toml")), ..base };
    refused(&missing, "invalid --cluster");
}

#[test]
fn an_unwritable_json_path_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    // Under a regular file: refused even for root (permissions would not be).
    refused(&BenchOptions { json: file.join("r.json"), ..base.clone() }, "is not a directory");
    refused(&BenchOptions { json: file.join("deeper").join("r.json"), ..base.clone() }, "invalid --json");
    refused(&BenchOptions { json: dir.path().to_path_buf(), ..base.clone() }, "is a directory");
    refused(&BenchOptions { json: PathBuf::from("/"), ..base.clone() }, "not a file path");
    // A missing directory is fine (write_json creates it), and so is an existing file,
    // which is left as it was.
    let deep = dir.path().join("x").join("y").join("r.json");
    BenchOptions { json: deep, ..base.clone() }.validate().unwrap();
    assert!(!dir.path().join("x").exists(), "the check creates nothing");
    BenchOptions { json: file.clone(), ..base }.validate().unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn the_open_loop_rate_is_positive_finite_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    assert_eq!(base.validate().unwrap().rate_tps, None, "closed loop by default");
    let plan = BenchOptions { rate: Some(1_500.5), ..base.clone() }.validate().unwrap();
    assert_eq!(plan.rate_tps, Some(1_500.5));
    BenchOptions { rate: Some(MAX_RATE_TPS), ..base.clone() }.validate().unwrap();
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_RATE_TPS * 2.0] {
        let msg = refused(&BenchOptions { rate: Some(bad), ..base.clone() }, &format!("invalid --rate {bad:?}:"));
        assert!(msg.contains("transactions per second"), "{msg}");
    }
}

#[test]
fn metrics_are_served_and_scraped_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    assert!(ok_options(dir.path()).validate().unwrap().metrics, "on by default");
    let off = BenchOptions { metrics: Some(false), ..ok_options(dir.path()) };
    assert!(!off.validate().unwrap().metrics);
}

#[test]
fn the_read_only_path_is_luigis_and_a_cluster_file_can_only_turn_it_off_for_its_client() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    for on in [None, Some(true), Some(false)] {
        let plan = BenchOptions { read_only_path: on, ..base.clone() }.validate().unwrap();
        assert_eq!(plan.read_only_path, on);
    }
    let off = BenchOptions { read_only_path: Some(false), protocol: Some("luigi,occ".into()), ..base.clone() };
    assert_eq!(off.validate().unwrap().protocols, vec![Protocol::Luigi, Protocol::Occ]);
    let on = BenchOptions { read_only_path: Some(true), ..base.clone() };
    let msg = refused(&BenchOptions { protocol: Some("2pl".into()), ..on.clone() }, "invalid --protocol 2pl:");
    assert!(msg.contains("--read-only-path on is Luigi's"), "{msg}");
    let path = dir.path().join("with.toml");
    std::fs::write(&path, "[protocol]\nread_only_path = true\n[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let luigi_file = BenchOptions { cluster: Some(path), ..base.clone() };
    for on in [Some(true), Some(false)] {
        BenchOptions { read_only_path: on, ..luigi_file.clone() }.validate().unwrap();
    }
    let path = dir.path().join("without.toml");
    std::fs::write(&path, "[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let without = BenchOptions { cluster: Some(path), ..base.clone() };
    BenchOptions { read_only_path: Some(false), ..without.clone() }.validate().unwrap();
    let msg = refused(&BenchOptions { read_only_path: Some(true), ..without }, "invalid --read-only-path on:");
    assert!(msg.contains("without.toml run without it"), "{msg}");
}

#[test]
fn client_near_names_a_replica_of_the_local_shards() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    let near = |plan: BenchPlan| match plan.target {
        Target::Local { client_near, .. } => client_near,
        Target::File { .. } => panic!("local"),
    };
    assert_eq!(near(BenchOptions { client_near: Some(0), ..base.clone() }.validate().unwrap()), Some(0));
    let three = BenchOptions { replicas: Some(3), ..base.clone() };
    assert_eq!(near(BenchOptions { client_near: Some(2), ..three.clone() }.validate().unwrap()), Some(2));
    let msg = refused(&BenchOptions { client_near: Some(3), ..three }, "invalid --client-near 3:");
    assert!(msg.contains("from 0 to 2"), "{msg}");
    refused(&BenchOptions { client_near: Some(1), ..base.clone() }, "invalid --client-near 1:");
    refused(&BenchOptions { client_near: Some(u32::MAX), ..base }, "from 0 to 0");
}

#[test]
fn the_clock_bound_is_the_local_clusters_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let base = ok_options(dir.path());
    let plan = BenchOptions { max_clock_offset_us: Some(10_000), ..base.clone() }.validate().unwrap();
    assert_eq!(plan.max_clock_offset_us, Some(10_000));
    refused(&BenchOptions { max_clock_offset_us: Some(60_000_001), ..base.clone() }, "invalid --max-clock-offset-us");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[[shards]]\nreplicas = [\"127.0.0.1:1\"]\n").unwrap();
    let on_file = BenchOptions { cluster: Some(file), max_clock_offset_us: Some(10_000), ..base };
    refused(&on_file, "--max-clock-offset-us cannot be used with --cluster");
}
