//! Small, stable hash functions (independent of the Rust version and of the process), for
//! the trace hash.

/// FNV-1a over `bytes`: the protocol's one stable hash, written once in `luigi_protocol::keyhash`
/// (its reference values are tested there).
pub use luigi_txn::keyhash::fnv1a;

/// Folds `x` into the running hash `h` (order sensitive).
pub fn fold(h: u64, x: u64) -> u64 {
    // splitmix64's finalizer over the combination.
    let mut z = h.rotate_left(23) ^ x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_is_order_sensitive() {
        assert_ne!(fold(fold(0, 1), 2), fold(fold(0, 2), 1));
    }
}
