//! The one model of a link's one-way delay, drawn the same way by the server's WAN emulation
//! (`luigi-runtime`'s delay line) and by the simulator's network.

use std::fmt;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// One-way delay distribution: uniform in `[mean_us - jitter_us, mean_us +
/// jitter_us]`, negative draws saturating to 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DelayDist {
    /// Mean one-way delay in microseconds.
    pub mean_us: u64,
    /// Half-width of the uniform jitter window in microseconds.
    pub jitter_us: u64,
}

impl DelayDist {
    /// No delay at all.
    pub const ZERO: DelayDist = DelayDist { mean_us: 0, jitter_us: 0 };

    /// `mean_us ± jitter_us`.
    pub const fn new(mean_us: u64, jitter_us: u64) -> Self {
        DelayDist { mean_us, jitter_us }
    }

    /// A constant delay of `delay_us`.
    pub const fn fixed(delay_us: u64) -> Self {
        DelayDist::new(delay_us, 0)
    }

    /// True if every draw is 0 (links with this distribution bypass the
    /// delay thread entirely).
    pub const fn is_zero(&self) -> bool {
        self.mean_us == 0 && self.jitter_us == 0
    }

    /// Smallest possible draw in microseconds.
    pub const fn min_us(&self) -> u64 {
        self.mean_us.saturating_sub(self.jitter_us)
    }

    /// Largest possible draw in microseconds.
    pub const fn max_us(&self) -> u64 {
        self.mean_us.saturating_add(self.jitter_us)
    }

    /// Draws one delay in microseconds.
    #[inline]
    pub fn sample_us<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if self.jitter_us == 0 {
            return self.mean_us;
        }
        let offset_us = rng.gen_range(0..=self.jitter_us.saturating_mul(2));
        self.mean_us.saturating_add(offset_us).saturating_sub(self.jitter_us)
    }
}

impl fmt::Display for DelayDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}±{}µs", self.mean_us, self.jitter_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn draws_stay_in_the_window_and_saturate_at_zero() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let d = DelayDist::new(2_000, 500);
        for _ in 0..1_000 {
            let x = d.sample_us(&mut rng);
            assert!((d.min_us()..=d.max_us()).contains(&x));
        }
        let wide = DelayDist::new(100, 500);
        assert!((0..1_000).all(|_| wide.sample_us(&mut rng) <= 600));
        assert_eq!(DelayDist::fixed(7).sample_us(&mut rng), 7);
        assert!(DelayDist::ZERO.is_zero());
    }
}
