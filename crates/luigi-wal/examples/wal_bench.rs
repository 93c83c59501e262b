//! Group-commit throughput of the WAL: appends/s and MB/s for batch sizes 1, 16 and 256, with
//! `fdatasync` after every batch and without.
//!
//! ```sh
//! cargo run --release -p luigi-wal --example wal_bench [-- DIR [ENTRY_BYTES [SECONDS]]]
//! ```
//!
//! DIR is where the temporary log goes (default `./target` if it exists, else the system temp
//! dir; it must be on the disk you want to measure, not a tmpfs). ENTRY_BYTES defaults to 128,
//! SECONDS per configuration to 1. Each configuration also stops after 128 MiB of data, and old
//! segments are compacted away as it runs, so disk use stays small.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use luigi_wal::{Durability, Wal, WalOptions, RECORD_OVERHEAD_BYTES};

fn main() {
    let mut args = std::env::args().skip(1);
    let parent = args.next().map(PathBuf::from).unwrap_or_else(|| {
        let target = PathBuf::from("target");
        if target.is_dir() {
            target
        } else {
            std::env::temp_dir()
        }
    });
    let entry_bytes: usize = args.next().map_or(128, |s| s.parse().expect("ENTRY_BYTES"));
    let seconds: f64 = args.next().map_or(1.0, |s| s.parse().expect("SECONDS"));
    let data_cap_bytes: u64 = 128 << 20;

    println!(
        "luigi-wal group commit: {entry_bytes}-byte entries ({} bytes per record), {seconds} s or 128 MiB per row, dir {}",
        entry_bytes + RECORD_OVERHEAD_BYTES,
        parent.display()
    );
    println!(
        "{:<11} {:>6} {:>13} {:>11} {:>10} {:>13}",
        "durability", "batch", "appends/s", "MB/s", "syncs/s", "us/sync(mean)"
    );
    for durability in [Durability::Fsync, Durability::None] {
        for batch in [1usize, 16, 256] {
            let dir = tempfile::Builder::new().prefix("wal-bench-").tempdir_in(&parent).expect("temp dir");
            let options = WalOptions { segment_bytes: 16 << 20, durability, ..WalOptions::default() };
            let (mut wal, _) = Wal::open(dir.path(), options).expect("open");
            let payload = vec![0xA5u8; entry_bytes];
            let mut index = 1u64;
            let mut syncs = 0u64;
            let mut entries = Vec::with_capacity(batch);
            let budget = Duration::from_secs_f64(seconds);
            let start = Instant::now();
            while start.elapsed() < budget && (index - 1) * (entry_bytes as u64) < data_cap_bytes {
                entries.clear();
                entries.extend((0..batch as u64).map(|i| (index + i, 1u64, &payload[..])));
                wal.append_and_sync(&entries).expect("append_and_sync");
                index += batch as u64;
                syncs += 1;
                if syncs & 1023 == 0 {
                    wal.compact_prefix(index - 1).expect("compact");
                }
            }
            let secs = start.elapsed().as_secs_f64();
            let appends = (index - 1) as f64;
            let written_bytes = appends * (entry_bytes + RECORD_OVERHEAD_BYTES) as f64;
            println!(
                "{:<11} {:>6} {:>13.0} {:>11.2} {:>10.0} {:>13.1}",
                durability.to_string(),
                batch,
                appends / secs,
                written_bytes / secs / 1e6,
                syncs as f64 / secs,
                secs * 1e6 / syncs as f64
            );
        }
    }
    println!(
        "MB/s counts record bytes written (data + {RECORD_OVERHEAD_BYTES}-byte record overhead), 1 MB = 10^6 bytes."
    );
}
