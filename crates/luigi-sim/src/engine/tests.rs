//! Tests of `engine`.

use super::*;

#[test]
fn clocks_clamp_at_zero_and_deadlines_translate_back() {
    assert_eq!(local_clock(100, -300), 0);
    assert_eq!(local_clock(1_000, -300), 700);
    assert_eq!(local_clock(1_000, 300), 1_300);
    for offset in [-300i64, 0, 300] {
        for deadline in [1u64, 250, 5_000] {
            let t = virtual_deadline(deadline, offset);
            assert!(local_clock(t, offset) >= deadline);
            if t > 0 {
                assert!(local_clock(t - 1, offset) < deadline);
            }
        }
    }
}
