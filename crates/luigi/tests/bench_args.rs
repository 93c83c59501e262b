//! `luigi bench micro` refuses nonsense before starting anything, bounds its runs, and leaves
//! no server or directory behind when it fails or is interrupted. Loopback only.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, scratch, start_durable, EXE};
use luigi_bench::options::{MAX_HEADROOM_US, MAX_IN_FLIGHT, MAX_OUTSTANDING, MAX_REPLICAS, MAX_SHARDS, MAX_THREADS};
use luigi_bench::report::read_json;
use luigi_bench::workload::micro::{MAX_OPS, MAX_ZIPF};

/// How long a refused invocation may take: no cluster is started, so far less than this.
const QUICK: Duration = Duration::from_secs(3);

/// Runs `luigi bench micro ARGS` in `dir/cwd` with `TMPDIR` set to `tmp`.
fn bench(dir: &Path, tmp: &Path, args: &[&str]) -> (Output, Duration) {
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let started = Instant::now();
    let out = Command::new(EXE)
        .args(["bench", "micro", "--no-progress"])
        .args(args)
        .current_dir(&cwd)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, started.elapsed())
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// A one-shard cluster file on a loopback port nothing listens on.
fn cluster_file(dir: &Path) -> PathBuf {
    let path = dir.join("cluster.toml");
    let port = free_port();
    std::fs::write(&path, format!("net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n")).unwrap();
    path
}

#[test]
fn every_bad_argument_is_refused_at_once_in_one_line_naming_it() {
    let dir = scratch("bench-args");
    // TMPDIR does not exist: a run that got as far as starting its local cluster would fail
    // with "cannot create a directory in ...", not with the refusal expected.
    let tmp = dir.join("no-such-tmp");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let under_file = file.join("r.json");
    let cluster = cluster_file(&dir);
    let (cluster, under_file) = (cluster.to_str().unwrap(), under_file.to_str().unwrap());
    let cases: &[(&[&str], &str)] = &[
        (&["--ops", "0"], "invalid --ops 0:"),
        (&["--ops", "1001"], "invalid --ops 1001:"),
        (&["--zipf", "nan"], "invalid --zipf NaN:"),
        (&["--zipf", "inf"], "invalid --zipf inf:"),
        (&["--zipf", "-1"], "invalid --zipf -1.0:"),
        (&["--zipf", "3.5"], "invalid --zipf 3.5:"),
        (&["--duration", "inf"], "invalid --duration inf:"),
        (&["--duration", "1e30"], "invalid --duration 1e30:"),
        (&["--duration", "0"], "invalid --duration 0.0:"),
        (&["--duration", "-1"], "invalid --duration -1.0:"),
        (&["--duration", "nan"], "invalid --duration NaN:"),
        (&["--warmup", "inf"], "invalid --warmup inf:"),
        (&["--warmup", "nan"], "invalid --warmup NaN:"),
        (&["--warmup", "-1"], "invalid --warmup -1.0:"),
        (&["--headroom-us", "18446744073709551615"], "invalid --headroom-us 18446744073709551615:"),
        (&["--in-flight", "0"], "invalid --in-flight 0:"),
        (&["--in-flight", "4294967295"], "invalid --in-flight 4294967295:"),
        (&["--threads", "64", "--in-flight", "100000"], "invalid --in-flight 100000 with --threads 64:"),
        (&["--threads", "1025"], "invalid --threads 1025:"),
        (&["--threads", "1,0"], "invalid --threads 0:"),
        (&["--threads", "1,2,4096"], "invalid --threads 4096:"),
        (&["--keys", "0"], "invalid --keys 0:"),
        (&["--keys", "19"], "invalid --keys 19 with --ops 10:"),
        (&["--keys", "20", "--shards", "64"], "invalid --keys 20 with --ops 10 over 64 shard(s):"),
        (&["--read-ratio", "nan"], "invalid --read-ratio NaN:"),
        (&["--read-ratio", "1.5"], "invalid --read-ratio 1.5:"),
        (&["--read-ratio", "-0.1"], "invalid --read-ratio -0.1:"),
        (&["--cross-shard", "101"], "invalid --cross-shard 101:"),
        (&["--shards", "0"], "invalid --shards 0:"),
        (&["--shards", "65"], "invalid --shards 65:"),
        (&["--replicas", "0"], "invalid --replicas 0:"),
        (&["--replicas", "8"], "invalid --replicas 8:"),
        (&["--json", under_file], "invalid --json"),
        (&["--json", "/"], "invalid --json /: not a file path"),
        (&["--cluster", "/nonexistent/cluster.toml"], "invalid --cluster /nonexistent/cluster.toml:"),
        (&["--cluster", cluster, "--shards", "2"], "--shards cannot be used with --cluster"),
        (&["--cluster", cluster, "--replicas", "3"], "--replicas cannot be used with --cluster"),
        (&["--cluster", cluster, "--net", "geo"], "--net cannot be used with --cluster"),
        (&["--cluster", cluster, "--durability", "none"], "--durability cannot be used with --cluster"),
        (
            &["--protocol", "2pc"],
            "invalid --protocol 2pc: unknown protocol '2pc' (expected one of: luigi, occ, 2pl, direct)",
        ),
        (&["--protocol", "OCC"], "invalid --protocol OCC:"),
        (&["--cluster", cluster, "--protocol", "occ"], "invalid --protocol occ: the servers of"),
        (&["--protocol", "occ", "--read-only-path", "on"], "--read-only-path on is Luigi's"),
        (&["--client-near", "1"], "invalid --client-near 1:"),
    ];
    for (args, needle) in cases {
        let (out, took) = bench(&dir, &tmp, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with("luigi: error: ") && err.contains(needle), "{args:?}: {needle:?} not in {err}");
        assert!(took < QUICK, "{args:?} took {took:?}");
        assert!(entries(&dir.join("cwd")).is_empty(), "{args:?} created {:?}", entries(&dir.join("cwd")));
        assert!(!tmp.exists());
    }
    // The control: valid arguments do reach the local cluster's start (which fails here,
    // TMPDIR missing), so the refusals above happened before it.
    let (out, took) = bench(&dir, &tmp, &["--json", dir.join("r.json").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot create a directory in"), "{err}");
    assert!(took < QUICK, "took {took:?}");
}

#[test]
fn help_states_every_limit() {
    let out = Command::new(EXE).args(["bench", "micro", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    for limit in [
        format!("1 to {MAX_SHARDS}"),
        format!("1 to {MAX_REPLICAS}"),
        format!("1 to {MAX_THREADS}"),
        format!("1 to {MAX_IN_FLIGHT}"),
        format!("at most {MAX_OUTSTANDING} over all threads"),
        format!("1 to {MAX_OPS}"),
        format!("from 0 (uniform) to {MAX_ZIPF}"),
        format!("at most {MAX_HEADROOM_US} (60 s)"),
        "0.1 to 86400 (a day)".into(),
        "0 to 86400 (a day)".into(),
        "0 to 1".into(),
        "0 to 100".into(),
        "from twice --ops to 2^53".into(),
        "--shards, --replicas, --net and --durability are refused with it".into(),
        "checked writable before the first run".into(),
        "with --cluster the file's [protocol] kind decides".into(),
        "SIGKILL".into(),
    ] {
        assert!(help.contains(&limit), "--help lacks {limit:?}:\n{help}");
    }
}

#[test]
fn a_run_that_commits_nothing_fails_and_leaves_nothing() {
    let dir = scratch("bench-nothing");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let json = dir.join("r.json");
    // A transaction takes two one-way delays of >= 130 ms: none ends in a 0.1 s interval.
    let args = ["--net", "geo", "--duration", "0.1", "--warmup", "0", "--durability", "none", "--in-flight", "4"];
    let (out, took) = bench(&dir, &tmp, &[&args[..], &["--json", json.to_str().unwrap()]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("luigi: error: no transaction committed in the 0.1s measured interval"), "{err}");
    assert!(!json.exists(), "no results written");
    assert!(entries(&tmp).is_empty(), "left {:?}", entries(&tmp));
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

#[test]
fn headroom_is_honoured_with_a_cluster_file() {
    let dir = scratch("bench-headroom");
    let port = free_port();
    let config = dir.join("cluster.toml");
    std::fs::write(&config, format!("net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n")).unwrap();
    let _server = start_durable(&config, &dir.join("data"), "s0r0", port, &dir.join("server.log"));
    let json = dir.join("r.json");
    let args = ["--duration", "0.5", "--warmup", "0", "--in-flight", "4", "--headroom-us", "4321"];
    let cluster = ["--cluster", config.to_str().unwrap(), "--json", json.to_str().unwrap()];
    let (out, _) = bench(&dir, &dir.join("tmp"), &[&args[..], &cluster[..]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = &read_json(&json).unwrap()[0];
    assert_eq!(r.params["headroom_us"], serde_json::json!(4321), "the override is used, not the file's default");
    assert_eq!((r.shards, r.replicas, r.net.as_str(), r.durability.as_str()), (1, 1, "none", "unknown"));
}

#[test]
fn a_cluster_stuck_mid_run_fails_the_run_within_its_bound() {
    let dir = scratch("bench-stuck");
    let port = free_port();
    let config = dir.join("cluster.toml");
    std::fs::write(&config, format!("net = \"none\"\n[[shards]]\nreplicas = [\"127.0.0.1:{port}\"]\n")).unwrap();
    let server = start_durable(&config, &dir.join("data"), "s0r0", port, &dir.join("server.log"));
    let started = Instant::now();
    let mut bench = Command::new(EXE)
        .args(["bench", "micro", "--no-progress", "--duration", "3", "--warmup", "0", "--in-flight", "8", "--cluster"])
        .arg(&config)
        .arg("--json")
        .arg(dir.join("r.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // The only replica stops answering (but keeps its connections) in the measured interval.
    assert!(Command::new("kill").args(["-STOP", &server.0.id().to_string()]).status().unwrap().success());
    // Bound: warm-up 0 + duration 3 + grace (15 s + the client's give-up time, 10 x 1 s).
    let bound = Duration::from_secs(3 + 15 + 10);
    let exit = loop {
        if let Some(exit) = bench.try_wait().unwrap() {
            break exit;
        }
        if started.elapsed() > bound + Duration::from_secs(10) {
            let _ = bench.kill();
            panic!("the bench did not stop within its bound");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(bench.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!exit.success(), "{err}");
    assert!(err.contains("got no complete answer") && err.contains("the cluster stalled"), "{err}");
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert!(!dir.join("r.json").exists());
    server.kill9();
}

/// Process ids whose command line mentions `needle` (Linux /proc).
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_bench_stopped_by_a_signal_leaves_no_server_and_no_directory() {
    for (signal, status) in [("TERM", 143), ("INT", 130)] {
        let dir = scratch(&format!("bench-sig{signal}"));
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let tmp_str = tmp.to_str().unwrap().to_string();
        let mut bench = Command::new(EXE)
            .args(["bench", "micro", "--no-progress", "--shards", "2", "--net", "none", "--durability", "none"])
            .args(["--duration", "60", "--warmup", "0", "--in-flight", "8", "--json"])
            .arg(dir.join("r.json"))
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The servers (their command line names their directory under TMPDIR) are up...
        wait_until("both servers", Duration::from_secs(30), || processes_mentioning(&tmp_str).len() >= 2);
        // ... and the load is under way.
        std::thread::sleep(Duration::from_secs(2));
        assert!(bench.try_wait().unwrap().is_none(), "the bench is still running");
        let kill = Command::new("kill").args([format!("-{signal}"), bench.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let exit = loop {
            if let Some(exit) = bench.try_wait().unwrap() {
                break exit;
            }
            if Instant::now() > deadline {
                let _ = bench.kill();
                panic!("the bench did not exit after SIG{signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(bench.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(exit.code(), Some(status), "SIG{signal}: {err}");
        assert!(err.contains("interrupted by signal"), "{err}");
        wait_until("no server left", Duration::from_secs(10), || processes_mentioning(&tmp_str).is_empty());
        assert!(entries(&tmp).is_empty(), "SIG{signal} left {:?}", entries(&tmp));
    }
}

#[test]
fn bad_tpcc_arguments_are_refused_at_once_in_one_line_naming_them() {
    let dir = scratch("bench-args-tpcc");
    let tmp = dir.join("no-such-tmp");
    let cluster = cluster_file(&dir);
    let cluster = cluster.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--mix", "payment"], "invalid --mix payment:"),
        (&["--remote-item-pct", "101"], "invalid --remote-item-pct 101:"),
        (&["--remote-payment-pct", "-1"], "invalid --remote-payment-pct -1:"),
        (&["--remote-item-pct", "nan"], "invalid --remote-item-pct NaN:"),
        (&["--warehouses", "0"], "invalid TPC-C options:"),
        (&["--shards", "2", "--warehouses", "1"], "invalid TPC-C options:"),
        (&["--scale", "0"], "invalid TPC-C options:"),
        (&["--scale", "1.5"], "invalid TPC-C options:"),
        (&["--cluster", cluster], "host no TPC-C database"),
        (&["--cluster", cluster, "--warehouses", "2"], "not with --cluster"),
        (&["--protocol", "paxos"], "invalid --protocol paxos:"),
        (&["--cluster", cluster, "--protocol", "direct"], "invalid --protocol direct: the servers of"),
    ];
    for (args, needle) in cases {
        let cwd = dir.join("cwd");
        std::fs::create_dir_all(&cwd).unwrap();
        let started = Instant::now();
        let out = Command::new(EXE)
            .args(["bench", "tpcc", "--no-progress"])
            .args(*args)
            .current_dir(&cwd)
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with("luigi: error: ") && err.contains(needle), "{args:?}: {needle:?} not in {err}");
        assert!(started.elapsed() < QUICK, "{args:?} took {:?}", started.elapsed());
        assert!(!tmp.exists());
    }
    // `luigi check tpcc` on a cluster that hosts no TPC-C says so, without connecting.
    let out = Command::new(EXE).args(["check", "tpcc", "--cluster", cluster]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("host no TPC-C database"), "{err}");
    // Nor does it check a cluster that runs no transactions.
    let direct = dir.join("direct.toml");
    let text = std::fs::read_to_string(cluster).unwrap();
    std::fs::write(&direct, format!("{text}[protocol]\nkind = \"direct\"\n")).unwrap();
    let out = Command::new(EXE).args(["check", "tpcc", "--cluster", direct.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("direct is not transactional"), "{err}");
}
