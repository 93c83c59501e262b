//! `luigi top --once` against real server processes on loopback (2 shards x 3 replicas, each
//! serving its metrics): the frame names every shard and its leader, counts commits while
//! `luigi put` runs, and once a leader is killed shows it DOWN with the reason and the new
//! leader its shard elects, without failing; the live view clears the screen and ends when
//! its reader closes the pipe.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{free_port, scratch, start_server, EXE};

/// Runs `luigi top --once` (scrapes 0.5 s apart) and returns its frame.
fn top_once(config: &Path) -> String {
    let o: Output =
        Command::new(EXE).args(["top", "--once", "--interval", "0.5", "--cluster"]).arg(config).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "luigi top --once: {out}{err}");
    assert!(!out.contains('\x1b'), "--once does not clear the screen: {out:?}");
    out.into_owned()
}

/// A shard's line of the frame, as cells (SHARD LEADER [elect] TERM COMMIT/S ...).
fn shard_cells(frame: &str, shard: u32) -> Vec<String> {
    let table = frame.split("\nSHARD ").nth(1).expect("the shard table");
    let line = table.lines().find(|l| l.split_whitespace().next() == Some(&shard.to_string())).expect("a shard line");
    line.split_whitespace().map(str::to_string).collect()
}

/// The replica leading `shard` as the frame shows it (serving, not `elect`).
fn serving_leader(frame: &str, shard: u32) -> Option<u32> {
    let cells = shard_cells(frame, shard);
    if cells[2] == "elect" {
        return None;
    }
    cells[1].strip_prefix('r')?.parse().ok()
}

/// Polls `luigi top --once` until `done` holds for its frame (at most 30 s).
fn frame_until(config: &Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let frame = top_once(config);
        if done(&frame) {
            return frame;
        }
        assert!(Instant::now() < deadline, "no frame with {what} within 30 s; the last:\n{frame}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn top_once_shows_every_shard_its_leader_commits_and_a_killed_leader() {
    let dir = scratch("top");
    let ports: Vec<[u16; 3]> = (0..2).map(|_| [free_port(), free_port(), free_port()]).collect();
    let metrics: Vec<[u16; 3]> = (0..2).map(|_| [free_port(), free_port(), free_port()]).collect();
    let list = |p: &[u16; 3]| p.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect::<Vec<_>>().join(", ");
    let mut toml = String::from("net = \"none\"\nsecret = \"top-test-secret-0123456789\"\n");
    for (p, m) in ports.iter().zip(&metrics) {
        toml.push_str(&format!("[[shards]]\nreplicas = [{}]\nmetrics = [{}]\n", list(p), list(m)));
    }
    let config = dir.join("cluster.toml");
    std::fs::write(&config, toml).unwrap();
    let (data, log) = (dir.join("data"), dir.join("servers.log"));
    let mut servers: Vec<Option<_>> = Vec::new();
    for (shard, p) in ports.iter().enumerate() {
        for (replica, port) in p.iter().enumerate() {
            servers.push(Some(start_server(&config, &data, &format!("s{shard}r{replica}"), *port, &log, "none")));
        }
    }
    let frame =
        frame_until(&config, "a serving leader on every shard", |f| (0..2).all(|s| serving_leader(f, s).is_some()));
    assert!(frame.contains("6 of 6 replicas answered"), "{frame}");
    for s in 0..2 {
        assert_eq!(shard_cells(&frame, s).last().map(String::as_str), Some("3/3"), "{frame}");
    }
    // Writes run while top scrapes: some shard counts commits in its interval.
    let writing = AtomicBool::new(true);
    let loaded = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut i = 0;
            while writing.load(Ordering::Relaxed) && i < 2_000 {
                let o = Command::new(EXE).args(["put", &format!("top/{i}"), "v", "--cluster"]).arg(&config).output();
                assert!(o.is_ok_and(|o| o.status.success()), "luigi put");
                i += 1;
            }
        });
        let frame = frame_until(&config, "commits counted", |f| {
            (0..2).any(|s| serving_leader(f, s).is_some() && shard_cells(f, s)[3].parse::<f64>().is_ok_and(|c| c > 0.0))
        });
        writing.store(false, Ordering::Relaxed);
        frame
    });
    assert!(loaded.contains("REPLICA "), "{loaded}");
    live_view_ends_when_its_reader_closes_the_pipe(&config);
    // Kill shard 1's leader: top still draws a frame, shows it DOWN with the reason, and the
    // shard's new leader once the survivors elect one.
    let old = serving_leader(&loaded, 1).expect("shard 1 led");
    servers[3 + old as usize].take().unwrap().kill9();
    let after =
        frame_until(&config, "a new serving leader on shard 1", |f| serving_leader(f, 1).is_some_and(|l| l != old));
    let down = after.lines().find(|l| l.starts_with(&format!("s1r{old} "))).expect("the killed replica's line");
    assert!(down.contains("DOWN") && down.contains("connection refused"), "{down}");
    assert!(after.contains("5 of 6 replicas answered"), "{after}");
    assert_eq!(shard_cells(&after, 1).last().map(String::as_str), Some("2/3"), "{after}");
    assert!(serving_leader(&after, 0).is_some(), "shard 0 is untouched:\n{after}");
}

/// The live view piped into a reader that reads one line and closes the pipe (`| head -1`)
/// ends, with status 0, at its next frame.
fn live_view_ends_when_its_reader_closes_the_pipe(config: &Path) {
    let mut child = Command::new(EXE)
        .args(["top", "--interval", "0.2", "--cluster"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("\x1b[2J\x1b[Hluigi top "), "the live view clears the screen: {first:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("luigi top still runs with its pipe closed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
}

#[test]
fn top_refuses_a_cluster_file_without_metrics_addresses() {
    let dir = scratch("top-no-metrics");
    let config = dir.join("cluster.toml");
    std::fs::write(&config, format!("[[shards]]\nreplicas = [\"127.0.0.1:{}\"]\n", free_port())).unwrap();
    let o = Command::new(EXE).args(["top", "--once", "--cluster"]).arg(&config).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("shard 0 has no `metrics` addresses"), "{err}");
    let o = Command::new(EXE).args(["top", "--interval", "0", "--cluster"]).arg(&config).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--interval must be 0.1 to 3600"));
}
