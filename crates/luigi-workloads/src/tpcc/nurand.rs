//! The spec's random functions (clause 2.1, 4.3.2): NURand and its constants, last names
//! from syllables, random strings; and [`SplitMix`], a small hash-seeded generator for the
//! static columns that must be computable on their own (see `population::s_dist`).

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The syllables of C_LAST (clause 4.3.2.3).
pub const SYLLABLES: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// Last name number `n` (0-999): the syllables of its three digits.
pub fn last_name(n: u16) -> String {
    let mut s = String::with_capacity(15);
    last_name_into(n, &mut s);
    s
}

/// Appends last name number `n` (0-999) to `out`.
pub fn last_name_into(n: u16, out: &mut String) {
    let n = usize::from(n % 1000);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        out.push_str(SYLLABLES[digit]);
    }
}

/// The NURand constants C (clause 2.1.6) of one population and its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NuRandConstants {
    /// C for C_LAST (A = 255).
    pub c_last: u32,
    /// C for C_ID (A = 1023).
    pub c_id: u32,
    /// C for OL_I_ID (A = 8191).
    pub ol_i_id: u32,
}

impl NuRandConstants {
    /// The constants used to populate (C_LOAD) and to run, drawn from `seed`: the run-time
    /// C_LAST differs from the load one by 65..=119, and not by 96 or 112 (clause 2.1.6.1).
    /// C_ID and OL_I_ID use the same constant at load and run time.
    pub fn from_seed(seed: u64) -> (Self, Self) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4e55_5241_4e44);
        let load =
            Self { c_last: rng.gen_range(0..=255), c_id: rng.gen_range(0..=1023), ol_i_id: rng.gen_range(0..=8191) };
        let delta = loop {
            let delta = rng.gen_range(65..=119);
            if delta != 96 && delta != 112 {
                break delta;
            }
        };
        let c_last = if load.c_last + delta <= 255 { load.c_last + delta } else { load.c_last - delta };
        (load, Self { c_last, ..load })
    }
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x, for `x <= y`.
pub fn nurand(rng: &mut impl Rng, a: u32, x: u32, y: u32, c: u32) -> u32 {
    let span = u64::from(y - x) + 1;
    let r = u64::from(rng.gen_range(0..=a) | rng.gen_range(x..=y));
    ((r + u64::from(c)) % span) as u32 + x
}

/// Characters of an a-string (alphanumeric).
const ALNUM: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Appends `len` random alphanumeric characters to `out`.
pub fn push_alnum(rng: &mut impl RngCore, len: usize, out: &mut String) {
    let mut buf = [0u8; 64];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len());
        rng.fill_bytes(&mut buf[..n]);
        // Multiply-shift maps a byte onto 62 characters (near uniform, no division).
        out.extend(buf[..n].iter().map(|&b| char::from(ALNUM[(usize::from(b) * 62) >> 8])));
        left -= n;
    }
}

/// A random a-string of `min..=max` characters (clause 4.3.2.2).
pub fn astring(rng: &mut impl RngCore, min: usize, max: usize) -> String {
    let len = rng.gen_range(min..=max);
    let mut s = String::with_capacity(len);
    push_alnum(rng, len, &mut s);
    s
}

/// A random a-string of `min..=max` characters holding "ORIGINAL" at a random position in
/// 10 % of the calls (I_DATA, S_DATA, clause 4.3.3.1).
pub fn data_string(rng: &mut impl RngCore, min: usize, max: usize) -> String {
    let mut s = astring(rng, min, max);
    if rng.gen_ratio(1, 10) {
        let at = rng.gen_range(0..=s.len() - 8);
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

/// splitmix64: a fast hash-seeded generator, for values that must be a pure function of a
/// few coordinates (each call seeds its own).
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator seeded from `parts`.
    pub fn new(parts: &[u64]) -> Self {
        let mut s = SplitMix(0x5443_5043_2d4c_7567);
        for p in parts {
            s.0 ^= p.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            s.0 = s.next_u64();
        }
        s
    }
}

impl RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_follow_the_syllables() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
        assert!((0..1000).map(last_name).all(|n| n.len() <= 15));
    }

    #[test]
    fn run_constant_of_c_last_keeps_its_distance() {
        for seed in 0..500 {
            let (load, run) = NuRandConstants::from_seed(seed);
            let delta = load.c_last.abs_diff(run.c_last);
            assert!((65..=119).contains(&delta) && delta != 96 && delta != 112, "seed {seed}: {delta}");
            assert!(run.c_last <= 255);
            assert_eq!((load.c_id, load.ol_i_id), (run.c_id, run.ol_i_id));
        }
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut counts = vec![0u32; 3000];
        for _ in 0..100_000 {
            let c = nurand(&mut rng, 1023, 1, 3000, 259);
            assert!((1..=3000).contains(&c));
            counts[c as usize - 1] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max > 3 * 100_000 / 3000, "NURand is non-uniform: max {max}");
        assert_eq!(nurand(&mut rng, 255, 0, 0, 7), 0);
    }

    #[test]
    fn strings_have_their_length_and_original_share() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut original = 0;
        for _ in 0..10_000 {
            let s = data_string(&mut rng, 26, 50);
            assert!((26..=50).contains(&s.len()) && s.is_ascii());
            original += usize::from(s.contains("ORIGINAL"));
        }
        assert!((800..1200).contains(&original), "{original}");
        assert_eq!(SplitMix::new(&[1, 2]).next_u64(), SplitMix::new(&[1, 2]).next_u64());
        assert_ne!(SplitMix::new(&[1, 2]).next_u64(), SplitMix::new(&[2, 1]).next_u64());
    }
}
