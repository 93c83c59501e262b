//! The runtime's clock: microseconds since the Unix epoch, never going backwards within a
//! process. All processes on one machine read the same wall clock, as real deployments read
//! NTP/PTP-disciplined clocks; the protocol's safety never depends on it (DESIGN.md).
//!
//! A process may shift its clock by a fixed offset ([`set_offset_us`], `luigi server
//! --clock-offset-us`, the client commands' `--clock-offset-us`): how the process tests run
//! servers and clients with skewed clocks (DESIGN.md rule 22) without outside tools.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static LAST_US: AtomicU64 = AtomicU64::new(0);
static OFFSET_US: AtomicI64 = AtomicI64::new(0);

/// Shifts this process's clock by `offset_us` (negative: behind). Set it once, at start: a
/// later negative shift holds the clock still until real time catches up.
pub fn set_offset_us(offset_us: i64) {
    OFFSET_US.store(offset_us, Ordering::Relaxed);
}

/// The offset set by [`set_offset_us`].
pub fn offset_us() -> i64 {
    OFFSET_US.load(Ordering::Relaxed)
}

/// Current time in µs since the Unix epoch (plus the offset), monotonic within this process.
pub fn now_us() -> u64 {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0);
    let wall = shifted(wall, offset_us());
    let prev = LAST_US.fetch_max(wall, Ordering::Relaxed);
    prev.max(wall)
}

/// `wall` moved by `offset_us`, within `u64`.
fn shifted(wall: u64, offset_us: i64) -> u64 {
    wall.saturating_add_signed(offset_us)
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_goes_backwards_and_shifts_within_range() {
        let mut last = 0;
        for _ in 0..10_000 {
            let t = super::now_us();
            assert!(t >= last);
            last = t;
        }
        assert!(last > 1_600_000_000_000_000, "epoch microseconds");
        // The offset itself is not set here: the clock never goes back, so it would move
        // every other test of this process an hour ahead. The process tests set it.
        assert_eq!(super::shifted(1_000, 3_600_000_000), 3_600_001_000);
        assert_eq!(super::shifted(1_000, -2_000), 0);
        assert_eq!(super::shifted(u64::MAX, 1), u64::MAX);
    }
}
