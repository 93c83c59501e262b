//! A key as the store's hash map holds it: up to [`INLINE_MAX`] bytes in the map's own slot,
//! longer ones on the heap. A probe of a map keyed by `Vec<u8>` loads the slot, then the key's
//! heap bytes to compare them: a second cache miss per point read or write of a large store
//! (a profile of saturated micro servers had the key comparison first, 13-15 % of the CPU,
//! stalled on that load). Inline, the bytes come with the slot.
//!
//! It hashes and compares as its bytes do (`[u8]`'s `Hash` and `Eq`), so the map is probed
//! with a borrowed `&[u8]` ([`Borrow`]).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// The longest key held inline: a key and its entry fill 64 bytes, one cache line.
pub const INLINE_MAX: usize = 30;

/// A key of the store's map.
#[derive(Clone)]
pub(crate) enum MapKey {
    /// `len` bytes in `bytes[..len]`.
    Inline { len: u8, bytes: [u8; INLINE_MAX] },
    /// A longer key.
    Heap(Box<[u8]>),
}

impl MapKey {
    /// The key's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            MapKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            MapKey::Heap(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for MapKey {
    fn from(key: &[u8]) -> Self {
        if key.len() <= INLINE_MAX {
            let mut bytes = [0; INLINE_MAX];
            bytes[..key.len()].copy_from_slice(key);
            MapKey::Inline { len: key.len() as u8, bytes }
        } else {
            MapKey::Heap(key.into())
        }
    }
}

impl Borrow<[u8]> for MapKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Hash for MapKey {
    /// As the bytes hash, which [`Borrow`] requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for MapKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for MapKey {}

impl std::fmt::Debug for MapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_bytes().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_key_of_any_length_holds_its_bytes_and_is_found_by_them() {
        let mut map: HashMap<MapKey, usize, crate::KeyedState> = HashMap::default();
        let keys: Vec<Vec<u8>> = (0..=70).map(|n| (0..n).map(|i| (i * 7 + n) as u8).collect()).collect();
        for (i, k) in keys.iter().enumerate() {
            let key = MapKey::from(k.as_slice());
            assert_eq!(key.as_bytes(), k.as_slice());
            assert_eq!(matches!(key, MapKey::Inline { .. }), k.len() <= INLINE_MAX);
            map.insert(key, i);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(map.get(k.as_slice()), Some(&i), "key of {} bytes", k.len());
        }
        assert_eq!(map.get([1u8, 2].as_slice()), None);
        assert_eq!(std::mem::size_of::<MapKey>(), 32);
    }
}
