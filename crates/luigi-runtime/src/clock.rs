//! The runtime's clock: microseconds since the Unix epoch, never going backwards within a
//! process. All processes on one machine read the same wall clock, as real deployments read
//! NTP/PTP-disciplined clocks; the protocol's safety never depends on it (DESIGN.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static LAST_US: AtomicU64 = AtomicU64::new(0);

/// Current time in µs since the Unix epoch, monotonic within this process.
pub fn now_us() -> u64 {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
    let prev = LAST_US.fetch_max(wall, Ordering::Relaxed);
    prev.max(wall)
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_goes_backwards() {
        let mut last = 0;
        for _ in 0..10_000 {
            let t = super::now_us();
            assert!(t >= last);
            last = t;
        }
        assert!(last > 1_600_000_000_000_000, "epoch microseconds");
    }
}
